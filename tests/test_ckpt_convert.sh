#!/bin/sh
# test_ckpt_convert.sh: `meshgrad ckpt export` and `ckpt import`:
# - a GPT trained here: safetensors (and config.json) exported, imported on 1,
#   2 and 4 ranks: the parameters come back bitwise; exported again, the
#   same bytes; the import resumes (train --resume, a fresh optimizer),
#   evaluates and generates as the original;
# - a llama checkpoint of `train --model llama`'s names (tests/llama_fixture,
#   tied and untied, kv_heads 1, 2 and = heads): safetensors and llama2c
#   round trips bitwise; a GPT, or a llama of another rope_theta, is refused
#   for llama2c;
# - outputs: an existing OUT or config.json is refused without --overwrite and
#   left as it was; with it only a file of the command's kind is replaced (not
#   a foreign file, a link, the input, a FIFO or a device node);
# - lying files (tests/test_convert_files --write: bad header lengths, JSON,
#   dtypes, shapes, offsets, overlaps; llama2c headers of sizes that cannot be
#   or do not match the length), truncated exports, configs whose sizes
#   disagree with the tensors, checkpoints whose attributes describe more
#   layers or wider ones than their weights: one `meshgrad: error:` line, a
#   non-zero exit, no output; the readers run under valgrind (when installed).
# Prints a Check-style summary line.
. "$(dirname "$0")/check.sh"
program_test_env convert
mobydick=$top/data/mobydick.h5
fixture=$top/tests/llama_fixture
check_failed() { show_out_err; }

# mg NP ARGS...: meshgrad on NP ranks, its output in $tmp/out and $tmp/err
mg() {
    _np=$1
    shift
    "$TIMEOUT" -k 5 120 "$MPIRUN" -np "$_np" "$prog" "$@" >"$tmp/out" 2>"$tmp/err"
}
same_params() { "$tool" compare "$1" "$2" >"$tmp/out" 2>"$tmp/err"; }
# refused_alone NAME PATTERN ARGS...: check_refused of meshgrad run as one
# process without mpirun, as a converter is run (and faster)
refused_alone() {
    _ra_name=$1 _ra_pattern=$2
    shift 2
    "$TIMEOUT" -k 5 30 "$prog" "$@" >"$tmp/refused.out" 2>&1
    _ra_rc=$?
    _ra_n=$(grep -c "meshgrad: error:" "$tmp/refused.out")
    if [ "$_ra_rc" -eq 0 ] || [ "$_ra_rc" -ge 124 ] || [ "$_ra_n" -ne 1 ] ||
        ! grep "meshgrad: error:" "$tmp/refused.out" | grep -Eq -- "$_ra_pattern"; then
        fail "$_ra_name: exit $_ra_rc, $_ra_n error lines, want one matching /$_ra_pattern/"
        show_log "$tmp/refused.out"
    else
        pass "$_ra_name (exit $_ra_rc): $(grep 'meshgrad: error:' "$tmp/refused.out")"
    fi
}

gpt="--model gpt --data $mobydick --layers 2 --heads 2 --embd 32 --ctx 32 --batch 8 --threads 1 --log-every 0"
# shellcheck disable=SC2086
mg 1 train $gpt --steps 10 --seed 3 --save "$tmp/gpt.h5"
check "a GPT trains 10 steps and saves" test -f "$tmp/gpt.h5"

# ---- the GPT: safetensors -------------------------------------------------------------
mkdir "$tmp/hf" "$tmp/hf2"
mg 1 ckpt export --format safetensors "$tmp/gpt.h5" "$tmp/hf/model.safetensors"
check "export --format safetensors: exit 0, the file and config.json" \
    test $? -eq 0 -a -s "$tmp/hf/model.safetensors" -a -s "$tmp/hf/config.json"
check "config.json is GPT2LMHeadModel's" grep -q '"GPT2LMHeadModel"' "$tmp/hf/config.json"
for np in 1 2 4; do
    mg "$np" ckpt import --format safetensors "$tmp/hf/model.safetensors" "$tmp/back$np.h5"
    check "import on $np rank(s): exit 0" test $? -eq 0
    check "... the parameters come back bitwise" same_params "$tmp/back$np.h5" "$tmp/gpt.h5"
done
mg 2 ckpt export --format safetensors "$tmp/back1.h5" "$tmp/hf2/model.safetensors"
check "the import exported again (2 ranks): the same bytes" \
    cmp -s "$tmp/hf/model.safetensors" "$tmp/hf2/model.safetensors"
