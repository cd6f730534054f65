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

awk -v W=300 -v N=2048 -v behind=137 -v dir="$dumps" 'BEGIN {
    half = N / 2
    members = "0"; zeros = "0"
    for (i = 1; i < W; i++) { members = members "," i; zeros = zeros ",0" }
    for (r = 0; r < W; r++) {
        f = dir "/rank-" r ".json"
        n = r == behind ? N - 1 : N
        printf "{\"meshgrad_flight\":1,\"reason\":\"watchdog timeout\",\"rank\":%d,\"world\":%d,\"pid\":%d,\"host\":\"node%d\",\"now_ns\":%.0f,\"step\":%d,\"recorded\":%d,\"capacity\":%d,\n",
            r, W, 1000 + r, int(r / 8), 9000000000000, int((N - 1) / 4), 50000, N > f
        printf "\"comms\":[\n{\"index\":0,\"name\":\"meshgrad mesh dim 0\",\"dim\":0,\"ordinal\":0,\"ranks\":[%s],\"seq\":%d,\"sends\":[%s],\"recvs\":[%s]},\n",
            members, 5000 + half - 1, zeros, zeros > f
        printf "{\"index\":1,\"name\":\"meshgrad mesh\",\"dim\":-1,\"ordinal\":0,\"ranks\":[%s],\"seq\":%d,\"sends\":[%s],\"recvs\":[%s]}],\n\"entries\":[\n",
            members, 5000 + half - (r == behind ? 2 : 1), zeros, zeros > f
        for (k = 0; k < n; k++) {
            c = k % 2; t = 8000000000000 + k * 500000; last = k == N - 1
            printf "{\"id\":%d,\"comm\":%d,\"seq\":%d,\"op\":\"all_reduce\",\"dim\":%d,\"peer\":-1,\"bytes\":%d,\"dtype\":\"float32\",\"step\":%d,\"state\":\"%s\",\"post_ns\":%.0f,\"start_ns\":%.0f,\"end_ns\":%.0f}%s\n",
                48000 + k, c, 5000 + int(k / 2), c ? -1 : 0, c ? 4 : 38440, int(k / 4),
                last ? "started" : "done", t, t, last ? 0 : t + 20000, k + 1 < n ? "," : "]}" > f
        }
        close(f)
    }
}'
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
