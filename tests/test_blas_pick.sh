#!/bin/sh
# test_blas_pick.sh: the OpenBLAS kernels the meshgrad program runs
# (src/backend/blas_core.h), end to end on this machine's CPU:
# - with no variable set, `--version` names the best core for this CPU;
# - MG_CPU_ISA=avx2 names Haswell and MG_CPU_ISA=avx512 SkylakeX or Cooperlake
#   (the program set OPENBLAS_CORETYPE and ran itself again), each winning over
#   a user's OPENBLAS_CORETYPE; a user's OPENBLAS_CORETYPE alone is kept and
#   said, with no warning;
# - the run again keeps argv and the exit code, works under `mpirun -np 2`
#   (every rank, then MPI), and does not loop: with the guard already set it
#   warns once, on rank 0, and carries on;
# - malloc asks for transparent huge pages (GLIBC_TUNABLES
#   glibc.malloc.hugetlb=1, set the same way) unless the user set it;
# - a short GPT training (GEMMs, layer norm, softmax) under avx2, avx512 and no
#   variable gives the same losses within 1e-5 (other kernels, other sums).
# Needs AVX2 (exit 77 without); the avx512 checks need AVX-512 (77 without).
. "$(dirname "$0")/check.sh"
program_test_env blas-pick
unset OPENBLAS_CORETYPE MG_CPU_ISA MG_BLAS_CORE_SET
check_failed() { show_out_err; }

has() { grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -qx "$1"; }
if ! has avx2 || ! has fma; then
    echo "SKIP: this CPU has no AVX2 and FMA: no OpenBLAS core to force here"
    exit 77
fi
avx512=1
for f in avx512f avx512bw avx512vl avx512dq avx512cd; do has $f || avx512=0; done
best=Haswell
[ $avx512 -eq 1 ] && best=SkylakeX
[ $avx512 -eq 1 ] && has avx512_bf16 && best=Cooperlake

# version VAR=VALUE...: `meshgrad --version` under those variables; the CPU
# backend's words in $tmp/blas ("Haswell kernels from ..."), rc, out, err
version() {
    env "$@" "$TIMEOUT" 60 "$prog" --version >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
    sed -n 's/^backends: cpu (OpenBLAS, \(.*\))\(, cuda\)\{0,1\}$/\1/p' "$tmp/out" >"$tmp/blas"
}
says() { grep -Eq "$1" "$tmp/blas"; }

version
check "no variable: the best core for this CPU ($(cat "$tmp/blas"))" \
    says "^[A-Za-z0-9]+ kernels: the best for this CPU"
if [ $avx512 -eq 1 ]; then
    check "... AVX-512 kernels on this AVX-512 CPU, $best's" says "^$best kernels"
fi
check "... and nothing on stderr" test ! -s "$tmp/err"

version MG_CPU_ISA=avx2
check "MG_CPU_ISA=avx2: Haswell kernels ($(cat "$tmp/blas"))" \
    says "^(Haswell|Zen|Excavator) kernels from MG_CPU_ISA=avx2"
check "... exit 0, nothing on stderr" test "$rc" -eq 0 -a ! -s "$tmp/err"
version MG_CPU_ISA=avx2 OPENBLAS_CORETYPE=Sandybridge
check "MG_CPU_ISA=avx2 wins over OPENBLAS_CORETYPE" says "^Haswell kernels from MG_CPU_ISA=avx2"
version OPENBLAS_CORETYPE=Sandybridge
check "the user's OPENBLAS_CORETYPE is kept and said ($(cat "$tmp/blas"))" \
    says "^Sandybridge kernels from OPENBLAS_CORETYPE; this CPU runs $best: unset it for"
check "... with no warning" test ! -s "$tmp/err"

if [ $avx512 -eq 1 ]; then
    version MG_CPU_ISA=avx512
    check "MG_CPU_ISA=avx512: AVX-512 kernels ($(cat "$tmp/blas"))" \
        says "^(SkylakeX|Cooperlake) kernels from MG_CPU_ISA=avx512"
    version MG_CPU_ISA=avx512 OPENBLAS_CORETYPE=Haswell
    check "MG_CPU_ISA=avx512 wins over OPENBLAS_CORETYPE=Haswell" \
        says "^(SkylakeX|Cooperlake) kernels from MG_CPU_ISA=avx512"
else
    echo "skipped: the MG_CPU_ISA=avx512 checks (this CPU has no AVX-512)"
fi

# the heap: malloc on huge pages unless the user's GLIBC_TUNABLES says otherwise
version
check "no variable: malloc asks for huge pages (the program set GLIBC_TUNABLES)" \
    grep -qx "heap: glibc.malloc.hugetlb=1 (transparent huge pages)" "$tmp/out"
