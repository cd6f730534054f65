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
#   check_refused NAME NP PATTERN ARGS...
#                         `$MPIRUN -np NP ARGS...` fails (non-zero exit) within
#                         30 s and prints PATTERN (grep -E) in exactly one
#                         "meshgrad: error:" line; its output is shown on a
#                         failure (needs $MPIRUN, $TIMEOUT and a $tmp folder)
#   program_test_env NAME for tests of the meshgrad program: exports the Open MPI
#                         settings (root, oversubscription) and one BLAS/OpenMP
#                         thread; sets top (the build directory, absolute), prog,
#                         tool (tests/train_ckpt_tool), data (data/digits.h5) and a
#                         fresh directory $tmp, removed at exit
#   torch_test_env NAME REF
#                         program_test_env NAME for a test against PyTorch: sets
#                         python ($MG_TORCH_PYTHON, else /usr/bin/python3) and ref
#                         (tests/REF); exits 77, saying so, when python cannot
#                         import torch; a failed check shows show_out_err
#   tmpfs_full SIZE       mounts a tmpfs of SIZE at $full ($tmp/full, made here),
#                         unmounted at exit before $tmp is removed; non-zero where
#                         mount is not permitted (it needs root)
#   show_out_err          prints $tmp/out and $tmp/err, each line prefixed with the
#                         file's name: a check_failed for scripts that keep the last
#                         command's output there
#   metrics_losses FILE   "STEP LOSS" for every step of a --metrics file (as written)
#   metrics_checksum FILE the first param_checksum of a --metrics file
#   losses_close GOT REF STEPS RTOL
#                         the --metrics file GOT has STEPS steps, each loss within RTOL
#                         (relative) of the same step's in REF; prints "N steps, worst
#                         relative difference D at step S"
#   check_invariant TAG GOT REF STEPS RTOL SECONDS
#                         one check: the --metrics file GOT starts from REF's parameters
#                         (the same param_checksum) and follows its losses (losses_close)
#   train_run TAG NP ARGS...
#                         `$MPIRUN -np NP $prog train ARGS...` with its metrics in
#                         $tmp/TAG.jsonl and its output in $tmp/TAG.out, killed after
#                         $train_limit seconds (120 unless the script sets it); its status
#   train_reference TAG STEPS ARGS...
#                         the 1-rank run (train_run TAG 1 ARGS...) that others are held
#                         to: one check that it wrote a param_checksum and STEPS losses;
#                         on a failure it shows the output and the summary and exits 1
#   train_invariant TAG NP REF STEPS RTOL ARGS...
#                         one check: train_run TAG NP ARGS..., then check_invariant of it
#                         against REF's metrics ($tmp/REF.jsonl); a failed run shows its
#                         output
#   metrics_values TAG    the loss, grad_norm and param_checksum values of the
#                         metrics $tmp/TAG.jsonl, one a line
#   check_bitwise WHAT REF GOT MIN
#                         one check: run GOT's metrics values are REF's, at least
#                         MIN of them (in $tmp/REF.vals and $tmp/GOT.vals, written
#                         by metrics_values), and its checkpoint $tmp/GOT.h5 is
#                         bitwise REF's ($tool compare); a failure shows where
#   trace_valid FILE RANKS [MIN_FLOWS]
#                         the checks of tests/check_trace.py on a --trace file
#                         (without python3, grep's: RANKS processes, as many flow
#                         starts as ends, at least MIN_FLOWS, step spans); prints
#                         one line
#   show_log FILE         prints FILE (or, without one, stdin) indented ("  | "): the
#                         output under a failure
#   rank_pid PID RANK     the pid of that rank of the mpirun whose pid is PID
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
        printf '%s\n' "$_check_out" | show_log
    fi
}

check_refused() {
    _ref_name=$1 _ref_np=$2 _ref_pattern=$3
    shift 3
    _ref_start=$(date +%s)
    "$TIMEOUT" -k 5 30 "$MPIRUN" -np "$_ref_np" "$@" >"$tmp/refused.out" 2>&1
    _ref_rc=$?
    _ref_secs=$(($(date +%s) - _ref_start))
    _ref_n=$(grep -c "meshgrad: error:" "$tmp/refused.out")
    if [ "$_ref_rc" -eq 0 ]; then
        fail "$_ref_name: exit 0"
    elif [ "$_ref_rc" -eq 124 ] || [ "$_ref_rc" -eq 137 ]; then
        fail "$_ref_name: timed out"
    elif [ "$_ref_n" -ne 1 ]; then
        fail "$_ref_name: $_ref_n error lines, want 1"
    elif ! grep "meshgrad: error:" "$tmp/refused.out" | grep -Eq -- "$_ref_pattern"; then
        fail "$_ref_name: the message does not match /$_ref_pattern/"
    else
        pass "$_ref_name (exit $_ref_rc, ${_ref_secs}s): $(grep 'meshgrad: error:' "$tmp/refused.out")"
        return 0
    fi
    show_log "$tmp/refused.out"
}

program_test_env() {
    : "${top_builddir:=.}" "${MPIRUN:=mpirun}" "${TIMEOUT:=timeout}"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
    top=$(cd "$top_builddir" && pwd)
    prog=$top/meshgrad tool=$top/tests/train_ckpt_tool data=$top/data/digits.h5
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/mg-$1.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
}

torch_test_env() {
    program_test_env "$1"
    python=${MG_TORCH_PYTHON:-/usr/bin/python3}
    ref="$(dirname "$0")/$2"
    if ! "$python" -c 'import torch' >/dev/null 2>&1; then
        echo "skipping: $python cannot import torch (apt-get install python3-torch gives it)"
        exit 77
    fi
    check_failed() { show_out_err; }
}

