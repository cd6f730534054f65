# trace_dumps.awk: W ranks' flight-recorder dumps of N records each, in the form
# src/dist/flight.c writes (about 390 kB a dump at N = 2048, the recorder's
# default ring), rank `behind` one collective behind the others on one
# communicator; into directory `dir` as rank-<r>.json. For trace analyze at
# scale: tests/test_trace_scale.sh, scripts/hostile.sh.
#   awk -v W=300 -v N=2048 -v behind=137 -v dir=DIR -f tests/trace_dumps.awk
BEGIN {
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
}
