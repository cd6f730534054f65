#!/bin/sh
# test_train_errors.sh: `meshgrad train` refuses bad input quickly and clearly:
# for each case a non-zero exit within seconds (never a hang), the expected
# message printed exactly once as "meshgrad: error: ...". Cases: missing and
# malformed data files, a mesh that does not match the ranks, plans that do not
# fit the mesh, a batch smaller than the data-parallel degree, an unknown flag,
# model, optimizer and plan, an option of another model (--heads with the
# MLP, --hidden with the GPT), and a bad config line (file:line named). Also
# checks that flags override the config file. And inputs
# that are checked at the start: a directory, a binary file or one 1 GiB line as --config, a
# key given twice (both lines named), --config given twice, a test split of 4x16 samples beside a
# train split of 8x8, a label of 2^31-1 (also in `meshgrad data info`), a
# model too large for this machine's memory (one label of 2^24-1), a
# --metrics file that cannot be written (stdout on /dev/full: the reason is
# given; /dev/full itself is refused as a device) and
# a data set without a test split (trained, with a warning, nothing evaluated);
# a step log that cannot be written (stdout on /dev/full, or closed): one
# warning, exit 0, the checkpoint saved.
. "$(dirname "$0")/check.sh"
program_test_env train-errors
: "${top_srcdir:=.}"

# expect NAME NP PATTERN ARGS...: `meshgrad train ARGS...` is refused (check.sh)
expect() { _n=$1 _np=$2 _p=$3; shift 3; check_refused "$_n" "$_np" "$_p" "$prog" train "$@"; }

ok="--data $data --steps 2 --log-every 0 --hidden 8"

# data files
expect "missing data file" 2 "data file '.*nonexistent\.h5' not found" $ok --data "$tmp/nonexistent.h5"
echo "this is not an HDF5 file" >"$tmp/bad.h5"
expect "malformed data file" 2 "bad\.h5" $ok --data "$tmp/bad.h5"

# mesh and plans
expect "mesh product != ranks" 2 "mesh 2x2 has 4 ranks but mpirun started 2" $ok --mesh 2x2
expect "one plan on a 2-D mesh" 2 "one plan per mesh dim" $ok --mesh 1x2 --parallel dp
expect "two data-parallel dims" 4 "at most one dim may be dp or fsdp" $ok --mesh 2x2 --parallel dp,fsdp
expect "batch smaller than the dp degree" 4 "global batch 3 is smaller than the data-parallel degree 4" \
    $ok --mesh 4 --parallel fsdp --batch 3

# flags, names and config files (more cases, without launching, in test_train.c)
expect "unknown flag" 2 "unknown option '--frobnicate'" $ok --frobnicate 3
expect "unknown model" 2 "unknown model 'resnet'" $ok --model resnet
expect "unknown optimizer" 2 "unknown optimizer 'lion'" $ok --optimizer lion
expect "unknown plan" 2 "unknown entry 'cp'" $ok --parallel cp
# an option of another model was dropped silently: now one line naming it and the fix
expect "--heads with the MLP" 2 \
    "heads applies to --model gpt or llama, but the model is mlp \(sized by hidden and depth\): drop heads, or give --model gpt" \
    $ok --heads 4
expect "--hidden with the GPT" 2 "hidden applies to --model mlp, permute-mlp or llama, but the model is gpt" \
    --model gpt --data "$top/data/mobydick.h5" --steps 2 --log-every 0 --hidden 64
# numbers past 2^31 reach int code (--threads 2^31 was taken as the default,
# --depth 2^31 named as -2147483648); a leading space is not a number
expect "--threads 2^31" 2 "--threads: threads must be <= 2147483647, got 2147483648" $ok --threads 2147483648
expect "--depth 2^31" 2 "--depth: depth must be <= 2147483647, got 2147483648" $ok --depth 2147483648
expect "--hidden 1e20" 2 "--hidden: hidden must be <= 2147483647, got 99999999999999999999" \
    $ok --hidden 99999999999999999999
expect "--steps ' 5'" 2 "--steps: steps wants an integer, got ' 5'" $ok --steps " 5"
printf 'steps = 10\n# a comment\nbatch 64\n' >"$tmp/noeq.conf"
expect "config line without '='" 2 "noeq\.conf:3: expected 'key = value'" --config "$tmp/noeq.conf"

# config files that are not text files of 'key = value' lines
expect "a directory as --config" 1 "config file '.*' is a directory" --config "$tmp"
printf '\177ELF\002\001\001\000\000steps = 5\n' >"$tmp/binary.conf"
expect "a binary file as --config" 2 "binary\.conf:1: the line holds a NUL byte" --config "$tmp/binary.conf"
# one 1 GiB line (sparse, NUL bytes): refused at its first 8192 characters;
# it was read whole into memory (a larger one failed the read, and the run
# went on with no config)
truncate -s 1G "$tmp/huge.conf"
expect "a 1 GiB line as --config" 1 "huge\.conf:1: line longer than 8192 characters" --config "$tmp/huge.conf"
rm -f "$tmp/huge.conf"
printf 'steps = 10\nbatch = 16\nsteps = 20\n' >"$tmp/twice.conf"
expect "a key given twice" 2 "twice\.conf: steps is set twice, on lines 1 and 3" --config "$tmp/twice.conf"
printf 'steps = 2\n' >"$tmp/one.conf"
expect "--config given twice (the second silently won)" 2 \
    "--config given twice \(.*one\.conf, then .*twice\.conf\): give one file" \
    --config "$tmp/one.conf" --config "$tmp/twice.conf"

