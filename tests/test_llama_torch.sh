#!/bin/sh
# test_llama_torch.sh: meshgrad's RMS norm, rotary embedding and grouped-query
# attention against PyTorch in float64 with llama2.c's formulas: the outputs
# and every input's gradient within 1e-5 relative, computed on 1 rank, on 2
# (a 1-D mesh: C, T and the heads sharded) and on 4 (2x2: batch too), by
# tests/llama_ops_dump and tests/llama_torch_ref.py. Needs /usr/bin/python3 with
# torch (Debian's python3-torch); without it the test is skipped (77), saying
# so. Prints a Check-style summary line.
. "$(dirname "$0")/check.sh"
torch_test_env llama-torch llama_torch_ref.py

dumps=
for np in 1 2 4; do
    "$TIMEOUT" -k 5 60 "$MPIRUN" -np "$np" "$top/tests/llama_ops_dump" "$tmp/dump$np" \
        >"$tmp/out" 2>"$tmp/err"
    check "the ops run at $np rank(s) and write their results" test $? -eq 0 -a -s "$tmp/dump$np"
    dumps="$dumps $tmp/dump$np"
done
# shellcheck disable=SC2086
"$TIMEOUT" 60 "$python" "$ref" $dumps >"$tmp/out" 2>"$tmp/err"
rc=$?
sed 's/^/  /' "$tmp/out"
check "every output and gradient within 1e-5 of PyTorch's (float64)" test "$rc" -eq 0
check_summary
