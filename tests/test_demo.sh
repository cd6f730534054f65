#!/bin/sh
# test_demo.sh: scripts/demo.sh without its long runs. A copy of the script
# runs in a scratch tree whose scripts/setup.sh does nothing, with an mpirun
# on PATH that only notes its arguments: the GPT job calls train then
# generate, the digits job train, each as the script's header says, and the
# last line of both is the demo's total time with its parts and conditions.
# Prints a Check-style summary line.
. "$(dirname "$0")/check.sh"
srcdir=${top_srcdir:-$(dirname "$0")/..}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mg-demo.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

mkdir -p "$tmp/tree/scripts" "$tmp/bin"
cp "$srcdir/scripts/demo.sh" "$tmp/tree/scripts/demo.sh"
printf '#!/bin/sh\nexit 0\n' >"$tmp/tree/scripts/setup.sh"
printf '#!/bin/sh\necho "mpirun $*" >>"%s/calls"\n' "$tmp" >"$tmp/bin/mpirun"
chmod +x "$tmp/tree/scripts/demo.sh" "$tmp/tree/scripts/setup.sh" "$tmp/bin/mpirun"

# the closing line: minutes and seconds, the parts, the cores and BLAS threads
total_re='^demo: total time [0-9]+ min [0-9]+ s \(set-up [0-9]+ s, training [0-9]+ s'
conditions_re='; [0-9]+ cores, OPENBLAS_NUM_THREADS=[0-9]+\)$'

PATH="$tmp/bin:$PATH" OPENBLAS_NUM_THREADS=1 sh "$tmp/tree/scripts/demo.sh" --steps 5 \
    >"$tmp/gpt.out" 2>&1
rc=$?
check "the GPT demo (stubbed) exits 0: $rc" test "$rc" -eq 0
check "... trains with the demo's config and the extra flags, then generates on 2 ranks" \
    sh -c "grep -q '^mpirun -np 2 build/meshgrad train --config data/mobydick-demo.conf --save build/demo-gpt.h5 --overwrite --steps 5' '$tmp/calls' &&
           grep -q '^mpirun -np 2 build/meshgrad generate --resume build/demo-gpt.h5 --parallel tp' '$tmp/calls'"
last=$(tail -n 1 "$tmp/gpt.out")
check "... its last line is the total time: $last" \
    sh -c "printf '%s\n' '$last' | grep -Eq '$total_re, generation [0-9]+ s$conditions_re'"

rm -f "$tmp/calls"
PATH="$tmp/bin:$PATH" OPENBLAS_NUM_THREADS=1 sh "$tmp/tree/scripts/demo.sh" --digits >"$tmp/digits.out" 2>&1
rc=$?
check "the digits demo (stubbed) exits 0: $rc" test "$rc" -eq 0
check "... trains the digits on 2 ranks" \
    grep -q '^mpirun -np 2 build/meshgrad train --config data/digits.conf' "$tmp/calls"
last=$(tail -n 1 "$tmp/digits.out")
check "... its last line is the total time: $last" \
    sh -c "printf '%s\n' '$last' | grep -Eq '$total_re$conditions_re'"
check_summary
