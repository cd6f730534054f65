#!/usr/bin/env bash
# bench-deterministic.sh: what --deterministic costs, side by side with its
# targets: the GPT recipe's step (data/mobydick.conf's model: 4 layers, 4 heads,
# C 128, T 64, batch 32; `meshgrad bench step --model gpt`), with the flag
# against without it,
# - on 1 rank, 1 thread (target <= 1.25),
# - on 2 ranks, dp and tp (target <= 1.35 each).
# meshgrad picks its OpenBLAS kernels itself (no OPENBLAS_CORETYPE). The runs go
# in rounds of adjacent runs (a shared 2-core VM drifts from one minute to the
# next); each ratio is the median over the rounds of that round's ratio, each
# time the median over the rounds. The load average is printed before and
# after: figures taken under load say little.
#
#   scripts/bench-deterministic.sh [--build DIR] [--rounds N] [--steps S]
# Prints a table and, as its last line, one JSON object.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
rounds=5
steps=10
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "bench-deterministic.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done
mg=$build/meshgrad
[ -x "$mg" ] || { echo "bench-deterministic.sh: $mg not found: build first (scripts/setup.sh)" >&2; exit 1; }
case $rounds$steps in *[!0-9]*) echo "bench-deterministic.sh: --rounds and --steps take counts" >&2; exit 2 ;; esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
unset OPENBLAS_CORETYPE
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
median() { tr ' ' '\n' | awk 'NF' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.3f", a / b }'; }

# ms NP PLAN [--deterministic]: one step time (ms, the median of the bench's steps)
ms() {
    local np=$1 plan=$2
    shift 2
    mpirun -np "$np" "$mg" bench step --model gpt --threads 1 --steps "$steps" --mesh "$np" \
        --parallel "$plan" "$@" 2>/dev/null | tail -n 1 | field ms_per_step
}

echo "load before: $(load)"
json='{"bench":"deterministic"'
printf '%-22s %10s %10s %8s %8s  %s\n' case "default" "determ." ratio target verdict
for c in "1 dp 1.25" "2 dp 1.35" "2 tp 1.35"; do
    set -- $c
    np=$1 plan=$2 target=$3
    d_all='' t_all='' r_all=''
    for ((r = 0; r < rounds; r++)); do
        d=$(ms "$np" "$plan")
        t=$(ms "$np" "$plan" --deterministic)
        d_all="$d_all $d" t_all="$t_all $t" r_all="$r_all $(ratio "$t" "$d")"
    done
    dm=$(echo "$d_all" | median) tm=$(echo "$t_all" | median) rm=$(echo "$r_all" | median)
    v=$(awk -v r="$rm" -v t="$target" 'BEGIN { print (r != "" && r <= t) ? "met" : "MISSED" }')
    printf '%-22s %8s ms %8s ms %8s %8s  %s\n' "$np rank(s) $plan" "$dm" "$tm" "$rm" "<= $target" "$v"
    json="$json,\"${np}_${plan}\":{\"default_ms\":${dm:-null},\"deterministic_ms\":${tm:-null},\"ratio\":${rm:-null},\"target\":$target}"
done
echo "load after: $(load)"
echo "$json}"
