#!/bin/sh
# test_train_gpt.sh: `meshgrad train --model gpt` on data/mobydick.h5, a tiny
# GPT (2 layers, 4 heads, width 16, context 16) for a few steps of AdamW with
# warmup, cosine decay and clipping.
# - mesh invariance: 2 dp, 2 tp, 2 sp, 2 tp+sp, 2 fsdp, 2x2 dp,tp and 2x2
#   fsdp,tp start from the 1-rank run's parameters bit for bit (the
#   param_checksum line) and every step's loss and the final val_loss are within
#   1e-4 (relative) of the 1-rank run's.
# - --grad-accum 4 (1 rank) and 2 (2 ranks dp): every loss within 1e-6 of the
#   one-batch run's; with 4, under half of its activation memory.
# - checkpoints: saved and resumed on 2 ranks dp, the losses and the final
#   checkpoint are bitwise those of the uninterrupted run; a 2-rank tp
#   checkpoint resumed on 2 ranks dp, and a 2-rank dp one on 2x2 dp,tp, follow
#   the uninterrupted run within 1e-5.
# - pipeline parallelism, a GPT of 4 blocks: pp=2 (1f1b), pp=4 (zb-h1), pp,dp
#   2x2 (gpipe), pp,tp 2x2 (interleaved-1f1b, 2 virtual stages) and pp,fsdp
#   2x2 start bitwise from the 1-rank parameters and follow its losses within
#   1e-4; a pp=2 run resumed on pp=2 is bitwise the uninterrupted one, on 2 dp
#   within 1e-5, a 1-rank checkpoint resumed on pp,dp 2x2 within 1e-5; a
#   1-rank checkpoint loaded and saved again on pp=2 holds the same arrays
#   (wte once), and generate samples the same text from both on 1 rank.
# - refusals, one "meshgrad: error:" line and a non-zero exit each: an MLP
#   checkpoint with --model gpt and the reverse, a text data set shorter than
#   ctx + 1 tokens, --heads not dividing --embd, a tensor-parallel degree that
#   cannot split the heads, a batch whose step (its estimate) cannot fit this
#   machine's memory (or, where a memory cgroup can be made, its 1 GiB
#   limit); with pp: a pipeline rank over the machine's memory
#   (with 65536 micro-batches too, in seconds), --pp-layers not summing to the blocks,
#   more stages than blocks, --grad-accum; generate with pp.
. "$(dirname "$0")/check.sh"
program_test_env train-gpt
text=$top/data/mobydick.h5
STEPS=12

gpt="--model gpt --data $text --layers 2 --heads 4 --embd 16 --ctx 16 --batch 8 --seed 3 \
--threads 1 --log-every 0 --eval-every 0 --optimizer adamw --lr 3e-3 --betas 0.9,0.95 \
--weight-decay 0.1 --schedule cosine --warmup 3 --lr-min 1e-4 --clip 1.0 --steps $STEPS"

lm=$gpt
. "$(dirname "$0")/lm_check.sh"

# ---- mesh invariance ----------------------------------------------------------------
reference
meshes ref 1e-4 2:2:dp 2:2:tp 2:2:sp 2:2:tp+sp 2:2:fsdp 4:2x2:dp,tp 4:2x2:fsdp,tp

# ---- gradient accumulation ------------------------------------------------------------
train accum4 1 --grad-accum 4 &&
    check_output "--grad-accum 4: the one-batch losses within 1e-6" close accum4 ref 1e-6 $((STEPS + 1))
# each micro-batch's activations are given back after its backward: 4 micro-batches of
# 2 windows take about a quarter of one batch of 8 (they took all of it: the step
# arena kept every micro-batch's tensors to the step's end)
act() { sed -n 's/.*"memory":{[^}]*"activations":\([0-9]*\).*/\1/p' "$tmp/$1.jsonl"; }
check "--grad-accum 4: activations $(act accum4) B, under half of one batch's $(act ref) B" \
    awk -v a="$(act accum4)" -v r="$(act ref)" 'BEGIN { exit !(a > 0 && r > 0 && a < 0.5 * r) }'
train accum2-dp 2 --mesh 2 --parallel dp --grad-accum 2 &&
    check_output "2 ranks dp, --grad-accum 2: the one-batch losses within 1e-6" \
        close accum2-dp mesh-2-dp 1e-6 $((STEPS + 1))

