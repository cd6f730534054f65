#!/bin/sh
# test_plan.sh: `meshgrad plan` (src/cli/plan.c): runs as one process without
# mpirun and under mpirun (rank 0 prints once); the stages, the per-rank
# timeline and the peak activation memory are printed; the predicted step of a
# one-stage plan is the model's FLOPs at the given rate; the unit-time bubble
# of gpipe, 1f1b, interleaved-1f1b and zb-h1 at pp=4, M=8 is the papers'
# formula; --trace writes Chrome-trace JSON (one process per rank, a flow for
# every send, both ends) and leaves a file it did not write alone; bad input
# gives one "meshgrad: error:" line and a non-zero exit each. --model gpt
# cuts the GPT's blocks (the embedding with the first, the head with the
# last; --pp-layers counting blocks). More threads than cores are not counted
# twice against the cores. Prints a
# Check-style summary line.
. "$(dirname "$0")/check.sh"
program_test_env plan
check_failed() { show_out_err; }

# the machine, given: the plan is then the same on every machine
given="--flops 100 --bandwidth 5 --latency 5"
run() {
    "$TIMEOUT" 60 "$prog" plan "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
}
# value LABEL: the number after "LABEL" in the output
value() { sed -n "s/.*$1 \([0-9.]*\).*/\1/p" "$tmp/out" | head -n 1; }

run --mesh 4 --microbatches 8 --pp-schedule 1f1b $given
check "plan runs as one process, without mpirun" test "$rc" -eq 0
check "... prints the 4 stages" test "$(grep -cE '^ +[0-3] +[0-3]  fc' "$tmp/out")" -eq 4
check "... a timeline line per rank" test "$(grep -c '^  rank [0-3] *|' "$tmp/out")" -eq 4
check "... the predicted step time" grep -q "^predicted step time: [0-9.]* ms" "$tmp/out"
check "... the peak activation memory of every stage" \
    grep -q "^peak activation memory per stage (MiB): s0 .* (4 mbs) s1 .* (3 mbs) s2 .* (2 mbs) s3 .* (1 mbs)" "$tmp/out"
check "... and nothing on stderr" test ! -s "$tmp/err"

# one stage: the step is the batch's FLOPs at 100 GFLOP/s, every pass counted
# (fc1 makes no input gradient; the widths are the default MLP's)
run --mesh 1 --microbatches 4 $given
want=$(awk 'BEGIN { n = split("1024,4096,1024,4096,1024,4096,1024,4096,1024", w, ",");
    for (i = 1; i < n; i++) { io = 2 * w[i] * w[i + 1]; o = w[i + 1];
        f += io + 2 * o + (i == 1 ? 0 : io) + o + io + o }
    printf "%.2f", 256 * f / 100e9 * 1e3 }')
got=$(value "predicted step time:")
check "one stage: the step is the batch's FLOPs at the given rate ($got ms, want $want)" \
    test "$got" = "$want"

# the unit-time bubble at pp=4, M=8: (p-1)/(M+p-1), (p-1)/(vM+p-1), (p-1)/(3M+p-1)
for case in "gpipe 1 27.3" "1f1b 1 27.3" "interleaved-1f1b 2 15.8" "zb-h1 1 11.1"; do
    set -- $case
    run --mesh 4 --microbatches 8 --pp-schedule "$1" --virtual-stages "$2" $given
    check "$1 (v=$2) at pp=4, M=8: the unit-time bubble is $3%" \
        grep -q "with these costs, $3% at unit time" "$tmp/out"
done

# --trace: Chrome-trace JSON
run --mesh 4 --microbatches 8 --pp-schedule 1f1b --trace "$tmp/trace.json" $given
check "--trace writes the file" test "$rc" -eq 0 -a -s "$tmp/trace.json"
n_proc=$(grep -c '"name":"process_name"' "$tmp/trace.json")
n_s=$(grep -c '"ph":"s"' "$tmp/trace.json")
n_f=$(grep -c '"ph":"f"' "$tmp/trace.json")
n_fwd=$(grep -c '"cat":"forward","ph":"X"' "$tmp/trace.json")
check "... one process per rank ($n_proc)" test "$n_proc" -eq 4
check "... a flow from every send, 2 (p-1) M = 48, to its receive ($n_s starts, $n_f ends)" \
    test "$n_s" -eq 48 -a "$n_f" -eq 48
