#!/bin/sh
# test_estimate.sh: `meshgrad plan --estimate` against what `meshgrad train`
# measures (issue 19): for the MLP on 1, 2 and 4 ranks under every plan (dp,
# tp, fsdp on 1-D meshes; dp,tp, fsdp,tp, tp,dp, tp,fsdp on 2x2), and the
# permute-MLP (SGD with momentum, clipping) on a few, the estimated peak
# memory of the largest rank and the bytes of every collective per step must
# be within 10% of train's own figures (its "memory" and "comm_per_step"
# metrics line: arena high-water marks plus parameter, gradient, optimizer
# and buffer bytes; mg_comm_stats over the steps after the first). Prints
# both side by side. The same for a tiny GPT (2 layers, embd 32, ctx 16, batch
# 8 windows of data/mobydick.h5) on 1, 2 and 4 ranks under every plan it has:
# dp, tp, sp, fsdp, tp+sp, dp,tp and fsdp,tp, and with --grad-accum; its
# collectives exactly, every byte and call. The MLPs again at other --depth.
# A pipeline plan's estimate (plan --estimate with pp) is checked for the
# bytes its ranks send; pp in a config file is refused.
. "$(dirname "$0")/check.sh"
program_test_env estimate
TOL=10
common="--data $data --steps 5 --log-every 0 --threads 1"

