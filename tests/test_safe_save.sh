#!/bin/sh
# test_safe_save.sh: saving never destroys anything (docs/CHECKPOINTS.md "What
# a save never does"), with the reproducers of what it once did:
# - a symbolic link planted at the old predictable temporary name
#   (<path>.tmp.<pid>) is not followed: the save succeeds, the link's target
#   is untouched; a link, a device node (mknod) or a file that is not a
#   checkpoint at the --save path is refused before step 1, and left as it is;
#   --save (or --metrics) naming the data set or the config file is refused;
#   --metrics over a file that is not a metrics file, or through a link, too,
#   also when the file is put there between the check and the open; a FIFO or
#   a device node as --metrics, --trace or a --flight-dir dump is refused at
#   once (a FIFO blocked, a device node took the metrics);
#   resuming from and saving to one file (the preemption workflow) works;
# - a new run refuses --save FILE that is a checkpoint already (a GPT's, the
#   run an MLP: it was replaced silently), naming its model and step, and
#   leaves it as it is; with --overwrite it replaces it;
# - --keep deletes only older ckpt-<step>.h5 checkpoints: a new run refuses a
#   directory that already holds checkpoints, and with --overwrite leaves
#   best.h5, a later ckpt-00005000.h5 and a ckpt-<step>.h5 that is not a
#   checkpoint where they are;
# - a full disk (a 200 kB tmpfs holding a 160 kB checkpoint) ends the save on
#   both ranks within seconds, one message naming the path and "No space left
#   on device", exit 1, the previous checkpoint intact and no temporary file
#   left; the same when the space cannot be reserved (the writes fail midway:
#   one message within the collective timeout; the temporary file of the job
#   so ended is removed by the next save). Needs mount (root): skipped with
#   the reason otherwise.
. "$(dirname "$0")/check.sh"
program_test_env safe-save
cd "$tmp" || exit 99

small="--data $data --hidden 16 --batch 32 --log-every 0 --threads 1"
# train NP ARGS...: output in $tmp/out, status in $rc
train() {
    _np=$1
    shift
    "$TIMEOUT" -k 5 120 "$MPIRUN" -np "$_np" "$prog" train $small "$@" >"$tmp/out" 2>&1
    rc=$?
}
refuse() { _n=$1 _np=$2 _p=$3; shift 3; check_refused "$_n" "$_np" "$_p" "$prog" train $small "$@"; }
same() { cmp -s "$1" "$2"; }

train 1 --steps 5 --save "$tmp/good.h5"
check "a checkpoint to plant as the run's own" test "$rc" -eq 0
cp "$data" "$tmp/digits.h5"
printf 'steps = 5\nbatch = 32\n' >"$tmp/base.conf"
cp "$tmp/base.conf" "$tmp/base.conf.orig"

# ---- 1. symlinks, devices, inputs -----------------------------------------------
mkdir sl
echo "victim" >victim.txt
"$TIMEOUT" -k 5 120 sh -c "ln -s ../victim.txt sl/run.h5.tmp.\$\$ && exec '$prog' train $small \
    --steps 5 --save sl/run.h5" >"$tmp/out" 2>&1
check_output "a symlink planted at the old temporary name: the save succeeds" test $? -eq 0
check "... the link's target is untouched" test "$(cat victim.txt)" = victim
check "... the link is left alone" test -L "$(ls -d sl/run.h5.tmp.* | head -n 1)"
check_output "... and sl/run.h5 is a regular file, a whole checkpoint" \
    sh -c "test -f sl/run.h5 && ! test -L sl/run.h5 && '$prog' ckpt info sl/run.h5"
mkdir sl2
ln -s ../victim.txt sl2/run.h5
refuse "a symlink at the --save path" 1 "will not replace sl2/run.h5: it is a symbolic link" \
    --steps 5 --save sl2/run.h5
check "... left as it is" sh -c "test -L sl2/run.h5 && test \"\$(cat victim.txt)\" = victim"
if mknod "$tmp/null" c 1 3 2>/dev/null; then
    refuse "a device node (mknod c 1 3) as --save" 2 "will not replace .*/null: it is a device" \
        --steps 5 --save "$tmp/null"
    check "... still a device" test -c "$tmp/null"
else
    echo "skipped: mknod is not permitted here (the device-node case needs root)"
