#!/bin/sh
# test_train_deterministic.sh: `meshgrad train --deterministic` gives the same
# bits on every mesh, plan, thread count and micro-batch split that qualifies.
# - a tiny GPT (2 layers, embd 128, ctx 32, batch 16 windows of
#   data/mobydick.h5) and a tiny Llama (4 heads, 4 kv heads, SwiGLU of 352),
#   AdamW with clipping, 30 steps: on 1 rank with 2 threads, --grad-accum 2,
#   dp, tp, fsdp (2 ranks), dp,tp and fsdp,tp (2x2), pp with gpipe and 1f1b
#   (4 micro-batches) and pp,dp (2x2), against 1 rank with 1 thread: every
#   metrics value (the initial checksum, each step's loss and gradient norm)
#   equal as printed, and the final parameters and optimizer state bitwise
#   equal (train_ckpt_tool compare);
# - a run saved at step 15 on 2x2 dp,tp and resumed on 2 fsdp ends bitwise
#   equal to the straight 1-rank run, its losses too;
# - without the flag the same dp run differs (the test can tell);
# - eval --deterministic of that run's checkpoint: its --text logits bitwise
#   equal on 1 rank, tp, sp and 2x2 dp,tp (and tp's differ without the flag),
#   its loss over /val equal as printed on 1 rank, tp and pp; bench step and
#   plan --estimate take the flag;
# - what cannot qualify is refused with one line each, non-zero exit: sp and
#   tp+sp, bf16, CUDA, --grad-accum 3, --microbatches 3, the interleaved
#   schedule, a batch too small to halve, a tensor-parallel split of a dim
#   too small to halve.
. "$(dirname "$0")/check.sh"
program_test_env train-deterministic
train_limit=240
gpt="--model gpt --data $top/data/mobydick.h5 --layers 2 --heads 4 --embd 128 --ctx 32 \
--batch 16 --steps 30 --clip 1 --log-every 0 --eval-every never --deterministic"
llama="--model llama --data $top/data/mobydick.h5 --layers 2 --heads 4 --kv-heads 4 --embd 128 \
--multiple-of 32 --ctx 32 --batch 16 --steps 30 --clip 1 --log-every 0 --eval-every never \
--deterministic"

# same NAME NP ARGS...: the run against the reference "ref" of the same model
same() {
    _name=$1 _np=$2
    shift 2
    rm -f "$tmp/run.jsonl" "$tmp/run.h5"
    if ! train_run run "$_np" $lm "$@" --save "$tmp/run.h5"; then
        fail "$_name: the run failed"
        show_log "$tmp/run.out"
        return
    fi
    metrics_values run >"$tmp/run.vals"
    check_bitwise "$_name" ref run 61
}

# reference LM: the 1-rank, 1-thread run of the model
reference() {
    lm=$1
    rm -f "$tmp/ref.h5"
    if train_run ref 1 $lm --threads 1 --save "$tmp/ref.h5"; then
        metrics_values ref >"$tmp/ref.vals"
        pass "$2: the 1-rank reference ran ($(wc -l <"$tmp/ref.vals") metrics values)"
    else
        fail "$2: the 1-rank reference failed"
        show_log "$tmp/ref.out"
    fi
}

for model in gpt llama; do
    if [ $model = gpt ]; then reference "$gpt" gpt; else reference "$llama" llama; fi
    same "$model, 1 rank, 2 threads" 1 --threads 2
    same "$model, --grad-accum 2" 1 --threads 1 --grad-accum 2
    same "$model, dp 2" 2 --mesh 2 --parallel dp
    same "$model, tp 2" 2 --mesh 2 --parallel tp
    same "$model, fsdp 2" 2 --mesh 2 --parallel fsdp
    same "$model, dp,tp 2x2" 4 --mesh 2x2 --parallel dp,tp
    same "$model, fsdp,tp 2x2" 4 --mesh 2x2 --parallel fsdp,tp
    same "$model, pp 2 1f1b" 2 --mesh 2 --parallel pp --microbatches 4
    same "$model, pp 2 gpipe" 2 --mesh 2 --parallel pp --microbatches 4 --pp-schedule gpipe
    same "$model, pp,dp 2x2" 4 --mesh 2x2 --parallel pp,dp --microbatches 4
done

# saved on one mesh, resumed on another: the straight run's bits (the GPT's
# reference is rerun: the loop above left the Llama's)
reference "$gpt" "gpt again"
rm -f "$tmp/half.h5" "$tmp/resumed.h5"
if train_run half 4 $gpt --mesh 2x2 --parallel dp,tp --steps 15 --save "$tmp/half.h5" &&
    train_run resumed 2 $gpt --mesh 2 --parallel fsdp --resume "$tmp/half.h5" \
        --save "$tmp/resumed.h5" &&
    "$tool" compare "$tmp/ref.h5" "$tmp/resumed.h5" >"$tmp/cmp.out" 2>&1; then
    grep -o '"step":[0-9]*,"loss":[^,}]*' "$tmp/ref.jsonl" | tail -n 15 >"$tmp/ref.tail"
    grep -o '"step":[0-9]*,"loss":[^,}]*' "$tmp/resumed.jsonl" | tail -n 15 >"$tmp/resumed.tail"
    check "saved at 15 on dp,tp 2x2, resumed on fsdp 2: the final state and the last 15 losses bitwise the 1-rank run's" \
        cmp -s "$tmp/ref.tail" "$tmp/resumed.tail"