# ---- checkpoints --------------------------------------------------------------------------
half=$((STEPS / 2))
resumed dp 2 "2 ranks dp" --mesh 2 --parallel dp
if train tp-full 2 --mesh 2 --parallel tp --save "$tmp/tp/" --save-every $half &&
    train tp-on-dp 2 --mesh 2 --parallel dp --resume "$(ckpt "$tmp/tp" $half)"; then
    check_output "2 tp -> 2 dp: the losses within 1e-5" close tp-on-dp tp-full 1e-5 $((half + 1))
fi
if train dp-on-2x2 4 --mesh 2x2 --parallel dp,tp --resume "$(ckpt "$tmp/dp" $half)"; then
    check_output "2 dp -> 2x2 dp,tp: the losses within 1e-5" close dp-on-2x2 dp-full 1e-5 $((half + 1))
fi

# ---- pipeline parallelism ------------------------------------------------------------------
# (--layers 4 after $gpt's --layers 2: the last flag wins)
if train ref4 1 --layers 4 --save "$tmp/one4/" --save-every $half; then
    pass "1 rank, 4 blocks: the pipeline's reference, checksum $(checksum ref4)"
fi
for run in 2:2:pp:1f1b:1 4:4:pp:zb-h1:1 4:2x2:pp,dp:gpipe:1 4:2x2:pp,tp:interleaved-1f1b:2 \
    4:2x2:pp,fsdp:1f1b:1; do
    IFS=: read -r np mesh plan sched v <<EOF
$run
EOF
    tag=pipe-$mesh-$plan
    train "$tag" "$np" --layers 4 --mesh "$mesh" --parallel "$plan" --pp-schedule "$sched" \
        --virtual-stages "$v" --microbatches 4 && follows "$tag" ref4 "$mesh [$plan] $sched" 1e-4
done
pp2="--layers 4 --mesh 2 --parallel pp --microbatches 4"
resumed pp 2 "pp=2" $pp2
train pp-on-dp 2 --layers 4 --mesh 2 --parallel dp --resume "$(ckpt "$tmp/pp" $half)" &&
    check_output "pp=2 -> 2 dp: the losses within 1e-5" close pp-on-dp pp-full 1e-5 $((half + 1))
train one-on-ppdp 4 --layers 4 --mesh 2x2 --parallel pp,dp --microbatches 2 \
    --resume "$(ckpt "$tmp/one4" $half)" &&
    check_output "1 rank -> pp,dp 2x2: the losses within 1e-5" close one-on-ppdp ref4 1e-5 $((half + 1))
if train one-resaved 2 $pp2 --resume "$(ckpt "$tmp/one4" $STEPS)" --save "$tmp/one-resaved.h5"; then
    check_output "a 1-rank checkpoint loaded and saved again on pp=2 holds the same arrays" \
        "$tool" compare "$(ckpt "$tmp/one4" $STEPS)" "$tmp/one-resaved.h5"
    sample() {
        "$TIMEOUT" 60 "$prog" generate --resume "$1" --threads 1 --prompt "Call me" --tokens 40 \
            --seed 5 2>/dev/null
    }
    sample "$(ckpt "$tmp/one4" $STEPS)" >"$tmp/sample-one.txt"
    sample "$tmp/one-resaved.h5" >"$tmp/sample-pp.txt"
    check "generate on 1 rank from the pp=2 checkpoint: the 1-rank checkpoint's text" \
        cmp -s "$tmp/sample-one.txt" "$tmp/sample-pp.txt"
fi

# ---- refusals -------------------------------------------------------------------------------

"$TIMEOUT" 60 "$prog" train --model mlp --data "$data" --hidden 8 --batch 8 --steps 2 --log-every 0 \
    --save "$tmp/mlp.h5" >"$tmp/mlp.out" 2>&1 || fail "the MLP run for a checkpoint failed"
check_refused "an MLP checkpoint with --model gpt" 1 "saved with model = mlp but --model is gpt" \
    "$prog" train $gpt --resume "$tmp/mlp.h5"
check_refused "a GPT checkpoint with --model mlp" 1 "saved with model = gpt but --model is mlp" \
    "$prog" train --model mlp --data "$data" --hidden 8 --batch 8 --steps 20 --resume "$(ckpt "$tmp/dp" $half)"
awk 'BEGIN { for (i = 0; i < 10; i++) printf "a short text, line %d\n", i }' >"$tmp/short.txt"
"$TIMEOUT" 60 "$prog" data text2h5 "$tmp/short.txt" "$tmp/short.h5" >/dev/null 2>&1 ||
    fail "text2h5 of a short text failed"