fi
refuse "--save equal to --data" 2 "--save .*digits.h5 is the file given as --data" \
    --data "$tmp/digits.h5" --steps 5 --save "$tmp/digits.h5"
check "... the data set is intact" same "$tmp/digits.h5" "$data"
refuse "--save equal to --config" 2 "--save base.conf is the file given as --config" \
    --config base.conf --save base.conf
refuse "--metrics equal to --config" 2 "--metrics base.conf is the file given as --config" \
    --config base.conf --metrics base.conf
check "... the config is intact" same base.conf base.conf.orig
echo "notes" >notes.txt
refuse "--metrics over a file that is not a metrics file" 1 \
    "will not replace notes.txt: it is not a metrics file this program wrote" --steps 2 --metrics notes.txt
check "... left as it is" test "$(cat notes.txt)" = notes
ln -s ../victim.txt sl2/m.jsonl
refuse "a symlink as --metrics" 1 "will not replace sl2/m.jsonl: it is a symbolic link" \
    --steps 2 --metrics sl2/m.jsonl
check "... its target is untouched" test "$(cat victim.txt)" = victim
train 1 --steps 2 --metrics m.jsonl && train 1 --steps 2 --metrics m.jsonl
check_output "the metrics file of an earlier run is replaced" \
    sh -c "test $rc -eq 0 && test \$(grep -c param_checksum m.jsonl) -eq 1"
train 1 --steps 2 --metrics /dev/stdout
check_output "--metrics /dev/stdout (a link to a stream) writes the lines there" \
    sh -c "test $rc -eq 0 && grep -q '^{\"step\":2,\"loss\"' '$tmp/out'"
# every output passes the rule of a save (io/files.h): a FIFO and a device
# node other than a terminal are refused at once, never opened (--metrics on
# a FIFO blocked before step 1; on a device node it wrote there and exit 0)
mkfifo fifo
refuse "--metrics naming a FIFO: refused at once, not waited on" 1 \
    "will not write fifo: it is a FIFO" --steps 2 --metrics fifo
refuse "--trace naming a FIFO" 1 "will not replace fifo: it is a FIFO" --steps 4 --trace fifo
mkdir fl
mkfifo fl/rank-0.json
refuse "a FIFO as rank 0's flight recorder dump (--flight-dir)" 2 \
    "will not replace fl/rank-0.json: it is a FIFO" --steps 2 --flight-dir fl
echo "not a dump" >fl/rank-1.json
rm fl/rank-0.json
train 2 --steps 2 --flight-dir fl
check_output "... a file there that is not a dump: the run goes on, saying it stays" \
    sh -c "test $rc -eq 0 && grep -q 'warning: flight recorder: fl/rank-1.json is not a dump' '$tmp/out' &&
           test \"\$(cat fl/rank-1.json)\" = 'not a dump'"
if [ -c "$tmp/null" ]; then
    refuse "--metrics naming a device node (mknod c 1 3)" 1 \
        "will not write .*/null: it is a device" --steps 2 --metrics "$tmp/null"
    mkdir fl2
    mknod fl2/rank-0.json c 1 3
    refuse "a device node as rank 0's flight recorder dump" 1 \
        "will not replace fl2/rank-0.json: it is a device" --steps 2 --flight-dir fl2
