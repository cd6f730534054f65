#!/usr/bin/env bash
# bench-vs-pytorch.sh: the MLP training step (batch 256, 1024-4096-1024, ReLU,
# MSE, SGD) in meshgrad and in PyTorch, side by side, with matching thread
# settings; then mg_linear against raw cblas, and data-parallel / fully sharded
# runs against the 1-rank step. PyTorch comes from Debian's python3-torch
# (/usr/bin/python3); without it the PyTorch column says so and the rest runs.
# The 1-rank and 2-rank steps run five times as adjacent pairs: the table gives
# the middle time of each and, for data parallel, the middle of the five
# pairwise ratios (a 2-core VM drifts by 10% or more from one minute to the
# next; a pair run seconds apart sees the same machine).
# A floor row: two independent 1-rank runs of half the batch at once, on two
# cores, which is what data parallel would cost with free communication.
# The fsdp memory row uses a deep model (1024, eight 4096 layers, 1024: 126M
# parameters plus momentum), where parameters and optimizer state dominate; a
# second row shows the wide 1024-8192-8192-1024 model, whose one 8192x8192
# layer (268 MB) must be gathered whole, for reference.
# The GPT rows: the recipe's training step (data/mobydick.conf: 4 layers, 4
# heads, C 128, T 64, batch 32, AdamW, clipping; `meshgrad bench step --model
# gpt`) against scripts/gpt-pytorch.py at 1 thread, and on 2 ranks dp and 2
# ranks tp against 1 rank; each measured as three adjacent pairs, the middle
# of the pairwise ratios given.
#
# meshgrad runs with no OPENBLAS_CORETYPE (its own pick, src/backend/blas_core.h);
# PyTorch is given the fastest OpenBLAS core here, --torch-core (Cooperlake).
#
#   scripts/bench-vs-pytorch.sh [--build DIR] [--steps N] [--torch-core CORE]
# Prints a table and, as its last line, one JSON object.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
steps=10
torch_core=Cooperlake
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --torch-core) torch_core=$2; shift 2 ;;
    -h | --help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "bench-vs-pytorch.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done
mg=$build/meshgrad
[ -x "$mg" ] || { echo "bench-vs-pytorch.sh: $mg not found: build first (scripts/setup.sh)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OPENBLAS_CORETYPE # meshgrad's own pick; PyTorch's runs set theirs
cores=$(nproc)
run() { # ranks threads args...
    local np=$1 th=$2
    shift 2
    # each rank gets th cores (mpirun would bind it to one); more than the
    # machine has: oversubscribe, unbound
    local place="--map-by slot:PE=$th"
    [ $((np * th)) -gt "$cores" ] && place="--oversubscribe --bind-to none"
    OPENBLAS_NUM_THREADS=$th OMP_NUM_THREADS=$th mpirun $place -np "$np" "$mg" "$@" --threads "$th" | tail -n 1
}
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }

torch_ms() { # threads
    /usr/bin/python3 - "$1" "$steps" <<'PY' 2>/dev/null
import sys, time
import torch
threads, steps = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024))
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)  # as meshgrad bench step
x = torch.randn(256, 1024)
y = torch.randn(256, 1024)
times = []
for i in range(steps + 2):
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    if i >= 2:
        times.append(time.perf_counter() - t0)
times.sort()
n = len(times)
print(1e3 * (times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])))
PY
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem:/{print $2}') GiB"
echo
lin=$(OPENBLAS_NUM_THREADS=1 mpirun -np 1 "$mg" bench linear --threads 1 | tail -n 1)
lin2=$(OPENBLAS_NUM_THREADS=2 mpirun --map-by slot:PE=2 -np 1 "$mg" bench linear --threads 2 | tail -n 1)
mid() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $0 } END { print v[int((NR + 1) / 2)] }'; }
# The floor for data parallel on this machine: two independent 1-rank runs of
# half the batch each, at the same time on the two first cores (no
# communication at all; only what the cores share: memory bandwidth, caches).
halves() {
    local out=$(mktemp)
    OPENBLAS_NUM_THREADS=1 taskset -c 0 mpirun --bind-to none -np 1 "$mg" bench step --steps "$steps" \
        --batch 128 --threads 1 | tail -n 1 | field ms_per_step >"$out" &
    OPENBLAS_NUM_THREADS=1 taskset -c 1 mpirun --bind-to none -np 1 "$mg" bench step --steps "$steps" \
        --batch 128 --threads 1 | tail -n 1 | field ms_per_step >>"$out"
    wait
    sort -g "$out" | tail -n 1 # the slower of the two
    rm -f "$out"
}
div() { awk -v x="$1" -v y="$2" 'BEGIN { if (x == "" || y == "" || y == 0) print ""; else printf "%.4f", x / y }'; }
a=() b=() h=() r=() rh=() j11=() j21=()
for i in 1 2 3 4 5; do
    j11+=("$(run 1 1 bench step --steps "$steps")")
    j21+=("$(run 2 1 bench step --steps "$steps" --parallel dp)")
    a+=("$(echo "${j11[-1]}" | field ms_per_step)")
    b+=("$(echo "${j21[-1]}" | field ms_per_step)")
    r+=("$(div "${b[-1]}" "${a[-1]}")")
    if [ "$cores" -ge 2 ]; then
        h+=("$(halves)")
        rh+=("$(div "${h[-1]}" "${a[-1]}")")
    fi
