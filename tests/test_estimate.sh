#!/bin/sh
# test_estimate.sh: `meshgrad plan --estimate` (train's step run on the meta
# device, src/train/estimate.h) against what `meshgrad train` measures: the
# MLP on 1, 2 and 4 ranks under every plan (dp, tp, fsdp on 1-D meshes;
# dp,tp, fsdp,tp, tp,dp, tp,fsdp on 2x2), the permute-MLP (SGD with
# momentum, clipping) on a few, the MLPs at other --depth, and the MLPs'
# pipelines (pp, pp,dp, pp,fsdp; gpipe, 1f1b). Every collective's bytes and
# calls per step must equal train's own (its "comm_per_step" metrics line:
# mg_comm_stats over the steps after the first, the largest rank's), and the
# peak memory of the largest rank be within 2% (its "memory" line: arena
# high-water marks plus parameter, gradient, optimizer and buffer bytes).
# Prints both side by side. The pipeline planner's own estimate (plan
# --estimate with pp and widths) is checked for the bytes its ranks send; bad
# input is refused. The GPT and the Llama: test_estimate_lm.sh.
. "$(dirname "$0")/check.sh"
program_test_env estimate
. "$(dirname "$0")/estimate_case.sh"

case_ 1 1 dp
for p in dp tp fsdp; do
    case_ 2 2 $p
    case_ 4 4 $p
done
for p in dp,tp fsdp,tp tp,dp tp,fsdp; do case_ 4 2x2 $p; done
pm="--model permute-mlp --hidden 40 --channels 6 --batch 50 --optimizer sgd --momentum 0.9 --clip 1"
case_ 2 2 tp $pm
case_ 4 2x2 fsdp,tp $pm
case_ 4 4 dp --hidden 4096 --batch 32
# --depth: deeper models (the estimate walked the 2-layer MLP and the 3-layer
# permute-MLP whatever --depth said: a quarter of a 4-layer MLP's memory)
case_ 1 1 dp --depth 4
case_ 2 2 tp --depth 4
case_ 2 2 tp --depth 4 --dtype bf16 # the MLP's weights' bf16 copies
case_ 4 2x2 fsdp,tp --depth 3
case_ 2 2 fsdp $pm --depth 5

# pipelines: train's own (--config and flags), each pipeline rank run in turn
case_ 2 2 pp --depth 4 --microbatches 4
case_ 2 2 pp --depth 4 --microbatches 4 --pp-schedule gpipe
case_ 4 2x2 pp,fsdp --depth 4 --microbatches 4
case_ 4 2x2 pp,dp $pm --depth 4 --microbatches 2
printf 'mesh = 2\nparallel = pp\ndepth = 4\nmicrobatches = 4\n' >"$tmp/pp.conf"
case_ 2 2 pp --config "$tmp/pp.conf"


# the pipeline planner's estimate: each pipeline rank's memory and the activations it sends
# (8 micro-batches of 32 rows of 1024 floats cross each stage boundary, each
# way: 1 MiB a boundary and direction)
"$prog" plan --estimate --mesh 4 --parallel pp --layers 1024,1024,1024,1024,1024 \
    --microbatches 8 --batch 256 --flops 100 --bandwidth 5 --latency 5 >"$tmp/out" 2>&1
check "pp: a line per pipeline rank: exit $?" test "$(grep -c '^  rank [0-3]: memory' "$tmp/out")" -eq 4
check "... the end stages send one boundary's activations or gradients, 1 MiB in 8 transfers" \
    sh -c "grep -q '^  rank 0: .*send 1048576 B in 8 transfers' $tmp/out && grep -q '^  rank 3: .*send 1048576 B in 8 transfers' $tmp/out"
check "... the middle ones both, 2 MiB in 16" grep -q '^  rank 1: .*send 2097152 B in 16 transfers' "$tmp/out"
"$prog" plan --estimate --mesh 4 --parallel=pp --layers 1024,1024,1024,1024,1024 \
    --microbatches 8 --batch 256 --flops 100 --bandwidth 5 --latency 5 >"$tmp/out" 2>&1
check "--parallel=pp is a pipeline too (was: train's step, all on one rank): exit $?" \
    test "$(grep -c '^  rank [0-3]: memory' "$tmp/out")" -eq 4
# plan (the pipeline planner) takes a train config's model, batch and
# pipeline (was: refused)
"$prog" plan --config "$tmp/pp.conf" --flops 100 --bandwidth 5 --latency 5 >"$tmp/out" 2>&1
check "plan --config with pp plans the config's MLP: exit $?" \
    grep -q "^meshgrad plan: mlp 64,128,128,128,10 (4 layers.*batch 64 in 4 micro-batches" "$tmp/out"

# bad input: one message, exit 2
"$prog" plan --estimate --model gpt --layers 2 --heads 2 --embd 32 --ctx 16 --batch 10 \
    --grad-accum 4 >"$tmp/out" 2>&1