fi
# the race between the check of --metrics and its open: another process puts
# a file of its own at the path in between (swap_in.so plays it, on the
# open for writing): that file is left as it is, and the run refused
shim=$top/tests/.libs/swap_in.so
if [ -r "$shim" ]; then
    printf '{"step":0}\n' >race.jsonl # a metrics file: it passes the check
    echo theirs >theirs.txt
    # (a sanitizer build's runtime then is not the first library: fine here)
    "$TIMEOUT" -k 5 120 env LD_PRELOAD="$shim" MG_SWAP_PATH=race.jsonl MG_SWAP_FROM=theirs.txt \
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
        "$prog" train $small --steps 2 --metrics race.jsonl >"$tmp/out" 2>&1
    rc=$?
    check "a file put at --metrics between its check and its open: left as it is" \
        test "$(cat race.jsonl)" = theirs
    check "... and the run refused (exit $rc), saying why" sh -c "test $rc -ne 0 &&
        grep -q 'will not replace race.jsonl: it is not a metrics file this program wrote' '$tmp/out'"
    # the race between a save's last check of --save and its rename: the file
    # put there in between is swapped back, not replaced (--overwrite: a new
    # run replaces the checkpoint there, the file it checked)
    cp good.h5 race.h5 # a checkpoint: it passes the check
    echo theirs >theirs.txt
    "$TIMEOUT" -k 5 120 env LD_PRELOAD="$shim" MG_SWAP_PATH=race.h5 MG_SWAP_FROM=theirs.txt \
        MG_SWAP_ON=rename ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
        "$prog" train $small --steps 2 --save race.h5 --overwrite >"$tmp/out" 2>&1
    rc=$?
    check "a file put at --save between the check and the rename: left as it is" \
        test "$(cat race.h5)" = theirs
    check "... the save refused (exit $rc), saying why, and no temporary file left" sh -c "test $rc -ne 0 &&
        grep -q 'will not replace race.h5: during the save another file, not a meshgrad checkpoint, was put there; it was left as it is' '$tmp/out' &&
        ! ls race.h5.tmp.* 2>/dev/null"
    cp good.h5 race2.h5 && cp good.h5 theirs.h5
    "$TIMEOUT" -k 5 120 env LD_PRELOAD="$shim" MG_SWAP_PATH=race2.h5 MG_SWAP_FROM=theirs.h5 \
        MG_SWAP_ON=rename ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
        "$prog" train $small --steps 2 --save race2.h5 --overwrite >"$tmp/out" 2>&1
    rc=$?
    check_output "... a checkpoint put there instead is replaced, as the one checked would be" \
        sh -c "test $rc -eq 0 && '$prog' ckpt info race2.h5 | grep -q 'step = 2' && ! ls race2.h5.tmp.* 2>/dev/null"
    # a save killed between its swap and the swap back leaves the other file
    # under the temporary name: the next save's cleaning of killed saves'
    # temporary files leaves it (it lacks their mark), and says so
    cp good.h5 race3.h5
    echo theirs >theirs.txt
    "$TIMEOUT" -k 5 120 env LD_PRELOAD="$shim" MG_SWAP_PATH=race3.h5 MG_SWAP_FROM=theirs.txt \
        MG_SWAP_ON=rename MG_SWAP_KILL=1 \
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
        "$prog" train $small --steps 2 --save race3.h5 --overwrite >"$tmp/out" 2>&1
    rc=$?
    left=$(ls race3.h5.tmp.* 2>/dev/null | head -n 1)
    check "a save killed between its swap and the swap back (exit $rc): the file is under $left" \
        sh -c "test $rc -ne 0 && test -n '$left' && test \"\$(cat '$left')\" = theirs"
    train 1 --steps 2 --save race4.h5
    check_output "... the next save in the directory leaves it, and says so" \
        sh -c "test $rc -eq 0 && test \"\$(cat '$left')\" = theirs &&
               grep -q 'warning: .*race3.h5.tmp.* has a temporary file.s name but was not made by a save' '$tmp/out'"
    rm -f "$left"
else
    echo "skipped: no $shim (the cases of a file put at --metrics or --save after its check)"
fi
refuse "--save over a file that is not a checkpoint" 1 \
    "will not replace base.conf.orig: it is not a meshgrad checkpoint" --steps 5 --save base.conf.orig
check "... left as it is" same base.conf base.conf.orig
cp good.h5 resumed.h5
train 2 --steps 10 --resume resumed.h5 --save resumed.h5
check_output "resuming from and saving to one file (preemption) works" \
    sh -c "test $rc -eq 0 && '$prog' ckpt info resumed.h5 | grep -q 'step = 10'"

# ---- 2. a new run over a checkpoint file; --keep -------------------------------------
"$TIMEOUT" -k 5 120 "$prog" train --model gpt --data "$top/data/mobydick.h5" --layers 1 --heads 2 \
    --embd 16 --ctx 8 --batch 4 --steps 2 --log-every 0 --eval-every never --threads 1 \
    --save valuable.h5 >"$tmp/out" 2>&1
check_output "a GPT's checkpoint, valuable.h5" test $? -eq 0
cp valuable.h5 valuable.h5.orig
refuse "a new MLP run with --save FILE, a GPT's checkpoint" 1 \
    "--save valuable.h5 already holds a checkpoint \(model gpt, step 2\); a new run would replace it: resume that run \(--resume valuable.h5\), save to another path, or give --overwrite" \
    --steps 2 --save valuable.h5
