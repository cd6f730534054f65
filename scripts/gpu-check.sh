#!/usr/bin/env bash
# gpu-check.sh: the GPU check, on a machine with an NVIDIA GPU, in under 8 minutes.
#   1. configure (CUDA for this GPU's architecture only) and build in build-gpu/
#   2. tests/test_cuda.mpi and tests/test_cuda_ops.mpi on 1 rank: every kernel
#      of the CUDA backend against the CPU backend (max relative error per
#      kernel) and ops with autograd on both devices at every placement
#   3. the digits job (data/digits.conf on a mesh of 1) with --device cuda, next
#      to the same job on the CPU
#   4. GEMM: meshgrad bench linear (y = x w^T, dx, dw) at 4096^3 on CUDA (fp32
#      and --tf32) next to the CPU, in TFLOP/s
#   5. the MLP step (batch 256, 1024-4096-1024, SGD, MSE): meshgrad bench step
#      on CUDA next to the CPU
# then prints one table. Exits non-zero when a step failed (the table still
# shows what ran). Needs the build packages (Open MPI, parallel HDF5, Check,
# OpenBLAS, autotools) and the CUDA toolkit with cuBLAS and NCCL (--with-cuda).
# Environment: MG_GPU_BUILD (build dir, default build-gpu), CUDA_HOME (default
# /usr/local/cuda), MAKE_JOBS (default: all cores).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
top=$(pwd)
build=${MG_GPU_BUILD:-build-gpu}
cuda=${CUDA_HOME:-/usr/local/cuda}
jobs=${MAKE_JOBS:-$(nproc 2>/dev/null || echo 4)}
logs=$build/gpu-check
start=$(date +%s)
failed=0

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 CK_FORK=no
export PATH="$cuda/bin:$PATH"

say() { echo "gpu-check: $*"; }
elapsed() { echo $(($(date +%s) - start)); }
fail() { say "FAILED: $*"; failed=1; }
# value of a "key":number field in a JSON line
json() { sed -n "s/.*\"$2\":\([-0-9.eE+]*\).*/\1/p" <<<"$1" | tail -n 1; }
fmt() { [ -n "$1" ] && awk -v v="$1" -v f="$2" 'BEGIN { printf f, v }' || echo "-"; }

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    say "no NVIDIA GPU visible (nvidia-smi -L failed): nothing to check here"
    exit 77
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
arch=${CUDA_ARCH_FLAGS:-}
if [ -z "$arch" ] && [ -n "$cap" ]; then arch="-gencode arch=compute_$cap,code=sm_$cap"; fi
say "GPU: $gpu (sm_${cap:-?}); build in $build with $jobs jobs"

# ---- 1. configure and build -------------------------------------------------------
mkdir -p "$build" "$logs"
if [ ! -x configure ] || [ -n "$(find . -path "./$build" -prune -o \( -name configure.ac -o -name '*.am' \) -newer configure -print 2>/dev/null | head -n 1)" ]; then
    autoreconf -fi >"$logs/autoreconf.log" 2>&1 || { say "autoreconf failed (see $logs/autoreconf.log)"; exit 1; }
fi
if [ ! -f "$build/Makefile" ]; then
    (cd "$build" && timeout 180 "$top/configure" -q --with-cuda="$cuda" ${arch:+CUDA_ARCH_FLAGS="$arch"}) \
        >"$logs/configure.log" 2>&1 || { say "configure failed (see $logs/configure.log)"; tail -n 20 "$logs/configure.log"; exit 1; }
fi
if ! timeout 300 make -C "$build" -j"$jobs" all tests/test_cuda.mpi tests/test_cuda_ops.mpi >"$logs/build.log" 2>&1; then
    say "build failed (see $logs/build.log)"
    tail -n 30 "$logs/build.log"
    exit 1
fi
warnings=$(grep -ci 'warning' "$logs/build.log")
say "built in $(elapsed) s ($warnings warning lines)"
mg=$build/meshgrad

# ---- 2. the CUDA test against the CPU ---------------------------------------------
test_status=FAIL
if (cd "$build" && for t in tests/test_cuda.mpi tests/test_cuda_ops.mpi; do
    MG_TEST_NP=1 MG_TEST_TIMEOUT=150 MPIRUN=mpirun TIMEOUT=timeout sh "$top/tests/mpi-run.sh" "$t" || exit 1
done) >"$logs/test_cuda.log" 2>&1; then
    test_status=PASS
else
    fail "tests/test_cuda.mpi or test_cuda_ops.mpi (see $logs/test_cuda.log)"
    grep -E 'failed|Failure|error' "$logs/test_cuda.log" | head -n 20
