#!/usr/bin/env bash
# run.sh: the GPU check, in one command, on a machine with an NVIDIA GPU, the
# CUDA toolkit and driver, cuBLAS and PyTorch, and nothing else: the kit
# (scripts/gpu-kit.sh) brings meshgrad, Open MPI, HDF5, OpenBLAS and the data.
# Under 6 minutes on one H200. Prints one table; with OUT set, writes the same
# as JSON to $OUT/gpu-kit.json, the table to $OUT/gpu-kit-table.txt and the
# logs to $OUT/gpu-kit-logs.tar.gz (three files: what a device call returns).
#
# Rows (each with its threshold and pass/fail; report.py reads the logs):
#   1. every CUDA kernel against the CPU backend (test_cuda.mpi), worst
#      relative error per kernel, within its tolerance
#   2. ops with autograd on CUDA against the CPU at every placement of their
#      leaves on a 1-rank mesh (test_cuda_ops.mpi), within 1e-4
#   3. the digits job (100 steps) with --device cuda against the CPU: loss
#      curve within 1e-4 (fp32), 1e-3 (--tf32, against fp32; --dtype bf16,
#      against the CPU's bf16, and apart from fp32); the GPT job of
#      data/mobydick.conf (4 layers, 4 heads, embd 128, ctx 64, batch 32,
#      AdamW) likewise, fp32 within 1e-4 and --tf32 within 1e-3, when this
#      meshgrad has one (else "not built")
#   4. GEMM 4096^3: mg_linear fwd+bwd against raw cuBLAS, fp32, TF32, bf16:
#      >= 0.9x (and torch.mm on the same shapes for context)
#   5. the MLP step (batch 256, 1024-4096-1024) against PyTorch eager on the
#      same GPU, fp32, TF32 and bf16 GEMMs: <= 1.0x PyTorch's ms/step; the
#      GPT step (the recipe's model, AdamW and clipping included), fp32 and
#      TF32, against scripts/gpt-pytorch.py's model: <= 1.0x PyTorch
#   6. NCCL through meshgrad's comm on one rank (test_cuda_ops.mpi), and a
#      checkpoint saved by a GPU run, resumed on the CPU: bitwise equal
#
# Exit: 0 every row passed, 1 a row failed (or the machine lacks a library),
# 77 no GPU is visible (the reason is printed; nothing else runs).
#
# run.sh --rehearse: the same steps with --device cpu in place of cuda (and
# small benchmarks), on any machine: it proves the kit's plumbing (launching,
# logs, comparisons, the table) where there is no GPU. Its table says so on
# every line and its JSON status is "rehearsal": it is no GPU result.
# Environment: OUT (results folder), MG_KIT_THREADS (CPU threads, default all
# cores), CUDA_HOME (a CUDA toolkit to use first).
set -uo pipefail
rehearse=0
case ${1:-} in
"") ;;
--rehearse) rehearse=1 ;;
*) echo "usage: run.sh [--rehearse]" >&2; exit 2 ;;
esac
MG_KIT=$(cd "$(dirname "$0")" && pwd)
export MG_KIT
# shellcheck disable=SC1091
. "$MG_KIT/env.sh"
start=$(date +%s)
say() { echo "gpu-kit: $*"; }
elapsed() { echo $(($(date +%s) - start)); }
threads=${MG_KIT_THREADS:-$(nproc 2>/dev/null || echo 4)}
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-kit.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
logs=$work/logs
mkdir -p "$logs"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 CK_FORK=no
export OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=$threads
export NCCL_DEBUG=${NCCL_DEBUG:-WARN} # NCCL says why, in the logs, if it fails
mpi1=(mpirun --bind-to none -np 1) # one rank, free to use every core

# the JSON of a run that ran nothing: {"status":"skipped"|"failed","reason":...}
early_json() {
    [ -n "${OUT:-}" ] || return 0
    mkdir -p "$OUT" && printf '{"status":"%s","reason":"%s","kit":"%s"}\n' "$1" \
        "$(printf '%s' "$2" | sed 's/\\/\\\\/g; s/"/\\"/g')" "$MG_KIT_COMMIT" >"$OUT/gpu-kit.json"
}

say "meshgrad GPU check kit $MG_KIT_COMMIT (built $MG_KIT_BUILT for $MG_KIT_ARCH) in $MG_KIT"
printf '%s' "$MG_KIT_FOUND" | while read -r lib path kind; do say "found $lib: $path ($kind)"; done

# ---- is a GPU visible? --------------------------------------------------------------------
if command -v nvidia-smi >/dev/null 2>&1; then
    smi=$(nvidia-smi -L 2>&1 | head -n 4 | tr '\n' ';')
else
    smi="nvidia-smi not found"
fi
if [ -n "$MG_KIT_GLIBC_PROBLEM" ]; then
    probe="meshgrad cannot start: $MG_KIT_GLIBC_PROBLEM"
elif [ -n "$MG_KIT_MISSING" ]; then
    probe="meshgrad cannot start without $MG_KIT_MISSING"
