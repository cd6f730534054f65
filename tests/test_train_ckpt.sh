#!/bin/sh
# test_train_ckpt.sh: checkpoints of `meshgrad train` (docs/CHECKPOINTS.md).
# - bitwise: a run saved and resumed on the same mesh continues bit for bit:
#   2 ranks dp (SGD with momentum; 20 steps, save, resume to 40) and 2x2
#   fsdp,tp (AdamW, cosine with warmup, clipping; resume from the step-20
#   checkpoint of a 40-step run): the same loss lines (metrics, %.9g, and the
#   printed ones) and bitwise equal final checkpoints (every /params and /optim
#   dataset; tests/train_ckpt_tool). The same on 2 ranks dp with a hidden
#   layer of 4096, where the optimizer step is split across the node
#   (nn/optim_shard.h). --save DIR/ --save-every --keep leave the newest K
#   zero-padded ckpt-<step>.h5.
# - reshard: the step-20 checkpoint of a 2x2 (dp,tp) run resumes on 1, 2
#   (fsdp) and 1x2 (dp,tp) ranks, and that of a 1-rank run on 2x2 (fsdp,tp):
#   every loss within 1e-5 (relative) of the uninterrupted run.
# - the file holds plain global arrays: h5dump -H shows /params/fc1.weight as
#   (16, 64) in a file written by 4 ranks, and a 1-rank checkpoint loaded and
#   saved again on 2x2 is bitwise the same.
# - preemption: SIGTERM to one rank of two (the ranks agree to stop after the
#   same step), SIGUSR1 to mpirun (it forwards that one) and SIGINT to a single
#   process (started with SIGINT at its default action): exit 0, a checkpoint
#   (in --save, else ./meshgrad-preempt.h5), and the resumed run ends bitwise
#   where an uninterrupted one does. Open MPI's mpirun answers SIGTERM itself
#   by ending the job a second later and exiting 1: with SIGTERM to mpirun
#   the status is 1 and ckpt info of the --save directory verifies the
#   checkpoint the ranks saved, as docs/CHECKPOINTS.md says.
# - refusals: another model size, another optimizer, a missing file, a text
#   file, a truncated file, a corrupt dataset: one clear "meshgrad: error:" line
#   naming the file, non-zero exit, within 30 s.
. "$(dirname "$0")/check.sh"
program_test_env train-ckpt
RTOL=1e-5

common="--data $data --batch 32 --hidden 16 --seed 5 --threads 1 --log-every 10"
sgd="--optimizer sgd --lr 0.05 --momentum 0.9 --schedule constant"
adamw="--optimizer adamw --lr 3e-3 --schedule cosine --warmup 5 --clip 1.0"

# train TAG NP ARGS...: output in $tmp/TAG.out, metrics in $tmp/TAG.jsonl; status in $rc
train() {
    tag=$1 np=$2
    shift 2
    start=$(date +%s)
    train_run "$tag" "$np" $common "$@"
    rc=$?
    secs=$(($(date +%s) - start))
    if [ "$rc" -eq 0 ]; then
        pass "$tag: np $np, ${secs}s"
    else
        fail "$tag: exit $rc"
        show_log "$tmp/$tag.out"
    fi
}

# "step loss" of every step (metrics, %.9g), and the printed "step N/M | loss X" lines
losses() { metrics_losses "$tmp/$1.jsonl"; }
printed() { sed -n 's/^\(step [0-9]*\/[0-9]* | loss [^|]*\)|.*/\1/p' "$tmp/$1.out"; }

# same_losses GOT REF: every step of GOT has the same loss text as REF
same_losses() {
    losses "$1" >"$tmp/got.txt"
    losses "$2" | awk 'NR == FNR { want[$1] = 1; next } ($1 in want)' "$tmp/got.txt" - >"$tmp/ref.txt"
    printed "$1" >"$tmp/got-printed.txt"
    printed "$2" | grep -F -x -f "$tmp/got-printed.txt" >"$tmp/ref-printed.txt"
    n=$(wc -l <"$tmp/got.txt")
    [ "$n" -gt 0 ] && cmp -s "$tmp/got.txt" "$tmp/ref.txt" &&
        [ -s "$tmp/got-printed.txt" ] && cmp -s "$tmp/got-printed.txt" "$tmp/ref-printed.txt" &&
        echo "$n steps, $(wc -l <"$tmp/got-printed.txt") printed lines identical" && return 0
    echo "resumed run:"; paste "$tmp/got.txt" "$tmp/ref.txt" | head -5
    return 1
}

