#!/bin/sh
# mpi-run.sh PROGRAM [ARGS]: runs an MPI test program under mpirun at each rank
# count in MG_TEST_NP (default "1 2 4"), each run under a timeout of
# MG_TEST_TIMEOUT seconds (default 300), root-safe (oversubscribed when ranks > cores), with
# Check in no-fork mode and one BLAS/OpenMP thread per rank. Exit 0 when every
# run passed (or skipped), 77 when every run skipped, 1 otherwise.
prog=$1
shift
: "${MPIRUN:=mpirun}"
: "${TIMEOUT:=timeout}"
: "${MG_TEST_NP:=1 2 4}"
: "${MG_TEST_TIMEOUT:=300}"
export CK_FORK=no
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cores=$(nproc 2>/dev/null || echo 1)
: "${OPENBLAS_NUM_THREADS:=1}"
: "${OMP_NUM_THREADS:=1}"
export OPENBLAS_NUM_THREADS OMP_NUM_THREADS
# --enable-sanitizers: Open MPI leaks by design at exit, so LeakSanitizer is off
# under MPI (the serial suites keep it); ASan/UBSan errors still fail the run.
: "${ASAN_OPTIONS:=detect_leaks=0}"
: "${UBSAN_OPTIONS:=print_stacktrace=1:halt_on_error=1}"
export ASAN_OPTIONS UBSAN_OPTIONS
case $prog in */*) ;; *) prog=./$prog ;; esac
status=0
ran=0
for np in $MG_TEST_NP; do
    echo "== $prog at $np rank(s)"
    # oversubscribe only when the ranks outnumber the cores: Open MPI then
    # yields when idle, which costs ~50 us per message on an unloaded node
    over=
    [ "$np" -gt "$cores" ] && over=--oversubscribe
    "$TIMEOUT" -k 10 "$MG_TEST_TIMEOUT" "$MPIRUN" $over -np "$np" "$prog" "$@"
    rc=$?
    case $rc in
    0) ran=1 ;;
    77) echo "== $prog at $np rank(s): skipped" ;;
    124 | 137) echo "== $prog at $np rank(s): TIMED OUT after ${MG_TEST_TIMEOUT}s"; status=1 ;;
    *) echo "== $prog at $np rank(s): FAILED (exit $rc)"; status=1 ;;
    esac
done
if [ $status -eq 0 ] && [ $ran -eq 0 ]; then exit 77; fi
exit $status
