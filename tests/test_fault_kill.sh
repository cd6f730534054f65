#!/bin/sh
# test_fault_kill.sh: a rank killed in the middle of `meshgrad train` (SIGKILL,
# as the out-of-memory killer or a lost node would) must end the whole job
# quickly and say which rank was lost: mpirun exits non-zero within 30 s,
# naming "process rank R ... signal 9", and no rank is left behind blocked in
# a collective with the dead peer. The rank's PID is found among mpirun's
# descendants by the OMPI_COMM_WORLD_RANK in its environment.
. "$(dirname "$0")/check.sh"
program_test_env fault-kill
out=$tmp/out

# descendants PID: every process below PID
descendants() {
    todo=$1 all=
    while [ -n "$todo" ]; do
        next=
        for p in $todo; do next="$next $(pgrep -P "$p" | tr '\n' ' ')"; done
        all="$all $next"
        todo=$(echo $next)
    done
    echo $all
}

# rank_pids PID RANK: the PIDs below PID whose environment says they are RANK
rank_pids() {
    for p in $(descendants "$1"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$p"
    done
}

# alive PID: the process exists and is not a zombie
alive() {
    [ -r "/proc/$1/stat" ] || return 1
    state=$(sed 's/.*) \(.\).*/\1/' "/proc/$1/stat" 2>/dev/null)
    [ -n "$state" ] && [ "$state" != Z ]
}

# kill_case NP MESH PLAN RANK
kill_case() {
    np=$1 mesh=$2 plan=$3 victim=$4
    "$TIMEOUT" -k 5 90 "$MPIRUN" -np "$np" "$prog" train --data "$data" --mesh "$mesh" --parallel "$plan" \
        --model mlp --hidden 32 --steps 1000000 --batch 30 --log-every 20 --threads 1 >"$out" 2>&1 &
    job=$!
    i=0
    while [ $i -lt 300 ] && ! grep -q "^step 40/" "$out"; do sleep 0.1; i=$((i + 1)); done
    pids=$(rank_pids "$job" "$victim")
    others=
    for r in $(seq 0 $((np - 1))); do [ "$r" = "$victim" ] || others="$others $(rank_pids "$job" "$r")"; done
    echo "--- $np ranks, mesh $mesh [$plan]: killing rank $victim (pid ${pids:-?}); other ranks:$others"
    start=$(date +%s)
    [ -n "$pids" ] && kill -KILL $pids
    wait "$job"
    rc=$?
    secs=$(($(date +%s) - start))
    echo "--- exit $rc after ${secs}s; its output:"
    sed 's/^/  | /' "$out"
    check "$np ranks: training was under way when rank $victim was killed" grep -q "^step 40/" "$out"
    check "... rank $victim was found and killed" test -n "$pids"
    # mpirun's own status is 128 + the signal (137); the timeout would take 90 s
    check "... the job exits non-zero" test "$rc" -ne 0
    check "... within 30 s (took ${secs}s)" test "$secs" -le 30
    check "... naming the lost rank $victim and the signal" \
        grep -q "process rank $victim .*signal 9" "$out"
    # mpirun may return while it still reaps the others: give them 5 s
    i=0
    while :; do
        left=
        for p in $others; do alive "$p" && left="$left $p"; done
        [ -z "$left" ] || [ $i -ge 50 ] && break
        sleep 0.1
        i=$((i + 1))
    done
    check "... leaving no other rank running (left:${left:- none})" test -z "$left"
    for p in $left; do kill -KILL "$p" 2>/dev/null; done
}

kill_case 2 2 dp 1
kill_case 4 2x2 dp,tp 2

check_summary