check "... every forward of every stage ($n_fwd)" test "$n_fwd" -eq 32
if command -v python3 >/dev/null 2>&1 && python3 -c 'import json' 2>/dev/null; then
    check "... which is valid JSON: ranks 0-3, matched flow ids, no overlapping spans on a thread" python3 -c '
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
assert sorted({e["pid"] for e in ev}) == [0, 1, 2, 3]
s = sorted(e["id"] for e in ev if e["ph"] == "s")
assert s == sorted(e["id"] for e in ev if e["ph"] == "f") and len(set(s)) == len(s)
spans = {}
for e in ev:
    if e["ph"] == "X": spans.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
for k, v in spans.items():  # spans on one thread follow each other
    v.sort()
    assert all(b[0] >= a[1] - 1e-3 for a, b in zip(v, v[1:])), k
' "$tmp/trace.json"
fi
run --mesh 4 --microbatches 8 --pp-schedule gpipe --trace "$tmp/trace.json" $given
check "... and replaces a trace it wrote" grep -q '"cat":"forward"' "$tmp/trace.json"
echo '{"not":"a trace of ours"}' >"$tmp/other.json"
run --mesh 4 --trace "$tmp/other.json" $given
check "... but leaves any other file alone: exit $rc" test "$rc" -ne 0
check "... untouched" grep -q "a trace of ours" "$tmp/other.json"
check "... saying so once" test "$(grep -c 'meshgrad: error: will not replace .*other.json: it is not a trace meshgrad plan wrote' "$tmp/err")" -eq 1
ln -s "$tmp/nowhere.json" "$tmp/link.json"
run --mesh 4 --trace "$tmp/link.json" $given
check "... and writes nothing through a symbolic link, even one to nothing: exit $rc" \
    test "$rc" -ne 0 -a ! -e "$tmp/nowhere.json"

# measured: one process measures a copy within itself
run --mesh 2 --microbatches 4
check "one process measures the FLOP rate and a copy as its link: exit $rc" \
    grep -q "GFLOP/s (measured, sgemm .*(measured as a copy within this process" "$tmp/out"

# under mpirun: the link is measured between ranks 0 and 1; rank 0 prints
"$TIMEOUT" -k 10 120 "$MPIRUN" -np 2 "$prog" plan --mesh 2 --microbatches 4 >"$tmp/out" 2>"$tmp/err" </dev/null
rc=$?
check "under mpirun -np 2: exit 0, measuring the link between ranks" \
    grep -q "measured between ranks 0 and 1" "$tmp/out"
check "... printed once" test "$rc" -eq 0 -a "$(grep -c '^predicted step time' "$tmp/out")" -eq 1

# more threads than the machine has cores: a rank alone already runs on all of
# them, so one process plans as with one thread (its rate is given); two ranks
# get half of it each when both compute, but for mpirun binding each to its
# own cores (as it does for 2 ranks): then they share none
cpus=$(getconf _NPROCESSORS_ONLN)
run --mesh 4 --microbatches 8 --threads 1 $given
want=$(value "predicted step time:")
run --mesh 4 --microbatches 8 --threads $((2 * cpus)) $given
got=$(value "predicted step time:")
check "one process with $((2 * cpus)) threads on $cpus cores: the step of one thread ($got ms, want $want)" \
    test "$rc" -eq 0 -a -n "$got" -a "$got" = "$want"
check "... and shares no cores" sh -c "! grep -q 'share' '$tmp/out'"
"$TIMEOUT" -k 10 120 "$MPIRUN" -np 2 "$prog" plan --mesh 2 --microbatches 4 --threads $((2 * cpus)) $given \
    >"$tmp/out" 2>"$tmp/err" </dev/null
rc=$?
usable=$(sed -n 's/.*this rank may only run on \([0-9]*\) CPU.*/\1/p' "$tmp/err" | head -n 1)
: "${usable:=$cpus}"
if [ $((2 * usable)) -le "$cpus" ]; then
    check "two ranks with $((2 * cpus)) threads each, bound to $usable of the $cpus cores each: they share none" \
        sh -c "test $rc -eq 0 && grep -q '^machine:' '$tmp/out' && ! grep -q 'share' '$tmp/out'"