check "... and the same config.json" cmp -s "$tmp/hf/config.json" "$tmp/hf2/config.json"

mg 1 eval --resume "$tmp/gpt.h5" --data "$mobydick" --eval-tokens 4096
ref=$(cut -d' ' -f1-2 "$tmp/out")
mg 1 eval --resume "$tmp/back2.h5" --data "$mobydick" --eval-tokens 4096 --batch 8
check "eval of the import: the original's loss ($ref)" test "$(cut -d' ' -f1-2 "$tmp/out")" = "$ref"
mg 1 generate --resume "$tmp/gpt.h5" --prompt CALL --tokens 40 --temperature 0
cp "$tmp/out" "$tmp/gen.txt"
mg 2 generate --resume "$tmp/back1.h5" --prompt CALL --tokens 40 --temperature 0 --parallel tp
check "generate from the import (2 ranks tp): the original's text" cmp -s "$tmp/out" "$tmp/gen.txt"
# shellcheck disable=SC2086
mg 2 train $gpt --steps 3 --resume "$tmp/back1.h5" --parallel dp --save "$tmp/tuned.h5"
check "train --resume the import (2 ranks dp, 3 steps): exit 0" test $? -eq 0 -a -f "$tmp/tuned.h5"
check "... from step 0 with a fresh optimizer" grep -q "resumed from .*back1.h5: step 0 of 3" "$tmp/out"

# ---- a llama (the checkpoint `train --model llama` writes) ------------------------------
# layers heads kv_heads embd ctx hidden vocab tied
for cfg in "2 4 2 32 16 96 64 1" "1 4 1 32 8 64 64 0" "2 2 2 16 8 48 32 0"; do
    set -- $cfg
    tag="llama L$1 H$2 KV$3 tied=$8"
    "$fixture" "$tmp/llama.h5" "$@" >"$tmp/out" 2>"$tmp/err"
    check "$tag: the fixture is written" test $? -eq 0
    rm -rf "$tmp/lh" "$tmp/llama.bin" && mkdir "$tmp/lh"
    mg 1 ckpt export --format safetensors "$tmp/llama.h5" "$tmp/lh/model.safetensors"
    check "$tag: export safetensors" grep -q '"LlamaForCausalLM"' "$tmp/lh/config.json"
    mg 2 ckpt import --format safetensors "$tmp/lh/model.safetensors" "$tmp/lback.h5"
    check "$tag: import safetensors (2 ranks), bitwise" same_params "$tmp/lback.h5" "$tmp/llama.h5"
    check "$tag: lm_head.weight only when untied" \
        test "$(grep -c lm_head "$tmp/lh/model.safetensors")" -eq $((1 - $8))
    mg 1 ckpt export --format llama2c "$tmp/llama.h5" "$tmp/llama.bin"
    check "$tag: export llama2c" test $? -eq 0 -a -s "$tmp/llama.bin"
    mg 1 ckpt import --format llama2c "$tmp/llama.bin" "$tmp/lback2.h5"
    check "$tag: import llama2c, bitwise" same_params "$tmp/lback2.h5" "$tmp/llama.h5"
    mg 1 ckpt export --format llama2c "$tmp/lback.h5" "$tmp/llama2.bin"
    check "$tag: the safetensors import exported to llama2c: the same bytes" \
        cmp -s "$tmp/llama.bin" "$tmp/llama2.bin"
    rm -f "$tmp/llama2.bin" "$tmp/lback.h5" "$tmp/lback2.h5"
done
check_refused "export --format llama2c of a GPT" 1 "holds a gpt; llama2.c's format holds a llama only" \
    "$prog" ckpt export --format llama2c "$tmp/gpt.h5" "$tmp/gpt.bin"
check "... wrote nothing" test ! -e "$tmp/gpt.bin"
"$fixture" "$tmp/theta.h5" 1 2 2 16 8 32 32 1 500000 1e-05 >/dev/null 2>&1
check_refused "llama2c of a llama with rope_theta 500000" 1 "rope_theta 500000.*run.c uses 10000" \
    "$prog" ckpt export --format llama2c "$tmp/theta.h5" "$tmp/theta.bin"

# ---- outputs ---------------------------------------------------------------------------------
out=$tmp/hf/model.safetensors
before=$(cksum <"$out")
check_refused "export over an existing OUT without --overwrite" 1 "will not replace .*give --overwrite" \
    "$prog" ckpt export --format safetensors "$tmp/gpt.h5" "$out"