# field FILE KEY: the number after "KEY": in the file's memory/estimate line
field() { sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" "$1" | head -n 1; }
# bytes FILE COLLECTIVE: its bytes per step
bytes() { sed -n "s/.*\"$2\":{\"bytes\":\([0-9.]*\).*/\1/p" "$1" | head -n 1; }
# calls FILE COLLECTIVE: its calls per step
calls() { sed -n "s/.*\"$2\":{\"bytes\":[0-9.]*,\"calls\":\([0-9.]*\).*/\1/p" "$1" | head -n 1; }
# within A B: B is within TOL% of A (both 0 counts)
within() { awk -v a="$1" -v b="$2" -v t="$TOL" 'BEGIN { d = b - a; if (d < 0) d = -d;
    exit !(a == b || (a > 0 && d <= t / 100 * a)) }'; }

# case NP MESH PLAN [FLAGS...]
case_() {
    np=$1 mesh=$2 plan=$3
    shift 3
    tag="$np ranks, mesh $mesh, $plan${*:+, $*}"
    rm -f "$tmp/m.jsonl"
    if ! "$TIMEOUT" -k 5 120 "$MPIRUN" -np "$np" "$prog" train $common --mesh "$mesh" \
        --parallel "$plan" --metrics "$tmp/m.jsonl" "$@" >"$tmp/out" 2>&1; then
        fail "$tag: train failed"
        sed 's/^/  | /' "$tmp/out"
        return
    fi
    if ! "$prog" plan --estimate $common --mesh "$mesh" --parallel "$plan" "$@" >"$tmp/est" 2>&1; then
        fail "$tag: plan --estimate failed"
        sed 's/^/  | /' "$tmp/est"
        return
    fi
    grep '"memory"' "$tmp/m.jsonl" >"$tmp/measured"
    tail -n 1 "$tmp/est" >"$tmp/estimated"
    m=$(field "$tmp/measured" peak) e=$(field "$tmp/estimated" peak)
    line="memory $m vs $e B"
    ok=0
    within "$m" "$e" || ok=1
    for k in all_reduce all_gather reduce_scatter all_to_all broadcast send; do
        mb=$(bytes "$tmp/measured" $k) eb=$(bytes "$tmp/estimated" $k)
        [ "$mb" = 0.0 ] && [ "$eb" = 0.0 ] && continue
        line="$line; $k $mb vs $eb"
        within "$mb" "$eb" || ok=1
        # EXACT=1: the GPT's collectives are counted, not estimated: every
        # byte and call of them (--grad-accum: 2 calls a step too many, a
        # parameter's Partial gradient summed per micro-batch, not once)
        if [ "${EXACT:-0}" = 1 ]; then
            mc=$(calls "$tmp/measured" $k) ec=$(calls "$tmp/estimated" $k)
            line="$line ($mc vs $ec calls)"
            awk -v a="$mb" -v b="$eb" -v c="$mc" -v d="$ec" 'BEGIN { exit !(a == b && c == d) }' ||
                ok=1
        fi
    done
    if [ "$ok" -eq 0 ]; then
        pass "$tag: measured vs estimated: $line"
    else
        fail "$tag: measured vs estimated (tolerance $TOL%${EXACT:+; collectives exact}): $line"
        sed 's/^/  | /' "$tmp/est"
    fi
}

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
case_ 4 2x2 fsdp,tp --depth 3
case_ 2 2 fsdp $pm --depth 5

# the GPT (4 heads where tp is 4 wide: each rank takes whole heads)
EXACT=1 # the GPT's collectives: every byte and call, as train counts them
gpt="--model gpt --data $top/data/mobydick.h5 --layers 2 --embd 32 --ctx 16 --batch 8"
case_ 1 1 dp $gpt --heads 2
for p in dp tp sp fsdp tp+sp; do
    case_ 2 2 $p $gpt --heads 2
    case_ 4 4 $p $gpt --heads 4
done
for p in dp,tp fsdp,tp; do case_ 4 2x2 $p $gpt --heads 2; done
# --grad-accum: the micro-batches' data in an arena reset after each backward,
# their headers kept until the step ends, their collectives but the gradients'
# sums once each (the whole batch's step was estimated: 3x train's memory)
case_ 1 1 dp $gpt --heads 2 --grad-accum 4
for p in dp tp sp fsdp; do case_ 2 2 $p $gpt --heads 2 --grad-accum 2; done
case_ 4 2x2 dp,tp $gpt --heads 2 --grad-accum 2
case_ 4 2x2 fsdp,tp $gpt --heads 2 --grad-accum 2
# sp and tp+sp split the sequence, not the batch: one window is a run (an
# estimate refused it as "smaller than the data-parallel degree 2")
case_ 2 2 sp $gpt --heads 2 --batch 1
case_ 2 2 tp+sp $gpt --heads 2 --batch 1

# a pipeline plan: each pipeline rank's memory and the activations it sends
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
# pp in a config file: plan.c never sees it, and train's walk knows no pipeline
printf 'mesh = 2\nparallel = pp\ndepth = 4\n' >"$tmp/pp.conf"
"$prog" plan --estimate --config "$tmp/pp.conf" >"$tmp/out" 2>&1
check "pp from a config file is refused (was: a step estimated without the pipeline): exit $?" \
    sh -c "test $? -eq 2 && grep -q \"meshgrad: error: plan --estimate: parallel 'pp' of .*pp.conf is a pipeline\" $tmp/out"
"$prog" plan --estimate --config "$tmp/pp.conf" --parallel pp >"$tmp/out" 2>&1
check "--config with --parallel pp names plan's flags: exit $?" \
    grep -q "meshgrad: error: plan: --config is read by plan --estimate without pp" "$tmp/out"

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
    grep -q "meshgrad: error: plan --estimate: a micro-batch of 1 windows (batch 8 / grad-accum 8) is smaller than the data-parallel degree 4" "$tmp/out"
"$prog" plan --estimate --mesh 2x2 --parallel dp >"$tmp/out" 2>&1
check "a plan count that is not the mesh's: exit $?" grep -q "meshgrad: error: estimate: 1 plans for a 2-d mesh" "$tmp/out"
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
"$prog" plan --estimate --model gpt --layers 2 --heads 2 --embd 32 --ctx 16 --mesh 4 --parallel tp >"$tmp/out" 2>&1
check "a GPT whose heads the tp ranks cannot split: exit $?" \
    grep -q "meshgrad: error: gpt: tensor-parallel degree 4 cannot split 2 heads" "$tmp/out"
check_summary