else
    probe=$(meshgrad --version 2>&1 | sed -n 's/^cuda: //p')
    [ -n "$probe" ] || probe="meshgrad --version failed: $(meshgrad --version 2>&1 | tail -n 1)"
fi
if [ -e /dev/nvidiactl ] || [[ $smi == GPU* ]]; then gpu_dev=1; else gpu_dev=0; fi
dev=cuda
if [ $rehearse -eq 1 ]; then
    dev=cpu
    probe="REHEARSAL on the CPU: every 'cuda' run below ran with --device cpu; no GPU result (CUDA: $probe)"
    case $probe in *"cannot start"* | *"--version failed"*) say "error: $probe"; exit 1 ;; esac
fi
case $probe in
*" visible:"* | REHEARSAL*) ;; # the CUDA runtime sees a GPU, or none is wanted
*)
    if [ $gpu_dev -eq 0 ] || [[ $probe == "no device visible"* ]]; then
        reason="no GPU visible: CUDA: $probe; nvidia-smi: ${smi%;}; /dev/nvidiactl: $([ -e /dev/nvidiactl ] && echo present || echo absent)"
        say "$reason"
        say "nothing to check here (exit 77)"
        early_json skipped "$reason"
        exit 77
    fi
    reason="a GPU is there (${smi%;}) but $probe: install the CUDA runtime, cuBLAS and NCCL (pip install nvidia-nccl-cu13) or set CUDA_HOME"
    say "error: $reason"
    early_json failed "$reason"
    exit 1
    ;;
esac
say "GPU: $probe"
command -v python3 >/dev/null 2>&1 || {
    say "error: python3 not found: the report and the PyTorch rows need the machine's python3"
    early_json failed "python3 not found"
    exit 1
}

# step NAME SECONDS COMMAND...: runs it into $logs/NAME.log; its exit status in
# $logs/NAME.rc; a step past the time budget is not run ("skipped: time")
budget=330
step() {
    local name=$1 secs=$2
    shift 2
    if [ "$(elapsed)" -gt $((budget - secs / 4)) ]; then
        echo 125 >"$logs/$name.rc"
        echo "not run: the time budget of $budget s was spent" >"$logs/$name.log"
        say "$name: skipped (time)"
        return
    fi
    local t0=$(date +%s)
    timeout -k 5 "$secs" "$@" >"$logs/$name.log" 2>&1
    local rc=$?
    echo $rc >"$logs/$name.rc"
    say "$name: exit $rc in $(($(date +%s) - t0)) s"
}

data=$MG_KIT/data/digits.h5
digits=(train --config "$MG_KIT/data/digits.conf" --data "$data" --mesh 1 --steps 100 --eval-every 0
    --log-every 0 --threads "$threads")

# ---- 1, 2 and 6a: kernels, ops at every placement, NCCL --------------------------------------
step test_cuda 120 "${mpi1[@]}" test_cuda.mpi
step test_cuda_ops 180 "${mpi1[@]}" test_cuda_ops.mpi

# ---- 3: training jobs on both devices ---------------------------------------------------------
step digits_cpu 60 "${mpi1[@]}" meshgrad "${digits[@]}" --metrics "$logs/digits_cpu.jsonl"
step digits_cuda 60 "${mpi1[@]}" meshgrad "${digits[@]}" --device $dev --metrics "$logs/digits_cuda.jsonl"
step digits_cuda_tf32 60 "${mpi1[@]}" meshgrad "${digits[@]}" --device $dev --tf32 --metrics "$logs/digits_cuda_tf32.jsonl"
step digits_cpu_bf16 60 "${mpi1[@]}" meshgrad "${digits[@]}" --dtype bf16 --metrics "$logs/digits_cpu_bf16.jsonl"
step digits_cuda_bf16 60 "${mpi1[@]}" meshgrad "${digits[@]}" --device $dev --dtype bf16 --metrics "$logs/digits_cuda_bf16.jsonl"
"${mpi1[@]}" meshgrad train --help >"$logs/train_help.log" 2>&1
# the GPT: the recipe's model and optimizer (data/mobydick.conf: 4 layers, 4
# heads, embd 128, ctx 64, batch 32, AdamW, warmup and cosine, clip 1) on one
# rank, 100 steps; the rehearsal shrinks the model (2 cores, not 16)
gpt_shape=(--layers 4 --heads 4 --embd 128 --ctx 64 --batch 32)
[ $rehearse -eq 1 ] && gpt_shape=(--layers 2 --heads 2 --embd 32 --ctx 32 --batch 8)
if grep -q -- '\bgpt\b' "$logs/train_help.log"; then
    echo "gpt ${gpt_shape[*]}" >"$logs/gpt_built"
    # the corpus, as the build makes data/mobydick.h5 (the kit carries the text gzipped)
    step gpt_data 60 "${mpi1[@]}" meshgrad data text2h5 "$MG_KIT/data/mobydick.txt.gz" "$work/mobydick.h5" \
        --val-fraction 0.1
    gpt=(train --config "$MG_KIT/data/mobydick.conf" --data "$work/mobydick.h5" "${gpt_shape[@]}"
        --mesh 1 --steps 100 --eval-every 0 --log-every 0 --threads "$threads")
    step gpt_cpu 120 "${mpi1[@]}" meshgrad "${gpt[@]}" --metrics "$logs/gpt_cpu.jsonl"
    step gpt_cuda 90 "${mpi1[@]}" meshgrad "${gpt[@]}" --device $dev --metrics "$logs/gpt_cuda.jsonl"
    step gpt_cuda_tf32 90 "${mpi1[@]}" meshgrad "${gpt[@]}" --device $dev --tf32 --metrics "$logs/gpt_cuda_tf32.jsonl"
