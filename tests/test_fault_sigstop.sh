#!/bin/sh
# test_fault_sigstop.sh: a rank stopped with SIGSTOP in the middle of training
# ends the job within 20 s, naming the stopped rank, blaming no healthy one
# (the collective watchdog covers the data loader's reads, the checkpoint
# I/O and the per-step agreement), and `meshgrad trace analyze` of the flight
# recorder's dumps says the stopped rank is behind. Runs 2 trials of
# scripts/sigstop-trials.sh (which runs 20 by default), stopping in two
# different phases of a step.
: "${top_builddir:=.}"
: "${top_srcdir:=.}"
: "${MPIRUN:=mpirun}"
top=$(cd "$top_builddir" && pwd)
. "$(dirname "$0")/check.sh"
out=$(MESHGRAD=$top/meshgrad DATA=$top/data/digits.h5 MPIRUN=$MPIRUN \
    sh "$top_srcdir/scripts/sigstop-trials.sh" 2 2>&1)
rc=$?
printf '%s\n' "$out" | sed 's/^/  | /'
check "2 of 2 SIGSTOP trials ended in <= 20 s naming the stopped rank" \
    sh -c "test $rc -eq 0 && printf '%s\n' \"\$1\" | grep -q '^2 of 2 SIGSTOP trials'" sh "$out"
check_summary
