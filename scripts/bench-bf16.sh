#!/usr/bin/env bash
# bench-bf16.sh: the training step with --dtype bf16 against fp32 and against
# PyTorch's CPU autocast, side by side with their targets, 1 thread:
# - the GPT recipe's model (data/mobydick.conf: 4 layers, 4 heads, C 128, T 64,
#   batch 32; `meshgrad bench step --model gpt`): the bf16 step against the
#   fp32 step (target <= 0.60) and against scripts/gpt-pytorch.py's step under
#   torch.autocast("cpu", bfloat16) (target <= 0.80); PyTorch's fp32 step is
#   printed for scale;
# - a mid-size GPT (6 layers, 6 heads, C 384, T 256, batch 8: nanoGPT's
#   shakespeare-char size): bf16 against fp32 (target <= 0.55).
# Every run, meshgrad's and PyTorch's, is taken on both of OpenBLAS's kernel
# sets that matter here, OPENBLAS_CORETYPE unset (OpenBLAS picks) and
# =SkylakeX, and the faster counts: the environment of the project's machines
# pins Haswell, which halves sgemm on AVX-512 CPUs, and a user who knew would
# set the best. The runs go in rounds of adjacent runs (a shared 2-core VM
# drifts from one minute to the next); each ratio is the median over the rounds
# of that round's ratio, and each time the median over the rounds. The load
# average is printed before and after: figures taken under load say little.
#
#   scripts/bench-bf16.sh [--build DIR] [--rounds N] [--steps S] [--no-mid]
# Prints a table and, as its last line, one JSON object.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
rounds=5
steps=10
mid=1
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --no-mid) mid=0; shift ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "bench-bf16.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done
mg=$build/meshgrad
[ -x "$mg" ] || { echo "bench-bf16.sh: $mg not found: build first (scripts/setup.sh)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

# best CMD...: the faster of the command's ms (its last line) with OpenBLAS's own
# pick and with SkylakeX's kernels; "" when both failed
best() {
    local a b
    a=$(env -u OPENBLAS_CORETYPE "$@" 2>/dev/null | tail -n 1)
    b=$(OPENBLAS_CORETYPE=SkylakeX "$@" 2>/dev/null | tail -n 1)
    printf '%s\n%s\n' "$a" "$b" | awk '$1 + 0 > 0 { if (m == "" || $1 + 0 < m + 0) m = $1 } END { print m }'
}
mg_ms() { "$mg" bench step --model gpt --threads 1 --steps "$steps" "$@" | tail -n 1 | field ms_per_step; }
torch_ms() {
    /usr/bin/python3 "$here/scripts/gpt-pytorch.py" step --threads 1 --steps "$steps" "$@"
}
have_torch=1
/usr/bin/python3 -c 'import torch' 2>/dev/null || have_torch=0

median() { tr ' ' '\n' | awk 'NF' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.3f", a / b }'; }

mid_args="--layers 6 --heads 6 --embd 384 --ctx 256 --batch 8"
load0=$(load)
echo "bench-bf16.sh: $rounds rounds of $steps steps, 1 thread; $("$mg" --version | grep 'bf16 GEMM'); load $load0"
gb=() gf=() tb=() tf=() rf=() rt=() mb=() mf=() rm=()
for r in $(seq "$rounds"); do
    b=$(best mg_ms --dtype bf16) f=$(best mg_ms --dtype fp32) t="" t32="" mb16="" mf32=""
    gb+=("$b") gf+=("$f") rf+=("$(ratio "$b" "$f")")
    if [ "$have_torch" = 1 ]; then
        t=$(best torch_ms --dtype bf16) t32=$(best torch_ms --dtype fp32)
        tb+=("$t") tf+=("$t32") rt+=("$(ratio "$b" "$t")")
    fi
    if [ "$mid" = 1 ]; then
        # shellcheck disable=SC2086
        mb16=$(best mg_ms --dtype bf16 $mid_args --steps 4)
        # shellcheck disable=SC2086
        mf32=$(best mg_ms --dtype fp32 $mid_args --steps 4)
        mb+=("$mb16") mf+=("$mf32") rm+=("$(ratio "$mb16" "$mf32")")
    fi
    echo "  round $r: gpt bf16 $b fp32 $f torch-bf16 ${t:--} torch-fp32 ${t32:--}" \
        "mid bf16 ${mb16:--} fp32 ${mf32:--} (load $(load))"
done
g16=$(echo "${gb[*]}" | median) g32=$(echo "${gf[*]}" | median) r32=$(echo "${rf[*]}" | median)
t16=$(echo "${tb[*]:-}" | median) t32=$(echo "${tf[*]:-}" | median) rtt=$(echo "${rt[*]:-}" | median)
m16=$(echo "${mb[*]:-}" | median) m32=$(echo "${mf[*]:-}" | median) rmm=$(echo "${rm[*]:-}" | median)
printf '\n%-58s %10s %10s %7s %s\n' "measure (ms a step, medians)" "bf16" "reference" "ratio" "target"
printf '%-58s %10s %10s %7s %s\n' "GPT recipe, 1 thread (ref: meshgrad fp32)" "$g16" "$g32" "$r32" "<= 0.60"
printf '%-58s %10s %10s %7s %s\n' "GPT recipe, 1 thread (ref: PyTorch 1.13 autocast bf16)" "$g16" \
    "${t16:-absent}" "${rtt:-n/a}" "<= 0.80"
printf '%-58s %10s %10s\n' "  (PyTorch fp32, for scale)" "" "${t32:-absent}"
[ "$mid" = 1 ] && printf '%-58s %10s %10s %7s %s\n' "GPT L6 H6 C384 T256 B8, 1 thread (ref: meshgrad fp32)" \
    "$m16" "$m32" "$rmm" "<= 0.55"
echo "load average before $load0, after $(load)"
printf '{"bench":"bf16","rounds":%s,"gpt_bf16_ms":%s,"gpt_fp32_ms":%s,"gpt_ratio":%s,' \
    "$rounds" "${g16:-null}" "${g32:-null}" "${r32:-null}"
printf '"torch_bf16_ms":%s,"torch_fp32_ms":%s,"torch_ratio":%s,' "${t16:-null}" "${t32:-null}" "${rtt:-null}"
printf '"mid_bf16_ms":%s,"mid_fp32_ms":%s,"mid_ratio":%s}\n' "${m16:-null}" "${m32:-null}" "${rmm:-null}"
