#!/bin/sh
# test_ckpt_bench.sh: `meshgrad ckpt bench` leaves nothing behind and checks
# first what it needs:
# - SIGTERM during the save (under mpirun too): the temporary file of the
#   checkpoint is removed once the processes ended (a killed bench left one of
#   gigabytes); mpirun's SIGKILL, 10 ms after its SIGTERM, often finds a rank
#   inside an fsync, so its reaper process removes them then; a run that ends
#   well leaves nothing in --dir either;
# - DIR/ckpt-bench.h5 that a bench did not write (a training checkpoint) is
#   refused and left as it is (it was replaced, then deleted);
# - --params too large for the memory is refused at once, one line; too large
#   for the disk (a 20 MB tmpfs, root only) too, naming the disk's free space
#   (the save filled the disk first).
. "$(dirname "$0")/check.sh"
program_test_env ckpt-bench
cd "$tmp" || exit 99

# stopped NP SIGNAL: ckpt bench of 20M parameters (a 240 MB checkpoint) in
# $tmp/d (NP 0: the program alone, else under mpirun), sent SIGNAL once its
# temporary file is there; the status in $rc once every process of it ended
# (mpirun returns while its killed ranks may still be ending)
stopped() {
    rm -rf d && mkdir d
    if [ "$1" -eq 0 ]; then
        "$TIMEOUT" -k 5 120 "$prog" ckpt bench --params 20M --dir "$tmp/d" >out 2>&1 &
    else
        "$TIMEOUT" -k 5 120 "$MPIRUN" -np "$1" "$prog" ckpt bench --params 20M --dir "$tmp/d" \
            >out 2>&1 &
    fi
    job=$!
    i=0
    while [ "$i" -lt 600 ] && ! ls d 2>/dev/null | grep -q 'tmp'; do
        sleep 0.1
        i=$((i + 1))
    done
    kill -"$2" "$job"
    wait "$job"
    rc=$?
    i=0
    while [ "$i" -lt 300 ] && pgrep -f "ckpt bench --params 20M --dir $tmp/d" >/dev/null; do
        sleep 0.1
        i=$((i + 1))
    done
}
stopped 0 TERM
check "SIGTERM during the save: the run ends (exit $rc)" test "$rc" -ne 0
check "... leaving no file in --dir (found: $(ls d | tr '\n' ' '))" test -z "$(ls -A d)"
stopped 2 INT
check "SIGINT to mpirun of 2 ranks during the save: the job ends (exit $rc)" test "$rc" -ne 0
check "... leaving no file in --dir (found: $(ls d | tr '\n' ' '))" test -z "$(ls -A d)"

rm -rf d && mkdir d
"$TIMEOUT" -k 5 120 "$prog" ckpt bench --params 1M --dir d >out 2>&1
check_output "a bench that ends well: exit $?, nothing left in --dir" \
    sh -c "grep -q '^ckpt bench: 1 rank' out && test -z \"\$(ls -A d)\""

"$TIMEOUT" -k 5 120 "$prog" train --data "$data" --hidden 16 --batch 32 --steps 2 --log-every 0 \
    --threads 1 --save d/ckpt-bench.h5 >out 2>&1
cp d/ckpt-bench.h5 mine.h5
check_refused "DIR/ckpt-bench.h5 that a bench did not write" 1 \
    "will not replace d/ckpt-bench.h5: it is not a checkpoint that ckpt bench wrote" \
    "$prog" ckpt bench --params 1M --dir d
check "... left as it is" cmp -s d/ckpt-bench.h5 mine.h5

check_refused "--params 40G: more than the memory" 1 \
    "ckpt bench --params 40000000000 needs at least .* GiB a rank, .* more than its .* GiB of memory" \
    "$prog" ckpt bench --params 40G --dir d
if tmpfs_full 20m; then
    check_refused "--params 2M on a 20 MB disk" 1 \
        "ckpt bench: --params 2000000 needs about .* MB of disk in .*full .* and .* MB are free there" \
        "$prog" ckpt bench --params 2M --dir "$full"
    check "... nothing written there" test -z "$(ls -A "$full")"
else
    echo "skipped: mount -t tmpfs is not permitted here (the full-disk case needs root)"
fi
check_summary
