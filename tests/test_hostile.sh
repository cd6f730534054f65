#!/bin/sh
# test_hostile.sh: the short run of scripts/hostile.sh (its cases marked
# quick: outputs over a planted symbolic link, a FIFO, a device node and the
# data set; inputs that are a FIFO, a copy of /dev/zero, a truncated gzip;
# hostile checkpoints and their attributes; --metrics /dev/stdout): no hang,
# no crash, nothing harmful outside a case's folder, nothing wrong.
: "${top_builddir:=.}"
: "${top_srcdir:=.}"
. "$(dirname "$0")/check.sh"
out=$(BUILD=$(cd "$top_builddir" && pwd) sh "$top_srcdir/scripts/hostile.sh" --quick 2>&1)
rc=$?
printf '%s\n' "$out" | sed 's/^/  | /'
last=$(printf '%s\n' "$out" | tail -n 1)
check "0 hang, 0 crash, 0 harmful, 0 wrong: $last" \
    sh -c "test $rc -eq 0 && printf '%s\n' \"\$1\" | grep -q ' 0 hang, 0 crash, 0 harmful, 0 wrong\$'" sh "$last"
check_summary
