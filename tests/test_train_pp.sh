#!/bin/sh
# test_train_pp.sh: `meshgrad train` with pipeline parallelism (--parallel
# with pp; nn/pipeline.h, cli/train_pp.c).
# - mesh invariance: the same job (an MLP of 4 layers, AdamW with warmup,
#   cosine decay and clipping, 100 steps) on pp=2 (1f1b, interleaved with 2
#   virtual stages, a --microbatch-rows list), pp=4 (4 ranks, zb-h1), pp,dp
#   2x2 (gpipe), pp,tp 2x2, pp,fsdp 2x2 and pp,dp,tp 2x2x2 (8 ranks,
#   oversubscribed): bitwise equal initial parameters (param_checksum) and
#   every step's loss within 1e-4 (relative) of the 1-rank run; the
#   permute-mlp on pp=2 likewise; the final evaluation (the test split in
#   chunks of the micro-batches) gives the 1-rank run's accuracy and loss.
# - checkpoints stay global arrays: the step-20 checkpoint of a 40-step pp=2
#   run resumed on pp=2 gives the same losses and a bitwise equal final
#   checkpoint; resumed on 1 rank (no pp), and a 1-rank run's resumed on
#   pp,dp 2x2, every loss within 1e-5 of the uninterrupted run; a 1-rank
#   checkpoint loaded and saved again on pp=4 holds bitwise the same arrays.
# - bench step --parallel pp runs and prints its measured and predicted times;
#   1f1b holds 2 and 1 micro-batches on its 2 stages, gpipe all 4.
# - bad input: more stages than layers, fewer micro-batches than 1f1b needs,
#   virtual stages that do not divide the layers, --pp-layers that do not sum
#   to the layers, --microbatch-rows that do not sum to the batch or hold a
#   count past 2^31, pipeline
#   flags on a plan without pp (ignored before): one "meshgrad: error:" line
#   each, non-zero exit.
. "$(dirname "$0")/check.sh"
program_test_env train-pp
STEPS=100
train_limit=180

common="--data $data --batch 32 --seed 11 --log-every 0 --threads 1"
mlp="--model mlp --hidden 24 --depth 4 --optimizer adamw --lr 3e-3 --schedule cosine --warmup 10 --clip 1.0"
pmlp="--model permute-mlp --hidden 20 --channels 6 --optimizer sgd --lr 0.03 --momentum 0.9 --clip 1.0"

# train TAG NP ARGS...: metrics in $tmp/TAG.jsonl, output in $tmp/TAG.out; 0 on success
train() {
    _tag=$1 _np=$2
    shift 2
    train_run "$_tag" "$_np" $common "$@"
}

losses() { metrics_losses "$tmp/$1.jsonl"; }
# close TAG REF STEPS RTOL: STEPS steps, each loss within RTOL of REF's; prints the worst
close() { losses_close "$tmp/$1.jsonl" "$tmp/$2.jsonl" "$3" "$4"; }

# invariant TAG NP REF ARGS...: starts from REF's parameters and follows its losses
invariant() {
    _tag=$1 _np=$2 _ref=$3
    shift 3
    train_invariant "$_tag" "$_np" "$_ref" $STEPS 1e-4 $common --steps $STEPS "$@"
}

# ---- the references ------------------------------------------------------------
for m in mlp pmlp; do
    eval flags=\$$m
    train_reference "$m-1" $STEPS $common --steps $STEPS $flags
done

# ---- mesh invariance --------------------------------------------------------------
invariant "pp-2-1f1b" 2 mlp-1 $mlp --parallel pp --microbatches 4
invariant "pp-2-interleaved-v2" 2 mlp-1 $mlp --parallel pp --pp-schedule interleaved-1f1b \
    --virtual-stages 2 --microbatches 4
invariant "pp-2-rows-5,7,3,7,10" 2 mlp-1 $mlp --parallel pp --microbatch-rows 5,7,3,7,10
invariant "pp-4-zb-h1" 4 mlp-1 $mlp --mesh 4 --parallel pp --pp-schedule zb-h1 --microbatches 4
invariant "pp,dp-2x2-gpipe" 4 mlp-1 $mlp --mesh 2x2 --parallel pp,dp --pp-schedule gpipe
invariant "pp,tp-2x2" 4 mlp-1 $mlp --mesh 2x2 --parallel pp,tp --microbatches 4
invariant "pp,fsdp-2x2" 4 mlp-1 $mlp --mesh 2x2 --parallel pp,fsdp --microbatches 4
invariant "pp,dp,tp-2x2x2" 8 mlp-1 $mlp --mesh 2x2x2 --parallel pp,dp,tp --microbatches 4
invariant "pmlp-pp-2" 2 pmlp-1 $pmlp --parallel pp --microbatches 4

# the evaluation at the end: the test split in chunks of the pipeline's
# micro-batches, each chunk's correct predictions added; its accuracy within
# 0.005 of the 1-rank run's (one of the 300 predictions may flip with
# parameters within 1e-4), its loss within 1e-3
evaluation() { sed -n 's/.*"eval_loss":\([^,]*\),"eval_accuracy":\([^}]*\).*/\1 \2/p' "$tmp/$1.jsonl" | tail -n 1; }
eval_close() {
    set -- "$(evaluation "$1")" "$(evaluation "$2")"
    echo "loss accuracy $1 against $2"
    [ -n "$1" ] && echo "$1 $2" | awk '{ d = $1 - $3; if (d < 0) d = -d; a = $2 - $4; if (a < 0) a = -a; exit !(d <= 1e-3 * $3 && a <= 0.005) }'
}
for tag in pp-2-1f1b pp-2-rows-5,7,3,7,10 pp-4-zb-h1 pp,dp-2x2-gpipe pp,dp,tp-2x2x2; do
    check_output "$tag: the final evaluation's accuracy and loss are the 1-rank run's" \
        eval_close "$tag" mlp-1
