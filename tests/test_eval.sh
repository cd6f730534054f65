#!/bin/sh
# test_eval.sh: `meshgrad eval` on a GPT trained here for 20 steps (1 rank,
# batch 8, its val_loss in the metrics):
# - eval_loss on 1 rank is the val_loss train printed for the checkpoint, and
#   on 2 ranks (dp, tp, fsdp, sp, pp) and 4 (2x2 dp,tp, fsdp,tp+sp, dp,pp)
#   within 1e-6 of it; perplexity is exp(eval_loss); --eval-tokens bounds the
#   windows; --split train reads the train split;
# - --text --logits: (T, V) float32, the same within 1e-5 on 1 rank, 2 tp,
#   2 sp and 2x2 dp,tp; a text longer than ctx keeps its first ctx bytes;
# - refusals, one line and a non-zero exit each: no --resume, no --data, a
#   data set of another vocabulary, --split other, --text without --logits,
#   pp with --logits, an existing --logits file without --overwrite (left as
#   it was; with it only eval's own is replaced), an MLP's checkpoint, a
#   FIFO or a device node as --logits;
# - a Llama (4 heads, 2 kv heads, untied head) trained 20 steps: eval_loss on
#   1 rank is train's val_loss, within 1e-6 on 2 ranks (tp, pp) and 4 (2x2
#   fsdp,tp+sp); its --logits on 2 tp within 1e-4; exported to safetensors and
#   imported back, the same eval_loss to the last digit (at the same --batch:
#   an import keeps no batch).
# Prints a Check-style summary line.
. "$(dirname "$0")/check.sh"
program_test_env eval
mobydick=$top/data/mobydick.h5
check_failed() { show_out_err; }

mg() {
    _np=$1
    shift
    "$TIMEOUT" -k 5 120 "$MPIRUN" -np "$_np" "$prog" "$@" >"$tmp/out" 2>"$tmp/err"
}
# within GOT REF TOL: |GOT - REF| <= TOL |REF|
within() { awk -v g="$1" -v r="$2" -v t="$3" 'BEGIN { d = g - r; if (d < 0) d = -d; exit !(d <= t * (r < 0 ? -r : r)) }'; }
# eval_loss: the eval_loss that the last mg printed
eval_loss() { sed -n 's/^eval_loss \([^ ]*\) .*/\1/p' "$tmp/out"; }

# train_and_eval NAME WHAT ARGS...: `train ARGS...` on 1 rank for 20 steps,
# saved in $tmp/NAME.h5 (metrics in $tmp/NAME.jsonl), val its last val_loss, one
# check that it printed one; then `eval` of the checkpoint over 16384 tokens
# ($ev) on 1 rank, one the eval_loss it printed.
train_and_eval() {
    _name=$1 _what=$2
    shift 2
    mg 1 train "$@" --batch 8 --steps 20 --threads 1 --log-every 0 --eval-tokens 16384 \
        --save "$tmp/$_name.h5" --metrics "$tmp/$_name.jsonl"
    val=$(sed -n 's/.*"val_loss":\([^,]*\),.*/\1/p' "$tmp/$_name.jsonl" | tail -n 1)
    check "$_what trains 20 steps, saves, and prints its val_loss ($val)" \
        test -n "$val" -a -f "$tmp/$_name.h5"
    ev="eval --resume $tmp/$_name.h5 --data $mobydick --eval-tokens 16384 --threads 1"
    # shellcheck disable=SC2086
    mg 1 $ev
    one=$(eval_loss)
}

# evals_within PREFIX RUN...: for each RUN "NP ARGS...", `eval $ev ARGS...` on NP
# ranks; one check each that its eval_loss is within 1e-6 of one's
evals_within() {
    _prefix=$1
    shift
    for _run; do
        set -- $_run
        _enp=$1
        shift
        # shellcheck disable=SC2086
        mg "$_enp" $ev "$@"
        got=$(eval_loss)
        check "$_prefix$_enp ranks ($*): eval_loss $got within 1e-6 of 1 rank's" \
            within "$got" "$one" 1e-6
    done
}

train_and_eval gpt "a GPT" --model gpt --data "$mobydick" --layers 2 --heads 2 --embd 32 --ctx 32 \
    --seed 4
