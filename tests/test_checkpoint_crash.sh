#!/bin/sh
# test_checkpoint_crash.sh: a crash never leaves a half checkpoint under the
# real name, and `meshgrad ckpt info` tells good files from bad ones.
# At 2 ranks, killing rank 0 (the one that renames) or rank 1 (rank 0 must then
# not rename): save checkpoint A (step 1); save B (step 2) with
# MG_CKPT_FAULT=kill-before-rename, which kills that rank after the data is
# written and before the rename: the job must fail, B's final name must not
# exist (its .tmp. file may), A must still load on another mesh, and resolve
# must pick A; the next save removes the temporary file (its writer is gone).
# Then `meshgrad ckpt info` exits 0 on A and 1, naming the problem, on a
# corrupt copy and on a file that is not HDF5.
: "${top_builddir:=.}"
: "${MPIRUN:=mpirun}"
: "${TIMEOUT:=timeout}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1
helper=$top_builddir/tests/checkpoint_helper.mpi
meshgrad=$top_builddir/meshgrad
dir=$(mktemp -d "${TMPDIR:-/tmp}/mg-ckpt-crash.XXXXXX")
out=$dir/out.txt
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/check.sh"
check_failed() { sed 's/^/  | /' "$out"; } # a failed check shows the last output

mpi() { # mpi NP ARGS...: runs the helper, output in $out, status in $rc
    ranks=$1
    shift
    "$TIMEOUT" -k 5 60 "$MPIRUN" -np "$ranks" "$helper" "$@" >"$out" 2>&1
    rc=$?
}

for case in "2 0" "2 1"; do
    set -- $case
    np=$1 victim=$2
    sub=$dir/np$np-rank$victim
    mkdir -p "$sub"
    mpi "$np" save "$sub/ckpt-1.h5" 1
    check "np $np: saving A succeeds" test "$rc" -eq 0
    start=$(date +%s)
    MG_CKPT_FAULT=kill-before-rename MG_CKPT_FAULT_RANK=$victim mpi "$np" save "$sub/ckpt-2.h5" 2
    secs=$(($(date +%s) - start))
    check "np $np: killing rank $victim before the rename fails the job (exit $rc)" \
        test "$rc" -ne 0 -a "$rc" -ne 124
    check "np $np: ... within 30 s (took ${secs}s)" test "$secs" -le 30
    check "np $np: ... and leaves nothing under B's final name" test ! -e "$sub/ckpt-2.h5"
    check "np $np: ... after writing the data to a temporary file (<name>.tmp.<host>.<pid>.<random>)" \
        sh -c "ls '$sub' | grep -q '^ckpt-2[.]h5[.]tmp[.].*[.][0-9]*[.][0-9a-f]\{16\}\$'"
    mpi "$np" verify "$sub/ckpt-1.h5" 1
    check "np $np: A still loads, equal to what was saved" test "$rc" -eq 0
    mpi 1 resolve "$sub"
    check "np $np: resolve picks A, ignoring the temporary file" \
        test "$rc" -eq 0 -a "$(tail -n 1 "$out")" = "$sub/ckpt-1.h5"
    mpi "$np" save "$sub/ckpt-3.h5" 3
    check "np $np: the next save succeeds and removes the leftover of the killed one" \
        sh -c "test $rc -eq 0 && ! ls '$sub' | grep -q '[.]tmp[.]'"
done

# meshgrad ckpt info
sub=$dir/np2-rank0
"$meshgrad" ckpt info "$sub/ckpt-1.h5" >"$out" 2>&1
rc=$?
check "ckpt info on a good checkpoint exits 0" test "$rc" -eq 0
check "... and says every checksum verifies" grep -q "checksums: all 3 datasets verify" "$out"
check "... listing the datasets with their global shapes" \
    grep -q "/params/w  (13, 7)  float32" "$out"
check "... and the attributes" grep -q "step = 1" "$out"
"$meshgrad" ckpt info "$sub" >"$out" 2>&1
check "ckpt info on a directory inspects its newest checkpoint" grep -q "ckpt-3.h5" "$out"
cp "$sub/ckpt-1.h5" "$dir/bad.h5"
mpi 1 corrupt "$dir/bad.h5"
"$meshgrad" ckpt info "$dir/bad.h5" >"$out" 2>&1
rc=$?
check "ckpt info on a corrupt checkpoint exits 1" test "$rc" -eq 1
want="meshgrad: error: checksum mismatch in $dir/bad.h5 dataset /params/w: the file is corrupt"
check "... naming the dataset" grep -qF "$want" "$out"
check "... in the summary too" grep -q "checksums: 1 of 3 datasets FAIL: /params/w" "$out"
echo "not hdf5" >"$dir/text.h5"
"$meshgrad" ckpt info "$dir/text.h5" >"$out" 2>&1
rc=$?
want="meshgrad: error: checkpoint $dir/text.h5 is not an HDF5 file"
check "ckpt info on a text file exits 1" test "$rc" -eq 1
check "... with a clear message" grep -qF "$want" "$out"

check_summary
