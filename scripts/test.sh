#!/usr/bin/env bash
# test.sh: sets the checkout up (scripts/setup.sh), runs `make check` in build/
# (one job more than the cores), then prints every Check summary line of the
# test logs, the automake summary, the skipped programs, the tails of failing
# logs, and as its very last line the total over all Check summaries:
#   checks: N passed, M failed
# (a failing test program that printed no failing Check summary, e.g. one that
# crashed or timed out, counts as one failed check). Exits non-zero on any failure.
# Arguments go to `make check`, e.g. scripts/test.sh TESTS="tests/test_cli.sh".
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || { echo "test: setup failed"; echo "checks: 0 passed, 0 failed"; exit 1; }

stamp=build/.test-stamp
out=build/check.out
touch "$stamp"
sleep 1 # .trs files written by this run are strictly newer than the stamp
# one job more than the cores (MAKE_JOBS overrides): the tests wait on process
# start-up, MPI and the watchdogs' sleeps a good part of their time, and with
# one job a core the CPU stood idle that long
jobs=${MAKE_JOBS:-$(($(nproc 2>/dev/null || echo 2) + 1))}
make -C build -j"$jobs" check "$@" </dev/null 2>&1 | tee "$out"
make_rc=${PIPESTATUS[0]}

passed=0 failed=0
failing_logs=() skipped=()
echo
echo "=== Check summaries"
while IFS= read -r trs; do
    log=${trs%.trs}.log
    name=${trs#build/}
    name=${name%.trs}
    result=$(sed -n 's/^:test-result: //p' "$trs" | sort -u | tr '\n' ' ')
    own_failures=0
    if [ -f "$log" ]; then
        # "100%: Checks: 7, Failures: 0, Errors: 0"
        while IFS= read -r line; do
            echo "$name: $line"
            read -r n f e < <(echo "$line" | sed -E 's/.*Checks: ([0-9]+), Failures: ([0-9]+), Errors: ([0-9]+).*/\1 \2 \3/')
            passed=$((passed + n - f - e))
            failed=$((failed + f + e))
            own_failures=$((own_failures + f + e))
        done < <(grep -E '^[0-9]+%: Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' "$log")
    fi
    case $result in
    *FAIL* | *ERROR*)
        failing_logs+=("$log")
        [ "$own_failures" -eq 0 ] && failed=$((failed + 1))
        ;;
    *SKIP*) skipped+=("$name") ;;
    esac
done < <(find build -path 'build/meshgrad-*' -prune -o -name '*.trs' -newer "$stamp" -print | sort)

echo
echo "=== automake summary"
sed -n -E '/^(=+ *)?Testsuite summary/,/^# ERROR:/p' "$out" | grep -E '^# [A-Z]+:|Testsuite summary' || true
if [ "${#skipped[@]}" -gt 0 ]; then
    echo
    echo "=== skipped programs (exit 77): ${skipped[*]}"
fi
for log in "${failing_logs[@]}"; do
    echo
    echo "=== FAILED: $log (last 40 lines)"
    tail -n 40 "$log"
done
status=0
if [ "$make_rc" -ne 0 ] || [ "$failed" -ne 0 ]; then
    status=1
    echo
    echo "test: FAILED (make check exit $make_rc)"
fi
echo "checks: $passed passed, $failed failed"
exit $status