fi

# ---- 4: GEMM 4096^3; 5: the MLP step; both next to PyTorch ------------------------------------
gemm=(bench linear --m 4096 --k 4096 --n 4096 --iters 20 --device $dev)
[ $rehearse -eq 1 ] && gemm=(bench linear --m 512 --k 512 --n 512 --iters 3 --threads "$threads")
step gemm_fp32 60 "${mpi1[@]}" meshgrad "${gemm[@]}"
step gemm_tf32 60 "${mpi1[@]}" meshgrad "${gemm[@]}" --tf32
step gemm_bf16 60 "${mpi1[@]}" meshgrad "${gemm[@]}" --dtype bf16
mlp=(bench step --batch 256 --layers 1024,4096,1024 --steps 50 --device $dev)
[ $rehearse -eq 1 ] && mlp=(bench step --batch 256 --layers 1024,4096,1024 --steps 3 --threads "$threads")
step step_fp32 60 "${mpi1[@]}" meshgrad "${mlp[@]}"
step step_tf32 60 "${mpi1[@]}" meshgrad "${mlp[@]}" --tf32
step step_bf16 60 "${mpi1[@]}" meshgrad "${mlp[@]}" --dtype bf16
# the GPT step: `meshgrad bench step --model gpt` when it takes --device (else
# report.py times the step from the GPT runs of row 3: their per-step "ms")
if [ -f "$logs/gpt_built" ]; then
    "${mpi1[@]}" meshgrad bench step --model gpt --help >"$logs/bench_gpt_help.log" 2>&1
    if grep -q -- '--device' "$logs/bench_gpt_help.log"; then
        gstep=(bench step --model gpt "${gpt_shape[@]}" --steps $([ $rehearse -eq 1 ] && echo 3 || echo 50)
            --device $dev --threads "$threads")
        step gpt_step_fp32 60 "${mpi1[@]}" meshgrad "${gstep[@]}"
        step gpt_step_tf32 60 "${mpi1[@]}" meshgrad "${gstep[@]}" --tf32
    fi
fi
torch_gpt=$(IFS=,; set -- "${gpt_shape[@]}"; echo "$2,$4,$6,$8,${10}") # L,H,C,T,B
step torch 150 python3 "$MG_KIT/scripts/torch_ref.py" --gpt "$torch_gpt" \
    $([ $rehearse -eq 1 ] && echo --rehearse)

# ---- 6b: a checkpoint from the GPU, resumed on the CPU -----------------------------------------
ck=(train --config "$MG_KIT/data/digits.conf" --data "$data" --mesh 1 --steps 50 --eval-every 0
    --log-every 0 --threads "$threads")
step ckpt_gpu_save 60 "${mpi1[@]}" meshgrad "${ck[@]}" --device $dev --save "$work/gpu.h5"
step ckpt_cpu_resume 60 "${mpi1[@]}" meshgrad "${ck[@]}" --resume "$work/gpu.h5" --save "$work/cpu.h5"
step ckpt_gpu_resume 60 "${mpi1[@]}" meshgrad "${ck[@]}" --device $dev --resume "$work/gpu.h5"
step ckpt_compare 30 train_ckpt_tool compare "$work/gpu.h5" "$work/cpu.h5"

# ---- the table --------------------------------------------------------------------------------
{
    echo "kit=$MG_KIT_COMMIT built $MG_KIT_BUILT"
    echo "gpu=$probe"
    echo "nvidia-smi=${smi%;}"
    printf '%s' "$MG_KIT_FOUND" | sed 's/^/found=/'
    echo "threads=$threads"
    echo "seconds=$(elapsed)"
} >"$logs/machine.txt"
[ -n "${OUT:-}" ] && mkdir -p "$OUT"
python3 "$MG_KIT/scripts/report.py" "$logs" ${OUT:+--json "$OUT/gpu-kit.json"} \
    $([ $rehearse -eq 1 ] && echo --rehearsal) | tee "${OUT:-$work}/gpu-kit-table.txt"
rc=${PIPESTATUS[0]}
[ -n "${OUT:-}" ] && tar -czf "$OUT/gpu-kit-logs.tar.gz" -C "$logs" .
say "done in $(elapsed) s (exit $rc)"
exit $rc