version GLIBC_TUNABLES=glibc.malloc.hugetlb=0
check "the user's glibc.malloc.hugetlb=0 is kept" grep -qx "heap: glibc.malloc.hugetlb=0" "$tmp/out"
version GLIBC_TUNABLES=glibc.malloc.perturb=0
check "another tunable of the user's: huge pages added beside it" \
    grep -qx "heap: glibc.malloc.hugetlb=1 (transparent huge pages)" "$tmp/out"

# the program run again: argv (an argument with a space) and the exit code
env MG_CPU_ISA=avx2 "$TIMEOUT" 60 "$prog" "no such command" >"$tmp/out" 2>"$tmp/err" </dev/null
rc=$?
check "run again: a usage error still exits 2" test "$rc" -eq 2
check "... naming argv's command, space and all, once" \
    test "$(grep -c "^meshgrad: error: unknown command 'no such command'" "$tmp/err")" -eq 1
env MG_CPU_ISA=avx2 "$TIMEOUT" 60 "$prog" data info "$tmp/none.h5" >"$tmp/out" 2>"$tmp/err" </dev/null
rc=$?
check "... a failed command still exits 1" test "$rc" -eq 1

# under mpirun: every rank runs itself again, then starts MPI
lin="bench linear --m 64 --k 48 --n 32 --iters 2 --threads 1"
MG_CPU_ISA=avx2 "$TIMEOUT" -k 10 120 "$MPIRUN" -np 2 "$prog" $lin >"$tmp/out" 2>"$tmp/err" </dev/null
rc=$?
check "mpirun -np 2, MG_CPU_ISA=avx2: bench linear exits 0 with its arguments" \
    grep -q "m=64 k=48 n=32 .* openblas=Haswell" "$tmp/out"
check "... no warning" test "$rc" -eq 0 -a ! -s "$tmp/err"
MG_CPU_ISA=avx2 "$TIMEOUT" -k 10 120 "$MPIRUN" -np 2 "$prog" --version >"$tmp/out" 2>"$tmp/err" </dev/null
check "... both ranks run Haswell" \
    test "$(grep -c "cpu (OpenBLAS, Haswell kernels from MG_CPU_ISA=avx2" "$tmp/out")" -eq 2

# the guard: a process that already ran again does not loop; it warns, once
MG_CPU_ISA=avx2 MG_BLAS_CORE_SET=Haswell "$TIMEOUT" -k 10 120 "$MPIRUN" -np 2 "$prog" $lin \
    >"$tmp/out" 2>"$tmp/err" </dev/null
rc=$?
check "the guard already set: no second run, exit 0" test "$rc" -eq 0
check "... one warning line, rank 0's, with the fix" \
    test "$(grep -c '^meshgrad: warning: MG_CPU_ISA=avx2 asks for Haswell kernels but OpenBLAS runs .*: set OPENBLAS_CORETYPE=Haswell too$' "$tmp/err")" -eq 1 -a \
    "$(wc -l <"$tmp/err")" -eq 1

# the same losses on every core
gpt="train --model gpt --data $top/data/mobydick.h5 --layers 2 --heads 2 --embd 32 --ctx 16 \
--batch 8 --seed 5 --threads 1 --log-every 0 --eval-every 0 --optimizer adamw --lr 3e-3 \
--steps 8"
# train TAG NP VAR=VALUE...: the GPT under those variables, metrics in $tmp/TAG.jsonl
train() {
    tag=$1 np=$2
    shift 2
    env "$@" "$TIMEOUT" -k 5 120 "$MPIRUN" -np "$np" "$prog" $gpt --metrics "$tmp/$tag.jsonl" \
        >"$tmp/$tag.out" 2>&1 </dev/null && return 0
    fail "$tag: the run failed"
    sed 's/^/  | /' "$tmp/$tag.out"
    return 1
}
# the reference of each rank count: no variable
for np in 1 2; do
    train auto$np $np &&
        pass "the GPT on $np rank(s), no variable: $(metrics_losses "$tmp/auto$np.jsonl" | tail -n 1)"
done
runs="avx2:1:MG_CPU_ISA=avx2 avx2-np2:2:MG_CPU_ISA=avx2"
[ $avx512 -eq 1 ] && runs="$runs avx512:1:MG_CPU_ISA=avx512 avx512-np2:2:MG_CPU_ISA=avx512"
for run in $runs; do
    IFS=: read -r tag np var <<EOF
$run
EOF
    train "$tag" "$np" "$var" &&
        check_output "$var, $np rank(s): the same losses within 1e-5" \
            losses_close "$tmp/$tag.jsonl" "$tmp/auto$np.jsonl" 8 1e-5
done

check_summary
