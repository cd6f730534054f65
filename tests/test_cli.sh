#!/bin/sh
# test_cli.sh: the meshgrad program's command line: --help (of the program and
# of every command and benchmark), --version, usage errors (exit 2, usage on
# stderr; a bad bench, ckpt or data flag or argument named), output stdout
# cannot take (a full disk or closed: exit 1, named), a checkpoint folder given as DIR/, and a failing command under
# mpirun printing "meshgrad: error: ..." exactly once, scripts/regress.sh's
# --out (its guard; a path with a space) and scripts/slurm-test.sh's guard.
# Prints a Check-style summary line.
. "$(dirname "$0")/check.sh"
program_test_env cli
# a failed check shows the last run's stdout and stderr
check_failed() { show_out_err; }

# run ARGS...: runs meshgrad (no MPI launcher), sets rc, output in $tmp/out, $tmp/err
run() {
    "$TIMEOUT" 60 "$prog" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
}
# mpirun_np N ARGS...: the same under mpirun
run_np() {
    np=$1
    shift
    "$TIMEOUT" -k 10 120 "$MPIRUN" -np "$np" "$prog" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
}
error_lines() { grep -c "meshgrad: error:" "$tmp/err"; }

run --help
check "--help exits 0" test "$rc" -eq 0
check "--help prints the usage on stdout" grep -q "^usage: meshgrad" "$tmp/out"
for c in train ckpt data bench eval; do
    check "--help lists '$c'" grep -q "^  $c " "$tmp/out"
done
run -h
check "-h exits 0" test "$rc" -eq 0

run --version
check "--version exits 0" test "$rc" -eq 0
check "--version prints 'meshgrad ${PACKAGE_VERSION:-0.1.0}' first" \
    test "$(head -n 1 "$tmp/out")" = "meshgrad ${PACKAGE_VERSION:-0.1.0}"
check "--version lists the CPU backend and the OpenBLAS kernels it runs" \
    grep -Eq "cpu \(OpenBLAS, [A-Za-z0-9_]+ kernels[:;,) ]" "$tmp/out"

run --no-such-flag
check "an unknown flag exits 2" test "$rc" -eq 2
check "... naming the flag on stderr, as every error is said" \
    grep -q "^meshgrad: error: unknown option '--no-such-flag'" "$tmp/err"
check "... with the usage on stderr" grep -q "^usage: meshgrad" "$tmp/err"
check "... and nothing on stdout" test ! -s "$tmp/out"

run frobnicate --x
check "an unknown command exits 2" test "$rc" -eq 2
check "... naming the command" grep -q "^meshgrad: error: unknown command 'frobnicate'" "$tmp/err"
check "... with the usage on stderr" grep -q "^usage: meshgrad" "$tmp/err"

run
check "no command exits 2" test "$rc" -eq 2
check "... saying so as every error is said" grep -q "^meshgrad: error: no command given" "$tmp/err"
check "... with the usage on stderr" grep -q "^usage: meshgrad" "$tmp/err"

# every command and benchmark answers --help with its usage on stdout, exit 0
for c in train generate ckpt data bench plan trace "bench comm" "bench linear" "bench step" \
    "bench ops" "bench step --model gpt" "bench step --parallel pp" "ckpt info" "data info" \
    "trace analyze" "data text2h5" "data csv2h5" eval "ckpt export" "ckpt import"; do
    run $c --help
    check "'$c --help' exits 0" test "$rc" -eq 0
    check "... printing its usage on stdout" grep -q "usage: .*meshgrad" "$tmp/out"
    check "... and no error" test ! -s "$tmp/err"
done
run bench step --help
check "'bench step --help' names the GPT's and the pipeline's step" \
    grep -q -- "--model gpt --help.*--parallel pp --help" "$tmp/out"
run train --help
check "'train --help' lists pp among the plans" grep -q -- "--parallel .*tp+sp, pp" "$tmp/out"

