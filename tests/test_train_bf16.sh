#!/bin/sh
# test_train_bf16.sh: `--dtype bf16` (bf16 GEMM inputs, fp32 sums, weights and
# optimizer state) on the CPU. The digits job (1 rank, 300 steps) learns as
# well as in fp32 (>= 95% test accuracy); its loss curve differs from the fp32
# one (the rounding happens: > 1e-6 somewhere) by a bounded amount (<= 2e-2
# relative at every step; about 2e-3 measured), and on 2 ranks (dp) it follows
# the 1-rank bf16 curve within 1e-4 over the first 100 steps (ranks sum in
# another order: about 1e-7 measured; later a bf16 rounding that flips lets it
# grow). The benchmarks take --dtype bf16, and a bad --dtype is refused.
. "$(dirname "$0")/check.sh"
program_test_env train-bf16
: "${top_srcdir:=.}"

job="--config $top_srcdir/data/digits.conf --data $top_builddir/data/digits.h5 --steps 300
     --eval-every 0 --log-every 0 --threads 1"

# train TAG NP ARGS...: metrics in $tmp/TAG.jsonl, output in $tmp/TAG.out
train() {
    tag=$1 np=$2
    shift 2
    # shellcheck disable=SC2086
    train_run "$tag" "$np" $job --mesh "$np" "$@"
    rc=$?
    check "$tag: exits 0" test "$rc" -eq 0
    [ "$rc" -eq 0 ] || show_log "$tmp/$tag.out"
}

losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1"; }
accuracy() { sed -n 's/.*"eval_accuracy":\([0-9.eE+-]*\).*/\1/p' "$1" | tail -n 1; }

# within TAG REF STEPS MIN MAX: over the first STEPS steps, the worst relative
# loss difference of TAG from REF is > MIN and <= MAX (prints it)
within() {
    losses "$tmp/$2.jsonl" >"$tmp/ref.txt"
    losses "$tmp/$1.jsonl" >"$tmp/got.txt"
    awk -v steps="$3" -v lo="$4" -v hi="$5" '
        NR == FNR { ref[$1] = $2; next }
        $1 <= steps { n++; d = $2 - ref[$1]; if (d < 0) d = -d; r = ref[$1] < 0 ? -ref[$1] : ref[$1];
          rel = d / (r > 1e-30 ? r : 1e-30); if (!($1 in ref)) rel = 1e30;
          if (rel > worst) { worst = rel; at = $1 } }
        END { printf "%d steps, worst relative difference %.2e at step %d (want > %g, <= %g)\n",
                     n, worst, at, lo, hi;
              exit !(n == steps && worst > lo && worst <= hi) }' "$tmp/ref.txt" "$tmp/got.txt"
}

train fp32 1
train bf16 1 --dtype bf16
train bf16-np2 2 --dtype bf16 --parallel dp

acc=$(accuracy "$tmp/bf16.jsonl") acc32=$(accuracy "$tmp/fp32.jsonl")
check "bf16 learns the digits: >= 95% test accuracy (got ${acc:-none}; fp32 ${acc32:-none})" \
    awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 0.95) }'
check "... within 2 points of fp32" awk -v a="${acc:-0}" -v b="${acc32:-1}" \
    'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.02) }'
check_output "bf16 differs from fp32, by a bounded amount" within bf16 fp32 300 1e-6 2e-2
check_output "bf16 on 2 ranks (dp) follows 1 rank for 100 steps" within bf16-np2 bf16 100 -1 1e-4

check_output "bench linear --dtype bf16 runs, in bf16" sh -c \
    "'$prog' bench linear --m 64 --k 96 --n 80 --iters 2 --threads 1 --dtype bf16 | tail -n 1 |
     grep '\"math\":\"bf16\"'"
check_output "bench step --dtype bf16 runs, in bf16" sh -c \
    "'$prog' bench step --batch 16 --layers 32,64,8 --steps 2 --threads 1 --dtype bf16 | tail -n 1 |
     grep '\"math\":\"bf16\"'"
check_refused "--dtype fp16 is refused" 1 "dtype 'fp16' is not one of fp32, bf16" \
    "$prog" train $job --dtype fp16

check_summary