check "... OUT unchanged" test "$(cksum <"$out")" = "$before"
mg 1 ckpt export --format safetensors --overwrite "$tmp/back1.h5" "$out"
check "with --overwrite it replaces a file it wrote" test $? -eq 0
echo "my notes" >"$tmp/notes.safetensors"
check_refused "--overwrite of a foreign file" 1 "will not replace .*notes.safetensors" \
    "$prog" ckpt export --format safetensors --overwrite "$tmp/gpt.h5" "$tmp/notes.safetensors"
check "... it is left as it was" test "$(cat "$tmp/notes.safetensors")" = "my notes"
ln -s "$out" "$tmp/link.safetensors"
check_refused "--overwrite of a symbolic link" 1 "link" \
    "$prog" ckpt export --format safetensors --overwrite "$tmp/gpt.h5" "$tmp/link.safetensors"
mkdir "$tmp/cfg"
echo '{"mine": 1}' >"$tmp/cfg/config.json"
check_refused "a foreign config.json beside OUT, even with --overwrite" 1 "config.json" \
    "$prog" ckpt export --format safetensors --overwrite "$tmp/gpt.h5" "$tmp/cfg/model.safetensors"
check "... nothing written" test ! -e "$tmp/cfg/model.safetensors" -a "$(cat "$tmp/cfg/config.json")" = '{"mine": 1}'
check_refused "import over the input" 1 "is the input" \
    "$prog" ckpt import --format safetensors --overwrite "$out" "$out"
check_refused "import over a foreign file" 1 "will not replace .*notes.safetensors" \
    "$prog" ckpt import --format safetensors --overwrite "$out" "$tmp/notes.safetensors"
check_refused "import over a checkpoint without --overwrite" 1 "give --overwrite" \
    "$prog" ckpt import --format safetensors "$out" "$tmp/back1.h5"
mg 1 ckpt import --format safetensors --overwrite "$out" "$tmp/back1.h5"
check "... with --overwrite: replaced" test $? -eq 0
check_refused "export into a missing directory" 1 "not a directory" \
    "$prog" ckpt export --format safetensors "$tmp/gpt.h5" "$tmp/none/model.safetensors"
check_refused "no --format" 1 "no --format" "$prog" ckpt import "$out" "$tmp/x.h5"
check_refused "an unknown format" 1 "--format onnx" "$prog" ckpt import --format onnx "$out" "$tmp/x.h5"
check_refused "one path" 1 "give IN and OUT" "$prog" ckpt export --format safetensors "$tmp/gpt.h5"
check_refused "export of a file that is no checkpoint" 1 "notes.safetensors" \
    "$prog" ckpt export --format safetensors "$tmp/notes.safetensors" "$tmp/y.safetensors"

# ---- files that lie ----------------------------------------------------------------------
cp "$tmp/gpt.h5" "$tmp/deep.h5"
"$tool" set-attr "$tmp/deep.h5" model.layers 1000000 >/dev/null 2>&1
check_refused "a checkpoint whose model.layers says 1000000 (2 blocks of weights)" 1 \
    "describe a model .* of [0-9]+ MB of parameters but the file has" \
    "$prog" ckpt export --format safetensors "$tmp/deep.h5" "$tmp/deep.safetensors"
check_refused "... eval of it" 1 "describe a model .* but the file has" \
    "$prog" eval --resume "$tmp/deep.h5" --text "$tmp/gen.txt" --logits "$tmp/deep-logits.h5"
cp "$tmp/gpt.h5" "$tmp/shallow.h5"
"$tool" set-attr "$tmp/shallow.h5" model.layers 1 >/dev/null 2>&1
check_refused "a checkpoint whose model.layers says 1 (2 blocks of weights)" 1 \
    "holds 28 parameters, but its attributes' model .* has 16" \
    "$prog" ckpt export --format safetensors "$tmp/shallow.h5" "$tmp/shallow.safetensors"
cp "$tmp/gpt.h5" "$tmp/wide.h5"
"$tool" set-attr "$tmp/wide.h5" model.embd 8192 >/dev/null 2>&1
check_refused "a checkpoint whose model.embd says 8192 (weights of 32)" 1 "describe a model .* of [0-9]+ MB" \
    "$prog" ckpt export --format safetensors "$tmp/wide.h5" "$tmp/wide.safetensors"

