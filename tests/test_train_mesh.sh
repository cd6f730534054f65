#!/bin/sh
# test_train_mesh.sh: mesh invariance of `meshgrad train`. The same job (seed,
# data, 100 steps, AdamW with warmup, cosine decay and clipping; SGD with
# momentum for the permute-mlp) runs on 1 rank and on meshes 2 and 4 (dp, tp,
# fsdp), 1x2 (dp,tp), 2x1 (fsdp,tp) and 2x2 (dp,tp, fsdp,tp, tp,fsdp); the
# permute-mlp on 2 (tp), 4 (fsdp), 1x2 (dp,tp) and 2x2 (fsdp,tp). Every run
# must start from bitwise equal parameters (the
# param_checksum metrics line) and every step's loss must be within 1e-4
# (relative) of the 1-rank run. (Ranks sum in another order, so losses differ
# by about 1e-7; a ReLU input that lands within that of zero flips its
# gradient, and a large learning rate can grow that to 1e-4 within 100 steps:
# the settings below keep well clear of it.)
. "$(dirname "$0")/check.sh"
program_test_env train-mesh
STEPS=100
RTOL=1e-4

common="--data $data --steps $STEPS --batch 30 --seed 11 --log-every 0 --threads 1"
mlp="--model mlp --hidden 24 --optimizer adamw --lr 3e-3 --schedule cosine --warmup 10 --clip 1.0"
pmlp="--model permute-mlp --hidden 20 --channels 6 --optimizer sgd --lr 0.03 --momentum 0.9 --clip 1.0"

# case TAG NP MESH PLAN MODEL REF: TAG starts from REF's parameters and follows its losses
case_() { train_invariant "$1" "$2" "$6" "$STEPS" "$RTOL" $common $5 --mesh "$3" --parallel "$4"; }

# the references
for m in mlp pmlp; do
    eval flags=\$$m
    train_reference "$m-1-dp" $STEPS $common $flags --mesh 1 --parallel dp
done

for plan in dp tp fsdp; do
    case_ "mlp-2-$plan" 2 2 $plan "$mlp" mlp-1-dp
    case_ "mlp-4-$plan" 4 4 $plan "$mlp" mlp-1-dp
done
case_ "mlp-1x2-dp,tp" 2 1x2 dp,tp "$mlp" mlp-1-dp
case_ "mlp-2x1-fsdp,tp" 2 2x1 fsdp,tp "$mlp" mlp-1-dp
for plan in dp,tp fsdp,tp tp,fsdp; do case_ "mlp-2x2-$plan" 4 2x2 $plan "$mlp" mlp-1-dp; done
case_ "pmlp-2-tp" 2 2 tp "$pmlp" pmlp-1-dp
case_ "pmlp-4-fsdp" 4 4 fsdp "$pmlp" pmlp-1-dp
case_ "pmlp-1x2-dp,tp" 2 1x2 dp,tp "$pmlp" pmlp-1-dp
case_ "pmlp-2x2-fsdp,tp" 4 2x2 fsdp,tp "$pmlp" pmlp-1-dp

check_summary
