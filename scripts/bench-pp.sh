#!/usr/bin/env bash
# bench-pp.sh: the pipeline benchmarks, from `meshgrad bench step
# --parallel pp ...` (src/cli/bench_pp.c), which prints each run's measured step
# time, bubble and per-stage activation high-water beside `meshgrad plan`'s
# prediction for the same cut, schedule and measured machine.
#  1. speed: the bench step MLP (batch 256, 1024-4096-1024) on 1 rank (no pp)
#     and on 2 ranks pp=2 with M=8 (1f1b), as adjacent pairs, 1 thread a rank:
#     the middle of the pairwise ratios (target <= 0.65).
#  2. bubbles: MLPs whose stages are equal and whose backward costs twice the
#     forward (a small first layer, then 2048-wide ones: 4 of them for 2 ranks,
#     8 for 4; interleaved cut one a stage), batch 256 in M=8: gpipe, 1f1b, interleaved-1f1b (v=2) and
#     zb-h1, on 2 and 4 ranks; measured bubble against the verifier's
#     (unit time) and the plan's (with these costs), measured pipeline time
#     against the predicted one, and the micro-batches each stage held.
# 4 ranks oversubscribe a 2-core machine: the plan then shares the cores among
# the ranks computing at each moment (pipeline_verify.h), and the measured
# bubbles count a rank's time sliced away as busy. Benchmark on a quiet machine.
#
#   scripts/bench-pp.sh [--build DIR] [--steps N] [--pairs N]
# Prints the tables; the JSON line of every run goes to bench-pp.jsonl.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build steps=10 pairs=3
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "bench-pp.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done
mg=$build/meshgrad
[ -x "$mg" ] || { echo "bench-pp.sh: $mg not found: build first (scripts/setup.sh)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
cores=$(nproc)
out=bench-pp.jsonl
if [ -L "$out" ] || { [ -e "$out" ] && [ ! -f "$out" ]; } ||
    { [ -s "$out" ] && [ "$(head -c 9 "$out")" != '{"bench":' ]; }; then
    echo "bench-pp.sh: ./$out is not an earlier run's output: move it away or run elsewhere" >&2
    exit 2
fi
: >"$out"
run() { # ranks args...: the run's JSON line
    local np=$1 over=
    shift
    [ "$np" -gt "$cores" ] && over="--oversubscribe --bind-to none"
    # shellcheck disable=SC2086
    mpirun $over -np "$np" "$mg" bench step --threads 1 --steps "$steps" "$@" | tail -n 1 | tee -a "$out"
}
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "== 1. bench step MLP: 1 rank against pp=2, M=8, 1f1b ($pairs adjacent pairs)"
ratios=() ones=() pps=()
for i in $(seq "$pairs"); do
    one=$(run 1 | field ms_per_step)
    pp=$(run 2 --parallel pp --microbatches 8 | field ms_per_step)
    ratios+=("$(awk -v a="$pp" -v b="$one" 'BEGIN { printf "%.3f", a / b }')")
    ones+=("$one") pps+=("$pp")
    echo "  pair $i: 1 rank $one ms, pp=2 $pp ms, ratio ${ratios[-1]}"
done
printf '  middle: 1 rank %s ms, pp=2 %s ms, ratio %s (target <= 0.65)\n' \
    "$(printf '%s\n' "${ones[@]}" | median)" "$(printf '%s\n' "${pps[@]}" | median)" \
    "$(printf '%s\n' "${ratios[@]}" | median)"

echo
echo "== 2. bubbles, M=8, batch 256 (measured / verifier's at unit time / plan's with these costs)"
printf '%-5s %-18s %9s %9s %9s %11s %11s %7s  %s\n' ranks schedule measured verifier plan \
    "pipe ms" "pred. ms" ratio "peak live mbs per stage"
# a first layer of 64 inputs (no input gradient: cheap), then 2048-wide layers: two per
# stage on `ranks` stages, one per stage on 2 x ranks (interleaved: the small one rides
# with the first)
w2=64,2048,2048,2048,2048,2048 w4=64,2048,2048,2048,2048,2048,2048,2048,2048,2048
v2=2,1,1,1 v4=2,1,1,1,1,1,1,1
for np in 2 4; do
    eval "w=\$w$np vl=\$v$np"
    for s in gpipe 1f1b interleaved-1f1b zb-h1; do
        v=1 label=$s cut=
        [ "$s" = interleaved-1f1b ] && v=2 label="$s v=2" cut="--pp-layers $vl"
        # shellcheck disable=SC2086
        line=$(run "$np" --mesh "$np" --parallel pp --microbatches 8 --layers "$w" --pp-schedule "$s" \
            --virtual-stages "$v" $cut)
        printf '%-5s %-18s %9s %9s %9s %11s %11s %7s  %s\n' "$np" "$label" \
            "$(echo "$line" | field bubble)" "$(echo "$line" | field unit_bubble)" \
            "$(echo "$line" | field predicted_bubble)" "$(echo "$line" | field pipeline_ms)" \
            "$(echo "$line" | field predicted_ms)" \
            "$(awk -v a="$(echo "$line" | field pipeline_ms)" -v b="$(echo "$line" | field predicted_ms)" \
                'BEGIN { printf "%.2f", a / b }')" \
            "$(echo "$line" | sed -n 's/.*"peak_live":\[\([0-9,]*\)\].*/\1/p')"
    done
done
echo "(each run's JSON line: $out)"