# close_losses GOT REF STEPS: GOT has STEPS steps, each within RTOL of REF's
close_losses() { losses_close "$tmp/$1.jsonl" "$tmp/$2.jsonl" "$3" "$RTOL"; }

ckpt() { printf '%s/ckpt-%08d.h5' "$1" "$2"; }

# ---- bitwise, 2 ranks dp: 20 steps, save, resume to 40 -----------------------
train dp-full 2 $sgd --steps 40 --save "$tmp/dp-full.h5"
train dp-half 2 $sgd --steps 20 --save "$tmp/dp-half.h5"
train dp-resumed 2 $sgd --steps 40 --resume "$tmp/dp-half.h5" --save "$tmp/dp-resumed.h5"
check_output "dp: the resumed run's losses are the uninterrupted run's" same_losses dp-resumed dp-full
check_output "dp: the final checkpoints are bitwise equal" "$tool" compare "$tmp/dp-full.h5" "$tmp/dp-resumed.h5"
check_output "dp: the resumed run says where it resumed" \
    grep -q "resumed from $tmp/dp-half.h5: step 20 of 40 (saved on mesh 2 \[dp\])" "$tmp/dp-resumed.out"

# ---- bitwise, 2 ranks dp with a hidden layer large enough for the split step
# (nn/optim_shard.h: weight and AdamW state once per node, the weight gradient
# as each rank's rows of the sum): the resumed run's first step computes what
# the uninterrupted run's step 21 does ------------------------------------------
train split-full 2 --hidden 4096 --batch 64 --optimizer adamw --steps 12 --save "$tmp/split-full.h5"
train split-half 2 --hidden 4096 --batch 64 --optimizer adamw --steps 6 --save "$tmp/split-half.h5"
train split-resumed 2 --hidden 4096 --batch 64 --optimizer adamw --steps 12 \
    --resume "$tmp/split-half.h5" --save "$tmp/split-resumed.h5"
check_output "dp, split step: the final checkpoints are bitwise equal" "$tool" compare \
    "$tmp/split-full.h5" "$tmp/split-resumed.h5"

# ---- bitwise, 2x2 fsdp,tp: resume the step-20 checkpoint of a 40-step run ----
f="--mesh 2x2 --parallel fsdp,tp"
train fsdp-full 4 $adamw $f --steps 40 --save "$tmp/fsdp/" --save-every 10 --keep 3
check_output "--save DIR/ --save-every 10 --keep 3 leaves the newest 3, zero-padded" \
    test "$(cd "$tmp/fsdp" && echo *)" = "ckpt-00000020.h5 ckpt-00000030.h5 ckpt-00000040.h5"
train fsdp-resumed 4 $adamw $f --steps 40 --resume "$(ckpt "$tmp/fsdp" 20)" --save "$tmp/fsdp-resumed.h5"
check_output "2x2 fsdp,tp: the resumed run's losses are the uninterrupted run's" same_losses fsdp-resumed fsdp-full
check_output "2x2 fsdp,tp: the final checkpoints are bitwise equal" \
    "$tool" compare "$(ckpt "$tmp/fsdp" 40)" "$tmp/fsdp-resumed.h5"

# ---- reshard -------------------------------------------------------------------
train r22-full 4 $adamw --mesh 2x2 --parallel dp,tp --steps 40 --save "$tmp/r22/" --save-every 20
r22=$(ckpt "$tmp/r22" 20)
train r22-on-1 1 $adamw --steps 40 --resume "$r22"
check_output "2x2 (dp,tp) -> 1: losses within $RTOL" close_losses r22-on-1 r22-full 20
train r22-on-2 2 $adamw --mesh 2 --parallel fsdp --steps 40 --resume "$r22"
check_output "2x2 (dp,tp) -> 2 (fsdp): losses within $RTOL" close_losses r22-on-2 r22-full 20
train r22-on-1x2 2 $adamw --mesh 1x2 --parallel dp,tp --steps 40 --resume "$r22"
check_output "2x2 (dp,tp) -> 1x2 (dp,tp): losses within $RTOL" close_losses r22-on-1x2 r22-full 20
train r1-full 1 $adamw --steps 40 --save "$tmp/r1/" --save-every 20
r1=$(ckpt "$tmp/r1" 20)
train r1-on-2x2 4 $adamw --mesh 2x2 --parallel fsdp,tp --steps 40 --resume "$r1"
check_output "1 -> 2x2 (fsdp,tp): losses within $RTOL" close_losses r1-on-2x2 r1-full 20

