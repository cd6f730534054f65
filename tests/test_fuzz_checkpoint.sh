#!/bin/sh
# test_fuzz_checkpoint.sh: a short run of scripts/fuzz-checkpoint.sh (every
# 26th of its 250 or so mutations of a real checkpoint: bit flips, runs of
# 0xff, truncations, edits through HDF5): every mutant is refused cleanly or
# loaded correctly; no hang, no crash, nothing accepted and wrong.
: "${top_builddir:=.}"
: "${top_srcdir:=.}"
. "$(dirname "$0")/check.sh"
out=$(BUILD=$(cd "$top_builddir" && pwd) sh "$top_srcdir/scripts/fuzz-checkpoint.sh" --every 26 --jobs 2 2>&1)
rc=$?
printf '%s\n' "$out" | sed 's/^/  | /'
check "0 hangs, 0 crashes, 0 accepted-and-wrong: $(printf '%s\n' "$out" | tail -n 1)" \
    sh -c "test $rc -eq 0 && printf '%s\n' \"\$1\" | tail -n 1 | grep -q ' 0 hangs, 0 crashes, 0 accepted-and-wrong'" sh "$out"
check_summary