else
    check "two ranks with $((2 * cpus)) threads each on $usable of $cpus cores: they share the $cpus" \
        sh -c "test $rc -eq 0 && grep -q '2 ranks share $cpus core' '$tmp/out'"
    if [ "$usable" -eq "$cpus" ]; then
        check "... half a rank's rate each when both compute" \
            grep -Eq "2 ranks share $cpus cores?: 0.50 of a core each" "$tmp/out"
    fi
fi
# the CPUs the ranks may run on are what they share, not the machine's: two
# ranks kept to one CPU (a container's cpuset; taskset here) share that one
if command -v taskset >/dev/null 2>&1; then
    "$TIMEOUT" -k 10 120 taskset -c 0 "$MPIRUN" --bind-to none -np 2 "$prog" plan --mesh 2 \
        --microbatches 4 --threads 1 $given >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
    check_output "two ranks of one thread kept to CPU 0 (taskset -c 0): they share that core" \
        sh -c "test $rc -eq 0 && grep -q '2 ranks share 1 core: 0.50 of a core each' '$tmp/out'"
    # masks that overlap in part (rank 0 on CPU 0, rank 1 on CPUs 0 and 1): the
    # ranks run on different numbers of cores, and must still agree on the
    # share (else one measures the FLOP rate twice and the other waits for ever)
    if [ "$cpus" -ge 2 ]; then
        "$TIMEOUT" -k 10 60 "$MPIRUN" --bind-to none -np 2 sh -c \
            'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then c=0; else c=0,1; fi; exec taskset -c $c "$@"' \
            sh "$prog" plan --mesh 2 --microbatches 4 --threads 2 --bandwidth 5 --latency 5 \
            >"$tmp/out" 2>"$tmp/err" </dev/null
        rc=$?
        check "two ranks on CPU 0 and on CPUs 0,1 (partly overlapping masks), FLOP rate measured: they agree and end (exit $rc)" \
            sh -c "test $rc -eq 0 && grep -q '^predicted step time' '$tmp/out'"
    fi
else
    echo "skipped: no taskset (the cpuset case)"
fi

# the GPT: its blocks cut into stages, the embedding with the first, the head with the last
run --model gpt --layers 8 --embd 64 --ctx 32 --vocab 256 --mesh 4 --microbatches 8 $given
check "--model gpt: 4 stages, the embedding with the first blocks and the head with the last" \
    test "$rc" -eq 0 -a "$(grep -cE '^ +0 +0  embedding-h\.[0-9]|^ +3 +3  h\.[0-9]-head' "$tmp/out")" -eq 2
check "... and its prediction" grep -q "^predicted step time: [0-9.]* ms" "$tmp/out"
run --model gpt --layers 8 --embd 64 --ctx 32 --mesh 4 --microbatches 8 --pp-layers 1,3,3,1 $given
check "--model gpt --pp-layers 1,3,3,1 counts blocks: the first stage holds embedding-h.0" \
    grep -qE '^ +0 +0  embedding-h\.0 ' "$tmp/out"

# a plan for a batch far past this machine's memory: the rate and the link are
# measured on at most 1024 rows, so the plan is made (it used to allocate the
# whole micro-batch); a layer too large to measure says how to give the figures
run --mesh 2 --batch 2147483647
check_output "a plan for a batch of 2^31 - 1 rows is made, the rate measured on 1024 of them" \
    sh -c "test $rc -eq 0 && grep -q 'sgemm 1024x' '$tmp/out' && grep -q '^predicted step time' '$tmp/out'"
run --mesh 2 --layers 1024,100000000,1024
check_output "a layer too large to measure here: the message says to give the figures" \
    sh -c "test $rc -ne 0 && grep -q 'out of memory for a 32 x 1024 x 100000000 product: give --flops GFLOPS, --bandwidth GB/s and --latency us' '$tmp/err'"

