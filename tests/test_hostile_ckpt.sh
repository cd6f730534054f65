#!/bin/sh
# test_hostile_ckpt.sh: hostile checkpoints stay bounded,
# with files the test makes itself from a real checkpoint (tests/train_ckpt_tool):
# - `meshgrad ckpt info` refuses, each within seconds of what a good file takes
#   (it ran past 60 s before), one message naming the problem: a file declaring
#   an unwritten 2^62-element dataset, 3000 nested groups, a dataset rewritten
#   without its Fletcher32 checksum, a dataset whose chunks were never written;
# - resume refuses the last two, and attributes that cannot be: data.cursor
#   past the batches of an epoch (1e9), data.epoch = INT64_MAX, and a step of
#   "99999999999999999999" (it saturated silently before);
# - a dataset that is an external link to another (good) checkpoint: resume
#   read that file, which the user did not name, and ckpt info skipped it.
# - a dataset beside the parameters (h5copy): resume loaded the others and
#   went on; so did a GPT checkpoint whose attributes count fewer layers than
#   it holds (model.layers 1 on 2 layers): both refused, by the rule of
#   mg_checkpoint_load that mg_ckpt_load and generate follow too.
. "$(dirname "$0")/check.sh"
program_test_env hostile

base="--data $data --hidden 16 --batch 32 --log-every 0 --threads 1"
refuse() { _n=$1 _np=$2 _p=$3; shift 3; check_refused "$_n" "$_np" "$_p" "$prog" train $base "$@"; }
now() { date +%s.%N; }

"$TIMEOUT" -k 5 120 "$MPIRUN" -np 1 "$prog" train $base --steps 5 --save "$tmp/good.h5" \
    >"$tmp/out" 2>&1
check "a real checkpoint to start from" test $? -eq 0
start=$(now)
"$prog" ckpt info "$tmp/good.h5" >"$tmp/out" 2>&1
good_rc=$?
good=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
check "ckpt info on the good file: exit 0 (${good}s, start-up included)" test "$good_rc" -eq 0