# ---- the file holds global arrays ------------------------------------------------
if command -v h5dump >/dev/null; then
    check_output "h5dump -H: /params/fc1.weight saved by 4 ranks has the global shape (16, 64)" \
        sh -c "h5dump -d /params/fc1.weight -H '$r22' | grep 'SIMPLE { ( 16, 64 ) / ( 16, 64 ) }'"
else
    echo "skipped: h5dump not found (apt-get install hdf5-tools)"
fi
check_output "the 2x2 and the 1-rank step-20 parameters agree (1e-3)" "$tool" compare "$r1" "$r22" 1e-3
train r1-resaved-on-2x2 4 $adamw --mesh 2x2 --parallel dp,tp --steps 20 --resume "$r1" \
    --save "$tmp/r1-resaved.h5"
check_output "a 1-rank checkpoint loaded and saved again on 2x2 is bitwise the same" \
    "$tool" compare "$r1" "$tmp/r1-resaved.h5"

# ---- preemption --------------------------------------------------------------------
# wait_steps TAG N: until TAG's metrics show N steps (at most 30 s)
wait_steps() {
    i=0
    while [ "$i" -lt 300 ]; do
        [ -f "$tmp/$1.jsonl" ] && [ "$(grep -c '"loss"' "$tmp/$1.jsonl")" -ge "$2" ] && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

# wait_bounded PID S: waits for the job PID, killed after S seconds if it
# has not ended; its status in $rc
wait_bounded() {
    (
        i=0
        while [ "$i" -lt $(($2 * 10)) ] && kill -0 "$1" 2>/dev/null; do
            sleep 0.1
            i=$((i + 1))
        done
        kill -KILL "$1" 2>/dev/null
    ) &
    wait "$1"
    rc=$?
}

# preempt TAG NP SIGNAL WHO ARGS...: starts a long run, sends SIGNAL after 5 steps
# to WHO (mpirun, last-rank, process), waits; status in $rc
preempt() {
    tag=$1 np=$2 sig=$3 who=$4
    shift 4
    if [ "$who" = process ]; then
        # a background job starts with SIGINT ignored (and meshgrad keeps it so)
        $default_int "$prog" train $common --metrics "$tmp/$tag.jsonl" "$@" >"$tmp/$tag.out" 2>&1 &
    else
        "$MPIRUN" -np "$np" "$prog" train $common --metrics "$tmp/$tag.jsonl" "$@" >"$tmp/$tag.out" 2>&1 &
    fi
    pid=$!
    if wait_steps "$tag" 5; then
        case $who in
        mpirun | process) kill -"$sig" "$pid" ;;
        last-rank) kill -"$sig" "$(pgrep -P "$pid" | tail -n 1)" ;;
        esac
    fi
    # the run is long: kill it after 60 s if the signal did not stop it
    wait_bounded "$pid" 60
    if [ "$rc" -eq 0 ] && grep -q "stopped by SIG$sig after step" "$tmp/$tag.out"; then
        pass "$tag: SIG$sig to $who: exit 0, $(grep 'stopped by' "$tmp/$tag.out")"
    else
        fail "$tag: SIG$sig to $who: exit $rc"
        sed 's/^/  | /' "$tmp/$tag.out"
    fi
}

# long enough (a second or more) that a signal sent after step 5, seen by a
# poll every 0.1 s, lands before the last step: 1000 steps of this model took
# 0.09 s, and a signal that came after the run had ended failed the checks
long="$adamw --steps 20000"
train pre-full 2 $long --save "$tmp/pre-full.h5" --log-every 500
preempt pre-stop 2 TERM last-rank $long --save "$tmp/pre/" --log-every 500
check_output "SIGTERM: one checkpoint, saved after the step it stopped at" \
    sh -c "ls '$tmp/pre' | grep -qx 'ckpt-[0-9]*.h5' && test \$(ls '$tmp/pre' | wc -l) -eq 1"
train pre-resumed 2 $long --resume "$tmp/pre/" --save "$tmp/pre-resumed.h5" --log-every 500
check_output "SIGTERM: the resumed run's losses are the uninterrupted run's" same_losses pre-resumed pre-full
check_output "SIGTERM: the resumed run ends bitwise where the uninterrupted one does" \
    "$tool" compare "$tmp/pre-full.h5" "$tmp/pre-resumed.h5"
mkdir "$tmp/cwd"
cd "$tmp/cwd" || exit 1
preempt pre-usr1 2 USR1 mpirun $long --log-every 0
check_output "SIGUSR1 to mpirun without --save: ./meshgrad-preempt.h5 is a whole checkpoint" \
    "$prog" ckpt info "$tmp/cwd/meshgrad-preempt.h5"
