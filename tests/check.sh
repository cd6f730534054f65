# check.sh: the check helpers of the shell tests (tests/test_*.sh), sourced
# from the script's own folder so it is found in-tree, in VPATH builds and in
# `make distcheck`:
#   . "$(dirname "$0")/check.sh"
# Exports:
#   checks, failures      the counters, both 0 at first
#   pass MESSAGE          one check passed: prints "ok: MESSAGE"
#   fail MESSAGE          one check failed: prints "FAILED: MESSAGE"
#   check DESCRIPTION COMMAND...
#                         one check, passed when COMMAND exits 0; on a failure it
#                         then calls check_failed, a no-op that a script may
#                         redefine (after sourcing this file) to show a log
#   check_output DESCRIPTION COMMAND...
#                         the same with COMMAND's stdout and stderr captured: the
#                         last line is added to the "ok:" line, and all of it is
#                         shown indented ("  | ") on a failure
#   check_summary         prints the Check-style summary line that scripts/test.sh
#                         adds up, "P%: Checks: N, Failures: F, Errors: 0", and
#                         returns non-zero when a check failed: end a script with it
checks=0 failures=0

pass() {
    checks=$((checks + 1))
    echo "ok: $*"
}

fail() {
    checks=$((checks + 1))
    failures=$((failures + 1))
    echo "FAILED: $*"
}

check_failed() { :; }

check() {
    _check_desc=$1
    shift
    if "$@"; then
        pass "$_check_desc"
    else
        fail "$_check_desc"
        check_failed
    fi
}

check_output() {
    _check_desc=$1
    shift
    if _check_out=$("$@" 2>&1); then
        _check_last=$(printf '%s\n' "$_check_out" | tail -n 1)
        pass "$_check_desc${_check_last:+: $_check_last}"
    else
        fail "$_check_desc"
        printf '%s\n' "$_check_out" | sed 's/^/  | /'
    fi
}

check_summary() {
    echo "$((checks ? (checks - failures) * 100 / checks : 0))%: Checks: $checks, Failures: $failures, Errors: 0"
    test "$failures" -eq 0
}
