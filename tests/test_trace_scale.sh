#!/bin/sh
# test_trace_scale.sh: `meshgrad trace analyze` reads the dumps of a large job
# in memory of about one dump and time linear in their bytes: 300 ranks'
# dumps of 2048 records each (the recorder's default ring, about 390 kB a
# dump, 113 MB in all), written by awk in the form flight.c writes, rank 137
# one collective behind the others on one communicator. The analysis must
# name rank 137 as behind, with a peak RSS (/usr/bin/time -f %M, else
# getrusage through python3) under 150 MB, less than the dumps' bytes, and
# under an address-space limit of 1 GB (ulimit -v), so that a reader that
# holds the dumps fails at once instead of filling the machine's memory (the
# reader that kept every dump's tree took 2.6 GB for 20 of them, and one
# allocation of the rest of the file for every string).
. "$(dirname "$0")/check.sh"
program_test_env trace-scale
dumps=$tmp/dumps
mkdir "$dumps"

awk -v W=300 -v N=2048 -v behind=137 -v dir="$dumps" -f "$(dirname "$0")/trace_dumps.awk"
bytes=$(cat "$dumps"/rank-*.json | wc -c)
check "300 dumps of 2048 records ($bytes bytes)" test "$(ls "$dumps" | wc -l)" -eq 300 -a "$bytes" -gt 100000000

# peak_rss COMMAND...: runs it (stdout in $tmp/out, stderr in $tmp/err), its
# status in $rc and its peak resident set in kB in $kb
peak_rss() {
    if [ -x /usr/bin/time ]; then
        /usr/bin/time -f %M -o "$tmp/rss" "$@" >"$tmp/out" 2>"$tmp/err"
        rc=$?
        kb=$(tail -n 1 "$tmp/rss")
    elif command -v python3 >/dev/null 2>&1; then
        python3 -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:], stdout=open(sys.argv[1] + "/out", "w"), stderr=open(sys.argv[1] + "/err", "w"))
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)' "$tmp" "$@" >"$tmp/rss"
        rc=$?
        kb=$(cat "$tmp/rss")
    else
        echo "skipped: neither /usr/bin/time nor python3 to measure the peak memory"
        exit 77
    fi
}
start=$(date +%s)
peak_rss sh -c "ulimit -v 1000000 && exec \"\$0\" trace analyze \"\$1\"" "$prog" "$dumps"
secs=$(($(date +%s) - start))
check_output "the analysis ends well (exit $rc, ${secs}s)" sh -c "test $rc -eq 0 || { cat '$tmp/err'; false; }"
check "... peak memory ${kb} kB: under 150 MB and under the dumps' $bytes bytes" \
    test "$rc" -eq 0 -a "${kb:-999999999}" -lt 153600 -a "$((${kb:-999999999} * 1024))" -lt "$bytes"
check "... and it names rank 137 as behind" grep -q "Rank 137 is behind: it is in no collective" "$tmp/out"
check "... for whom the 299 others wait" grep -q "wait for it in all_reduce #6023 on the whole mesh" "$tmp/out"
check_summary
