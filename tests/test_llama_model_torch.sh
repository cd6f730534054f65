#!/bin/sh
# test_llama_model_torch.sh: the Llama of src/nn/llama.h against llama2.c's
# model.py math in PyTorch float64, with meshgrad's random initial weights and
# norm weights other than 1: the logits, the mean cross-entropy and every
# parameter's gradient within 1e-5 relative, on 1 rank and on 2 dp, 2 tp, 2
# sp (rope at positions past 0 on the second shard), 2 fsdp, 2x2 dp,tp and
# pp=2 (no logits there: the loss and the gradients), with kv_heads 2; with
# kv_heads 1 (on 1 rank and 2 sp) and kv_heads == heads (on 1 rank and 2 tp);
# an untied head on 1 rank and on pp=2. tests/llama_model_dump runs
# meshgrad's side, tests/llama_model_ref.py PyTorch's. When llama2.c's folder
# is found ($MG_LLAMA2C_DIR, else ../shared/peers/llama2c beside the source
# tree), its own model.py is run on the same weights too. Needs /usr/bin/python3
# with torch (Debian's python3-torch); without it the test is skipped (77),
# saying so. Prints a Check-style summary line.
. "$(dirname "$0")/check.sh"
torch_test_env llama-model-torch llama_model_ref.py

cases=
# run NP MESH PLAN KV [untied]: meshgrad's side of one case, in $tmp/<tag>.<rank>
run() {
    tag=$(printf '%s-%s-kv%s%s' "$2" "$3" "$4" "${5:+-$5}" | tr ',+' '__')
    "$TIMEOUT" -k 5 60 "$MPIRUN" -np "$1" "$top/tests/llama_model_dump" "$tmp/$tag" "$2" "$3" \
        "$4" ${5:+"$5"} >"$tmp/out" 2>"$tmp/err"
    check "meshgrad's step on mesh $2 [$3], kv_heads $4${5:+, $5 head}" test $? -eq 0 -a -s "$tmp/$tag.0"
    cases="$cases $tmp/$tag"
}
run 1 1 dp 2
for p in dp tp sp fsdp pp; do run 2 2 $p 2; done
run 4 2x2 dp,tp 2
run 1 1 dp 1
run 2 2 sp 1
run 1 1 dp 4
run 2 2 tp 4
run 1 1 dp 2 untied
run 2 2 pp 2 untied

llama2c=${MG_LLAMA2C_DIR:-${top_srcdir:-$top/..}/../shared/peers/llama2c}
with=
if [ -f "$llama2c/model.py" ]; then
    with="--llama2c $llama2c"
else
    echo "note: no llama2.c folder at $llama2c (MG_LLAMA2C_DIR): the float64 reference only"
fi
# shellcheck disable=SC2086
"$TIMEOUT" 300 "$python" "$ref" $with $cases >"$tmp/out" 2>"$tmp/err"
rc=$?
sed 's/^/  /' "$tmp/out"
what="logits, loss and gradients within 1e-5 of PyTorch's"
[ -z "$with" ] || what="$what and of model.py's"
check "$what" test "$rc" -eq 0
check_summary
