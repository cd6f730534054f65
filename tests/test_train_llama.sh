#!/bin/sh
# test_train_llama.sh: `meshgrad train --model llama` and `meshgrad generate` of
# its checkpoints, on data/mobydick.h5, a tiny Llama (2 layers, 4 heads, 2 kv
# heads, width 16, FFN 48, context 16) for a few steps of AdamW with warmup,
# cosine decay, clipping and weight decay.
# - mesh invariance: 2 dp, 2 tp, 2 sp, 2 tp+sp, 2 fsdp, 2x2 dp,tp, 2x2
#   fsdp,tp and pp=2 start from the 1-rank run's parameters bit for bit (the
#   param_checksum line) and every step's loss and the final val_loss are
#   within 1e-6 (relative) of the 1-rank run's; an untied head on 2 tp and on
#   pp=2 the same against its own 1-rank run.
# - --grad-accum 2: every loss within 1e-6 of the one-batch run's.
# - checkpoints: saved and resumed on 2 ranks dp and on pp=2, the losses and
#   the final checkpoint are bitwise those of the uninterrupted run; a 2-rank
#   tp checkpoint resumed on 2 dp follows the uninterrupted run within 1e-5;
#   the file holds llama2.c's names and (out, in) shapes and the model.*
#   attributes.
# - weight decay on 2-D parameters only: one step with --weight-decay 0.5
#   leaves the norms' weights bitwise those of a step without decay and the
#   matrices not; with --decay-all the norms' weights differ too.
# - generate: the same text from one checkpoint on 1 rank, 2 dp, 2 tp and
#   2x2 dp,tp; greedy twice the same; the tokens/s line; the window slides.
# - refusals, one "meshgrad: error:" line and a non-zero exit each: --kv-heads
#   not dividing --heads, a tp degree that does not divide kv_heads (train and
#   generate), an odd head dim, --kv-heads with --model gpt, a GPT
#   checkpoint with --model llama and the reverse, a resume with another
#   --rope-theta, a checkpoint whose attributes disagree with its datasets'
#   shapes (train --resume and generate), and one whose layer count is not
#   that of the blocks it holds (generate).
. "$(dirname "$0")/check.sh"
program_test_env train-llama
text=$top/data/mobydick.h5
STEPS=12

llama="--model llama --data $text --layers 2 --heads 4 --kv-heads 2 --embd 16 --multiple-of 16 \
--ctx 16 --batch 8 --seed 3 --threads 1 --log-every 0 --eval-every 0 --eval-tokens 2048 \
--optimizer adamw --lr 3e-3 --betas 0.9,0.95 --weight-decay 0.1 --schedule cosine --warmup 3 \
--lr-min 1e-4 --clip 1.0 --steps $STEPS"

lm=$llama
. "$(dirname "$0")/lm_check.sh"

# ---- mesh invariance ----------------------------------------------------------------
reference
if grep -q "llama (layers 2, heads 4, kv-heads 2, embd 16, hidden 48, ctx 16, 10320 parameters)" \
    "$tmp/ref.out"; then
    pass "the banner names the model: hidden 48 by --multiple-of 16, 10320 parameters"
else
    fail "the banner names the model"
    show_log "$tmp/ref.out"
fi
meshes ref 1e-6 2:2:dp 2:2:tp 2:2:sp 2:2:tp+sp 2:2:fsdp 4:2x2:dp,tp 4:2x2:fsdp,tp \
    "2:2:pp:--microbatches 4"
train untied 1 --untied-head &&
    for run in 2:tp 2:pp; do
        IFS=: read -r np plan <<EOF
$run
EOF
        if [ "$plan" = pp ]; then set -- --microbatches 4; else set --; fi
        train "untied-$plan" "$np" --untied-head --mesh 2 --parallel "$plan" "$@" &&
            follows "untied-$plan" untied "untied head, 2 [$plan]" 1e-6
    done

# ---- gradient accumulation ------------------------------------------------------------
train accum2 1 --grad-accum 2 &&
    check_output "--grad-accum 2: the one-batch losses within 1e-6" close accum2 ref 1e-6 $((STEPS + 1))

