#!/bin/sh
# test_train_gpt_bf16.sh: `meshgrad train --model gpt --dtype bf16` (bf16 GEMM
# inputs, fp32 sums, weights, optimizer state, norms, softmax and loss) on the
# tiny GPT of test_train_gpt.sh (2 layers, 4 heads, width 16, context 16, AdamW
# with warmup, cosine decay and clipping, 12 steps), under every plan:
# - 1 rank, 2 dp, 2 tp, 2 sp, 2 tp+sp, 2 fsdp, 2x2 dp,tp, 2x2 fsdp,tp, and a
#   4-block GPT on pp=2 and pp,dp 2x2: each starts from the fp32 run's
#   parameters (param_checksum), every loss and the val_loss within 1e-3
#   (relative) of the 1-rank fp32 run's (about 3e-5 measured) and within 1e-4
#   of the 1-rank bf16 run's (the ranks sum in another order);
# - the 1-rank bf16 run is not the fp32 one (a loss apart by more than 1e-7:
#   the rounding happens);
# - MG_CPU_BF16=emulate (the path of a CPU without AVX512-BF16, forced here):
#   `meshgrad --version` names the emulation, the run prints no warning (it was
#   asked for) and follows the kernel's 1-rank bf16 run within 1e-4;
# - the memory line counts the weights' bf16 copies, half their fp32 bytes
#   (wte and the blocks' four matrices) on 1 rank, none under fsdp (gathered
#   weights are rounded as they are read).
. "$(dirname "$0")/check.sh"
program_test_env train-gpt-bf16
text=$top/data/mobydick.h5
STEPS=12

gpt="--model gpt --data $text --heads 4 --embd 16 --ctx 16 --batch 8 --seed 3 \
--threads 1 --log-every 0 --eval-every 0 --optimizer adamw --lr 3e-3 --betas 0.9,0.95 \
--weight-decay 0.1 --schedule cosine --warmup 3 --lr-min 1e-4 --clip 1.0 --steps $STEPS"

lm=$gpt
. "$(dirname "$0")/lm_check.sh"

# apart GOT REF: some loss of GOT is more than 1e-7 (relative) from REF's
apart() {
    losses "$2" >"$tmp/ref.txt"
    losses "$1" >"$tmp/got.txt"
    awk 'NR == FNR { ref[$1] = $2; next }
         { d = $2 - ref[$1]; if (d < 0) d = -d; r = ref[$1] < 0 ? -ref[$1] : ref[$1];
           if (d / (r > 1e-30 ? r : 1e-30) > worst) worst = d / (r > 1e-30 ? r : 1e-30) }
         END { printf "worst relative difference %.2e", worst; exit !(worst > 1e-7) }' \
        "$tmp/ref.txt" "$tmp/got.txt"
}

# follows_both TAG F32 B16: TAG starts from F32's parameters, is within 1e-3 of
# F32 and within 1e-4 of B16
follows_both() {
    if [ "$(checksum "$1")" != "$(checksum "$2")" ]; then
        fail "$1: param_checksum $(checksum "$1"), the fp32 run's $(checksum "$2")"
        return
    fi
    check_output "$1: within 1e-3 of 1-rank fp32" close "$1" "$2" 1e-3
    check_output "$1: within 1e-4 of 1-rank bf16" close "$1" "$3" 1e-4
}

# ---- 1 rank ---------------------------------------------------------------------------
train fp32 1 --layers 2 || { check_summary; exit 1; }
train bf16 1 --layers 2 --dtype bf16 || { check_summary; exit 1; }
check_output "bf16, 1 rank: within 1e-3 of fp32" close bf16 fp32 1e-3
check_output "bf16, 1 rank: not the fp32 curve (the rounding happens)" apart bf16 fp32

# ---- every plan -----------------------------------------------------------------------
for p in 2:2:dp 2:2:tp 2:2:sp 2:2:tp+sp 2:2:fsdp 4:2x2:dp,tp 4:2x2:fsdp,tp; do
    IFS=: read -r np mesh plan <<EOF
$p
EOF
    tag=bf16-$mesh-$plan
    train "$tag" "$np" --layers 2 --dtype bf16 --mesh "$mesh" --parallel "$plan" &&
        follows_both "$tag" fp32 bf16
done

# pipelines: a GPT of 4 blocks
if train fp32-4 1 --layers 4 && train bf16-4 1 --layers 4 --dtype bf16; then
    check_output "bf16, 4 blocks, 1 rank: within 1e-3 of fp32" close bf16-4 fp32-4 1e-3
    for p in 2:2:pp 4:2x2:pp,dp; do
        IFS=: read -r np mesh plan <<EOF
$p
EOF
        tag=bf16-4-$mesh-$plan
        train "$tag" "$np" --layers 4 --dtype bf16 --mesh "$mesh" --parallel "$plan" \
            --microbatches 4 && follows_both "$tag" fp32-4 bf16-4
    done
fi

# ---- the emulation, forced --------------------------------------------------------------
check_output "MG_CPU_BF16=emulate: --version names the emulation" sh -c \
    "MG_CPU_BF16=emulate '$prog' --version | grep 'bf16 GEMM.*emulated, as MG_CPU_BF16=emulate asks'"
if MG_CPU_BF16=emulate train emulated 1 --layers 2 --dtype bf16; then
    check_output "emulated: within 1e-4 of the kernel's bf16" close emulated bf16 1e-4
    check "emulated: no warning (it was asked for)" sh -c "! grep -q warning '$tmp/emulated.out'"
fi

# ---- memory -------------------------------------------------------------------------------
# casts: the bf16 bytes of wte (256 x 16) and of 2 blocks' qkv, proj, fc, fc2 (12 x 16 x 16)
want=$(((256 * 16 + 2 * 12 * 16 * 16) * 2))
casts() { sed -n 's/.*"memory":{.*"casts":\([0-9]*\).*/\1/p' "$tmp/$1.jsonl"; }
check "memory counts the weights' bf16 copies: $want B (got $(casts bf16))" \
    test "$(casts bf16)" = "$want"
check "... none under fsdp (got $(casts bf16-2-fsdp))" test "$(casts bf16-2-fsdp)" = 0
check "... none in fp32 (got $(casts fp32))" test "$(casts fp32)" = 0

check_summary