check_refused "a text shorter than ctx + 1 tokens" 1 "val split holds [0-9]+ tokens, fewer than --ctx \+ 1 = 65" \
    "$prog" train $gpt --data "$tmp/short.h5" --ctx 64
check_refused "--heads 3 with --embd 16" 1 "--heads 3 does not divide --embd 16" \
    "$prog" train $gpt --heads 3
check_refused "tp 2 with 3 heads" 2 "tensor-parallel degree 2 cannot split 3 heads" \
    "$prog" train $gpt --heads 3 --embd 18 --mesh 2 --parallel tp

check_refused "--pp-layers not summing to the blocks" 2 "--pp-layers sums to 3 layers but the model has 4" \
    "$prog" train $gpt --layers 4 --mesh 2 --parallel pp --pp-layers 1,2
check_refused "more stages than blocks" 4 "4 pipeline stages need at least one layer each, but the model has 2 layers" \
    "$prog" train $gpt --mesh 4 --parallel pp
check_refused "--grad-accum with pp" 2 "--grad-accum 2 with pp: .* give --microbatches 2" \
    "$prog" train $gpt --mesh 2 --parallel pp --grad-accum 2
# the step's estimate against this machine's memory: refused at once (it took
# a minute to fill 16 GB of window starts before the first tensor failed)
check_refused "a batch whose step cannot fit this machine" 2 \
    "the model's .* parameters with their gradients and optimizer state, and one output a layer for the backward \(.* floats\), split over all [0-9]+ ranks, needs at least [0-9.]+ GiB a rank, .* more than its [0-9.]+ GiB of memory: use a smaller --batch" \
    "$prog" train $gpt --batch 2147483647
# with pp, the largest pipeline rank's parameters and kept activations (a batch
# of 10^6 windows filled the memory for 2.5 minutes until the kernel killed it)
check_refused "a pipeline whose largest rank cannot fit this machine" 2 \
    "pipeline rank [01] needs about [0-9.]+ GiB \(.*the activations of [0-9]+ micro-batch(es)? of up to [0-9]+ rows, with their backwards. temporaries, [0-9.]+\), .* more than its [0-9.]+ GiB of memory: use a smaller --batch, more --microbatches" \
    "$prog" train $gpt --mesh 2 --parallel pp --batch 100000000
# ... in seconds with the most micro-batches too (the schedule's simulation
# scanned back to the start for every input-less compute: 45 s for 65536)
check_refused "65536 micro-batches over the machine's memory, refused in seconds" 2 \
    "pipeline rank [01] needs about [0-9.]+ GiB \(.*of up to 32768 rows, with their backwards. temporaries, [0-9.]+\), .* more than its [0-9.]+ GiB of memory" \
    "$prog" train $gpt --mesh 2 --parallel pp --embd 1024 --ctx 1024 --batch 2147483647 \
    --microbatches 65536
check "... within 10 s (${_ref_secs}s)" test "$_ref_secs" -lt 10
# in a container, the memory is its cgroup's limit: a child cgroup of this
# process's with 1 GiB, where a step of about 2.6 GiB must be refused (the
# machine's whole memory was taken before, and such a run was killed)
cg=""
if grep -q '^0::' /proc/self/cgroup && [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    cg=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)/mg-test-$$ limit=memory.max
elif grep -q ':memory:' /proc/self/cgroup; then
    cg=/sys/fs/cgroup/memory$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)/mg-test-$$
    limit=memory.limit_in_bytes
fi
if [ -n "$cg" ] && mkdir "$cg" 2>/dev/null; then
    if echo 1073741824 >"$cg/$limit" 2>/dev/null; then
        "$TIMEOUT" -k 5 30 sh -c "echo \$\$ >'$cg/cgroup.procs' && exec '$prog' train --model gpt \
            --data '$text' --batch 400 --steps 1" >"$tmp/cg.out" 2>&1
        rc=$?
        check_output "a step over its cgroup's 1 GiB limit: refused (exit $rc)" sh -c "test $rc -ne 0 &&
            grep -q 'more than its 1.0 GiB of memory' '$tmp/cg.out'"
    fi
    rmdir "$cg" 2>/dev/null
else
    echo "skipped: no memory cgroup to make here (the case of a container's limit)"
fi
check_refused "generate with pp" 2 "generate: --parallel pp has pp" \
    "$prog" generate --resume "$(ckpt "$tmp/pp" $STEPS)" --parallel pp

check_summary