check "--grad-accum not dividing the batch, refused as train refuses it: exit $?" \
    grep -q "meshgrad: error: grad-accum 4 does not divide batch 10" "$tmp/out"
"$prog" plan --estimate --grad-accum 4 >"$tmp/out" 2>&1
check "--grad-accum with the MLP (train refuses it): exit $?" \
    grep -q "meshgrad: error: grad-accum 4 applies to --model gpt" "$tmp/out"
# each data-parallel rank needs a row of each micro-batch, not only of the batch
"$prog" plan --estimate --model gpt --layers 2 --heads 2 --embd 32 --ctx 16 --batch 8 \
    --grad-accum 8 --mesh 4 --parallel dp >"$tmp/out" 2>&1
check "a micro-batch smaller than the data-parallel degree, refused as train refuses it: exit $?" \
    grep -q "meshgrad: error: a micro-batch of 1 windows (batch 8 / grad-accum 8) is smaller than the data-parallel degree 4" "$tmp/out"
"$prog" plan --estimate --mesh 2x2 --parallel dp >"$tmp/out" 2>&1
check "a plan count that is not the mesh's: exit $?" grep -q "meshgrad: error: parallel plan 'dp' has 1 entry but the mesh 2x2 is 2-D" "$tmp/out"
"$prog" plan --estimate --input 8y8 >"$tmp/out" 2>&1
check "a bad --input: exit $?" grep -q "meshgrad: error: plan --estimate: --input '8y8' is not RxC" "$tmp/out"
"$prog" plan --estimate --nodes 4294967296 >"$tmp/out" 2>&1
check "--nodes 2^32 (an int: was taken as 0): exit $?" \
    grep -q "meshgrad: error: plan --estimate: --nodes '4294967296' is not a count from 1 to 2147483647" "$tmp/out"
"$prog" plan --estimate --input 99999999999999999999x8 >"$tmp/out" 2>&1
check "--input past 2^63: exit $?" grep -q "meshgrad: error: plan --estimate: --input '99999999999999999999x8' is not RxC" "$tmp/out"
# a GPT of 2^63-1 layers overran the estimate's step table (a crash); of 2^31-1
# layers, its parameters' int index
"$prog" plan --estimate --model gpt --layers 9223372036854775807 >"$tmp/out" 2>&1
check "gpt --layers 2^63-1: exit $?" grep -q "meshgrad: error: --layers: layers must be <= 2147483647" "$tmp/out"
"$prog" plan --estimate --model gpt --layers 2147483647 >"$tmp/out" 2>&1
check "gpt --layers 2^31-1: exit $?" grep -q "meshgrad: error: gpt: layers (2147483647).* is too large" "$tmp/out"
"$prog" plan --estimate --model gpt --layers 1000 --embd 2147483647 --heads 1 >"$tmp/out" 2>&1
check "gpt of 5e22 parameters: exit $?" grep -q "meshgrad: error: gpt: 1000 layers of embd 2147483647 make .* parameters" "$tmp/out"
# a model no machine holds, refused at once, before anything is laid out
# (was: plan --estimate and train grew to the machine's memory)
"$prog" plan --estimate --model gpt --layers 100000000 >"$tmp/out" 2>&1
check "plan --estimate of 1e8 layers: exit $?" grep -q "meshgrad: error: an estimate of 100000000 layers lays out every layer's tensors" "$tmp/out"
"$TIMEOUT" 60 "$prog" train --model gpt --data "$top/data/mobydick.h5" --layers 100000000 --steps 1 >"$tmp/out" 2>&1
check "train of 1e8 layers: exit $?" grep -q "meshgrad: error: the model's 1.98e+13 parameters .* more than its .* GiB of memory" "$tmp/out"
"$TIMEOUT" 60 "$prog" train --model gpt --data "$top/data/mobydick.h5" --embd 4096 --heads 32 --ctx 1024 --batch 64 --steps 1 >"$tmp/out" 2>&1
check "train of a step larger than the machine, by its estimate: exit $?" grep -q "meshgrad: error: a step of this run (meshgrad plan --estimate shows its parts) needs at least .* GiB a rank" "$tmp/out"
"$prog" plan --estimate --model gpt --layers 2 --heads 2 --embd 32 --ctx 16 --mesh 4 --parallel tp >"$tmp/out" 2>&1
check "a GPT whose heads the tp ranks cannot split: exit $?" \
    grep -q "meshgrad: error: gpt: tensor-parallel degree 4 cannot split 2 heads" "$tmp/out"
llama="--model llama --layers 2 --heads 4 --kv-heads 2 --embd 32 --multiple-of 32 --ctx 16"
check_refused "a Llama whose kv heads the tp ranks cannot split" 1 \
    "llama: tensor-parallel degree 4 cannot split --kv-heads 2" \
    "$prog" plan --estimate $llama --mesh 4 --parallel tp
check_summary
