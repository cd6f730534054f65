#!/bin/sh
# test_mpi_first.sh: a program that starts MPI itself and goes on with it
# after mg_finalize (tests/mpi_first.c): on 1 and 2 ranks it exits 0 with the
# world's sum; under valgrind (when installed) MPI_Finalize reads nothing
# that mg_finalize freed (the communicators' records, src/dist/comm_info.c).
. "$(dirname "$0")/check.sh"
program_test_env mpi-first
first=$top/tests/mpi_first
for np in 1 2; do
    "$TIMEOUT" -k 5 60 "$MPIRUN" -np $np "$first" >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
    check "$np rank(s): MPI after mg_finalize, then MPI_Finalize: exit 0, sum $np" \
        test "$rc" -eq 0 -a "$(cat "$tmp/out")" = "sum $np"
done
if command -v valgrind >/dev/null 2>&1 && [ -x "$top/libtool" ]; then
    "$TIMEOUT" 300 "$top/libtool" --mode=execute valgrind -q --error-exitcode=3 \
        --suppressions="${top_srcdir:-$(dirname "$0")/..}/tests/valgrind.supp" \
        "$first" >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
    check "under valgrind: no read of freed memory (exit $rc)" test "$rc" -eq 0
else
    echo "note: valgrind not found: the program was not run under it"
fi
check_summary
