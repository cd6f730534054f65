#!/bin/sh
# test_train_errors.sh: `meshgrad train` refuses bad input quickly and clearly:
# for each case a non-zero exit within seconds (never a hang), the expected
# message printed exactly once as "meshgrad: error: ...". Cases: missing and
# malformed data files, a mesh that does not match the ranks, plans that do not
# fit the mesh, a batch smaller than the data-parallel degree, an unknown flag,
# model, optimizer and plan, and a bad config line (file:line named). Also
# checks that flags override the config file.
: "${top_builddir:=.}"
: "${top_srcdir:=.}"
: "${MPIRUN:=mpirun}"
: "${TIMEOUT:=timeout}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1
prog=$top_builddir/meshgrad
data=$top_builddir/data/digits.h5
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mg-train-errors.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/check.sh"

# expect NAME NP PATTERN ARGS...: `meshgrad train ARGS...` is refused (check.sh)
expect() { _n=$1 _np=$2 _p=$3; shift 3; check_refused "$_n" "$_np" "$_p" "$prog" train "$@"; }

ok="--data $data --steps 2 --log-every 0 --hidden 8"

# data files
expect "missing data file" 2 "data file '.*nonexistent\.h5' not found" $ok --data "$tmp/nonexistent.h5"
echo "this is not an HDF5 file" >"$tmp/bad.h5"
expect "malformed data file" 2 "bad\.h5" $ok --data "$tmp/bad.h5"

# mesh and plans
expect "mesh product != ranks" 2 "mesh 2x2 has 4 ranks but mpirun started 2" $ok --mesh 2x2
expect "one plan on a 2-D mesh" 2 "one plan per mesh dim" $ok --mesh 1x2 --parallel dp
expect "two data-parallel dims" 4 "at most one dim may be dp or fsdp" $ok --mesh 2x2 --parallel dp,fsdp
expect "batch smaller than the dp degree" 4 "global batch 3 is smaller than the data-parallel degree 4" \
    $ok --mesh 4 --parallel fsdp --batch 3

# flags, names and config files (more cases, without launching, in test_train.c)
expect "unknown flag" 2 "unknown option '--frobnicate'" $ok --frobnicate 3
expect "unknown model" 2 "unknown model 'resnet'" $ok --model resnet
expect "unknown optimizer" 2 "unknown optimizer 'lion'" $ok --optimizer lion
expect "unknown plan" 2 "unknown entry 'cp'" $ok --parallel cp
printf 'steps = 10\n# a comment\nbatch 64\n' >"$tmp/noeq.conf"
expect "config line without '='" 2 "noeq\.conf:3: expected 'key = value'" --config "$tmp/noeq.conf"

# flags override the file (and the file is read)
printf '# a job\nsteps = 7 # trailing comment\nbatch=16\nlog-every = 0\nweight_decay = 0\n' >"$tmp/good.conf"
"$TIMEOUT" -k 5 60 "$MPIRUN" -np 2 "$prog" train --config "$tmp/good.conf" --data "$data" \
    --hidden 8 --steps 3 --metrics "$tmp/m.jsonl" >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q "batch 16, 3 steps" "$tmp/out" && [ "$(grep -c '"loss"' "$tmp/m.jsonl")" -eq 3 ]; then
    pass "flags override the config file"
else
    fail "flags override the config file (exit $rc)"
    sed 's/^/  | /' "$tmp/out"
fi

check_summary
