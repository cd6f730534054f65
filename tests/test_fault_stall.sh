#!/bin/sh
# test_fault_stall.sh: the collective watchdog (src/dist/watchdog.c). A rank
# that never enters a collective must not hang the job: with
# MG_COLLECTIVE_TIMEOUT=3 the job ends within 10 s of the stall (3 s, up to
# 0.75 s until the watchdog looks, 1 s for the other ranks' lines, teardown),
# non-zero, and the message names the collective, the mesh dim, its ranks and
# the rank not answering. A rank that is merely late (under the timeout) and a
# disabled watchdog (MG_COLLECTIVE_TIMEOUT=0) must not end anything. A rank
# that never sends a point-to-point message is named by the one waiting for
# it. Ranks napping in the FLOP-rate measure of a pipeline plan while another
# stalls in it are ended the same way. Uses tests/fault_stall.
: "${top_builddir:=.}"
: "${MPIRUN:=mpirun}"
: "${TIMEOUT:=timeout}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
prog=$top_builddir/tests/fault_stall
out=${TMPDIR:-/tmp}/mg-fault-stall.$$
trap 'rm -f "$out"' EXIT
. "$(dirname "$0")/check.sh"

now() { date +%s.%N; }
# run TIMEOUT NP MESH DIM OP LATE SECONDS: sets rc and secs (from the moment the
# late rank says it sleeps, i.e. the stall begins, to the end of the job; the
# start-up of MPI on a loaded machine is not counted), output in $out
run() {
    MG_COLLECTIVE_TIMEOUT=$1 "$TIMEOUT" -k 5 60 "$MPIRUN" -np "$2" "$prog" "$3" "$4" "$5" "$6" "$7" \
        >"$out" 2>&1 &
    job=$!
    start=$(now)
    while kill -0 "$job" 2>/dev/null; do
        if grep -q "sleeps" "$out"; then start=$(now); break; fi
        sleep 0.1
    done
    wait "$job"
    rc=$?
    secs=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.0f", b - a + 0.5 }')
    echo "--- MG_COLLECTIVE_TIMEOUT=$1, $2 ranks, mesh $3: rank $6 late by $7 s to $5 on dim $4:" \
        "exit $rc, ${secs}s after the stall began; its output:"
    show_log "$out"
}

# ended DESCRIPTION: two checks, that the job ended on its own (non-zero, not
# killed by the timeout) and within 10 s of the stall
ended() {
    check "$1" test "$rc" -ne 0 -a "$rc" -ne 124 -a "$rc" -ne 137
    check "... within 10 s of the stall (took ${secs}s)" test "$secs" -le 10
}

# stalled ENDED NAMED PATTERN TIMEOUT NP MESH DIM OP LATE SECONDS: run ...,
# ended ENDED, and one check (NAMED) that the output holds PATTERN (grep)
stalled() {
    _ended=$1 _named=$2 _pattern=$3
    shift 3
    run "$@"
    ended "$_ended"
    check "$_named" grep -q "$_pattern" "$out"
}

stalled "a rank that never enters all_reduce ends the job" \
    "... naming the op, mesh dim 1, its ranks and rank 1" \
    "meshgrad: error: collective all_reduce on mesh dim 1 (ranks 0,1) has not completed after [0-9]* s: rank(s) 1 are not answering" \
    3 2 1x2 1 all_reduce 1 60
stalled "4 ranks, rank 3 never enters all_gather on dim 0: the job ends" \
    "... and rank 1, its partner on dim 0, names rank 3" \
    "collective all_gather on mesh dim 0 (ranks 1,3) has not completed after [0-9]* s: rank(s) 3 are not answering (rank 1 waits" \
    3 4 2x2 0 all_gather 3 60
stalled "4 ranks, rank 2 never sends its point-to-point message: the job ends" \
    "... and rank 3, its receiver, names rank 2 alone" \
    "collective recv on mesh dim 0 (ranks 3,2) has not completed after [0-9]* s: rank(s) 2 are not answering (rank 3 waits" \
    3 4 4 0 recv 2 60

run 3 4 4 0 flops 1 20
ended "4 ranks, rank 1 stalls while measuring the FLOP rate: the job ends"
check "... named by the ranks that wait in the all-reduce, rank 1 not among them" sh -c \
    "grep -q 'collective all_reduce on mesh dim 0 (ranks 0,1,2,3) has not completed after' '$out' && ! grep -q '(rank 1 waits' '$out'"

run 3 2 2 0 barrier 1 1
check "a rank late by 1 s under a 3 s timeout: the run passes" test "$rc" -eq 0
check "... to the end" grep -q "fault_stall: done" "$out"
check "... with no watchdog message" sh -c "! grep -q 'has not completed' '$out'"

run 0 2 2 0 barrier 1 1
check "MG_COLLECTIVE_TIMEOUT=0 disables the watchdog (not a 0 s timeout): a late rank passes" test "$rc" -eq 0
check "... with no watchdog message" sh -c "! grep -q 'has not completed' '$out'"

check_summary
