#!/bin/sh
# test_layers.sh: no file under src/ includes a header of a layer above its own
# (scripts/check-layers.sh), and the check itself catches an upward include
# planted in a copy of the sources, and a folder that is no layer.
. "$(dirname "$0")/check.sh"
srcdir=${top_srcdir:-$(dirname "$0")/..}
script=$srcdir/scripts/check-layers.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check_output "src/ has no upward include" sh "$script" "$srcdir/src"

cp -r "$srcdir/src" "$tmp/src"
echo '#include "autograd/vjp.h"' >>"$tmp/src/dist/mesh.c"
out=$(sh "$script" "$tmp/src" 2>&1)
rc=$?
check "a planted dist -> autograd include is refused" test "$rc" -ne 0
echo "$out" | grep -q 'src/dist/mesh.c:[0-9]*: dist includes autograd/vjp.h (autograd)' &&
    pass "the refusal names the file, the line and both layers" ||
    fail "the refusal names the file, the line and both layers: $out"

rm -rf "$tmp/src" && cp -r "$srcdir/src" "$tmp/src" && mkdir "$tmp/src/extra" && echo 'int x;' >"$tmp/src/extra/x.c"
sh "$script" "$tmp/src" >/dev/null 2>&1
check "a folder that is no layer is refused" test $? -ne 0
check_summary