done
ms11=$(mid "${a[@]}") ms21=$(mid "${b[@]}") dp_ratio=$(mid "${r[@]}")
ms_h=$(mid "${h[@]}") h_ratio=$(mid "${rh[@]}")
# the parts of the middle runs (slowest rank each): where the dp step's time goes
parts() { # json
    printf 'forward %s, backward %s, optimizer %s ms' "$(echo "$1" | field fwd_ms)" \
        "$(echo "$1" | field bwd_ms)" "$(echo "$1" | field opt_ms)"
}
for i in "${!a[@]}"; do [ "${a[$i]}" = "$ms11" ] && p11=$(parts "${j11[$i]}"); done
for i in "${!b[@]}"; do [ "${b[$i]}" = "$ms21" ] && p21=$(parts "${j21[$i]}"); done
ms12=$(run 1 2 bench step --steps "$steps" | field ms_per_step)
deep=1024,4096,4096,4096,4096,4096,4096,4096,4096,1024 wide=1024,8192,8192,1024
f1=$(run 1 1 bench step --steps 3 --batch 8 --layers $deep)
f4=$(run 4 1 bench step --steps 3 --batch 8 --layers $deep --parallel fsdp)
w1=$(run 1 1 bench step --steps 3 --batch 8 --layers $wide)
w4=$(run 4 1 bench step --steps 3 --batch 8 --layers $wide --parallel fsdp)
t1=$(OPENBLAS_CORETYPE=$torch_core OPENBLAS_NUM_THREADS=1 torch_ms 1)
t2=$(OPENBLAS_CORETYPE=$torch_core OPENBLAS_NUM_THREADS=2 torch_ms 2)
# the GPT: three rounds of (1 rank, PyTorch, 2 ranks dp, 2 ranks tp), ratios per round
gpt="bench step --model gpt --steps $steps"
ga=() gt=() gd=() gp=() rgt=() rgd=() rgp=()
for i in 1 2 3; do
    ga+=("$(run 1 1 $gpt | field ms_per_step)")
    gt+=("$(OPENBLAS_CORETYPE=$torch_core OPENBLAS_NUM_THREADS=1 /usr/bin/python3 \
        "$here/scripts/gpt-pytorch.py" step --threads 1 --steps "$steps" 2>/dev/null)")
    gd+=("$(run 2 1 $gpt --parallel dp | field ms_per_step)")
    gp+=("$(run 2 1 $gpt --parallel tp | field ms_per_step)")
    rgt+=("$(div "${ga[-1]}" "${gt[-1]}")") rgd+=("$(div "${gd[-1]}" "${ga[-1]}")")
    rgp+=("$(div "${gp[-1]}" "${ga[-1]}")")
done
g11=$(mid "${ga[@]}") gtorch=$(mid "${gt[@]}") g21dp=$(mid "${gd[@]}") g21tp=$(mid "${gp[@]}")
gt_ratio=$(mid "${rgt[@]}") gdp_ratio=$(mid "${rgd[@]}") gtp_ratio=$(mid "${rgp[@]}")
rss1=$(echo "$f1" | field peak_rss_mb); rss4=$(echo "$f4" | field peak_rss_mb)
wrss1=$(echo "$w1" | field peak_rss_mb); wrss4=$(echo "$w4" | field peak_rss_mb)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "n/a"; else printf "%.2f", a / b }'; }

printf '%-52s %12s %12s %8s %s\n' "measure" "meshgrad" "reference" "ratio" "target"
printf '%-52s %12s %12s %8s %s\n' "mg_linear fwd+bwd GFLOP/s, 1 thread (ref: cblas)" \
    "$(echo "$lin" | field mg_gflops)" "$(echo "$lin" | field blas_gflops)" "$(echo "$lin" | field ratio)" ">= 0.90"