tmpfs_full() {
    full=$tmp/full
    mkdir -p "$full"
    mount -t tmpfs -o size="$1" tmpfs "$full" 2>/dev/null || return
    trap 'umount "$full"; rm -rf "$tmp"' EXIT
}

show_log() { sed 's/^/  | /' "$@"; }

show_out_err() {
    for f in "$tmp/out" "$tmp/err"; do [ -s "$f" ] && sed "s|^|  $(basename "$f")> |" "$f"; done
}

metrics_losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([^,}]*\)[,}].*/\1 \2/p' "$1"; }
metrics_checksum() { sed -n 's/.*"param_checksum":"\([0-9a-f]*\)".*/\1/p' "$1" | head -n 1; }

losses_close() {
    metrics_losses "$2" | awk -v rtol="$4" -v steps="$3" -v got="$1" '
        { ref[$1] = $2 }
        END {
            while ((getline line < got) > 0) {
                if (line !~ /"step":[0-9]+,"loss":/) continue
                s = line; sub(/.*"step":/, "", s); l = s; s = s + 0
                sub(/^[0-9]+,"loss":/, "", l); sub(/[,}].*/, "", l)
                n++; d = l - ref[s]; if (d < 0) d = -d; r = ref[s] < 0 ? -ref[s] : ref[s]
                rel = d / (r > 1e-30 ? r : 1e-30); if (!(s in ref)) rel = 1e30
                if (rel > worst) { worst = rel; at = s }
            }
            printf "%d steps, worst relative difference %.2e at step %d", n, worst, at
            exit !(n == steps && worst <= rtol)
        }'
}

check_invariant() {
    _inv_c=$(metrics_checksum "$2") _inv_r=$(metrics_checksum "$3")
    if [ -z "$_inv_c" ] || [ "$_inv_c" != "$_inv_r" ]; then
        fail "$1: param_checksum $_inv_c, the reference's $_inv_r"
    elif _inv_msg=$(losses_close "$2" "$3" "$4" "$5"); then
        pass "$(printf '%-30s checksum %s | %s | %ss' "$1" "$_inv_c" "$_inv_msg" "$6")"
    else
        fail "$1: $_inv_msg"
    fi
}

train_run() {
    _run_tag=$1 _run_np=$2
    shift 2
    "$TIMEOUT" -k 5 "${train_limit:-120}" "$MPIRUN" -np "$_run_np" "$prog" train "$@" \
        --metrics "$tmp/$_run_tag.jsonl" >"$tmp/$_run_tag.out" 2>&1
}

train_reference() {
    _tref_tag=$1 _tref_steps=$2
    shift 2
    if train_run "$_tref_tag" 1 "$@" && [ -n "$(metrics_checksum "$tmp/$_tref_tag.jsonl")" ] &&
        [ "$(metrics_losses "$tmp/$_tref_tag.jsonl" | wc -l)" -eq "$_tref_steps" ]; then
        pass "$(printf '%-24s checksum %s | reference' "$_tref_tag" \
            "$(metrics_checksum "$tmp/$_tref_tag.jsonl")")"
    else
        fail "$_tref_tag: the 1-rank reference run failed"
        show_log "$tmp/$_tref_tag.out"
        check_summary
        exit 1
    fi
}

train_invariant() {
    _tinv_tag=$1 _tinv_np=$2 _tinv_ref=$3 _tinv_steps=$4 _tinv_rtol=$5
    shift 5
    _tinv_start=$(date +%s)
    if train_run "$_tinv_tag" "$_tinv_np" "$@"; then
        check_invariant "$_tinv_tag" "$tmp/$_tinv_tag.jsonl" "$tmp/$_tinv_ref.jsonl" "$_tinv_steps" \
            "$_tinv_rtol" $(($(date +%s) - _tinv_start))
    else
        fail "$_tinv_tag: run failed"
        show_log "$tmp/$_tinv_tag.out"
    fi
}

metrics_values() { grep -o '"\(loss\|grad_norm\|param_checksum\)":[^,}]*' "$tmp/$1.jsonl"; }

check_bitwise() {
    _bw_n=$(wc -l <"$tmp/$2.vals")
    if [ "$_bw_n" -ge "$4" ] && cmp -s "$tmp/$2.vals" "$tmp/$3.vals" &&
        "$tool" compare "$tmp/$2.h5" "$tmp/$3.h5" >"$tmp/cmp.out" 2>&1; then
        pass "$1: $_bw_n metrics values and the final checkpoint bitwise equal"
    else
        fail "$1: differs from the run $2"
        diff "$tmp/$2.vals" "$tmp/$3.vals" | head -n 6 | show_log
        show_log "$tmp/cmp.out"
    fi
}

trace_valid() {
    if python3 -c 'import json' 2>/dev/null; then
        python3 "$(dirname "$0")/check_trace.py" "$@"
        return
    fi
    _tv_proc=$(grep -c '"name":"process_name"' "$1")
    _tv_s=$(grep -c '"ph":"s"' "$1")
    _tv_f=$(grep -c '"ph":"f"' "$1")
    echo "$_tv_proc processes, $_tv_s flow starts, $_tv_f flow ends (no python3: spans not checked)"
    [ "$_tv_proc" -eq "$2" ] && [ "$_tv_s" -eq "$_tv_f" ] && [ "$_tv_s" -ge "${3:-0}" ] &&
        grep -q '"cat":"step"' "$1"
}

# rank_pid MPIRUN_PID RANK: that rank's pid (a child of mpirun)
rank_pid() {
    for p in $(pgrep -P "$1"); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

check_summary() {
    echo "$((checks ? (checks - failures) * 100 / checks : 0))%: Checks: $checks, Failures: $failures, Errors: 0"
    test "$failures" -eq 0
}
