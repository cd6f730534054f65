#!/bin/sh
# test_flight.sh: the flight recorder (src/dist/flight.c) and `meshgrad trace
# analyze` (src/cli/trace.c) on real jobs of `meshgrad train`:
# - kill -USR2 of mpirun (which forwards it): every rank writes
#   --flight-dir/rank-<r>.json and the job goes on to finish, exit 0; a file
#   there that is not a dump is left alone; the analyzer reads the dumps;
# - SIGSEGV of one rank: it writes its dump before it dies;
# - an injected collective mismatch on 4 ranks (MG_TEST_SKIP_COLLECTIVE=2:K:
#   rank 2 skips its K-th collective, for two K that stall two ways: the
#   skipped all-reduce's successor meets the others' at one sequence number,
#   or rank 2 runs on into another communicator): the watchdog ends the job,
#   every rank dumps, and the analyzer names rank 2 and the op;
# - bad input to the analyzer: a clear message, non-zero exit; hostile dumps
#   (ranks outside the job, a comm without members, a FIFO, a 5 GiB file)
#   are refused, not a crash, a hang or the file read whole.
# The stopped rank (SIGSTOP) is scripts/sigstop-trials.sh's, run by
# test_fault_sigstop.sh, which checks that the analyzer names it too.
. "$(dirname "$0")/check.sh"
program_test_env flight
: "${top_srcdir:=.}"
common="--data $data --batch 32 --log-every 0 --threads 1"

# started METRICS: waits (at most 60 s) until the job trains
started() {
    i=0
    while [ "$i" -lt 600 ] && ! grep -q '"loss"' "$1" 2>/dev/null; do
        sleep 0.1
        i=$((i + 1))
    done
}