# hostile NAME PATTERN EDIT...: a copy of good.h5 edited by `train_ckpt_tool EDIT FILE ARGS`
hostile() {
    _name=$1 _pattern=$2 _edit=$3
    shift 3
    cp "$tmp/good.h5" "$tmp/$_name.h5"
    "$tool" "$_edit" "$tmp/$_name.h5" "$@" || fail "$_name: the tool could not make the file"
    _start=$(now)
    "$TIMEOUT" -k 5 120 "$prog" ckpt info "$tmp/$_name.h5" >"$tmp/out" 2>&1
    _rc=$?
    _secs=$(awk -v a="$_start" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
    _n=$(grep -c "meshgrad: error:" "$tmp/out")
    if [ "$_rc" -eq 1 ] && [ "$_n" -eq 1 ] && grep "meshgrad: error:" "$tmp/out" | grep -Eq -- "$_pattern" &&
        awk -v s="$_secs" -v g="$good" 'BEGIN { exit !(s <= g + 10) }'; then
        pass "ckpt info refuses $_name in ${_secs}s (a good file: ${good}s): $(grep 'meshgrad: error:' "$tmp/out")"
    else
        fail "ckpt info on $_name: exit $_rc after ${_secs}s, $_n error lines"
        sed 's/^/  | /' "$tmp/out" | tail -n 20
    fi
}

hostile huge "dataset /params/huge declares 4.61e\+18 elements, more than a file of [0-9]+ bytes can hold" huge
hostile nested "not a meshgrad checkpoint: group /params/deep/deep/deep is nested deeper" nest 3000
hostile stripped "dataset /params/fc1.weight has no Fletcher32 checksum" strip params/fc1.weight
hostile unwritten "dataset /params/fc1.weight has 0 of its 1 chunks written" unwritten params/fc1.weight
# a dataset that is an external link to a good file (resume read that file before)
hostile elink "not a meshgrad checkpoint: /params/fc1.weight is an external link" elink params/fc1.weight "$tmp/good.h5"
refuse "resume: a dataset that is an external link" 2 "elink.h5: /params/fc1.weight is an external link \\(to params/fc1.weight in file $tmp/good.h5\\)" \
    --steps 10 --resume "$tmp/elink.h5"
refuse "resume: a dataset without its checksum" 1 "stripped.h5: dataset /params/fc1.weight has no Fletcher32 checksum" \
    --steps 10 --resume "$tmp/stripped.h5"
refuse "resume: unwritten chunks" 2 "unwritten.h5: dataset /params/fc1.weight has 0 of its 1 chunks written" \
    --steps 10 --resume "$tmp/unwritten.h5"

# a dataset beside the parameters (another model's, or a layer more): resume
# loaded the rest and went on before (mg_ckpt_load refused it); now the rule
# of checkpoint_load.c, which every loader uses
if command -v h5copy >/dev/null 2>&1; then
    cp "$tmp/good.h5" "$tmp/extra.h5"
    h5copy -i "$tmp/good.h5" -o "$tmp/extra.h5" -s /params/fc1.bias -d /params/fc3.bias 2>/dev/null ||
        fail "h5copy could not add a dataset"
    refuse "resume: a checkpoint with an extra dataset" 2 \
        "cannot load .*extra.h5: it holds /params/fc3.bias, which is not among the 12 tensors given" \
        --steps 10 --resume "$tmp/extra.h5"
fi

# fewer layers in the attributes than in the file: resume built the model the
# attributes say and loaded that much of it; refused with --layers 1 (the
# weights of layer 1 are not the model's) and with --layers 2 (the attributes)
gpt="--model gpt --data $top/data/mobydick.h5 --heads 2 --embd 16 --ctx 8 --batch 4 --log-every 0 \
--eval-every never --threads 1"
"$TIMEOUT" -k 5 120 "$prog" train $gpt --layers 2 --steps 2 --save "$tmp/gpt2.h5" >"$tmp/out" 2>&1
check "a GPT checkpoint of 2 layers" test $? -eq 0
cp "$tmp/gpt2.h5" "$tmp/fewer.h5"
"$tool" set-attr "$tmp/fewer.h5" model.layers 1 || fail "fewer: set-attr failed"
check_refused "resume --layers 1: model.layers 1 on a GPT of 2 layers" 1 \
    "cannot load .*fewer.h5: it holds /[a-z]+/h\.1\..*, which is not among the [0-9]+ tensors given" \
    "$prog" train $gpt --layers 1 --steps 4 --resume "$tmp/fewer.h5"
check_refused "resume --layers 2: the same file" 1 "model.layers" \
    "$prog" train $gpt --layers 2 --steps 4 --resume "$tmp/fewer.h5"
# more: model.layers 1000000 on a file of 2 blocks: generate built a model
# of a million blocks (past 3 GB, unbounded); refused before it builds any,
# and a resume asking for such a model by its floor
cp "$tmp/gpt2.h5" "$tmp/more.h5"
"$tool" set-attr "$tmp/more.h5" model.layers 1000000 || fail "more: set-attr failed"
check_refused "generate: model.layers 1000000 on a GPT of 2 blocks" 1 \
    "more.h5: attribute model.layers is 1000000 but the file holds the weights of 2 blocks" \
    "$prog" generate --resume "$tmp/more.h5" --tokens 4
check_refused "resume --layers 1000000: the same file" 1 \
    "parameters with their gradients and optimizer state.* more than its .* GiB of memory" \
    "$prog" train $gpt --layers 1000000 --steps 4 --resume "$tmp/more.h5"

# attributes that cannot be
attr() {
    cp "$tmp/good.h5" "$tmp/$1.h5"
    "$tool" set-attr "$tmp/$1.h5" "$2" "$3" || fail "$1: set-attr failed"
}
attr cursor data.cursor 1000000000
refuse "resume: data.cursor = 1e9" 2 "cursor.h5: data.cursor 1000000000 is past the 46 batches of an epoch" \
    --steps 10 --resume "$tmp/cursor.h5"
attr epoch data.epoch 9223372036854775807
refuse "resume: data.epoch = INT64_MAX" 1 "epoch.h5: data.epoch 9223372036854775807 .* cannot follow 5 steps" \
    --steps 10 --resume "$tmp/epoch.h5"
attr step step 99999999999999999999
refuse "resume: step = 99999999999999999999" 2 "step.h5: attribute \"step\" is \"99999999999999999999\", not a count" \
    --steps 10 --resume "$tmp/step.h5"

check_summary