else
    fail "saved on dp,tp 2x2, resumed on fsdp 2: differs or failed"
    show_log "$tmp/half.out" "$tmp/resumed.out" "$tmp/cmp.out"
fi

# the test can tell: without --deterministic, dp's sums have another order
nodet=$(echo "$gpt" | sed 's/ --deterministic//')
rm -f "$tmp/plain.h5"
if train_run plain 2 $nodet --mesh 2 --parallel dp --save "$tmp/plain.h5"; then
    check "without --deterministic, dp 2 differs from the deterministic 1-rank run" \
        sh -c "! '$tool' compare '$tmp/ref.h5' '$tmp/plain.h5' >/dev/null 2>&1"
else
    fail "dp 2 without --deterministic failed"
    show_log "$tmp/plain.out"
fi

# eval: logits and loss on every mesh
printf 'Call me Ishmael. Some years ago - never mind how long precisely - having little ' >"$tmp/prompt.txt"
# logits NAME NP ARGS...: eval --text of the reference checkpoint; the logits' bytes in NAME.bin
logits() {
    _n=$1 _np=$2
    shift 2
    rm -f "$tmp/$_n.h5" "$tmp/$_n.bin"
    "$TIMEOUT" -k 5 60 "$MPIRUN" -np "$_np" "$prog" eval --resume "$tmp/ref.h5" \
        --text "$tmp/prompt.txt" --logits "$tmp/$_n.h5" --threads 1 "$@" >"$tmp/$_n.out" 2>&1 &&
        h5dump -b LE -o "$tmp/$_n.bin" -d logits "$tmp/$_n.h5" >/dev/null 2>&1
}
logits l1 1 --deterministic
logits ltp 2 --mesh 2 --parallel tp --deterministic
logits lsp 2 --mesh 2 --parallel sp --deterministic
logits ldptp 4 --mesh 2x2 --parallel dp,tp --deterministic
logits ltp0 2 --mesh 2 --parallel tp
for m in ltp lsp ldptp; do
    check "eval --deterministic: the --text logits on $m bitwise those of 1 rank" \
        cmp -s "$tmp/l1.bin" "$tmp/$m.bin"
done
check "eval without the flag: tp's logits differ from the deterministic 1-rank ones (the test can tell)" \
    sh -c "test -s '$tmp/ltp0.bin' && ! cmp -s '$tmp/l1.bin' '$tmp/ltp0.bin'"
# evalloss NP ARGS...: the printed eval_loss of the reference checkpoint over /val
evalloss() {
    _np=$1
    shift
    "$TIMEOUT" -k 5 60 "$MPIRUN" -np "$_np" "$prog" eval --resume "$tmp/ref.h5" \
        --data "$top/data/mobydick.h5" --eval-tokens 16384 --threads 1 --deterministic "$@" 2>&1 |
        sed -n 's/^eval_loss \([^ ]*\) .*/\1/p'
}
e1=$(evalloss 1) etp=$(evalloss 2 --mesh 2 --parallel tp) epp=$(evalloss 2 --mesh 2 --parallel pp)
check "eval --deterministic: the loss over /val $e1 on 1 rank, $etp on tp, $epp on pp: equal" \
    test -n "$e1" -a "$e1" = "$etp" -a "$e1" = "$epp"
"$prog" bench step --model gpt --steps 1 --threads 1 --deterministic >"$tmp/bench.out" 2>&1
check "bench step --deterministic says so in its JSON line" grep -q '"deterministic":true' "$tmp/bench.out"
"$TIMEOUT" 60 "$MPIRUN" -np 1 "$prog" plan --estimate $gpt --mesh 2 --parallel dp >"$tmp/plan.out" 2>&1
check "plan --estimate takes --deterministic (a meta run sums nothing)" test $? -eq 0

# what cannot qualify: one line each
small="$gpt --steps 1"
check_refused "--deterministic with sp" 2 "cannot take sequence parallelism" \
    "$prog" train $small --mesh 2 --parallel sp
check_refused "--deterministic with tp+sp" 2 "cannot take sequence parallelism" \
    "$prog" train $small --mesh 2 --parallel tp+sp
check_refused "--deterministic with bf16" 1 "fp32 only: drop --dtype bf16" \
    "$prog" train $small --dtype bf16
check_refused "--deterministic on CUDA" 1 "runs on the CPU only" \
    "$prog" train $small --device cuda
check_refused "--deterministic --grad-accum 3" 1 "grad-accum a power of two" \
    "$prog" train $small --batch 12 --grad-accum 3
check_refused "--deterministic --microbatches 3" 2 "microbatches a power of two" \
    "$prog" train $small --mesh 2 --parallel pp --microbatches 3 --batch 12
check_refused "--deterministic with interleaved-1f1b" 2 "gpipe and 1f1b pipeline schedules" \
    "$prog" train $small --layers 4 --mesh 2 --parallel pp --microbatches 4 \
    --pp-schedule interleaved-1f1b --virtual-stages 2
check_refused "--deterministic, a batch too small to halve" 2 "must be its halves" \
    "$prog" train $small --mesh 2 --parallel dp --batch 2 --ctx 16
check_refused "--deterministic, tp of a dim too small to halve" 2 "cannot split a sum of 64 terms over 2 ranks" \
    "$prog" train $small --mesh 2 --parallel tp --embd 64 --heads 2
check_summary