# ---- checkpoints --------------------------------------------------------------------------
half=$((STEPS / 2))
resumed dp 2 "2 ranks dp" --mesh 2 --parallel dp
resumed pp 2 "pp=2" --mesh 2 --parallel pp --microbatches 4
if train tp-full 2 --mesh 2 --parallel tp --save "$tmp/tp/" --save-every $half &&
    train tp-on-dp 2 --mesh 2 --parallel dp --resume "$(ckpt "$tmp/tp" $half)"; then
    check_output "2 tp -> 2 dp: the losses within 1e-5" close tp-on-dp tp-full 1e-5 $((half + 1))
fi
final=$(ckpt "$tmp/dp" $STEPS)
# llama2.c's state_dict names and PyTorch's (out, in) shapes
shapes_ok=1
for ds in "tok_embeddings.weight 256 16" "layers.0.attention_norm.weight 16" \
    "layers.0.attention.wq.weight 16 16" "layers.0.attention.wk.weight 8 16" \
    "layers.0.attention.wv.weight 8 16" "layers.1.attention.wo.weight 16 16" \
    "layers.1.ffn_norm.weight 16" "layers.1.feed_forward.w1.weight 48 16" \
    "layers.1.feed_forward.w2.weight 16 48" "layers.1.feed_forward.w3.weight 48 16" \
    "norm.weight 16"; do
    set -- $ds
    name=$1
    shift
    got=$("$tool" get "$final" "params/$name" 2>&1 | head -n 1)
    [ "$got" = "shape $*" ] || { shapes_ok=0; echo "  params/$name: $got, want shape $*"; }
done
"$tool" get "$final" params/output.weight >/dev/null 2>&1 && shapes_ok=0
check "the checkpoint holds llama2.c's names and (out, in) shapes, no output.weight when tied" \
    test $shapes_ok -eq 1
"$prog" ckpt info "$final" >"$tmp/info" 2>&1
check "... and the attributes model = llama, model.kind, .kv_heads, .hidden, .rope_theta, .norm_eps, .tied" \
    sh -c "grep -q '^  model = llama$' '$tmp/info' && grep -q '^  model.kind = llama$' '$tmp/info' &&
        grep -q '^  model.kv_heads = 2$' '$tmp/info' && grep -q '^  model.hidden = 48$' '$tmp/info' &&
        grep -q '^  model.rope_theta = 10000$' '$tmp/info' && grep -q '^  model.norm_eps = 1e-05$' '$tmp/info' &&
        grep -q '^  model.tied = 1$' '$tmp/info' && grep -q '^  optimizer.decay = 2-d$' '$tmp/info'"

