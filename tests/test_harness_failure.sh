#!/bin/sh
# test_harness_failure.sh: a failing MPI test must fail fast, never hang.
# Runs tests/fail_on_one_rank.mpi through tests/mpi-run.sh (as `make check` runs
# every MPI suite) in each mode and checks the exit status, the time taken and
# that the output names the failing rank. The inner output is shown indented so
# its Check summaries are not counted as this test's own.
: "${top_builddir:=.}"
: "${top_srcdir:=.}"
prog=$top_builddir/tests/fail_on_one_rank.mpi
run=$top_srcdir/tests/mpi-run.sh
out=${TMPDIR:-/tmp}/mg-harness-failure.$$
trap 'rm -f "$out"' EXIT
. "$(dirname "$0")/check.sh"

# run MODE NP TIMEOUT: sets rc and secs, leaves the output in $out. The extra
# argument (ignored by the program) tags this run's processes for pgrep.
tag=mg-harness-$$
run() {
    start=$(date +%s)
    MG_TEST_NP=$2 MG_TEST_TIMEOUT=$3 ${SHELL:-/bin/sh} "$run" "$prog" "$1" "$tag" >"$out" 2>&1
    rc=$?
    secs=$(($(date +%s) - start))
    echo "--- mode $1 at $2 rank(s): exit $rc after ${secs}s; its output:"
    sed 's/^/  | /' "$out"
}

run pass "1 2" 60
check "a passing run exits 0" test "$rc" -eq 0

run assert 2 60
check "a failed assertion on rank 1 of 2 fails the run" test "$rc" -ne 0 -a "$rc" -ne 77
check "... within 30 s, not the 300 s timeout (took ${secs}s)" test "$secs" -le 30
check "... naming rank 1" grep -q "rank 1: .*failed: value == 42" "$out"
check "... and not rank 0" sh -c "! grep -q 'rank 0: .*failed' '$out'"
check "... while the later collective still ran (1 failure of 2 checks)" \
    grep -q "Checks: 2, Failures: 1, Errors: 0" "$out"

run assert 4 60
check "a failed assertion on rank 3 of 4 fails the run" test "$rc" -ne 0 -a "$rc" -ne 77
check "... within 30 s, not the 300 s timeout (took ${secs}s)" test "$secs" -le 30
check "... naming rank 3" grep -q "rank 3: .*failed: value == 42" "$out"

run crash 2 60
check "rank 1 aborting while rank 0 waits in a barrier fails the run" test "$rc" -ne 0 -a "$rc" -ne 77
check "... within 30 s, not the 300 s timeout (took ${secs}s)" test "$secs" -le 30
check "... naming rank 1 (mpirun reports it)" grep -q "process rank 1 .*signal" "$out"

run hang 2 3
check "rank 1 hanging fails the run at the timeout" grep -q "TIMED OUT" "$out"
check "... with a non-zero status" test "$rc" -ne 0 -a "$rc" -ne 77
check "... within the 3 s timeout + 10 s of grace (took ${secs}s)" test "$secs" -le 20
check "... naming rank 1" grep -q "rank 1: hanging on purpose" "$out"
sleep 1
check "... leaving no process behind" sh -c "! pgrep -f 'fail_on_one_rank[.]mpi hang $tag' >/dev/null"

check_summary