# bad input: one line each, non-zero exit
refused() {
    name=$1 pattern=$2
    shift 2
    run "$@" $given
    n=$(grep -c "meshgrad: error:" "$tmp/err")
    if [ "$rc" -ne 0 ] && [ "$n" -eq 1 ] && grep "meshgrad: error:" "$tmp/err" | grep -Eq -- "$pattern"; then
        pass "$name (exit $rc): $(cat "$tmp/err")"
    else
        fail "$name: exit $rc, $n error lines, want 1 matching /$pattern/"
        check_failed
    fi
}
refused "more stages than layers" "4 pipeline stages need at least one layer each, but the model has 2 layers" \
    --mesh 4 --layers 64,128,10
refused "M < stages for 1f1b" "1f1b needs at least as many micro-batches as pipeline ranks: 2 micro-batches on 4 ranks is too few; use 4 or more" \
    --mesh 4 --microbatches 2
refused "M < stages for zb-h1" "zb-h1 needs at least as many micro-batches as pipeline ranks" \
    --mesh 4 --microbatches 3 --pp-schedule zb-h1
refused "virtual stages not dividing the layers" "2 ranks x 3 virtual stages = 6 stages do not divide the model's 8 layers" \
    --mesh 2 --pp-schedule interleaved-1f1b --virtual-stages 3 --microbatches 4
refused "--pp-layers not summing to the layers" "--pp-layers sums to 9 layers but the model has 8" \
    --mesh 4 --pp-layers 3,3,1,2
refused "--pp-layers with a count per stage missing" "--pp-layers has 3 entries but there are 4 pipeline stages" \
    --mesh 4 --pp-layers 3,3,2
refused "--pp-layers giving a stage no layer" "--pp-layers gives stage 3 0 layers" \
    --mesh 4 --pp-layers 3,3,2,0
refused "an unknown schedule" "unknown pipeline schedule '2f2b': use gpipe, 1f1b, interleaved-1f1b or zb-h1" \
    --mesh 4 --pp-schedule 2f2b
refused "virtual stages with a one-stage schedule" "1f1b holds one stage per rank: 2 virtual stages need the interleaved-1f1b schedule" \
    --mesh 4 --virtual-stages 2
refused "interleaved micro-batches not in groups of the ranks" "6 micro-batches on 4 ranks is not a multiple of 4; use 4 or 8" \
    --mesh 4 --pp-schedule interleaved-1f1b --virtual-stages 2 --microbatches 6
refused "a GPT with more stages than blocks" "4 pipeline stages need at least one layer each, but the model has 3 layers" \
    --model gpt --layers 3 --mesh 4
refused "a GPT's --pp-layers not summing to the blocks" "--pp-layers sums to 5 layers but the model has 4" \
    --model gpt --layers 4 --mesh 2 --pp-layers 2,3
refused "a mesh without a pp dim" "give one plan per mesh dim, pp once" --mesh 2x2 --parallel dp,dp
refused "a batch that leaves a micro-batch empty" "leaves the last ones empty: use 5 micro-batches" \
    --mesh 4 --batch 10 --microbatches 6
refused "an empty --trace" "--trace '' is not a file name: give the file to write the trace to" \
    --mesh 2 --microbatches 2 --trace ''
# counts past what an int holds were taken modulo 2^64 (a negative batch, a
# stage count cast to garbage)
refused "a micro-batch size past 2^31" "--microbatch-rows '99999999999999999999,1' is not row counts from 1 to 2147483647" \
    --mesh 2 --microbatch-rows 99999999999999999999,1
refused "a batch past 2^31" "--batch '9223372036854775807' is not a count from 1 to 2147483647" \
    --mesh 2 --batch 9223372036854775807
refused "a --pp-layers count past 2^31" "--pp-layers '99999999999,1' is not layer counts" \
    --mesh 2 --pp-layers 99999999999,1
# the machine's figures must be finite (strtod reads 1e400 and inf as infinity)
given_rate=$given
for bad in "--flops 1e400" "--bandwidth inf" "--latency nan"; do
    given="$given_rate $bad"
    refused "a machine figure that is not finite: $bad" "'(1e400|inf|nan)' is not a finite positive number" \
        --mesh 4
done
given=$given_rate
refused "a machine figure with a leading space" "--flops ' 100' is not a finite positive number" \
    --mesh 4 --flops " 100"
check_summary
