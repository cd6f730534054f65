#!/bin/sh
# test_convert_torch.sh: what ckpt export and import write and read, against
# PyTorch and llama2.c (tests/convert_torch_ref.py; skipped, exit 77, when
# /usr/bin/python3 cannot import torch and h5py):
# - a GPT trained here, exported to safetensors: GPT-2 written in PyTorch
#   (float64) on those weights gives `meshgrad eval --logits`'s logits within
#   1e-5, for the checkpoint and for its import;
# - the same file rounded to BF16 imports to exactly the BF16 values;
# - with llama2.c's folder (MG_LLAMA2C, else shared/peers/llama2c beside the
#   checkout or one level up; the llama parts are skipped, saying so, when it
#   is absent): a llama checkpoint of `train --model llama`'s names
#   (tests/llama_fixture; kv_heads 2 and 1, tied and untied) exported to
#   safetensors runs as LlamaForCausalLM (rotate-half q, k) with model.py's
#   logits; exported to llama2c, run.c's own forward (tests/llama2c_harness)
#   gives model.py's logits within 1e-5; files written by export.py's
#   legacy_export (tied and untied) import to model.py's parameters bitwise.
# Prints a Check-style summary line.
. "$(dirname "$0")/check.sh"
program_test_env convert-torch
: "${top_srcdir:=$(dirname "$0")/..}"
src=$(cd "$top_srcdir" && pwd)
python=${MG_TORCH_PYTHON:-/usr/bin/python3}
ref="$src/tests/convert_torch_ref.py"
peers=${MG_LLAMA2C:-}
for d in "$src/../shared/peers/llama2c" "$src/../../shared/peers/llama2c"; do
    [ -z "$peers" ] && [ -f "$d/run.c" ] && peers=$(cd "$d" && pwd)
done
if ! "$python" -c 'import torch, h5py, numpy' >/dev/null 2>&1; then
    echo "skipping: $python cannot import torch, h5py and numpy (apt-get install python3-torch python3-h5py)"
    exit 77
fi
check_failed() { show_out_err; }
mobydick=$top/data/mobydick.h5
export PEERS="$peers"

mg() {
    _np=$1
    shift
    "$TIMEOUT" -k 5 120 "$MPIRUN" -np "$_np" "$prog" "$@" >"$tmp/out" 2>"$tmp/err"
}
py() { "$TIMEOUT" 300 "$python" "$ref" "$@" >"$tmp/out" 2>"$tmp/err"; }
# pycheck DESCRIPTION ARGS...: one check of a subcommand, its line shown
pycheck() {
    _pc=$1
    shift
    if py "$@"; then pass "$_pc: $(tail -n 1 "$tmp/out")"; else fail "$_pc"; show_out_err; fi
}

# ---- the GPT ------------------------------------------------------------------------------
"$TIMEOUT" -k 5 120 "$MPIRUN" -np 1 "$prog" train --model gpt --data "$mobydick" --layers 2 \
    --heads 4 --embd 32 --ctx 32 --batch 8 --steps 30 --seed 9 --threads 1 --log-every 0 \
    --save "$tmp/gpt.h5" >"$tmp/out" 2>"$tmp/err"
check "a GPT (2 layers, 4 heads) trains 30 steps and saves" test -f "$tmp/gpt.h5"
mkdir "$tmp/hf" "$tmp/bf16" "$tmp/hf2"
mg 1 ckpt export --format safetensors "$tmp/gpt.h5" "$tmp/hf/model.safetensors"
check "export --format safetensors" test $? -eq 0
printf 'Call me Ishmael. Some years ago' >"$tmp/text.txt"
mg 2 eval --resume "$tmp/gpt.h5" --text "$tmp/text.txt" --logits "$tmp/logits.h5" --parallel tp
check "meshgrad eval --logits (2 ranks tp)" test $? -eq 0
pycheck "GPT-2 in PyTorch on the export, against meshgrad's logits" gpt2 "$tmp/hf" "$tmp/logits.h5" "$tmp/text.txt"
mg 1 ckpt import --format safetensors "$tmp/hf/model.safetensors" "$tmp/back.h5"
mg 1 eval --resume "$tmp/back.h5" --text "$tmp/text.txt" --logits "$tmp/logits2.h5"
pycheck "... and against the import's logits (1 rank)" gpt2 "$tmp/hf" "$tmp/logits2.h5" "$tmp/text.txt"

pycheck "the export rounded to BF16 by torch" to-bf16 "$tmp/hf" "$tmp/bf16"
mg 2 ckpt import --format safetensors "$tmp/bf16/model.safetensors" "$tmp/bf16.h5"
check "import of BF16 tensors (2 ranks)" test $? -eq 0
mg 1 ckpt export --format safetensors "$tmp/bf16.h5" "$tmp/hf2/model.safetensors"
pycheck "... holds exactly the BF16 values" same-bf16 "$tmp/bf16" "$tmp/hf2"

# ---- llama2.c -------------------------------------------------------------------------------
if [ ! -f "$peers/model.py" ] || [ ! -f "$peers/run.c" ] || [ ! -f "$peers/export.py" ]; then
    echo "note: llama2.c's model.py, export.py and run.c are not in $peers: the llama checks are skipped"
    check_summary
    exit $?
fi
cc -O2 -I"$peers" -o "$tmp/harness" "$src/tests/llama2c_harness.c" -lm >"$tmp/out" 2>"$tmp/err"
check "run.c builds with tests/llama2c_harness.c" test -x "$tmp/harness"
printf '3.14159 26535 89793 23846 26433 83279 50288 41971' >"$tmp/digits.txt" # bytes < 64
# layers heads kv_heads embd ctx hidden vocab tied
for cfg in "2 4 2 32 16 96 64 1" "2 4 1 32 16 64 64 0"; do
    set -- $cfg
    tag="llama H$2 KV$3 tied=$8"
    "$top/tests/llama_fixture" "$tmp/llama.h5" "$@" >"$tmp/out" 2>"$tmp/err"
    rm -rf "$tmp/lh" "$tmp/llama.bin" && mkdir "$tmp/lh"
    mg 1 ckpt export --format safetensors "$tmp/llama.h5" "$tmp/lh/model.safetensors"
    pycheck "$tag: LlamaForCausalLM on the safetensors export = model.py" \
        llama-hf "$tmp/lh" "$tmp/llama.h5" "$tmp/digits.txt"
    mg 1 ckpt export --format llama2c "$tmp/llama.h5" "$tmp/llama.bin"
    "$tmp/harness" "$tmp/llama.bin" "$tmp/digits.txt" "$tmp/runc.raw" >"$tmp/tv" 2>"$tmp/err"
    check "$tag: run.c reads the llama2c export and runs ($(cat "$tmp/tv"))" test -s "$tmp/runc.raw"
    py model-logits "$tmp/llama.h5" "$tmp/digits.txt" "$tmp/model.raw"
    # shellcheck disable=SC2046
    pycheck "$tag: run.c's logits = model.py's" close-raw "$tmp/runc.raw" "$tmp/model.raw" $(cat "$tmp/tv")
done
for tied in 1 0; do
    pycheck "export.py's legacy_export (tied $tied)" legacy "$tmp/legacy.bin" "$tmp/sd.h5" "$tied"
    mg 1 ckpt import --format llama2c "$tmp/legacy.bin" "$tmp/legacy.h5" --overwrite
    check "... imports" test $? -eq 0
    pycheck "... to model.py's parameters" same-params "$tmp/legacy.h5" "$tmp/sd.h5"
done
check_summary
