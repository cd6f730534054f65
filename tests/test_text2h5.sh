#!/bin/sh
# test_text2h5.sh: `meshgrad data text2h5`: a gzip file and the same text plain
# give the same splits (first 90% train, the rest val, as data info counts
# them), and each refusal is one clear line and exit 1 (an empty file, a file
# too short for two splits, OUT equal to IN, an OUT that is not a data set,
# which stays as it was; a gzip file cut short, also within its first block,
# or with a wrong checksum; an input that is a FIFO or a device node) or
# exit 2 (a bad --val-fraction: an empty one, and 0, which leaves no val
# split for train).
# Also csv2h5's flags: an empty or overflowing --test-every (taken as 0 and as
# LONG_MAX before) and a --scale that makes a value infinite (written as inf
# before). Prints a Check-style summary line.
: "${top_builddir:=.}"
: "${TIMEOUT:=timeout}"
mg=$top_builddir/meshgrad
tmp=${TMPDIR:-/tmp}/mg-test-text2h5.$$
mkdir -p "$tmp" || exit 99
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/check.sh"
check_failed() { [ -s "$tmp/err" ] && sed 's|^|  err> |' "$tmp/err"; }
run() {
    "$TIMEOUT" 60 "$mg" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
}

awk 'BEGIN { for (i = 0; i < 3000; i++) printf "line %d of the text\n", i }' >"$tmp/t.txt"
bytes=$(wc -c <"$tmp/t.txt")
gzip -c "$tmp/t.txt" >"$tmp/t.txt.gz"
run data text2h5 "$tmp/t.txt" "$tmp/plain.h5"
check "text2h5 of a plain file exits 0" test "$rc" -eq 0
run data text2h5 "$tmp/t.txt.gz" "$tmp/gz.h5" --val-fraction 0.1
check "text2h5 of a gzip file exits 0" test "$rc" -eq 0
train=$(awk -v n="$bytes" 'BEGIN { printf "%d", 0.9 * n }')
run data info "$tmp/gz.h5"
check "the gzip file's train split is the first 90% ($train of $bytes bytes)" \
    grep -q "^/train: $train tokens, vocabulary 256" "$tmp/out"
check "... and val the rest" grep -q "^/val: $((bytes - train)) tokens" "$tmp/out"
run data info "$tmp/plain.h5"
check "the plain file gives the same splits" grep -q "^/train: $train tokens" "$tmp/out"

refused() { # DESCRIPTION RC PATTERN ARGS...
    d=$1 want=$2 pat=$3
    shift 3
    run "$@"
    check "$d: exit $want" test "$rc" -eq "$want"
    check "$d: one line saying so" sh -c "test \$(grep -c 'meshgrad: error:' '$tmp/err') -eq 1 && grep -q '$pat' '$tmp/err'"
}
: >"$tmp/empty.txt"
refused "an empty file" 1 "is empty" data text2h5 "$tmp/empty.txt" "$tmp/e.h5"
printf 'abc' >"$tmp/short.txt"
refused "a 3-byte file" 1 "too few" data text2h5 "$tmp/short.txt" "$tmp/s.h5"
refused "OUT equal to IN" 1 "is the input file" data text2h5 "$tmp/t.txt" "$tmp/t.txt"
echo "keep me" >"$tmp/notes.txt"
refused "an OUT that is not a data set" 1 "will not replace" data text2h5 "$tmp/t.txt" "$tmp/notes.txt"
check "... which stays as it was" grep -qx "keep me" "$tmp/notes.txt"
refused "--val-fraction 1" 2 "val-fraction" data text2h5 "$tmp/t.txt" "$tmp/v.h5" --val-fraction 1
refused "a missing input" 1 "cannot open" data text2h5 "$tmp/none.txt" "$tmp/n.h5"
refused "an empty --val-fraction" 2 "val-fraction .. is not a number" \
    data text2h5 "$tmp/t.txt" "$tmp/v.h5" --val-fraction ''
refused "--val-fraction 0 (a data set without the val split train evaluates)" 2 \
    "val-fraction .0. is not a number in (0, 1)" data text2h5 "$tmp/t.txt" "$tmp/v.h5" --val-fraction 0
# a gzip file cut short (its trailer missing) is refused, however short: the
# part before the cut was written as the data set before, exit 0, and a cut
# within the first block was called empty
big=$tmp/big.txt.gz
awk 'BEGIN { for (i = 0; i < 20000; i++) printf "line %d of a longer text\n", i }' | gzip -c >"$big"
head -c 30000 "$big" >"$tmp/cut.gz"
refused "a truncated gzip file (its first 30000 bytes)" 1 "cut.gz is truncated" \
    data text2h5 "$tmp/cut.gz" "$tmp/cut.h5"
check "... and no data set is left" test ! -e "$tmp/cut.h5"
head -c 20 "$big" >"$tmp/cut20.gz"
refused "a truncated gzip file (its first 20 bytes)" 1 "cut20.gz is truncated" \
    data text2h5 "$tmp/cut20.gz" "$tmp/cut20.h5"
gzip -c "$tmp/t.txt" >"$tmp/crc.gz"
size=$(wc -c <"$tmp/crc.gz")
printf 'XXXX' | dd of="$tmp/crc.gz" bs=1 seek=$((size - 8)) conv=notrunc 2>/dev/null
refused "a gzip file whose checksum does not match" 1 "reading .*crc.gz failed" \
    data text2h5 "$tmp/crc.gz" "$tmp/crc.h5"
# inputs that are not regular files are refused at once, as the other
# readers refuse them (a FIFO blocked; a copy of /dev/zero was read for
# minutes, gigabytes, before a refusal)
mkfifo "$tmp/fifo"
refused "a FIFO as IN" 1 "cannot open the input .*fifo: it is a FIFO" \
    data text2h5 "$tmp/fifo" "$tmp/f.h5"
refused "a FIFO as csv2h5 --in" 1 "cannot open --in .*fifo: it is a FIFO" \
    data csv2h5 --in "$tmp/fifo" --out "$tmp/c.h5" --shape 2
refused "a FIFO as OUT" 1 "will not replace .*fifo: it is a FIFO" \
    data text2h5 "$tmp/t.txt" "$tmp/fifo"
if mknod "$tmp/zero" c 1 5 2>/dev/null; then
    refused "a device node (a copy of /dev/zero) as IN" 1 "cannot open the input .*zero: it is a device" \
        data text2h5 "$tmp/zero" "$tmp/z.h5"
else
    echo "skipped: mknod is not permitted here (the device-node case needs root)"
fi
printf '0,1,2,3,1\n4,5,6,7,0\n' >"$tmp/s.csv"
refused "csv2h5: an empty --test-every" 2 "test-every ..: give an integer from 0 to 2147483647" \
    data csv2h5 --in "$tmp/s.csv" --out "$tmp/c.h5" --shape 2x2 --test-every ''
refused "csv2h5: --test-every past 2^63" 2 "test-every .99999999999999999999.: give an integer" \
    data csv2h5 --in "$tmp/s.csv" --out "$tmp/c.h5" --shape 2x2 --test-every 99999999999999999999
refused "csv2h5: a --scale that makes a value infinite" 1 "s.csv:1: field 2 is 1, which divided by --scale 1e-300 is past the range of a float" \
    data csv2h5 --in "$tmp/s.csv" --out "$tmp/c.h5" --shape 2x2 --scale 1e-300
check "... and no data set is left" test ! -e "$tmp/c.h5"
check_summary