# ---- weight decay on 2-D parameters only ------------------------------------------------------
# after one step the norms' weights depend only on their gradient and the decay
train wd0 1 --steps 1 --warmup 0 --schedule constant --weight-decay 0 --save "$tmp/wd0.h5" &&
    train wd 1 --steps 1 --warmup 0 --schedule constant --weight-decay 0.5 --save "$tmp/wd.h5" &&
    train wdall 1 --steps 1 --warmup 0 --schedule constant --weight-decay 0.5 --decay-all \
        --save "$tmp/wdall.h5" && {
    check "weight decay 0.5: the norms' weights are those of no decay, bit for bit" \
        sh -c "[ \"\$($tool get $tmp/wd.h5 params/norm.weight)\" = \"\$($tool get $tmp/wd0.h5 params/norm.weight)\" ] &&
            [ \"\$($tool get $tmp/wd.h5 params/layers.0.ffn_norm.weight)\" = \"\$($tool get $tmp/wd0.h5 params/layers.0.ffn_norm.weight)\" ]"
    check "... the matrices are not" \
        sh -c "[ \"\$($tool get $tmp/wd.h5 params/layers.0.attention.wq.weight)\" != \"\$($tool get $tmp/wd0.h5 params/layers.0.attention.wq.weight)\" ]"
    check "--decay-all: the norms' weights decay too" \
        sh -c "[ \"\$($tool get $tmp/wdall.h5 params/norm.weight)\" != \"\$($tool get $tmp/wd0.h5 params/norm.weight)\" ]"
}

# ---- generate ----------------------------------------------------------------------------------
sample() {
    _np=$1
    shift
    "$TIMEOUT" -k 5 60 "$MPIRUN" -np "$_np" "$prog" generate --resume "$final" --threads 1 \
        --prompt "Call me" --tokens 40 --seed 5 "$@"
}
if sample 1 >"$tmp/gen-1.txt" 2>"$tmp/gen-1.err"; then
    pass "generate on 1 rank: $(wc -c <"$tmp/gen-1.txt") bytes, the prompt's 7 first"
    check "... the text starts with the prompt" sh -c "head -c 7 '$tmp/gen-1.txt' | grep -q '^Call me$'"
    check "... the speed on stderr (the tokens/s line), the window slid (ctx 16, 40 tokens)" \
        sh -c "grep -q 'generate: 40 tokens in .* tokens/s (1 thread/rank, 1 rank, [1-9][0-9]* window slides)' '$tmp/gen-1.err'"
else
    fail "generate on 1 rank"
    show_log "$tmp/gen-1.err"
fi
for run in 2:2:dp 2:2:tp 4:2x2:dp,tp; do
    IFS=: read -r np mesh plan <<EOF
$run
EOF
    sample "$np" --mesh "$mesh" --parallel "$plan" >"$tmp/gen.txt" 2>"$tmp/gen.err"
    check "generate on $mesh [$plan]: the 1-rank text" cmp -s "$tmp/gen.txt" "$tmp/gen-1.txt"
done
sample 1 --temperature 0 >"$tmp/greedy1.txt" 2>/dev/null
sample 2 --temperature 0 --parallel tp >"$tmp/greedy2.txt" 2>/dev/null
check "greedy: the same text twice (1 rank, 2 tp)" \
    sh -c "[ -s '$tmp/greedy1.txt' ] && cmp -s '$tmp/greedy1.txt' '$tmp/greedy2.txt'"

# ---- refusals -------------------------------------------------------------------------------
check_refused "--kv-heads 3 with --heads 4" 1 "--kv-heads 3 does not divide --heads 4" \
    "$prog" train $llama --kv-heads 3
check_refused "tp 2 with 1 kv head" 2 "tensor-parallel degree 2 cannot split --kv-heads 1.*give --kv-heads a multiple of 2" \
    "$prog" train $llama --kv-heads 1 --mesh 2 --parallel tp
check_refused "generate: tp 4 with 2 kv heads" 4 "tensor-parallel degree 4 cannot split --kv-heads 2" \
    "$prog" generate --resume "$final" --parallel tp
check_refused "an odd head dim" 1 "the head dim embd / heads = 3 is odd" \
    "$prog" train $llama --embd 12 --kv-heads 4
check_refused "--kv-heads with --model gpt" 1 "kv-heads applies to --model llama" \
    "$prog" train $llama --model gpt
"$TIMEOUT" 60 "$prog" train --model gpt --data "$text" --layers 2 --heads 4 --embd 16 --ctx 16 \
    --batch 8 --steps 2 --log-every 0 --eval-every never --save "$tmp/gpt.h5" >"$tmp/gpt.out" 2>&1 ||
    fail "the GPT run for a checkpoint failed"
check_refused "a GPT checkpoint with --model llama" 1 "saved with model = gpt but --model is llama" \
    "$prog" train $llama --resume "$tmp/gpt.h5"
check_refused "a Llama checkpoint with --model gpt" 1 "saved with model = llama but --model is gpt" \
    "$prog" train --model gpt --data "$text" --layers 2 --heads 4 --embd 16 --ctx 16 --batch 8 \
    --steps 20 --log-every 0 --resume "$final"
check_refused "a resume with another --rope-theta" 1 "saved with model.rope_theta = 10000 but --rope-theta is 500" \
    "$prog" train $llama --resume "$final" --steps 20 --rope-theta 500
cp "$final" "$tmp/lies.h5"
"$tool" set-attr "$tmp/lies.h5" model.kv_heads 4 || fail "set-attr"
check_refused "generate: attributes that disagree with the datasets' shapes" 1 \
    "dataset /params/layers.0.attention.wk.weight has shape \(8, 16\) but the tensor loaded into it has global shape \(16, 16\)" \
    "$prog" generate --resume "$tmp/lies.h5"
cp "$final" "$tmp/more.h5"
"$tool" set-attr "$tmp/more.h5" model.layers 1000000 || fail "set-attr"
check_refused "generate: model.layers 1000000 on a Llama of 2 blocks" 1 \
    "attribute model.layers is 1000000 but the file holds the weights of 2 blocks \(params/layers.0 to 1\)" \
    "$prog" generate --resume "$tmp/more.h5"
check_refused "train --resume of the same file with --kv-heads 4" 1 \
    "dataset /params/layers.0.attention.wk.weight has shape \(8, 16\)" \
    "$prog" train $llama --kv-heads 4 --resume "$tmp/lies.h5" --steps 20

check_summary