fi
summary=$(grep -E '^[0-9]+%: Checks:' "$logs/test_cuda.log" | tail -n 1)
# "kernel NAME max_rel_err E tol T cases N": the worst E, TF32 aside (it is meant to differ)
worst_kernel=$(awk '/^kernel / && $2 !~ /tf32/ { if (n == "" || $4 + 0 > w) { w = $4 + 0; n = $2 } }
    END { if (n != "") printf "%.2g", w }' "$logs/test_cuda.log")
say "test_cuda: $test_status ${summary:+($summary)} after $(elapsed) s"

# ---- 3. the digits job on both devices ----------------------------------------------
digits() { # device -> log
    timeout 150 mpirun -np 1 "$mg" train --config data/digits.conf --mesh 1 --device "$1" \
        --log-every 500 --threads "$jobs" >"$logs/digits-$1.log" 2>&1
}
declare -A acc loss msps
for dev in cpu cuda; do
    if digits "$dev"; then
        acc[$dev]=$(sed -n 's/^eval .*accuracy \([0-9.]*\)%.*/\1/p' "$logs/digits-$dev.log" | tail -n 1)
        loss[$dev]=$(sed -n 's/^eval .*test loss \([0-9.]*\) .*/\1/p' "$logs/digits-$dev.log" | tail -n 1)
        msps[$dev]=$(sed -n 's/^done: .*(\([0-9.]*\) ms\/step).*/\1/p' "$logs/digits-$dev.log" | tail -n 1)
    else
        fail "digits job on $dev (see $logs/digits-$dev.log)"
        tail -n 5 "$logs/digits-$dev.log"
    fi
done
say "digits jobs done after $(elapsed) s"

# ---- 4. GEMM and 5. the MLP step ------------------------------------------------------
bench() { # name args...: runs `meshgrad bench args...` into bench-<name>.log
    local name=$1
    shift
    timeout 120 mpirun -np 1 "$mg" bench "$@" >"$logs/bench-$name.log" 2>&1 ||
        fail "meshgrad bench $* (see $logs/bench-$name.log)"
}
result() { grep '^{' "$logs/bench-$1.log" 2>/dev/null | tail -n 1; } # its JSON line
gemm=(--m 4096 --k 4096 --n 4096)
bench linear-cpu linear "${gemm[@]}" --iters 3 --threads "$jobs"
bench linear-cuda linear "${gemm[@]}" --iters 20 --device cuda
bench linear-tf32 linear "${gemm[@]}" --iters 20 --device cuda --tf32
step=(step --batch 256 --layers "1024,4096,1024" --steps 10)
bench step-cpu "${step[@]}" --threads "$jobs"
bench step-cuda "${step[@]}" --device cuda
bench step-tf32 "${step[@]}" --device cuda --tf32
lin_cpu=$(result linear-cpu) lin_gpu=$(result linear-cuda) lin_tf32=$(result linear-tf32)
step_cpu=$(result step-cpu) step_gpu=$(result step-cuda) step_tf32=$(result step-tf32)
say "benchmarks done after $(elapsed) s"

tflops() { fmt "$(awk -v g="$(json "$1" "$2")" 'BEGIN { if (g != "") print g / 1000 }')" "%.2f"; }

# ---- the table ------------------------------------------------------------------------
echo
echo "meshgrad GPU check on $gpu ($(elapsed) s)"
printf '%-44s %14s %14s %14s\n' "" "cpu" "cuda" "cuda tf32"
printf '%-44s %14s %14s %14s\n' "test_cuda: kernels + ops vs CPU" "-" "$test_status" "-"
printf '%-44s %14s %14s %14s\n' "  worst max relative error, fp32" "-" "${worst_kernel:--}" "-"
printf '%-44s %14s %14s %14s\n' "digits: test accuracy %" "${acc[cpu]:--}" "${acc[cuda]:--}" "-"
printf '%-44s %14s %14s %14s\n' "digits: test loss" "${loss[cpu]:--}" "${loss[cuda]:--}" "-"
printf '%-44s %14s %14s %14s\n' "digits: ms/step" "${msps[cpu]:--}" "${msps[cuda]:--}" "-"
printf '%-44s %14s %14s %14s\n' "GEMM 4096^3 x3, raw BLAS: TFLOP/s" "$(tflops "$lin_cpu" blas_gflops)" \
    "$(tflops "$lin_gpu" blas_gflops)" "$(tflops "$lin_tf32" blas_gflops)"
printf '%-44s %14s %14s %14s\n' "GEMM 4096^3 x3, mg_linear fwd+bwd: TFLOP/s" "$(tflops "$lin_cpu" mg_gflops)" \
    "$(tflops "$lin_gpu" mg_gflops)" "$(tflops "$lin_tf32" mg_gflops)"
printf '%-44s %14s %14s %14s\n' "MLP step 256x1024-4096-1024: ms" "$(fmt "$(json "$step_cpu" ms_per_step)" "%.2f")" \
    "$(fmt "$(json "$step_gpu" ms_per_step)" "%.2f")" "$(fmt "$(json "$step_tf32" ms_per_step)" "%.2f")"
printf '%-44s %14s %14s %14s\n' "MLP step: TFLOP/s" "$(tflops "$step_cpu" gflops)" \
    "$(tflops "$step_gpu" gflops)" "$(tflops "$step_tf32" gflops)"
echo
echo "max relative error per kernel (CUDA vs CPU, relative to the largest CPU value):"
grep '^kernel ' "$logs/test_cuda.log" | sed 's/^kernel /  /' || echo "  (none: see $logs/test_cuda.log)"
echo "logs: $logs"
exit $failed
