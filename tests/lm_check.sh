# lm_check.sh: the helpers of the tests that train a tiny language model on
# data/mobydick.h5 and hold its runs to one another (test_train_gpt.sh,
# test_train_llama.sh, test_train_gpt_bf16.sh), sourced after check.sh and
# program_test_env:
#   . "$(dirname "$0")/lm_check.sh"
# They read $lm (the model's flags, given to every run), $STEPS (its steps) and
# check.sh's $tmp, $tool and train_run.
# Exports:
#   train TAG NP ARGS...  `train_run TAG NP $lm ARGS...`: output in $tmp/TAG.out,
#                         metrics in $tmp/TAG.jsonl; on a failure one failed check
#                         showing the output; its status
#   checksum TAG          the param_checksum of run TAG
#   losses TAG            "STEP LOSS" for every step of run TAG, then "val LOSS"
#                         for its last val_loss
#   close GOT REF RTOL [N]
#                         GOT has N lines of losses (steps and val; STEPS + 1
#                         unless given), each within RTOL (relative) of REF's;
#                         prints "N losses, worst relative difference D (at S)"
#   follows TAG REF WHAT RTOL
#                         one check: TAG starts from REF's parameters and its
#                         losses (all STEPS and val) are REF's within RTOL
#   reference             one check: the 1-rank run "ref" (train ref 1) wrote
#                         its param_checksum and every loss
#   meshes REF RTOL RUN...
#                         for each RUN "NP:MESH:PLAN[:ARGS]", the run
#                         mesh-MESH-PLAN on NP ranks (--mesh MESH --parallel
#                         PLAN ARGS) and follows of it against REF within RTOL
#   ckpt DIR STEP         the checkpoint of STEP that --save DIR/ writes
#   resumed NAME NP WHAT ARGS...
#                         two checks: NAME-full saves in $tmp/NAME/ at half the
#                         steps, NAME-resumed resumes there: the same loss text
#                         at every step and val, and a final checkpoint bitwise
#                         the uninterrupted run's

train() {
    tag=$1 np=$2
    shift 2
    # shellcheck disable=SC2086
    train_run "$tag" "$np" $lm "$@" && return 0
    fail "$tag: run failed"
    show_log "$tmp/$tag.out"
    return 1
}

checksum() { metrics_checksum "$tmp/$1.jsonl"; }

losses() {
    sed -n 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$tmp/$1.jsonl"
    sed -n 's/.*"val_loss":\([^,}]*\).*/val \1/p' "$tmp/$1.jsonl" | tail -n 1
}

close() {
    losses "$2" >"$tmp/ref.txt"
    losses "$1" >"$tmp/got.txt"
    awk -v rtol="$3" -v want="${4:-$((STEPS + 1))}" '
        NR == FNR { ref[$1] = $2; next }
        { n++; d = $2 - ref[$1]; if (d < 0) d = -d; r = ref[$1] < 0 ? -ref[$1] : ref[$1];
          rel = d / (r > 1e-30 ? r : 1e-30); if (!($1 in ref)) rel = 1e30;
          if (rel > worst) { worst = rel; at = $1 } }
        END { printf "%d losses, worst relative difference %.2e (at %s)", n, worst, at == "" ? "-" : at;
              exit !(n == want && worst <= rtol) }' "$tmp/ref.txt" "$tmp/got.txt"
}

follows() {
    if [ "$(checksum "$1")" != "$(checksum "$2")" ]; then
        fail "$3: param_checksum $(checksum "$1"), 1-rank run $(checksum "$2")"
        return
    fi
    check_output "$3: same init, the 1-rank losses within $4" close "$1" "$2" "$4"
}

reference() {
    if train ref 1 && [ -n "$(checksum ref)" ] && [ "$(losses ref | wc -l)" -eq $((STEPS + 1)) ]; then
        pass "1 rank: the reference, checksum $(checksum ref), val_loss $(losses ref | tail -n 1)"
    fi
}

meshes() {
    _ref=$1 _rtol=$2
    shift 2
    for _run; do
        IFS=: read -r _np _mesh _plan _args <<EOF
$_run
EOF
        # shellcheck disable=SC2086
        train "mesh-$_mesh-$_plan" "$_np" --mesh "$_mesh" --parallel "$_plan" $_args &&
            follows "mesh-$_mesh-$_plan" "$_ref" "$_mesh [$_plan]" "$_rtol"
    done
}

ckpt() { printf '%s/ckpt-%08d.h5' "$1" "$2"; }

resumed() {
    _name=$1 _np=$2 _what=$3 _half=$((STEPS / 2))
    shift 3
    train "$_name-full" "$_np" "$@" --save "$tmp/$_name/" --save-every $_half &&
        train "$_name-resumed" "$_np" "$@" --resume "$(ckpt "$tmp/$_name" $_half)" \
            --save "$tmp/$_name-resumed.h5" || return
    losses "$_name-full" | tail -n $((_half + 1)) >"$tmp/want.txt"
    losses "$_name-resumed" >"$tmp/got.txt"
    check "$_what, resumed at $_half: the same loss text at every step and val" \
        cmp -s "$tmp/want.txt" "$tmp/got.txt"
    check_output "$_what, resumed: the final checkpoint is bitwise the uninterrupted run's" \
        "$tool" compare "$(ckpt "$tmp/$_name" $STEPS)" "$tmp/$_name-resumed.h5"
}
