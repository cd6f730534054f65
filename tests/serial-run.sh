#!/bin/sh
# serial-run.sh PROGRAM [ARGS]: runs a serial test program under a timeout
# (Check's fork mode, so a crashing test is reported, not fatal). With
# MG_VALGRIND=1 (`make check-valgrind`), runs it under valgrind memcheck in
# no-fork mode: any memory error or definite leak fails the test (exit 3).
prog=$1
shift
: "${TIMEOUT:=timeout}"
: "${MG_TEST_TIMEOUT:=300}"
: "${top_builddir:=.}"
: "${top_srcdir:=.}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case $prog in */*) ;; *) prog=./$prog ;; esac
if [ "${MG_VALGRIND:-0}" = 1 ]; then
    if [ -z "$VALGRIND" ]; then
        echo "serial-run.sh: MG_VALGRIND=1 but valgrind was not found at configure time" >&2
        exit 99
    fi
    export CK_FORK=no
    # valgrind runs one thread at a time: extra BLAS/OpenMP threads only cost time
    : "${OPENBLAS_NUM_THREADS:=1}" "${OMP_NUM_THREADS:=1}"
    export OPENBLAS_NUM_THREADS OMP_NUM_THREADS
    # a test program is a libtool wrapper script: libtool runs valgrind on the real binary
    exec "$TIMEOUT" -k 10 $((MG_TEST_TIMEOUT * 10)) "$top_builddir/libtool" --mode=execute \
        "$VALGRIND" -q --error-exitcode=3 --leak-check=full --errors-for-leak-kinds=definite \
        --show-leak-kinds=definite --suppressions="$top_srcdir/tests/valgrind.supp" \
        "$prog" "$@"
fi
exec "$TIMEOUT" -k 10 "$MG_TEST_TIMEOUT" "$prog" "$@"