rm -f "$tmp/cwd/meshgrad-preempt.h5"
# SIGTERM to mpirun: Open MPI 4.1 ends the job itself (SIGTERM to the ranks a second
# later) and exits 1 whatever they did, and may drop their last lines of output; this
# small model saves in that time, which ckpt info of the --save directory verifies
# (docs/CHECKPOINTS.md "Preemption")
"$MPIRUN" -np 2 "$prog" train $common --metrics "$tmp/pre-term.jsonl" $long --log-every 0 \
    --save "$tmp/pre-term/" >"$tmp/pre-term.out" 2>&1 &
pid=$!
wait_steps pre-term 5 && kill -TERM "$pid"
wait_bounded "$pid" 30
check "SIGTERM to mpirun: it exits $rc, not 0 (Open MPI's own status, as documented)" test "$rc" -ne 0
check_output "... and ckpt info of the --save directory verifies the checkpoint the ranks saved" \
    "$prog" ckpt info "$tmp/pre-term/"
default_int="env --default-signal=INT" sig=INT
$default_int true 2>/dev/null || default_int="" sig=TERM # coreutils < 8.31
preempt pre-int 1 $sig process $long --log-every 0
check_output "SIG$sig to a single process: ./meshgrad-preempt.h5 is a whole checkpoint" \
    "$prog" ckpt info "$tmp/cwd/meshgrad-preempt.h5"
cd "$tmp" || exit 1

# ---- another data set ----------------------------------------------------------------
# a resume on another data set than the checkpoint's goes on, saying so in
# one line and in the metrics (it went on silently); the same file named
# another way is no change
h="$tmp/dp-half.h5"
cp "$data" "$tmp/other-data.h5"
"$TIMEOUT" -k 5 60 "$MPIRUN" -np 1 "$prog" train $common $sgd --steps 22 --resume "$h" \
    --data "$tmp/other-data.h5" --metrics "$tmp/other.jsonl" >"$tmp/other.out" 2>&1
check "a resume on another data set says so: $(grep -c '^warning: resuming' "$tmp/other.out") line" \
    grep -q "^warning: resuming $h with --data $tmp/other-data.h5, but it was saved with data.file = .*; using $tmp/other-data.h5$" "$tmp/other.out"
check "... and the metrics say so" grep -q "\"changed\":\"data.file: .* -> $tmp/other-data.h5\"" "$tmp/other.jsonl"
ln -s "$data" "$tmp/same-data.h5"
"$TIMEOUT" -k 5 60 "$MPIRUN" -np 1 "$prog" train $common $sgd --steps 22 --resume "$h" \
    --data "$tmp/same-data.h5" >"$tmp/same.out" 2>&1
check "the same data set through a link is no change" sh -c "! grep -q 'data.file' $tmp/same.out"

# ---- refusals ----------------------------------------------------------------------
# refuse NAME NP PATTERN ARGS...: `meshgrad train $common ARGS...` is refused (check.sh)
refuse() { _n=$1 _np=$2 _p=$3; shift 3; check_refused "$_n" "$_np" "$_p" "$prog" train $common "$@"; }

h="$tmp/dp-half.h5"
refuse "another model size" 2 "cannot resume from $h: it was saved with model.hidden = 16 but --hidden is 24" \
    $sgd --steps 40 --resume "$h" --hidden 24
refuse "another optimizer" 1 "cannot resume from $h: it was saved with optimizer = sgd but --optimizer is adamw" \
    $adamw --steps 40 --resume "$h"
refuse "a missing file" 2 "no checkpoint at $tmp/missing.h5: No such file" $sgd --steps 40 --resume "$tmp/missing.h5"
echo "not a checkpoint" >"$tmp/text.h5"
refuse "a text file" 1 "checkpoint $tmp/text.h5 is not an HDF5 file" $sgd --steps 40 --resume "$tmp/text.h5"
head -c 4000 "$h" >"$tmp/truncated.h5"
refuse "a truncated file" 1 "checkpoint $tmp/truncated.h5 is truncated" $sgd --steps 40 --resume "$tmp/truncated.h5"
cp "$h" "$tmp/corrupt.h5"
"$tool" corrupt "$tmp/corrupt.h5" params/fc1.weight
refuse "a corrupt dataset" 2 "checksum mismatch in $tmp/corrupt.h5 dataset /params/fc1.weight" \
    $sgd --steps 40 --resume "$tmp/corrupt.h5"
refuse "a checkpoint past --steps" 1 "checkpoint $h is at step 20, past --steps 10" \
    $sgd --steps 10 --resume "$h"

check_summary
