#!/bin/sh
# test_trace.sh: --trace FILE --trace-steps A:B (src/cli/observe.c,
# src/io/timeline.c). The timeline of `meshgrad train` on 1, 2 and 4 ranks (a
# 2x2 mesh, dp,tp), of
# `meshgrad bench step` (fsdp), and of tests/trace_p2p (a linear layer and a
# ring of point-to-point transfers a step, on 1, 2 and 4 ranks) is a Chrome
# trace that tests/check_trace.py accepts: valid JSON, one process per rank,
# every flow (send to receive) with both ends, spans nesting on every thread;
# an op span carries its record's cost of the rank's shard (FLOPs, bytes).
# Without python3 the same is checked more coarsely with grep. A file that is
# not a trace of ours is never replaced; bad ranges are refused.
. "$(dirname "$0")/check.sh"
program_test_env trace
p2p=$top/tests/trace_p2p

run() { # NP ARGS...: the meshgrad program under mpirun, output in $tmp/out
    np=$1
    shift
    "$TIMEOUT" -k 5 120 "$MPIRUN" -np "$np" "$@" >"$tmp/out" 2>&1
}

common="--data $data --steps 6 --batch 32 --log-every 0 --threads 1"
run 1 "$prog" train $common --trace "$tmp/t1.json" --trace-steps 2:3
check "train on 1 rank writes its trace: exit $?" grep -q "^trace: $tmp/t1.json, steps 2 to 3" "$tmp/out"
check_output "... a valid timeline" trace_valid "$tmp/t1.json" 1
check "... with ops, kernels and backward nodes" \
    sh -c "grep -q '\"cat\":\"op\"' $tmp/t1.json && grep -q '\"name\":\"gemm\",\"cat\":\"kernel\"' $tmp/t1.json && grep -q '\"cat\":\"backward\"' $tmp/t1.json"
# the first layer's linear, x (32, 64) W^T (64 -> 128): 2 x 32 x 64 x 128 FLOPs, its record's cost
check "... an op span carries its record's cost: mg_linear of 524288 FLOPs" \
    grep -q '"name":"mg_linear","cat":"op",[^}]*"args":{"flops":524288,' "$tmp/t1.json"
run 2 "$prog" train $common --trace "$tmp/t2.json"
check "train on 2 ranks (default steps 2:4): exit $?" grep -q "^trace: $tmp/t2.json, steps 2 to 4 of 2 ranks" "$tmp/out"
check_output "... a valid timeline of both ranks, with collectives" trace_valid "$tmp/t2.json" 2
check "... 3 steps on each rank" test "$(grep -c '"cat":"step"' "$tmp/t2.json")" -eq 6
check "... each rank's op cost is its shard's: the first linear on 16 rows, 262144 FLOPs" \
    grep -q '"name":"mg_linear","cat":"op",[^}]*"args":{"flops":262144,' "$tmp/t2.json"
run 4 "$prog" train $common --mesh 2x2 --parallel dp,tp --trace "$tmp/t4.json" --trace-steps 5:6
check "train on a 2x2 mesh (dp,tp): exit $?" grep -q "^trace: $tmp/t4.json, steps 5 to 6 of 4 ranks" "$tmp/out"
check_output "... a valid timeline of all 4 ranks" trace_valid "$tmp/t4.json" 4
check "... with the collectives of both mesh dims" \
    sh -c "grep -q '\"dim\":0,' $tmp/t4.json && grep -q '\"dim\":1,' $tmp/t4.json"
run 2 "$prog" bench step --layers 64,128,32 --batch 16 --steps 4 --threads 1 --parallel fsdp \
    --trace "$tmp/b.json" --trace-steps 1:2
check "bench step (fsdp) writes its trace: exit $?" grep -q "^trace: $tmp/b.json" "$tmp/out"
check_output "... a valid timeline" trace_valid "$tmp/b.json" 2
check "... where fsdp gathers and reduce-scatters" \
    sh -c "grep -q '\"name\":\"all_gather\"' $tmp/b.json && grep -q '\"name\":\"reduce_scatter\"' $tmp/b.json"

for np in 1 2 4; do
    "$TIMEOUT" -k 5 120 "$MPIRUN" -np $np "$p2p" "$tmp/p$np.json" 3 >"$tmp/out" 2>&1
    check "trace_p2p on $np rank(s): exit $?" grep -q "^trace: $tmp/p$np.json" "$tmp/out"
    # 3 steps x 3 ring transfers a step x np ranks
    check_output "... every send joined to its receive" trace_valid "$tmp/p$np.json" $np $((9 * np))
done

# what it never does
echo '{"not":"a trace"}' >"$tmp/other.json"
check_refused "--trace on a file that is not a trace of ours" 2 "other.json.*not a trace" \
    "$prog" train $common --trace "$tmp/other.json"
check "... which is left as it was" grep -q '"not":"a trace"' "$tmp/other.json"
check "... before the run says it starts" sh -c "! grep -q '^meshgrad train:' '$tmp/refused.out'"
run 1 "$prog" train $common --trace "$tmp/t1.json" --trace-steps 1:1
check "... while a trace of ours is replaced: exit $?" grep -q '"steps":"1:1"' "$tmp/t1.json"
check_refused "--trace-steps outside the run" 1 "trace-steps 9:12 starts outside" \
    "$prog" train $common --trace "$tmp/x.json" --trace-steps 9:12
check_refused "--trace-steps that is not a range" 1 "trace-steps '3-4' is not A:B" \
    "$prog" train $common --trace "$tmp/x.json" --trace-steps 3-4
check_refused "--trace-steps without --trace" 1 "needs --trace FILE" \
    "$prog" train $common --trace-steps 2:3
check "... none of which wrote a file" test ! -e "$tmp/x.json"
check_summary