check "1 rank: eval_loss $one is train's val_loss $val" test "$one" = "$val"
ppl=$(sed -n 's/.* perplexity \([^ ]*\) .*/\1/p' "$tmp/out")
check "perplexity $ppl is exp(eval_loss)" \
    awk -v l="$one" -v p="$ppl" 'BEGIN { d = exp(l) - p; exit !(d < 1e-4 * p && d > -1e-4 * p) }'
check "512 windows of 32 tokens (--eval-tokens 16384)" grep -q " 512 windows of 32 tokens" "$tmp/out"
evals_within "" "2 --parallel dp" "2 --parallel tp" "2 --parallel fsdp" "2 --parallel sp" \
    "2 --parallel pp" "4 --mesh 2x2 --parallel dp,tp" "4 --mesh 2x2 --parallel fsdp,tp+sp" \
    "4 --mesh 2x2 --parallel dp,pp --microbatches 4"
# shellcheck disable=SC2086
mg 1 $ev --eval-tokens 2048
check "--eval-tokens 2048: 64 windows" grep -q " 64 windows of 32 tokens" "$tmp/out"
# shellcheck disable=SC2086
mg 2 $ev --split train --parallel tp
train_loss=$(eval_loss)
check "--split train (2 ranks tp): eval_loss $train_loss, of /train" \
    sh -c "grep -q ' /train ' '$tmp/out' && test '$train_loss' != '$one'"

# ---- logits ----------------------------------------------------------------------------------
printf 'Call me Ishmael. Some years ago--never mind how long precisely' >"$tmp/text.txt"
lg="eval --resume $tmp/gpt.h5 --text $tmp/text.txt --threads 1"
# shellcheck disable=SC2086
mg 1 $lg --logits "$tmp/l1.h5"
check "--logits on 1 rank: exit 0" test $? -eq 0 -a -f "$tmp/l1.h5"
check "... (32, 256) float32 (the first ctx bytes of a longer text)" \
    sh -c "h5dump -H -d logits '$tmp/l1.h5' | grep -q 'H5T_IEEE_F32LE' &&
           h5dump -H -d logits '$tmp/l1.h5' | grep -q '( 32, 256 )'"
check "... the text's cut is said on stderr" grep -q "using its first 32 bytes" "$tmp/err"
for run in "tp 2 --parallel tp" "sp 2 --parallel sp" "dptp 4 --mesh 2x2 --parallel dp,tp"; do
    set -- $run
    tag=$1 np=$2
    shift 2
    # shellcheck disable=SC2086
    mg "$np" $lg --logits "$tmp/l$tag.h5" "$@"
    check "--logits on $np ranks ($*): within 1e-5 of 1 rank's" \
        sh -c "'$tool' compare '$tmp/l$tag.h5' '$tmp/l1.h5' 1e-5 >'$tmp/out' 2>'$tmp/err'"
done
printf 'Call me' >"$tmp/short.txt"
mg 1 eval --resume "$tmp/gpt.h5" --text "$tmp/short.txt" --logits "$tmp/short.h5"
check "a text of 7 bytes: logits (7, 256)" \
    sh -c "h5dump -H -d logits '$tmp/short.h5' | grep -q '( 7, 256 )'"

# ---- refusals -------------------------------------------------------------------------------
printf 'plain ascii text, with nothing above 127, long enough for windows of ctx. %.0s' \
    $(seq 1 200) >"$tmp/ascii.txt"
"$prog" data text2h5 "$tmp/ascii.txt" "$tmp/ascii.h5" >/dev/null 2>&1 &&
    "$tool" set-attr "$tmp/ascii.h5" vocab_size 128 >/dev/null 2>&1
check_refused "a data set of another vocabulary" 1 "vocabulary of 256 tokens but .*ascii.h5 one of 128" \
    "$prog" eval --resume "$tmp/gpt.h5" --data "$tmp/ascii.h5"
check_refused "no --resume" 1 "no checkpoint given" "$prog" eval --data "$mobydick"
check_refused "no --data" 1 "no --data" "$prog" eval --resume "$tmp/gpt.h5"
check_refused "--split test" 1 "--split test: give val or train" \
    "$prog" eval --resume "$tmp/gpt.h5" --data "$mobydick" --split test
check_refused "--text without --logits" 1 "go together" \
    "$prog" eval --resume "$tmp/gpt.h5" --text "$tmp/text.txt"
