#!/bin/sh
# test_estimate_lm.sh: `meshgrad plan --estimate` against `meshgrad train`, as
# test_estimate.sh, for the language models: a tiny GPT (2 layers, embd 32,
# ctx 16, batch 8 windows of data/mobydick.h5) under every plan it has (dp,
# tp, sp, fsdp, tp+sp, dp,tp, fsdp,tp), with --grad-accum, a tiny Llama (2 kv
# heads of 4, an untied head too) on the same plans, both with --recompute
# blocks and attention, some with --dtype bf16 (the weights' bf16 copies
# counted to the byte), and their pipelines (pp, pp,tp; 1f1b, interleaved;
# with --recompute and bf16). Every collective's bytes and calls
# per step equal train's own, the peak memory within 2%.
. "$(dirname "$0")/check.sh"
program_test_env estimate-lm
. "$(dirname "$0")/estimate_case.sh"

# the GPT (4 heads where tp is 4 wide: each rank takes whole heads)
gpt="--model gpt --data $top/data/mobydick.h5 --layers 2 --embd 32 --ctx 16 --batch 8"
case_ 1 1 dp $gpt --heads 2
for p in dp tp sp fsdp tp+sp; do case_ 2 2 $p $gpt --heads 2; done
for p in tp fsdp; do case_ 4 4 $p $gpt --heads 4; done
for p in dp,tp fsdp,tp; do case_ 4 2x2 $p $gpt --heads 2; done
# --grad-accum: the micro-batches' data in an arena reset after each backward,
# their headers kept until the step ends, their collectives but the gradients'
# sums once each (the whole batch's step was estimated: 3x train's memory)
case_ 1 1 dp $gpt --heads 2 --grad-accum 4
for p in tp fsdp; do case_ 2 2 $p $gpt --heads 2 --grad-accum 2; done
case_ 4 2x2 dp,tp $gpt --heads 2 --grad-accum 2
# sp and tp+sp split the sequence, not the batch: one window is a run (an
# estimate refused it as "smaller than the data-parallel degree 2")
case_ 2 2 sp $gpt --heads 2 --batch 1
case_ 2 2 tp+sp $gpt --heads 2 --batch 1

# --dtype bf16: each weight's bf16 copy (2 bytes an element, made once a step
# through the device's memory) counted as train counts it; gathered fsdp
# weights have none
case_ 1 1 dp $gpt --heads 2 --dtype bf16
for p in tp fsdp; do case_ 2 2 $p $gpt --heads 2 --dtype bf16; done

# --recompute: each block (or its attention) runs again in backward, with its
# collectives; its data lives in the recompute arena, one segment at a time
case_ 1 1 dp $gpt --heads 2 --recompute blocks
for p in tp sp; do case_ 2 2 $p $gpt --heads 2 --recompute blocks; done
case_ 4 2x2 fsdp,tp $gpt --heads 2 --recompute blocks --grad-accum 2
case_ 1 1 dp $gpt --heads 2 --recompute attention
case_ 2 2 tp+sp $gpt --heads 2 --recompute attention

# the Llama (kv heads 2, or 4 where tp is 4 wide: each rank takes whole k, v heads)
llama="--model llama --data $top/data/mobydick.h5 --layers 2 --heads 4 --kv-heads 2 --embd 32 \
--multiple-of 32 --ctx 16 --batch 8"
case_ 1 1 dp $llama
for p in dp tp sp fsdp tp+sp; do case_ 2 2 $p $llama; done
case_ 4 4 tp $llama --kv-heads 4
case_ 4 2x2 fsdp,tp $llama
case_ 2 2 tp $llama --untied-head
case_ 2 2 dp $llama --grad-accum 2
case_ 2 2 tp $llama --recompute blocks
case_ 2 2 sp $llama --recompute attention
case_ 2 2 tp $llama --dtype bf16

gpt4="--model gpt --data $top/data/mobydick.h5 --layers 4 --embd 32 --ctx 16 --batch 8 --heads 2"
case_ 2 2 pp $gpt4 --microbatches 4
case_ 2 2 pp $gpt4 --microbatches 4 --pp-schedule interleaved-1f1b --virtual-stages 2
case_ 4 2x2 pp,tp $gpt4 --microbatches 2
case_ 2 2 pp $gpt4 --microbatches 4 --recompute blocks
case_ 2 2 pp $gpt4 --microbatches 4 --dtype bf16
llama4="--model llama --data $top/data/mobydick.h5 --layers 4 --heads 4 --kv-heads 2 --embd 32 \
--multiple-of 32 --ctx 16 --batch 8"
case_ 2 2 pp $llama4 --microbatches 4 --untied-head
case_ 4 2x2 pp,tp $llama4 --microbatches 2
# the copies' bytes: wte (256 x 32) and 2 blocks of 12 x 32 x 32, 2 bytes each; none in fp32
"$prog" plan --estimate $gpt --heads 2 --dtype bf16 >"$tmp/out" 2>&1
check "bf16: the estimate counts the weights' copies, 65536 B: exit $?" \
    grep -q '"casts":65536}' "$tmp/out"
"$prog" plan --estimate $gpt --heads 2 >"$tmp/out" 2>&1
check "fp32: none: exit $?" grep -q '"casts":0}' "$tmp/out"
check_summary