# a checkpoint directory given as DIR/ (as the documents write it) names its
# newest checkpoint DIR/ckpt-<step>.h5, not DIR//ckpt-<step>.h5
run train --data "$data" --mesh 1 --steps 2 --log-every 0 --save "$tmp/ck/"
check "train --save DIR/ on 1 rank exits 0" test "$rc" -eq 0
run ckpt info "$tmp/ck/"
check "ckpt info DIR/ names DIR/ckpt-00000002.h5" \
    grep -q "^checkpoint: $tmp/ck/ckpt-00000002.h5 " "$tmp/out"
run train --data "$data" --mesh 1 --steps 3 --log-every 0 --resume "$tmp/ck/"
check "train --resume DIR/ names DIR/ckpt-00000002.h5" \
    grep -q "^resumed from $tmp/ck/ckpt-00000002.h5: step 2 of 3" "$tmp/out"

# a command whose product is its stdout fails, naming stdout, when the output
# cannot be written: on a full disk or closed (each exited 0 having printed
# nothing); --version too (train's log only warns: test_train_errors.sh)
for c in "--version" "ckpt info $tmp/ck/" "data info $data" "plan --mesh 2 --parallel pp"; do
    for to in full closed; do
        if [ $to = full ]; then
            "$TIMEOUT" 60 "$prog" $c >/dev/full 2>"$tmp/err" </dev/null
        else
            "$TIMEOUT" 60 "$prog" $c >&- 2>"$tmp/err" </dev/null
        fi
        rc=$?
        check "'$c' with stdout $to: exit 1 ($rc), one error naming stdout" \
            sh -c "test $rc -eq 1 && test \$(grep -c 'meshgrad: error:' '$tmp/err') -eq 1 &&
                   grep -q 'meshgrad: error: .*could not be written to stdout' '$tmp/err'"
    done
done

run_np 2 bench no-such-bench
check "an unknown benchmark on 2 ranks exits 2" test "$rc" -eq 2
check "... printing 'meshgrad: error:' once" test "$(error_lines)" -eq 1
check "... naming the benchmark" grep -q "meshgrad: error: .*'no-such-bench'" "$tmp/err"

# hostile numbers: counts past 2^31, an --lr of inf, sizes that overflow, and
# shapes too large for memory (bench linear wrote through NULL: a crash)
for a in "linear --m 99999999999999999999" "linear --iters 2147483648" "step --lr 1e400" \
    "step --model gpt --lr inf" "step --steps 0"; do
    run bench $a
    check "bench $a: refused, exit 2 ($rc), one error line" \
        sh -c "test $rc -eq 2 && test \$(grep -c 'meshgrad: error:' '$tmp/err') -eq 1"
done
# a bad bench flag is named, with what it takes (each said "bad arguments" before)
for a in "ops --iters x|--iters 'x' is not a count" "ops --bogus|unknown option or missing value '--bogus'" \
    "step --batch x|--batch 'x' is not a count" "step --layers 5|--layers '5' is not a list of two widths" \
    "step extra|unexpected argument 'extra'" "linear --device tpu|--device 'tpu' is not cpu or cuda" \
    "step --model gpt --heads x|--heads 'x' is not a count" \
    "step --model gpt --microbatches 0|--microbatches '0' is not a count from 1 to" \
    "step --model xx|--model 'xx' is not gpt" "step --model mlp|--model 'mlp' is not gpt" \
    "step --model=gpt --heads x|--heads 'x' is not a count"; do
    run bench ${a%%|*}
    check "bench ${a%%|*}: exit 2 ($rc), usage, one error naming the flag" \
        sh -c "test $rc -eq 2 && grep -q '^usage: meshgrad bench' '$tmp/err' &&
               test \$(grep -c 'meshgrad: error:' '$tmp/err') -eq 1 &&
               grep -qF -- \"${a#*|}\" '$tmp/err'"