mkdir "$tmp/lies"
"$top/tests/test_convert_files" --write "$tmp/lies"
cfg=$tmp/hf/config.json
for f in "$tmp"/lies/*.safetensors; do
    refused_alone "import of $(basename "$f")" "safetensors file .*$(basename "$f")" \
        ckpt import --format safetensors --config "$cfg" "$f" "$tmp/lie.h5"
done
for f in "$tmp"/lies/*.bin; do
    refused_alone "import of $(basename "$f")" "llama2.c file .*$(basename "$f")" \
        ckpt import --format llama2c "$f" "$tmp/lie.h5"
done
size=$(wc -c <"$out")
head -c $((size - 4)) "$out" >"$tmp/cut.safetensors"
check_refused "a truncated safetensors file" 1 "past its end" \
    "$prog" ckpt import --format safetensors --config "$cfg" "$tmp/cut.safetensors" "$tmp/lie.h5"
head -c 100 "$out" >"$tmp/cut2.safetensors"
check_refused "a safetensors file cut inside its header" 1 "past the end of the file" \
    "$prog" ckpt import --format safetensors --config "$cfg" "$tmp/cut2.safetensors" "$tmp/lie.h5"
head -c $(($(wc -c <"$tmp/llama.bin") - 4)) "$tmp/llama.bin" >"$tmp/cut.bin"
check_refused "a truncated llama2c file" 1 "asks for" \
    "$prog" ckpt import --format llama2c "$tmp/cut.bin" "$tmp/lie.h5"
sed 's/"n_embd": 32/"n_embd": 64/' "$cfg" >"$tmp/wide.json"
check_refused "shapes that disagree with config.json" 1 "has shape \(256, 32\) but .*gives \(256, 64\)" \
    "$prog" ckpt import --format safetensors --config "$tmp/wide.json" "$out" "$tmp/lie.h5"
sed 's/"n_layer": 2/"n_layer": 3/' "$cfg" >"$tmp/deep.json"
check_refused "a tensor config.json asks for is missing" 1 "has no tensor transformer.h.2" \
    "$prog" ckpt import --format safetensors --config "$tmp/deep.json" "$out" "$tmp/lie.h5"
sed 's/"n_layer": 2/"n_layer": 1/' "$cfg" >"$tmp/shallow.json"
check_refused "a tensor config.json does not have" 1 "holds tensor transformer.h.1" \
    "$prog" ckpt import --format safetensors --config "$tmp/shallow.json" "$out" "$tmp/lie.h5"
echo '{"model_type": "gpt2",' >"$tmp/broken.json"
check_refused "a config.json that does not parse" 1 "is not JSON" \
    "$prog" ckpt import --format safetensors --config "$tmp/broken.json" "$out" "$tmp/lie.h5"
mkdir "$tmp/alone" && cp "$out" "$tmp/alone/"
check_refused "no config.json beside the file" 1 "needs the config.json" \
    "$prog" ckpt import --format safetensors "$tmp/alone/model.safetensors" "$tmp/lie.h5"
check "no refused import wrote anything" test ! -e "$tmp/lie.h5"
# OUT passes the rule of every output (io/files.h): a FIFO or a device node is refused at
# once, never opened
mkfifo "$tmp/out.fifo"
check_refused "export OUT naming a FIFO: refused at once, not waited on" 1 \
    "will not replace .*out.fifo: it is a FIFO" \
    "$prog" ckpt export --format safetensors "$tmp/gpt.h5" "$tmp/out.fifo"
if mknod "$tmp/null" c 1 3 2>/dev/null; then
    check_refused "export OUT naming a device node (mknod c 1 3)" 1 "will not replace .*null: it is a device" \
        "$prog" ckpt export --format safetensors --overwrite "$tmp/gpt.h5" "$tmp/null"
fi

if command -v valgrind >/dev/null 2>&1 && [ -x "$top/libtool" ]; then
    CK_FORK=no "$TIMEOUT" 600 "$top/libtool" --mode=execute valgrind -q --error-exitcode=3 \
        --leak-check=full --errors-for-leak-kinds=definite \
        --suppressions="${top_srcdir:-$(dirname "$0")/..}/tests/valgrind.supp" \
        "$top/tests/test_convert_files" >"$tmp/out" 2>"$tmp/err"
    check "the readers on every lying file under valgrind: no memory error, no leak" test $? -eq 0
else
    echo "note: valgrind not found: the readers were not run under it"
fi
check_summary