# data sets checked at the start
"$tool" make-data "$tmp/shapes.h5" 200 8x8 50 4x16
expect "a test split of 4x16 beside a train split of 8x8" 2 \
    "the test split holds samples of shape \(4, 16\) but the train split \(8, 8\)" \
    $ok --data "$tmp/shapes.h5" --steps 100000
"$tool" make-data "$tmp/label.h5" 200 8x8 50 8x8 2147483647
expect "a label of 2^31-1" 2 "/train/labels row 0 holds 2147483647; labels must be class indices 0\.\.16777215" \
    $ok --data "$tmp/label.h5"
check_refused "data info on a label of 2^31-1" 2 "labels must be class indices 0\.\.16777215" \
    "$prog" data info "$tmp/label.h5"
# the largest label taken asks for 16777216 classes: at --hidden 4096 the
# parameters, gradients and optimizer state would need 1 TiB (the kernel
# killed the job while they filled); refused before anything is made
"$tool" make-data "$tmp/classes.h5" 200 8x8 50 8x8 16777215
expect "a model larger than this machine's memory (one label of 2^24-1)" 2 \
    "the model's 6.87e\+10 parameters with their gradients and optimizer state, and one output a layer for the backward \(.* floats\), split over all 2 ranks, needs at least .* GiB a rank, .* GiB for this machine's [0-9]+ ranks?, more than its .* GiB of memory: make the model smaller \(--hidden, --depth\) or the --batch, or check the labels of .*classes.h5 \(16777216 classes\)" \
    $ok --data "$tmp/classes.h5" --hidden 4096
"$tool" make-data "$tmp/notest.h5" 200 8x8 0 -
"$TIMEOUT" -k 5 60 "$MPIRUN" -np 2 "$prog" train $ok --data "$tmp/notest.h5" --batch 16 \
    >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q "warning: .*notest.h5 has no test split (/test): the run evaluates nothing" "$tmp/out" &&
    ! grep -q "^eval" "$tmp/out"; then
    pass "a data set without a test split trains, with a warning, evaluating nothing"
else
    fail "a data set without a test split (exit $rc)"
    sed 's/^/  | /' "$tmp/out"
fi

# a metrics file that cannot be written: stdout on a full disk (a device
# node such as /dev/full itself is refused: only a file, a terminal, a pipe
# or stdout takes the metrics)
if [ -c /dev/full ]; then
    expect "--metrics /dev/full" 2 "will not write /dev/full: it is a device" $ok --metrics /dev/full
    "$TIMEOUT" -k 5 60 "$prog" train $ok --metrics /dev/stdout >/dev/full 2>"$tmp/err"
    rc=$?
    if [ "$rc" -ne 0 ] && [ "$(grep -c 'meshgrad: error:' "$tmp/err")" -eq 1 ] &&
        grep -q "meshgrad: error: cannot write metrics file '/dev/stdout': No space left on device" "$tmp/err"; then
        pass "--metrics /dev/stdout on a full disk: exit $rc, the reason given"
    else
        fail "--metrics /dev/stdout on a full disk (exit $rc)"
        sed 's/^/  | /' "$tmp/err"
    fi
fi
# a step log that cannot be written (stdout on a full disk, or closed): one
# warning, and the run goes on to its checkpoint (it was lost silently before)
if [ -c /dev/full ]; then
    "$TIMEOUT" -k 5 60 "$prog" train $ok --log-every 1 --save "$tmp/full-out.h5" >/dev/full 2>"$tmp/err"
    rc=$?
    if [ "$rc" -eq 0 ] && [ -s "$tmp/full-out.h5" ] && [ "$(grep -c '^warning: the log cannot be written to stdout (No space left on device)' "$tmp/err")" -eq 1 ]; then
        pass "stdout on a full disk: one warning, the run saves its checkpoint"
    else
        fail "stdout on a full disk (exit $rc)"
        sed 's/^/  | /' "$tmp/err"
    fi
fi
"$TIMEOUT" -k 5 60 "$prog" train $ok --log-every 1 >&- 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 0 ] && grep -q '^warning: the log cannot be written to stdout (Bad file descriptor)' "$tmp/err"; then
    pass "a closed stdout: a warning, the run finishes"
else
    fail "a closed stdout (exit $rc)"
    sed 's/^/  | /' "$tmp/err"
fi
mkdir "$tmp/ck"
expect "--metrics naming a directory" 2 "will not replace .*ck: it is a directory" \
    $ok --metrics "$tmp/ck"

# flags override the file (and the file is read)
printf '# a job\nsteps = 7 # trailing comment\nbatch=16\nlog-every = 0\nweight_decay = 0\n' >"$tmp/good.conf"
"$TIMEOUT" -k 5 60 "$MPIRUN" -np 2 "$prog" train --config "$tmp/good.conf" --data "$data" \
    --hidden 8 --steps 3 --metrics "$tmp/m.jsonl" >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q "batch 16, 3 steps" "$tmp/out" && [ "$(grep -c '"loss"' "$tmp/m.jsonl")" -eq 3 ]; then
    pass "flags override the config file"
else
    fail "flags override the config file (exit $rc)"
    sed 's/^/  | /' "$tmp/out"
fi

check_summary