# end_of JOB: waits for mpirun (at most 120 s, then kills it); its exit status
end_of() {
    i=0
    while kill -0 "$1" 2>/dev/null && [ "$i" -lt 1200 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    kill -0 "$1" 2>/dev/null && kill -KILL "$1"
    wait "$1"
}

json_ok() { # FILE: a JSON object that starts as a dump does (python3 when there is one)
    head -c 20 "$1" | grep -q '^{"meshgrad_flight":1' || return 1
    if python3 -c 'import json' 2>/dev/null; then
        python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["entries"] and d["comms"]' "$1"
    fi
}

# 1. SIGUSR2: dumps, and the job goes on
mkdir "$tmp/usr2"
echo "not a dump" >"$tmp/usr2/rank-1.json"
"$MPIRUN" -np 2 "$prog" train $common --steps 1500 --flight-dir "$tmp/usr2" \
    --metrics "$tmp/m1.jsonl" >"$tmp/out1" 2>&1 &
job=$!
started "$tmp/m1.jsonl"
kill -USR2 "$job" # mpirun forwards it to the ranks
end_of "$job"
rc=$?
check "SIGUSR2: the job goes on to the end, exit $rc" \
    sh -c "test $rc -eq 0 && grep -q '^done: 1500 steps' $tmp/out1"
check "... rank 0 wrote its dump" grep -q "flight recorder: wrote $tmp/usr2/rank-0.json on SIGUSR2" "$tmp/out1"
check "... a valid one" json_ok "$tmp/usr2/rank-0.json"
check "... rank 1 left the file that is not a dump as it was, saying so" \
    sh -c "grep -qx 'not a dump' $tmp/usr2/rank-1.json && grep -q 'rank-1.json exists and is not a flight recorder dump' $tmp/out1"
"$prog" trace analyze "$tmp/usr2" >"$tmp/a1" 2>&1
check "... the analyzer refuses a directory with that file, naming it: exit $?" \
    grep -q "meshgrad: error: trace analyze: $tmp/usr2/rank-1.json is not a flight recorder dump" "$tmp/a1"
mkdir "$tmp/usr2b" && cp "$tmp/usr2/rank-0.json" "$tmp/usr2b/"
check_output "... and reads rank 0's dump" "$prog" trace analyze "$tmp/usr2b"

# 2. a fatal signal: the rank dumps before it dies
"$MPIRUN" -np 2 "$prog" train $common --steps 100000 --flight-dir "$tmp/segv" \
    --metrics "$tmp/m2.jsonl" >"$tmp/out2" 2>&1 &
job=$!
started "$tmp/m2.jsonl"
victim=$(rank_pid "$job" 1)
[ -n "$victim" ] && kill -SEGV "$victim"
end_of "$job"
rc=$?
check "SIGSEGV of rank 1: the job ends, exit $rc" test "$rc" -ne 0
check "... rank 1 wrote its dump first" \
    sh -c "grep -q 'flight recorder: wrote $tmp/segv/rank-1.json on SIGSEGV' $tmp/out2 && grep -q '\"reason\":\"SIGSEGV\"' $tmp/segv/rank-1.json"
check "... a valid one" json_ok "$tmp/segv/rank-1.json"

# 3. an injected collective mismatch: rank 2 of 4 skips its K-th collective
for k in 100 101; do
    MG_COLLECTIVE_TIMEOUT=2 MG_TEST_SKIP_COLLECTIVE=2:$k "$TIMEOUT" -k 5 120 "$MPIRUN" -np 4 "$prog" \
        train $common --steps 200 --flight-dir "$tmp/skip$k" >"$tmp/out3" 2>&1
    rc=$?
    check "rank 2 skips collective $k: the watchdog ends the job, exit $rc" \
        sh -c "test $rc -ne 0 && grep -q 'meshgrad: error: collective' $tmp/out3"
    check "... every rank dumped" test "$(ls "$tmp/skip$k" | grep -c '^rank-[0-3].json$')" -eq 4
    "$prog" trace analyze "$tmp/skip$k" >"$tmp/a3" 2>&1
    rc=$?
    sed 's/^/  | /' "$tmp/a3"
    check "... the analyzer names rank 2 as the odd one out, and the op: exit $rc" \
        sh -c "test $rc -eq 0 && grep -Eq 'Rank 2 is out of step|rank 2 entered all_reduce' $tmp/a3 && grep -q 'mismatch' $tmp/a3 && grep -q 'all_reduce' $tmp/a3"
done

# 4. bad input
"$prog" trace analyze "$tmp/none" >"$tmp/a4" 2>&1
check "analyze of a missing directory: exit $?, a clear message" \
    grep -q "meshgrad: error: trace analyze: cannot open the directory '$tmp/none'" "$tmp/a4"
mkdir "$tmp/empty"
"$prog" trace analyze "$tmp/empty" >"$tmp/a4" 2>&1
check "analyze of a directory without dumps: exit $?, a clear message" \
    grep -q "meshgrad: error: trace analyze: '$tmp/empty' holds no flight recorder dump" "$tmp/a4"
# hostile dumps: ranks outside the job, a comm without members, a FIFO, a huge
# file (the first three crashed the analyzer, the FIFO hung it, the huge file
# was read into memory whole)
hostile_dump() { # DIR WHAT PATTERN JSON-AFTER-THE-HEADER
    mkdir -p "$tmp/$1"
    printf '{"meshgrad_flight":1,"reason":"test","rank":0,"world":2,"now_ns":2000000000,"step":3,%s}\n' \
        "$4" >"$tmp/$1/rank-0.json"
    "$TIMEOUT" 20 "$prog" trace analyze "$tmp/$1" >"$tmp/a4" 2>&1
    _rc=$?
    check "analyze of a dump with $2: exit $_rc (1), one message: $(grep 'error' "$tmp/a4")" \
        test "$_rc" -eq 1 -a "$(grep -c 'meshgrad: error:' "$tmp/a4")" -eq 1 -a \
        -n "$(grep -F "meshgrad: error: trace analyze: $tmp/$1/rank-0.json: $3" "$tmp/a4")"
}
world='"comms":[{"name":"MPI_COMM_WORLD","dim":-1,"ordinal":0,"ranks":[0,1],"seq":5,"sends":[0,0],"recvs":[0,0]}]'
wait1='"state":"started","post_ns":1,"start_ns":1,"end_ns":0'
hostile_dump h-peer "a peer past the world" "entry 0 has peer 100000000, not -1 or a rank 0..4095" \
    "$world,\"entries\":[{\"id\":1,\"comm\":0,\"seq\":1,\"op\":\"send\",\"peer\":100000000,\"bytes\":4,\"dtype\":\"float32\",\"step\":3,$wait1}]"
hostile_dump h-neg "a negative member" "a comm lists rank -7, not a rank 0..4095" \
    '"comms":[{"name":"x","dim":0,"ordinal":0,"ranks":[-7,0,1],"seq":1}],"entries":[]'
hostile_dump h-none "two comms without members" 'comm 0 has no "ranks" list' \
    '"comms":[{"name":"x","dim":0,"ordinal":0},{"name":"x","dim":0,"ordinal":0}],"entries":[]'
hostile_dump h-wait "a wait past the world" "waiting_in lists rank 5000, not a rank 0..4095" \
    '"waiting_in":{"op":"checkpoint read","dim":0,"since_ns":1,"ranks":[0,5000]},"comms":[],"entries":[]'
mkdir "$tmp/h-fifo" && mkfifo "$tmp/h-fifo/rank-0.json"
"$TIMEOUT" 20 "$prog" trace analyze "$tmp/h-fifo" >"$tmp/a4" 2>&1
check "analyze of a FIFO named like a dump: exit $? (1), no wait" \
    grep -q "meshgrad: error: trace analyze: cannot open flight recorder dump $tmp/h-fifo/rank-0.json: it is a FIFO" "$tmp/a4"
mkdir "$tmp/h-big" && truncate -s 5G "$tmp/h-big/rank-0.json"
"$TIMEOUT" 20 "$prog" trace analyze "$tmp/h-big" >"$tmp/a4" 2>&1
check "analyze of a 5 GiB (sparse) file named like a dump: exit $? (1), not read" \
    grep -q "meshgrad: error: trace analyze: cannot read $tmp/h-big/rank-0.json: larger than 4 GiB" "$tmp/a4"
"$prog" trace >"$tmp/a4" 2>&1
check "trace without analyze DIR: exit $? (usage)" test $? -ne 0 -a -n "$(grep 'give .analyze DIR.' "$tmp/a4")"
check_summary
