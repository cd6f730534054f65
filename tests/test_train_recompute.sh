#!/bin/sh
# test_train_recompute.sh: `meshgrad train --recompute blocks|attention`
# (activation recomputation, autograd/recompute.h) against --recompute none.
# - bitwise: a tiny GPT (2 layers, embd 32, ctx 16, batch 8 windows of
#   data/mobydick.h5, AdamW with clipping, 5 steps) on 1 rank, dp (4 ranks
#   with embd 256: gradients in several buckets and some summed on their
#   own), tp, tp+sp, fsdp, fsdp,tp (2x2), dp,tp with --grad-accum 2, and
#   pipelines (pp interleaved-1f1b of 4 layers, pp,tp); a tiny Llama (4
#   heads, 2 kv heads) on 1 rank, sp, fsdp,tp (2x2) and pp 1f1b: every
#   metrics value (the initial parameter checksum, each step's loss and
#   gradient norm) equal as printed, and the final checkpoints' parameters
#   and optimizer state bitwise equal (train_ckpt_tool compare), for both
#   granularities;
# - memory: the 1-rank runs' activations (the metrics' memory line) drop,
#   for both models;
# - bad input: an unknown --recompute value, recompute with the MLP, with
#   --pp-schedule zb-h1, and bench step's --recompute with the MLP or an
#   unknown value: one "meshgrad: error:" line each, non-zero exit.
. "$(dirname "$0")/check.sh"
program_test_env train-recompute
train_limit=180
gpt="--model gpt --data $top/data/mobydick.h5 --layers 2 --embd 32 --ctx 16 --batch 8 --heads 2 \
--steps 5 --clip 1 --log-every 0 --threads 1 --eval-every never"
llama="--model llama --data $top/data/mobydick.h5 --layers 2 --heads 4 --kv-heads 2 --embd 32 \
--multiple-of 16 --ctx 16 --batch 8 --steps 5 --clip 1 --log-every 0 --threads 1 --eval-every never"

# same NAME NP ARGS...: the run with each --recompute against none's
same() {
    _name=$1 _np=$2
    shift 2
    for _m in none blocks attention; do
        rm -f "$tmp/$_m.jsonl" "$tmp/$_m.h5"
        if ! train_run "$_m" "$_np" $lm "$@" --recompute "$_m" --save "$tmp/$_m.h5"; then
            fail "$_name: --recompute $_m failed"
            show_log "$tmp/$_m.out"
            return
        fi
        metrics_values "$_m" >"$tmp/$_m.vals"
    done
    for _m in blocks attention; do check_bitwise "$_name, --recompute $_m" none "$_m" 11; done
}

lm=$gpt
same "1 rank" 1
same "dp 4, embd 256" 4 --mesh 4 --parallel dp --embd 256 --heads 4
same "tp" 2 --mesh 2 --parallel tp
same "tp+sp" 2 --mesh 2 --parallel tp+sp --batch 2
same "fsdp" 2 --mesh 2 --parallel fsdp
same "fsdp,tp 2x2" 4 --mesh 2x2 --parallel fsdp,tp
same "dp,tp 2x2 --grad-accum 2" 4 --mesh 2x2 --parallel dp,tp --grad-accum 2
same "pp interleaved-1f1b" 2 --layers 4 --mesh 2 --parallel pp --microbatches 4 \
    --pp-schedule interleaved-1f1b --virtual-stages 2
same "pp,tp 2x2" 4 --layers 4 --mesh 2x2 --parallel pp,tp --microbatches 2
lm=$llama
same "llama, 1 rank" 1
same "llama, sp" 2 --mesh 2 --parallel sp
same "llama, fsdp,tp 2x2" 4 --mesh 2x2 --parallel fsdp,tp
same "llama, pp 1f1b" 2 --layers 4 --mesh 2 --parallel pp --microbatches 4

# the activations' high-water of the 1-rank runs (the memory line)
act() { sed -n 's/.*"activations":\([0-9]*\).*/\1/p' "$tmp/$1.jsonl"; }
for which in gpt llama; do
    if [ $which = gpt ]; then lm=$gpt; else lm=$llama; fi
    for m in none blocks attention; do train_run "mem-$m" 1 $lm --recompute "$m"; done
    check "$which: activations drop: none $(act mem-none) B, blocks $(act mem-blocks) B, attention $(act mem-attention) B" \
        test "$(act mem-blocks)" -lt "$(act mem-attention)" -a "$(act mem-attention)" -lt "$(act mem-none)"
done

# bad input
check_refused "an unknown --recompute value" 1 "recompute.*unknown recompute mode 'layers'; use none, blocks or attention" \
    "$prog" train $gpt --recompute layers
check_refused "--recompute with the MLP" 1 "recompute blocks applies to a model of blocks \(--model gpt or llama\); model mlp has none" \
    "$prog" train --data "$data" --steps 2 --recompute blocks
check_refused "--recompute with zb-h1" 2 "recompute attention with --pp-schedule zb-h1" \
    "$prog" train $gpt --layers 4 --mesh 2 --parallel pp --microbatches 4 --pp-schedule zb-h1 \
    --recompute attention
check_refused "bench step --recompute with the MLP" 1 "bench step: --recompute applies to the GPT's and the Llama's steps" \
    "$prog" bench step --recompute blocks --steps 1
check_refused "bench step --model gpt --recompute bogus" 1 "unknown recompute mode 'bogus'" \
    "$prog" bench step --model gpt --recompute bogus --steps 1
check_summary
