#!/bin/sh
# test_nonfinite.sh: non-finite values are caught, with the
# reproducers of the issue:
# - one NaN pixel in the training inputs (train/inputs[3,2,2] = nan): the run
#   stops within its first epoch naming the row, non-zero, and saves nothing;
# - --lr 1e30: the run stops naming the step and the first parameter whose
#   gradient is not finite, before the update (the parameters stay finite);
#   with --on-nonfinite skip such steps are skipped and counted, the run ends
#   0, and every metrics line is valid JSON (no nan);
# - a NaN written into a checkpoint's parameter (its checksum recomputed, so
#   only the value is wrong): resume refuses it naming the dataset and the
#   element, and `meshgrad ckpt info` flags it (exit 1).
. "$(dirname "$0")/check.sh"
program_test_env nonfinite

base="--hidden 16 --batch 64 --log-every 0 --threads 1"
refuse() { _n=$1 _np=$2 _p=$3; shift 3; check_refused "$_n" "$_np" "$_p" "$prog" train $base "$@"; }

# one NaN pixel: 1497 rows make 23 batches of 64 an epoch; 50 steps read row 3
cp "$data" "$tmp/nan.h5"
check "a copy of the digits with train/inputs[3,2,2] = nan" "$tool" set "$tmp/nan.h5" train/inputs \
    $((3 * 64 + 2 * 8 + 2)) nan
refuse "a NaN pixel" 2 "/train/inputs row 3 holds a non-finite value \(nan at \[2,2\]\): fix or remove" \
    --data "$tmp/nan.h5" --steps 50 --save "$tmp/nan-run.h5"
check "... and no checkpoint was saved" test ! -e "$tmp/nan-run.h5"

# a diverging run
refuse "--lr 1e30" 2 "step [0-9]+: the loss is (nan|inf|-nan)( and the gradient of [a-z0-9.]+ is not finite)?.*--on-nonfinite skip" \
    --data "$data" --steps 40 --lr 1e30 --save "$tmp/lr.h5"
check "... and no checkpoint of NaN weights was saved" test ! -e "$tmp/lr.h5"
"$TIMEOUT" -k 5 120 "$MPIRUN" -np 2 "$prog" train $base --data "$data" --steps 40 --lr 1e30 \
    --on-nonfinite skip --metrics "$tmp/skip.jsonl" --save "$tmp/skip.h5" >"$tmp/out" 2>&1
rc=$?
skipped=$(grep -c '"skipped":"non-finite"' "$tmp/skip.jsonl")
check_output "--on-nonfinite skip: the run ends 0 and counts $skipped skipped steps" \
    sh -c "test $rc -eq 0 && test $skipped -gt 0 && grep -q 'skipped $skipped steps with a non-finite' '$tmp/out'"
check "... every metrics line is valid JSON (no nan or inf)" \
    sh -c "! grep -qiE 'nan|inf' '$tmp/skip.jsonl'"
check_output "... and its checkpoint holds finite values only" "$prog" ckpt info "$tmp/skip.h5"

# a NaN in a checkpoint
"$TIMEOUT" -k 5 120 "$MPIRUN" -np 2 "$prog" train $base --data "$data" --steps 5 \
    --save "$tmp/good.h5" >"$tmp/out" 2>&1
check "a checkpoint to spoil" test $? -eq 0
cp "$tmp/good.h5" "$tmp/nanparam.h5"
check "... /params/fc2.weight[3,5] = nan (checksum recomputed)" "$tool" set "$tmp/nanparam.h5" \
    params/fc2.weight $((3 * 16 + 5)) nan
refuse "resuming from a checkpoint with a NaN parameter" 2 \
    "nanparam.h5: dataset /params/fc2.weight holds a non-finite value \(nan at \[3,5\]\)" \
    --data "$data" --steps 10 --resume "$tmp/nanparam.h5"
"$prog" ckpt info "$tmp/nanparam.h5" >"$tmp/out" 2>&1
rc=$?
check_output "ckpt info flags it: exit 1, naming the dataset and the element" sh -c "test $rc -eq 1 && \
grep -q '/params/fc2.weight .*NON-FINITE: 1 value (the first, nan, at \[3,5\])' '$tmp/out' && \
grep -q 'meshgrad: error: .*dataset /params/fc2.weight holds non-finite values' '$tmp/out'"

check_summary