printf '%-52s %12s %12s %8s %s\n' "mg_linear fwd+bwd GFLOP/s, 2 threads (ref: cblas)" \
    "$(echo "$lin2" | field mg_gflops)" "$(echo "$lin2" | field blas_gflops)" "$(echo "$lin2" | field ratio)" ">= 0.90"
printf '%-52s %12s %12s %8s %s\n' "MLP step ms, 1 rank x 1 thread (ref: PyTorch)" "$ms11" "${t1:-absent}" "$(ratio "$ms11" "$t1")" "<= 1.00"
printf '%-52s %12s %12s %8s %s\n' "MLP step ms, 1 rank x 2 threads (ref: PyTorch)" "$ms12" "${t2:-absent}" "$(ratio "$ms12" "$t2")" "<= 1.00"
printf '%-52s %12s %12s %8s %s\n' "MLP step ms, 2 ranks x 1 thread dp (ref: 1x1)" "$ms21" "$ms11" "$(printf '%.2f' "$dp_ratio")" "<= 0.60"
printf '%-52s %12s %12s %8s %s\n' "2 x half batch, independent, at once (ref: 1x1)" "${ms_h:-n/a}" "$ms11" "$( [ -n "$h_ratio" ] && printf '%.2f' "$h_ratio" || echo n/a)" "(floor)"
printf '%-52s %12s %12s %8s %s\n' "peak RSS MB/rank, 4 ranks fsdp, deep (ref: 1 rank)" "$rss4" "$rss1" "$(ratio "$rss4" "$rss1")" "<= 0.40"
printf '%-52s %12s %12s %8s %s\n' "peak RSS MB/rank, 4 ranks fsdp, wide (ref: 1 rank)" "$wrss4" "$wrss1" "$(ratio "$wrss4" "$wrss1")" "(info)"
printf '%-52s %12s %12s %8s %s\n' "GPT step ms, 1 rank x 1 thread (ref: PyTorch)" "$g11" "${gtorch:-absent}" "${gt_ratio:-n/a}" "<= 0.80"
printf '%-52s %12s %12s %8s %s\n' "GPT step ms, 2 ranks x 1 thread dp (ref: 1x1)" "$g21dp" "$g11" "${gdp_ratio:-n/a}" "<= 0.60"
printf '%-52s %12s %12s %8s %s\n' "GPT step ms, 2 ranks x 1 thread tp (ref: 1x1)" "$g21tp" "$g11" "${gtp_ratio:-n/a}" "<= 0.75"
echo "(GPT rounds: 1x1 ${ga[*]} ms; PyTorch ${gt[*]} ms; 2 dp ${gd[*]} ms; 2 tp ${gp[*]} ms)"
echo "(1x1 runs: ${a[*]} ms; 2x1 dp runs, each right after one: ${b[*]} ms; dp ratio: the middle of the pairs' ${r[*]})"
echo "(floor: the slower of two independent batch-128 runs at once, after each pair: ${h[*]} ms)"
echo "(1x1 middle run: $p11; 2x1 dp middle run: $p21)"
echo "(scratch arena on 4 ranks: deep $(echo "$f4" | field scratch_mb) MB, wide $(echo "$w4" | field scratch_mb) MB)"
[ -z "$t1" ] && echo "(PyTorch not found: apt-get install python3-torch for the reference column)"
printf '{"bench":"vs-pytorch","linear_ratio_1t":%s,"step_ms_1x1":%s,"torch_ms_1t":%s,"step_ms_1x2":%s,"torch_ms_2t":%s,"step_ms_2x1_dp":%s,"dp_ratio":%s,"dp_floor_ratio":%s,"fsdp_rss_ratio":%s,"fsdp_wide_rss_ratio":%s,"gpt_ms_1x1":%s,"gpt_torch_ms_1t":%s,"gpt_torch_ratio":%s,"gpt_dp_ratio":%s,"gpt_tp_ratio":%s}\n' \
    "$(echo "$lin" | field ratio)" "$ms11" "${t1:-null}" "$ms12" "${t2:-null}" "$ms21" "${dp_ratio:-null}" "${h_ratio:-null}" \
    "$(ratio "$rss4" "$rss1" | sed 's#n/a#null#')" "$(ratio "$wrss4" "$wrss1" | sed 's#n/a#null#')" \
    "${g11:-null}" "${gtorch:-null}" "${gt_ratio:-null}" "${gdp_ratio:-null}" "${gtp_ratio:-null}"
