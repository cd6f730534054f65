#!/bin/sh
# test_observe_api.sh: the calls of meshgrad.h that show inside a run, from
# programs written against the public API (src/io/observe.c):
# - examples/train_gpt -t FILE -S 2:3 (mg_trace_open, mg_trace_step_begin/end)
#   on 1 and 2 ranks writes a timeline that tests/check_trace.py accepts (one
#   process per rank, each with its step spans; spans nest);
# - examples/train_gpt -f DIR (mg_flight_recorder_set_dir) on 2 ranks whose
#   rank 1 skips a collective (MG_TEST_SKIP_COLLECTIVE): the collective
#   watchdog ends the job and every rank dumps into DIR; `meshgrad trace
#   analyze DIR` reads the dumps and names the step the program gave;
# - tests/observe_api on 1 and 2 ranks: each refusal of the calls, then a
#   traced run and a dump on demand (mg_flight_recorder_dump) that the
#   analyzer reads; a file that is not a trace is left as it was.
# Prints a Check-style summary line.
. "$(dirname "$0")/check.sh"
program_test_env observe_api
gpt=$top/examples/train_gpt

tiny="-d $top/data/mobydick.h5 -L 2 -H 2 -C 32 -T 32 -B 8 -n 6 -w 2 -e 0 -V 4"
for np in 1 2; do
    # shellcheck disable=SC2086
    "$TIMEOUT" -k 5 120 "$MPIRUN" -np $np "$gpt" $tiny -t "$tmp/gpt$np.json" -S 2:3 >"$tmp/out" 2>&1
    check "train_gpt -t on $np rank(s) writes its trace: exit $?" \
        grep -q "^trace: $tmp/gpt$np.json, steps 2 to 3 of $np rank" "$tmp/out"
    check_output "... a valid timeline, with its steps" trace_valid "$tmp/gpt$np.json" "$np"
done

# the watchdog: rank 1 skips its 30th collective; the others wait 3 s, then every rank dumps
# shellcheck disable=SC2086
MG_COLLECTIVE_TIMEOUT=3 MG_TEST_SKIP_COLLECTIVE=1:30 "$TIMEOUT" -k 5 120 "$MPIRUN" -np 2 \
    -x MG_COLLECTIVE_TIMEOUT -x MG_TEST_SKIP_COLLECTIVE "$gpt" $tiny -f "$tmp/stall" >"$tmp/out" 2>&1
rc=$?
check "train_gpt -f DIR, a collective skipped: the watchdog ends the job ($rc), both ranks dump" \
    sh -c "test $rc -ne 0 && test $rc -ne 124 && test -f '$tmp/stall/rank-0.json' &&
           test -f '$tmp/stall/rank-1.json' && grep -q 'wrote $tmp/stall/rank-1.json on watchdog timeout' '$tmp/out'"
check_failed() { show_log "$tmp/analyze"; }
"$prog" trace analyze "$tmp/stall" >"$tmp/analyze" 2>&1
check "... meshgrad trace analyze reads the dumps, with the program's step: exit $?" \
    sh -c "grep -q 'dumps of rank 0, 1 of 2, written on watchdog timeout' '$tmp/analyze' &&
           grep -q '(step [0-9]*)' '$tmp/analyze'"

for np in 1 2; do
    echo "not a trace" >"$tmp/other.json"
    "$TIMEOUT" -k 5 60 "$MPIRUN" -np $np "$top/tests/observe_api" "$tmp/dumps$np" "$tmp/api$np.json" \
        "$tmp/other.json" >"$tmp/out" 2>&1
    rc=$?
    sed 's/^/  | /' "$tmp/out"
    check "observe_api on $np rank(s): every call and refusal as documented: exit $rc" test "$rc" -eq 0
    check "... the file that is not a trace is left as it was" grep -qx "not a trace" "$tmp/other.json"
    check_output "... its trace of steps 2 to 3 is valid" trace_valid "$tmp/api$np.json" "$np"
    "$prog" trace analyze "$tmp/dumps$np" >"$tmp/analyze" 2>&1
    check "... meshgrad trace analyze reads the dumps made on demand: exit $?" \
        grep -q "written on asked by the test" "$tmp/analyze"
done
check_summary
