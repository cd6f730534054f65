#!/usr/bin/env bash
# bench-llama.sh: the Llama against its references, side by side.
# - step: the recipe's training step (data/mobydick-llama.conf: 4 layers, 4
#   heads, 2 kv heads, C 128, SwiGLU 352, T 64, batch 32, AdamW, clipping;
#   `meshgrad bench step --model llama`) at 1 thread against llama2.c's own
#   model.py in PyTorch (scripts/llama-pytorch.py), PyTorch given OpenBLAS's
#   fastest core here (OPENBLAS_CORETYPE, --torch-core); three adjacent pairs,
#   the middle of the pairwise ratios. Target <= 0.8.
# - tp and dp: the same step on 2 ranks (1 thread each) against 1 rank, three
#   adjacent pairs each. Targets <= 0.65 (tp) and <= 0.6 (dp).
# - generate: a Llama of llama2.c's stories15M shape (6 layers, 6 heads, C 288,
#   SwiGLU 768, T 256, byte vocabulary), its checkpoint exported with `ckpt
#   export --format llama2c`, greedy from a 16-byte prompt to position 256 on 1
#   thread: `meshgrad generate`'s tokens/s against llama2.c's run.c built with
#   its runfast flags (-Ofast), which reports its own tok/s; three adjacent
#   pairs. Target >= 1.0.
# llama2.c's folder: --llama2c DIR, else shared/peers/llama2c beside the checkout
# or one level up. PyTorch from Debian's python3-torch (/usr/bin/python3).
#
#   scripts/bench-llama.sh [--build DIR] [--steps N] [--llama2c DIR] [--torch-core CORE]
# Prints a table and, as its last line, one JSON object.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
steps=10
l2c=
torch_core=Cooperlake
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --llama2c) l2c=$2; shift 2 ;;
    --torch-core) torch_core=$2; shift 2 ;;
    -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "bench-llama.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done
mg=$build/meshgrad
[ -x "$mg" ] || { echo "bench-llama.sh: $mg not found: build first (scripts/setup.sh)" >&2; exit 1; }
if [ -z "$l2c" ]; then
    for d in "$here/../shared/peers/llama2c" "$here/../../shared/peers/llama2c"; do
        [ -f "$d/run.c" ] && l2c=$(cd "$d" && pwd) && break
    done
fi
[ -n "$l2c" ] && [ -f "$l2c/run.c" ] || { echo "bench-llama.sh: llama2.c's folder not found: give --llama2c DIR" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d /tmp/mg-bench-llama.XXXXXX)
trap 'rm -rf "$work"' EXIT

run() { # ranks args... (1 thread a rank; meshgrad picks its own OpenBLAS core)
    local np=$1
    shift
    env -u OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
        mpirun --oversubscribe --bind-to none -np "$np" "$mg" "$@" --threads 1 | tail -n 1
}
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }
mid() { printf '%s\n' "$@" | sort -g | sed -n 2p; } # the middle of three
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }

step="bench step --model llama --steps $steps"
declare -a m1 pt dp tp rt rd rp
for i in 1 2 3; do
    a=$(run 1 $step | field ms_per_step)
    b=$(OPENBLAS_CORETYPE=$torch_core OPENBLAS_NUM_THREADS=1 /usr/bin/python3 \
        "$here/scripts/llama-pytorch.py" step --threads 1 --steps "$steps" --llama2c "$l2c" 2>/dev/null | tail -n 1)
    c=$(run 2 $step --parallel dp | field ms_per_step)
    d=$(run 2 $step --parallel tp | field ms_per_step)
    m1+=("$a") pt+=("$b") dp+=("$c") tp+=("$d")
    rt+=("$(ratio "$a" "$b")") rd+=("$(ratio "$c" "$a")") rp+=("$(ratio "$d" "$a")")
done

# generate: a stories15M-shaped Llama, one step trained so its file is a real run's
"$mg" train --model llama --data "$build/data/mobydick.h5" --layers 6 --heads 6 --kv-heads 6 \
    --embd 288 --hidden 768 --ctx 256 --batch 4 --steps 1 --log-every 0 --threads 1 \
    --save "$work/s15.h5" >/dev/null 2>&1 &&
    "$mg" ckpt export --format llama2c "$work/s15.h5" "$work/s15.bin" >/dev/null 2>&1 ||
    { echo "bench-llama.sh: could not make the generate model" >&2; exit 1; }
/usr/bin/python3 - "$work/tok.bin" <<'PY'
import struct, sys
with open(sys.argv[1], "wb") as f:  # run.c's tokenizer: one token per byte
    f.write(struct.pack("i", 1))
    for b in range(256):
        f.write(struct.pack("fi", 0.0, 1) + bytes([b]))
PY
cc -Ofast -o "$work/run" "$l2c/run.c" -lm || { echo "bench-llama.sh: run.c did not build" >&2; exit 1; }
declare -a gm gr gq
prompt="Call me Ishmael." # run.c stops at token 1, which a greedy run from BOS alone may pick
for i in 1 2 3; do
    a=$(env -u OPENBLAS_CORETYPE "$mg" generate --resume "$work/s15.h5" --prompt "$prompt" \
        --tokens $((256 - ${#prompt})) --temperature 0 --threads 1 2>&1 >/dev/null |
        sed -n 's/.* \([0-9.]*\) tokens\/s.*/\1/p')
    b=$("$work/run" "$work/s15.bin" -z "$work/tok.bin" -t 0 -n 256 -i "$prompt" 2>&1 >/dev/null |
        sed -n 's/achieved tok\/s: \([0-9.]*\)/\1/p')
    gm+=("$a") gr+=("$b") gq+=("$(ratio "$a" "$b")")
done

printf '%-46s %12s %12s %8s %8s\n' "Llama (recipe model; $(date -u +%F), $(nproc) cores)" meshgrad reference ratio target
printf '%-46s %9.2f ms %9.2f ms %8s %8s\n' "step, 1 thread, vs model.py (PyTorch)" "$(mid "${m1[@]}")" \
    "$(mid "${pt[@]}")" "$(mid "${rt[@]}")" "<= 0.8"
printf '%-46s %9.2f ms %9.2f ms %8s %8s\n' "step, 2 ranks tp vs 1 rank" "$(mid "${tp[@]}")" \
    "$(mid "${m1[@]}")" "$(mid "${rp[@]}")" "<= 0.65"
printf '%-46s %9.2f ms %9.2f ms %8s %8s\n' "step, 2 ranks dp vs 1 rank" "$(mid "${dp[@]}")" \
    "$(mid "${m1[@]}")" "$(mid "${rd[@]}")" "<= 0.6"
printf '%-46s %8.0f t/s %8.0f t/s %8s %8s\n' "generate, 1 thread, vs run.c (-Ofast)" "$(mid "${gm[@]}")" \
    "$(mid "${gr[@]}")" "$(mid "${gq[@]}")" ">= 1.0"
printf '{"bench":"llama","step_ms":%s,"torch_ms":%s,"torch_ratio":%s,"tp_ratio":%s,"dp_ratio":%s,"gen_tps":%s,"runc_tps":%s,"gen_ratio":%s}\n' \
    "$(mid "${m1[@]}")" "$(mid "${pt[@]}")" "$(mid "${rt[@]}")" "$(mid "${rp[@]}")" \
    "$(mid "${rd[@]}")" "$(mid "${gm[@]}")" "$(mid "${gr[@]}")" "$(mid "${gq[@]}")"