done

# ---- checkpoints --------------------------------------------------------------------
# same TAG REF: TAG's losses (steps 21 to 40) are REF's, to the last digit (%.9g)
same() {
    losses "$1" >"$tmp/got.txt"
    losses "$2" | awk '$1 > 20' >"$tmp/ref.txt"
    n=$(wc -l <"$tmp/got.txt")
    [ "$n" -eq 20 ] && cmp -s "$tmp/got.txt" "$tmp/ref.txt" && echo "$n steps identical" && return 0
    paste "$tmp/got.txt" "$tmp/ref.txt" | head -5
    return 1
}
full="$mlp --steps 40"
pp2="--parallel pp --microbatches 4"
c20=ckpt-00000020.h5 c40=ckpt-00000040.h5
train pp-full 2 $full $pp2 --save "$tmp/pp/" --save-every 20 &&
    train pp-resumed 2 $full $pp2 --resume "$tmp/pp/$c20" --save "$tmp/pp-resumed.h5"
check_output "pp=2 resumed on pp=2: the losses of the uninterrupted run" same pp-resumed pp-full
check_output "pp=2 resumed on pp=2: the final checkpoints are bitwise equal" \
    "$tool" compare "$tmp/pp/$c40" "$tmp/pp-resumed.h5"
train pp-to-1 1 $full --resume "$tmp/pp/$c20"
check_output "pp=2 checkpoint resumed on 1 rank (no pp): within 1e-5" close pp-to-1 pp-full 20 1e-5
train one-full 1 $full --save "$tmp/one/" --save-every 20 &&
    train one-to-ppdp 4 $full --mesh 2x2 --parallel pp,dp --resume "$tmp/one/$c20"
check_output "1-rank checkpoint resumed on pp,dp 2x2: within 1e-5" close one-to-ppdp one-full 20 1e-5
train one-resaved 4 $mlp --steps 20 --mesh 4 --parallel pp --resume "$tmp/one/$c20" \
    --save "$tmp/one-resaved.h5"
check_output "a 1-rank checkpoint loaded and saved again on pp=4 holds the same arrays" \
    "$tool" compare "$tmp/one/$c20" "$tmp/one-resaved.h5"

# ---- bad input ------------------------------------------------------------------------
expect() { _n=$1 _np=$2 _p=$3; shift 3; check_refused "$_n" "$_np" "$_p" "$prog" train "$@"; }
ok="--data $data --steps 2 --log-every 0 --hidden 8"
expect "more stages than layers" 4 "4 pipeline stages need at least one layer each, but the model has 2 layers" \
    $ok --mesh 4 --parallel pp
expect "1f1b with fewer micro-batches than stages" 4 \
    "1f1b needs at least as many micro-batches as pipeline ranks: 2 micro-batches on 4 ranks" \
    $ok --mesh 4 --parallel pp --depth 4 --microbatches 2
expect "virtual stages that do not divide the layers" 2 "4 stages do not divide the model's 6 layers" \
    $ok --parallel pp --depth 6 --pp-schedule interleaved-1f1b --virtual-stages 2 --microbatches 4
expect "--pp-layers that do not sum to the layers" 2 "--pp-layers sums to 3 layers but the model has 4" \
    $ok --parallel pp --depth 4 --pp-layers 1,2
expect "--microbatch-rows that do not sum to the batch" 2 \
    "--microbatch-rows sums to 30 rows but the batch has 64" $ok --parallel pp --microbatch-rows 10,20
expect "--microbatch-rows past 2^31 (summed to a negative batch before)" 2 \
    "--microbatch-rows '99999999999999999999,1' is not a list of at most 1024 counts from 1 to 2147483647" \
    $ok --parallel pp --microbatch-rows 99999999999999999999,1
expect "an unknown pipeline schedule" 2 "unknown pipeline schedule 'zb-v'" \
    $ok --parallel pp --pp-schedule zb-v
expect "--microbatches without pp" 2 \
    "microbatches applies to a pipeline, and --parallel 'dp' has no pp: add pp to it" $ok --microbatches 4
expect "--pp-schedule without pp" 2 "pp-schedule applies to a pipeline, and --parallel 'dp,tp' has no pp" \
    $ok --mesh 1x2 --parallel dp,tp --pp-schedule gpipe

# ---- bench step --parallel pp: runs, and says what it measured beside the plan -------
bench_pp() {
    "$TIMEOUT" -k 5 60 "$MPIRUN" -np 2 "$prog" bench step --parallel pp --layers 16,32,32,8 \
        --batch 32 --microbatches 4 --steps 2 --threads 1 --flops 10 --bandwidth 1 --latency 5 \
        --pp-schedule "$1" >"$tmp/bench-$1.out" 2>&1 &&
        grep -q "measured .* ms/step: pipeline" "$tmp/bench-$1.out" &&
        grep -q "predicted .* ms pipeline" "$tmp/bench-$1.out" &&
        live=$(sed -n 's/.*"peak_live":\[\([0-9,]*\)\].*/\1/p' "$tmp/bench-$1.out") &&
        [ "$live" = "$2" ] && echo "peak live micro-batches per stage $live" && return 0
    cat "$tmp/bench-$1.out"
    return 1
}
check_output "bench step --parallel pp (1f1b): measured beside predicted, 2 then 1 live" bench_pp 1f1b 2,1
check_output "bench step --parallel pp (gpipe): all 4 micro-batches live on each stage" bench_pp gpipe 4,4

check_summary