check_refused "--logits with pp" 2 "has pp" \
    "$prog" eval --resume "$tmp/gpt.h5" --text "$tmp/text.txt" --logits "$tmp/pp.h5" --parallel pp
"$prog" data text2h5 "$tmp/ascii.txt" "$tmp/ascii2.h5" >/dev/null 2>&1
before=$(cksum <"$tmp/l1.h5")
check_refused "an existing --logits file without --overwrite" 1 "will not replace .*--overwrite" \
    "$prog" eval --resume "$tmp/gpt.h5" --text "$tmp/text.txt" --logits "$tmp/l1.h5"
check "... it is left as it was" test "$(cksum <"$tmp/l1.h5")" = "$before"
mg 1 eval --resume "$tmp/gpt.h5" --text "$tmp/short.txt" --logits "$tmp/l1.h5" --overwrite
check "with --overwrite a logits file of eval is replaced" test $? -eq 0
check_refused "--overwrite of a file that is not eval's" 1 "will not replace .*ascii2.h5" \
    "$prog" eval --resume "$tmp/gpt.h5" --text "$tmp/text.txt" --logits "$tmp/ascii2.h5" --overwrite
check_refused "--logits onto the checkpoint" 1 "is the checkpoint" \
    "$prog" eval --resume "$tmp/gpt.h5" --text "$tmp/text.txt" --logits "$tmp/gpt.h5" --overwrite
mg 1 train --model mlp --data "$data" --steps 2 --log-every 0 --threads 1 --save "$tmp/mlp.h5"
check_refused "an MLP's checkpoint" 1 "holds a model of kind mlp" \
    "$prog" eval --resume "$tmp/mlp.h5" --data "$mobydick"
check_refused "an unknown flag" 1 "unknown option" "$prog" eval --resume "$tmp/gpt.h5" --lr 3
# --logits passes the rule of every output (io/files.h): a FIFO or a device node is
# refused at once, never opened
mkfifo "$tmp/logits.fifo"
check_refused "--logits naming a FIFO: refused at once, not waited on" 1 \
    "will not replace .*logits.fifo: it is a FIFO" \
    "$prog" eval --resume "$tmp/gpt.h5" --text "$tmp/text.txt" --logits "$tmp/logits.fifo"
if mknod "$tmp/null" c 1 3 2>/dev/null; then
    check_refused "--logits naming a device node (mknod c 1 3)" 1 "will not replace .*null: it is a device" \
        "$prog" eval --resume "$tmp/gpt.h5" --text "$tmp/text.txt" --logits "$tmp/null"
fi

# ---- a Llama ---------------------------------------------------------------------------------
train_and_eval llama "a Llama" --model llama --data "$mobydick" --layers 2 --heads 4 --kv-heads 2 \
    --embd 32 --ctx 32 --untied-head --seed 5
check "llama, 1 rank: eval_loss $one is train's val_loss $val" test "$one" = "$val"
check "... the model said: 4 heads (2 kv), untied head" grep -q "4 heads (2 kv).*untied head" "$tmp/out"
evals_within "llama, " "2 --parallel tp" "2 --parallel pp" "4 --mesh 2x2 --parallel fsdp,tp+sp"
mg 1 eval --resume "$tmp/llama.h5" --text "$tmp/text.txt" --logits "$tmp/ll1.h5" --threads 1
mg 2 eval --resume "$tmp/llama.h5" --text "$tmp/text.txt" --logits "$tmp/ll2.h5" --threads 1 \
    --parallel tp
check "llama --logits on 2 ranks (tp): within 1e-4 of 1 rank's" \
    sh -c "'$tool' compare '$tmp/ll2.h5' '$tmp/ll1.h5' 1e-4 >'$tmp/out' 2>'$tmp/err'"
mg 1 ckpt export --format safetensors "$tmp/llama.h5" "$tmp/llama.safetensors"
mg 1 ckpt import --format safetensors "$tmp/llama.safetensors" "$tmp/llama-back.h5"
mg 1 eval --resume "$tmp/llama-back.h5" --data "$mobydick" --eval-tokens 16384 --threads 1 \
    --batch 8
back=$(eval_loss)
check "llama exported to safetensors and imported: eval_loss $back is $one" test "$back" = "$one"
check_summary
