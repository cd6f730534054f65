#!/bin/sh
# test_train_digits.sh: the default job (data/digits.conf: 2 ranks, data
# parallel MLP, AdamW) learns the digits: test accuracy >= 97% at the end and
# the loss falls. It takes a few seconds on 2 idle cores; the time is printed,
# and only a run past 120 s (a hang) fails on time.
. "$(dirname "$0")/check.sh"
program_test_env train-digits
: "${top_srcdir:=.}"

start=$(date +%s)
"$TIMEOUT" -k 5 120 "$MPIRUN" -np 2 "$top_builddir/meshgrad" train --config "$top_srcdir/data/digits.conf" \
    --data "$top_builddir/data/digits.h5" --metrics "$tmp/m.jsonl" >"$tmp/out" 2>&1
rc=$?
secs=$(($(date +%s) - start))
sed 's/^/  | /' "$tmp/out"
check "the default job exits 0" test "$rc" -eq 0
check "... within the 120 s timeout (took ${secs}s)" test "$secs" -lt 120
acc=$(sed -n 's/.*"eval_accuracy":\([0-9.eE+-]*\).*/\1/p' "$tmp/m.jsonl" | tail -n 1)
check "... reaching >= 97% test accuracy (got ${acc:-none})" \
    awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 0.97) }'
first=$(sed -n 's/.*"step":1,"loss":\([^,]*\),.*/\1/p' "$tmp/m.jsonl")
last=$(sed -n 's/.*"step":[0-9]*,"loss":\([^,]*\),.*/\1/p' "$tmp/m.jsonl" | tail -n 1)
check "... with the loss falling (first step: ${first:-none}, last step: ${last:-none})" \
    awk -v f="${first:-0}" -v l="${last:-1e9}" 'BEGIN { exit !(l < f / 5) }'

check_summary