done
# ckpt's and data's bad flags and extra arguments are named (each said only
# 'bad option' or the usage; ckpt bench ran with an argument it ignored)
for a in "ckpt bench --params 1K --dir $tmp extra|ckpt bench: unexpected argument 'extra'" \
    "ckpt bench --bogus|ckpt bench: unknown option or missing value '--bogus'" \
    "data csv2h5 --bogus|csv2h5: unknown option or missing value '--bogus'" \
    "ckpt info --bogus $tmp/ck/|ckpt info: unknown option '--bogus'" \
    "ckpt info $tmp/ck/ extra|ckpt info: unexpected argument 'extra' after PATH" \
    "data info $data extra|data info: unexpected argument 'extra' after PATH"; do
    run ${a%%|*}
    check "${a%%|*}: exit 2 ($rc), one error naming it" \
        sh -c "test $rc -eq 2 && test \$(grep -c 'meshgrad: error:' '$tmp/err') -eq 1 &&
               grep -qF -- \"${a#*|}\" '$tmp/err'"
done
# a GPT step that cannot fit this machine is refused up front by its estimate,
# as train's is (it would fill the memory until the kernel killed it; here
# under a 4 GB limit it failed at its first tensor instead)
(ulimit -v 4000000 2>/dev/null; run bench step --model gpt --batch 2147483647 --steps 1
 echo $rc >"$tmp/rc")
rc=$(cat "$tmp/rc")
check "bench step --model gpt --batch 2147483647: refused by its estimate (exit $rc)" \
    sh -c "test $rc -eq 1 && test \$(grep -c 'meshgrad: error:' '$tmp/err') -eq 1 &&
           grep -q \"the model's .* parameters .* and one output a layer .* needs at least [0-9.]* GiB a rank, .* more than its [0-9.]* GiB of memory: use a smaller --batch,\" '$tmp/err'"
# and so is the MLP's, by what it must hold at once, counted low (it failed at
# its first tensor, saying only 'the full tensor is NULL'; --batch 3000000
# makes 24 GB of inputs a rank for the kernel to kill)
(ulimit -v 4000000 2>/dev/null; run bench step --batch 2147483647 --steps 1; echo $rc >"$tmp/rc")
rc=$(cat "$tmp/rc")
check "bench step --batch 2147483647: refused, more than the machine's memory (exit $rc)" \
    sh -c "test $rc -eq 1 && test \$(grep -c 'meshgrad: error:' '$tmp/err') -eq 1 &&
           grep -q 'meshgrad: error: bench step: a step of batch 2147483647 needs at least [0-9.]* GiB a rank, .* more than its [0-9.]* GiB of memory: use a smaller --batch' '$tmp/err'"
# a --parallel that is no plan is a usage error, as in train (exit 1 before)
for a in "step --parallel xx" "step --model gpt --parallel xx"; do
    run bench $a
    check "bench $a: exit 2 ($rc), one error naming the plan" \
        sh -c "test $rc -eq 2 && test \$(grep -c 'meshgrad: error:' '$tmp/err') -eq 1 &&
               grep -q \"parallel plan 'xx': unknown entry 'xx'\" '$tmp/err'"
done
run bench comm --sizes 99999999999G
check "bench comm --sizes 99999999999G: refused (exit $rc)" \
    sh -c "test $rc -eq 2 && grep -q 'a size is at most 1024G' '$tmp/err'"
run bench linear --m 2147483647 --k 2147483647 --n 8 --iters 1
check "bench linear of 2^62 floats: refused, more than the machine's memory (exit $rc)" \
    sh -c "test $rc -eq 1 && grep -q 'meshgrad: error: bench linear: m=2147483647 k=2147483647 n=8 needs at least [0-9.]* GiB a rank, .* more than its [0-9.]* GiB of memory: give smaller --m' '$tmp/err'"