check "... left as it is" same valuable.h5 valuable.h5.orig
refuse "... the same on 2 ranks, and from a config file's save = FILE" 2 \
    "--save valuable.h5 already holds a checkpoint" --config "$tmp/base.conf" --save valuable.h5
check "... left as it is" same valuable.h5 valuable.h5.orig
train 2 --steps 2 --save valuable.h5 --overwrite
check_output "--overwrite: the new run replaces it" \
    sh -c "test $rc -eq 0 && '$prog' ckpt info valuable.h5 | grep -q 'model = mlp'"

mkdir kd
cp good.h5 kd/ckpt-00005000.h5
cp good.h5 kd/best.h5
refuse "a new run into a directory of checkpoints" 2 \
    "--save kd/: the directory already holds checkpoints .*ckpt-00005000.h5.*--overwrite" \
    --steps 60 --save kd/ --save-every 20 --keep 1
check "... touches nothing" sh -c "test \"\$(ls kd | tr '\n' ' ')\" = 'best.h5 ckpt-00005000.h5 '"
echo "not a checkpoint" >kd/ckpt-00000010.h5
train 2 --steps 60 --save kd/ --save-every 20 --keep 1 --overwrite
check_output "--overwrite: the run saves, --keep 1 prunes only its own older checkpoints" \
    sh -c "test $rc -eq 0 && test \"\$(ls kd | tr '\n' ' ')\" = \
'best.h5 ckpt-00000010.h5 ckpt-00000060.h5 ckpt-00005000.h5 '"
check "... the planted files are unchanged" \
    sh -c "same() { cmp -s \"\$1\" \"\$2\"; }; same good.h5 kd/best.h5 && same good.h5 kd/ckpt-00005000.h5"

# ---- 3. a full disk ----------------------------------------------------------------
if ! tmpfs_full 200k; then
    echo "skipped: mount -t tmpfs is not permitted here (the full-disk cases need root)"
    check_summary
    exit $?
fi
train 2 --hidden 128 --batch 64 --steps 10 --save "$full/run.h5"
check "a 160 kB checkpoint on a 200 kB tmpfs" test "$rc" -eq 0
cp "$full/run.h5" "$tmp/run.h5.before"
# full NAME ENV...: the reproducer; sets rc, secs, errors (the "meshgrad: error:" lines)
full_save() {
    _name=$1
    shift
    _start=$(date +%s)
    env "$@" MG_COLLECTIVE_TIMEOUT=10 "$TIMEOUT" -k 5 45 "$MPIRUN" -np 2 "$prog" train $small \
        --hidden 128 --batch 64 --steps 40 --save "$full/run.h5" --save-every 10 --overwrite \
        >"$tmp/out" 2>&1
    rc=$?
    secs=$(($(date +%s) - _start))
    errors=$(grep -c "meshgrad: error:" "$tmp/out")
    echo "--- $_name: exit $rc after ${secs}s:"
    sed 's/^/  | /' "$tmp/out"
}
full_save "reserved"
check "full disk: the run stops, exit 1 (not a hang)" test "$rc" -eq 1
check "... within 20 s (took ${secs}s)" test "$secs" -le 20
check "... one message naming the path and the cause" sh -c "test $errors -eq 1 && grep 'meshgrad: error:' \
'$tmp/out' | grep -q 'cannot save $full/run.h5: No space left on device'"
check "... the previous checkpoint is intact" same "$full/run.h5" "$tmp/run.h5.before"
check "... no temporary file is left" sh -c "! ls '$full' | grep -q tmp"
full_save "writes failing midway" MG_CKPT_FAULT=no-reserve
check "full disk, no reservation: the job ends non-zero (not a hang)" \
    test "$rc" -ne 0 -a "$rc" -ne 124 -a "$rc" -ne 137
check "... within 25 s (took ${secs}s)" test "$secs" -le 25
check "... one message naming the path and the cause" sh -c "test $errors -eq 1 && grep 'meshgrad: error:' \
'$tmp/out' | grep -q '$full/run.h5.*No space left on device'"
check "... the previous checkpoint is intact" same "$full/run.h5" "$tmp/run.h5.before"
check "... leaving its temporary file (its writer was ended)" sh -c "ls '$full' | grep -q tmp"
full_save "the next save"
check "the next save removes it (its writer is gone), then stops on the full disk as before" \
    sh -c "test $rc -eq 1 && test $errors -eq 1 && ! ls '$full' | grep -q tmp"

check_summary