# buffers past the machine's memory are refused up front, as bench step's
# batches are (a 16G size or a 60000 x 60000 input would be allocated, then
# filled until the kernel killed the job; these failed at the allocation)
(ulimit -v 4000000 2>/dev/null; run bench comm --sizes 1024G --iters 1; echo $rc >"$tmp/rc")
rc=$(cat "$tmp/rc")
check "bench comm --sizes 1024G: refused, more than the machine's memory (exit $rc)" \
    sh -c "test $rc -eq 1 && test \$(grep -c 'meshgrad: error:' '$tmp/err') -eq 1 &&
           grep -q 'meshgrad: error: bench comm: the largest of --sizes needs at least 2048.0 GiB a rank, .* more than its [0-9.]* GiB of memory: give smaller --sizes' '$tmp/err'"

run_np 2 train --config "$tmp/no-such.conf"
check "train with a missing config on 2 ranks fails" test "$rc" -ne 0
check "... printing 'meshgrad: error:' once" test "$(error_lines)" -eq 1
check "... naming the file" grep -q "meshgrad: error: .*no-such.conf" "$tmp/err"

# scripts/regress.sh --out (its guard and its paths): a folder holding a
# results.tsv of its own (not the rows regress.sh writes) is not taken for an
# earlier run's output, and its ckpt/ stays; an --out with a space in it
# reaches --save whole (the quick MLP matrix, real ranks: about 13 s a run)
regress=$(cd "$(dirname "$0")/.." && pwd)/scripts/regress.sh
mkdir -p "$tmp/bin" "$tmp/mine/ckpt"
echo 'my own table' >"$tmp/mine/results.tsv"
echo mine >"$tmp/mine/ckpt/keep.h5"
regress() {
    "$TIMEOUT" 300 sh "$regress" --quick --models mlp --build "$top" --out "$1" >"$tmp/out" \
        2>"$tmp/err" </dev/null
    rc=$?
}
regress "$tmp/mine"
check "regress.sh --out over a folder with a results.tsv it did not write: refused (exit $rc)" \
    sh -c "test $rc -eq 2 && grep -q 'not an earlier run' '$tmp/err'"
check "... its ckpt/ and results.tsv left as they were" \
    sh -c "test -f '$tmp/mine/ckpt/keep.h5' && grep -qx 'my own table' '$tmp/mine/results.tsv'"
regress "$tmp/run s"
check "regress.sh --out 'run s' (a space) passes (exit $rc)" test "$rc" -eq 0
check "... its checkpoints saved under the whole path" \
    sh -c "ls '$tmp/run s/ckpt/mlp-2-dp/' | grep -q '^ckpt-.*[.]h5$'"
regress "$tmp/run s"
check "... and a second run takes the first one's output folder (exit $rc)" test "$rc" -eq 0

# scripts/slurm-test.sh --out: the same guard, before it removes daemons/
# (Slurm, Munge and the network tools here are stand-ins that fail; the script
# wants root before anything else)
if [ "$(id -u)" = 0 ]; then
    for t in ip unshare hostname munged slurmctld slurmd sbatch srun scontrol sinfo scancel; do
        printf '%s\n' '#!/bin/sh' 'exit 1' >"$tmp/bin/$t"
        chmod +x "$tmp/bin/$t"
    done
    mkdir -p "$tmp/mine/daemons"
    echo 'my own legs' >"$tmp/mine/legs.tsv"
    echo mine >"$tmp/mine/daemons/keep.log"
    PATH=$tmp/bin:$PATH "$TIMEOUT" 60 \
        sh "$(dirname "$regress")/slurm-test.sh" --build "$top" --out "$tmp/mine" >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
    check "slurm-test.sh --out over a folder with a legs.tsv it did not write: refused (exit $rc)" \
        sh -c "test $rc -eq 2 && grep -q 'not an earlier run' '$tmp/err'"
    check "... its daemons/ and legs.tsv left as they were" \
        sh -c "test -f '$tmp/mine/daemons/keep.log' && grep -qx 'my own legs' '$tmp/mine/legs.tsv'"
else
    echo "skipped: slurm-test.sh's --out guard (the script needs root)"
fi

check_summary
