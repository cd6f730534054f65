#!/bin/sh
# regress.sh: the regression runs of `meshgrad train` across meshes, plans and
# models, across checkpoint/resume onto other meshes, and across a rank killed
# mid-run. Every run's loss curve (its --metrics JSON lines) is compared step
# by step with the 1-rank reference of the same model; a run passes when it
# exits 0 and every step's loss is within 1e-4 (relative) of the reference.
# Prints one table, writes summary.json, the loss curves as losses.png
# (gnuplot) and every run's log and metrics under the output directory, and
# exits non-zero when any run fails or diverges. See docs/REGRESSION.md.
# With --deterministic every run trains with `--deterministic` and passes only
# when every step's loss equals the reference's as printed and its final
# parameters and optimizer state differ from the reference's in 0 bits.
#
# usage: scripts/regress.sh [--quick] [--deterministic] [--models LIST] [--hostfile FILE]
#                           [--launcher mpirun|srun] [--build DIR] [--out DIR]
#   --quick          60 steps (the GPT and the Llama 40), a subset (each plan once per
#                    model): minutes
#   --deterministic  the GPT and the Llama recipes' models on the layouts that mode
#                    takes (dp, tp, fsdp, 2x2 dp,tp and fsdp,tp, pp, pp,dp; the
#                    Llama's 2 kv heads of 32 cannot split over tp): 0 bits apart
#   --models LIST    the models to run, of "mlp pmlp ppmlp gpt gptsmall llama" (default
#                    all; the kill leg runs with mlp; gptsmall: a small GPT on pp,dp,tp
#                    2x2x2; llama: data/mobydick-llama.conf's model)
#   --hostfile FILE  give mpirun this hostfile; ranks are spread over its hosts
#   --launcher L     mpirun (default; root-safe, --oversubscribe) or srun
#   --build DIR      the build directory with meshgrad and data/digits.h5
#                    (default ./build)
#   --out DIR        where results go (default runs/regress-<date>)
# Environment: MPIRUN_ARGS / SRUN_ARGS (extra launcher options), RUN_TIMEOUT
# (seconds per run, default 300), MG_COLLECTIVE_TIMEOUT (default here 60).
set -u
# shellcheck disable=SC2034,SC2154 # per-model settings are read through eval

usage() { awk 'NR >= 14 { if (!/^#/) exit; sub(/^# ?/, ""); print }' "$0"; }

quick=0 det=0 models_given=0 hostfile='' launcher=mpirun build=./build out='' models='mlp pmlp ppmlp gpt gptsmall llama'
need() { [ $# -ge 2 ] || { echo "regress.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case $1 in
    --quick) quick=1 ;;
    --deterministic) det=1 ;;
    --models) need "$@"; models=$(echo "$2" | tr ',' ' ') models_given=1; shift ;;
    --models=*) models=$(echo "${1#*=}" | tr ',' ' ') models_given=1 ;;
    --hostfile) need "$@"; hostfile=$2; shift ;;
    --hostfile=*) hostfile=${1#*=} ;;
    --launcher) need "$@"; launcher=$2; shift ;;
    --launcher=*) launcher=${1#*=} ;;
    --build) need "$@"; build=$2; shift ;;
    --build=*) build=${1#*=} ;;
    --out) need "$@"; out=$2; shift ;;
    --out=*) out=${1#*=} ;;
    -h | --help) usage; exit 0 ;;
    *) echo "regress.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
if [ $det -eq 1 ]; then
    [ $models_given -eq 1 ] || models='gpt llama'
    for m in $models; do
        case $m in gpt | llama) ;; *) echo "regress.sh: --deterministic runs the gpt and llama models, not '$m'" >&2; exit 2 ;; esac
    done
fi
for m in $models; do
    case $m in
    mlp | pmlp | ppmlp | gpt | gptsmall | llama) ;;
    *) echo "regress.sh: --models takes mlp, pmlp, ppmlp, gpt, gptsmall and llama, not '$m'" >&2; exit 2 ;;
    esac
done
case $launcher in
mpirun | srun) ;;
*) echo "regress.sh: --launcher must be mpirun or srun, not '$launcher'" >&2; exit 2 ;;
esac
command -v "$launcher" >/dev/null 2>&1 || { echo "regress.sh: $launcher is not on PATH" >&2; exit 2; }
if [ -n "$hostfile" ]; then
    [ -r "$hostfile" ] || { echo "regress.sh: cannot read hostfile '$hostfile'" >&2; exit 2; }
    hostfile=$(cd "$(dirname "$hostfile")" && pwd)/$(basename "$hostfile")
fi
[ -d "$build" ] || { echo "regress.sh: no build directory '$build' (run scripts/setup.sh, or give --build DIR)" >&2; exit 2; }
build=$(cd "$build" && pwd)
prog=$build/meshgrad
data=$build/data/digits.h5
[ -x "$prog" ] || { echo "regress.sh: $prog is missing: build first (scripts/setup.sh or make -C $build)" >&2; exit 2; }
if [ $det -eq 1 ]; then
    for t in h5dump python3; do
        command -v $t >/dev/null 2>&1 || { echo "regress.sh: --deterministic counts differing bits with $t, which is not on PATH" >&2; exit 2; }
    done
fi
for f in "$data" "$build/data/mobydick.h5"; do
    [ -r "$f" ] || { echo "regress.sh: $f is missing: run make in $build" >&2; exit 2; }
done
[ -n "$out" ] || out=runs/regress-$(date +%Y%m%d-%H%M%S)
# the runs replace what an earlier run of this script left there, nothing else:
# an earlier run's results.tsv is empty or rows of the ten fields record() writes
# (a results.tsv of another kind does not make a folder this script's)
if [ -d "$out" ] && [ -n "$(ls -A "$out")" ] && { [ ! -f "$out/results.tsv" ] ||
    ! awk -F '\t' 'NF != 10 { exit 1 }' "$out/results.tsv"; }; then
    echo "regress.sh: --out $out holds files and is not an earlier run's output (no results.tsv of this script's): give a new or empty directory" >&2
    exit 2
fi
# an earlier run's checkpoints would refuse this run's saves: they are this script's own
rm -rf "$out/ckpt"
mkdir -p "$out/runs" "$out/curves" "$out/ckpt" && : >>"$out/results.tsv" || exit 2
out=$(cd "$out" && pwd)

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
export MG_COLLECTIVE_TIMEOUT="${MG_COLLECTIVE_TIMEOUT:-60}"
# every rank carries this in its environment; the kill leg finds its victim by it
MG_REGRESS_TAG=regress-$$
export MG_REGRESS_TAG
: "${RUN_TIMEOUT:=300}" "${MPIRUN_ARGS:=}" "${SRUN_ARGS:=}"
RTOL=1e-4
[ $det -eq 1 ] && RTOL=0

if [ $quick -eq 1 ]; then STEPS=60 EVAL=0 KILL_STEPS=600; else STEPS=200 EVAL=50 KILL_STEPS=1000; fi
MID=$((STEPS / 2))
common="--data $data --steps $STEPS --batch 30 --seed 11 --threads 1 --log-every 0 --eval-every $EVAL"
[ $det -eq 1 ] && common="$common --deterministic"
mlp_model=mlp
mlp_flags="--model mlp --hidden 24 --optimizer adamw --lr 3e-3 --schedule cosine --warmup 10 --clip 1.0"
pmlp_model=permute-mlp
# seed 12: with seed 11 this job's step 91 sits on a knife edge (the 1-rank run's
# gradient norm is 2.00520, every multi-rank run's 2.00619, the losses equal to
# 1e-7: most likely a ReLU input that rounds to the other side of 0), and SGD
# with momentum carries that 5e-4 on (1e-1 by step 200); seeds 12, 13 and 14
# agree to 2e-6 for 200 steps
pmlp_flags="--model permute-mlp --hidden 20 --channels 6 --optimizer sgd --lr 0.05 --momentum 0.9 --clip 2.0 --seed 12"
# the GPT: the recipe's model (data/mobydick.conf), 100 steps (40 with --quick)
gpt_model=gpt
gpt_flags="--model gpt --data $build/data/mobydick.h5 --layers 4 --heads 4 --embd 128 --ctx 64 --batch 32 \
--optimizer adamw --lr 1e-3 --betas 0.9,0.95 --weight-decay 0.1 --schedule cosine --warmup 10 --lr-min 1e-4 \
--clip 1.0"
if [ $quick -eq 1 ]; then gpt_steps=40; else gpt_steps=100; fi
# a small GPT for the 8-rank pipeline (pp,dp,tp 2x2x2, oversubscribed). Seed 12:
# with seed 11 step 59 of this job sits on a knife edge (every multi-rank run,
# 2x2 dp,tp without pp too, is 4e-5 off the 1-rank loss there and 2e-6 around
# it); with seed 12 pp,dp,tp and dp,tp stay within 1.1e-7 for 100 steps
gptsmall_model=gpt-small
gptsmall_flags="--model gpt --data $build/data/mobydick.h5 --layers 4 --heads 4 --embd 32 --ctx 32 --batch 16 \
--optimizer adamw --lr 1e-3 --betas 0.9,0.95 --weight-decay 0.1 --schedule cosine --warmup 10 --lr-min 1e-4 \
--clip 1.0 --seed 12"
gptsmall_pp_flags="--microbatches 4"
gptsmall_steps=$gpt_steps
# the Llama: the recipe's model (data/mobydick-llama.conf), as many steps as the GPT
llama_model=llama
llama_flags="--model llama --data $build/data/mobydick.h5 --layers 4 --heads 4 --kv-heads 2 --embd 128 \
--multiple-of 32 --ctx 64 --batch 32 --optimizer adamw --lr 1e-3 --betas 0.9,0.95 --weight-decay 0.1 \
--schedule cosine --warmup 10 --lr-min 1e-4 --clip 1.0"
llama_steps=$gpt_steps
# the pipeline runs (--parallel with pp): the mlp with 4 layers, 4 micro-batches
ppmlp_model=mlp-depth4
ppmlp_flags="--model mlp --depth 4 --hidden 24 --optimizer adamw --lr 3e-3 --schedule cosine --warmup 10 --clip 1.0"
ppmlp_pp_flags="--microbatches 4"
kill_model=mlp
kill_flags="--model mlp --hidden 256 --optimizer adamw --lr 1e-3 --schedule constant"

results=$out/results.tsv
: >"$results"
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
safe() { printf '%s' "$1" | tr ',>' '+_'; } # a run name as a file name

# launch NP ARGS...: meshgrad ARGS on NP ranks under the launcher and a timeout
launch() {
    np=$1
    shift
    if [ "$launcher" = srun ]; then
        # shellcheck disable=SC2086
        timeout -k 10 "$RUN_TIMEOUT" srun -n "$np" --kill-on-bad-exit=1 $SRUN_ARGS "$prog" "$@"
    elif [ -n "$hostfile" ]; then
        # shellcheck disable=SC2086
        timeout -k 10 "$RUN_TIMEOUT" mpirun --oversubscribe --hostfile "$hostfile" --map-by node \
            -np "$np" -x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS -x MG_COLLECTIVE_TIMEOUT -x MG_REGRESS_TAG \
            $MPIRUN_ARGS "$prog" "$@"
    else
        # shellcheck disable=SC2086
        timeout -k 10 "$RUN_TIMEOUT" mpirun --oversubscribe -np "$np" $MPIRUN_ARGS "$prog" "$@"
    fi
}

# steps_of MODEL-KEY: that model's steps (the GPT's differ: KEY_steps)
steps_of() { eval "echo \${${1}_steps:-$STEPS}"; }

# train NAME NP MESH PLAN MODEL-KEY EXTRA...: one run; sets rc and secs
train() {
    name=$1 np=$2 mesh=$3 plan=$4 key=$5
    shift 5
    eval "flags=\$${key}_flags"
    # the pipeline's flags only where the plan has pp (train refuses them elsewhere)
    case ",$plan," in *,pp,*) eval "flags=\"\$flags \${${key}_pp_flags:-}\"" ;; esac
    eval "ksteps_=\${${key}_steps:-}"
    [ -z "$ksteps_" ] || flags="$flags --steps $ksteps_"
    f=$out/runs/$(safe "$name")
    t0=$(now)
    # shellcheck disable=SC2086
    launch "$np" train $common $flags --mesh "$mesh" --parallel "$plan" --metrics "$f.jsonl" "$@" \
        >"$f.log" 2>&1
    rc=$?
    secs=$(since "$t0")
}

# compare NAME REF FIRST LAST: compares the losses of steps FIRST..LAST of run
# NAME with those of run REF; writes NAME's curve (step loss reldiff) for the
# plot; prints "maxrel ok|why" (ok: every step there, each within RTOL).
compare() {
    a=$out/runs/$(safe "$1").jsonl b=$out/runs/$(safe "$2").jsonl
    [ -r "$a" ] || { echo "- no metrics written"; return; }
    awk -v rtol="$RTOL" -v first="$3" -v last="$4" -v curve="$out/curves/$(safe "$1").dat" '
        function loss(line) { sub(/.*"loss":/, "", line); sub(/[,}].*/, "", line); return line + 0 }
        function step(line) { sub(/.*"step":/, "", line); sub(/,.*/, "", line); return line + 0 }
        FNR == 1 { part++ }
        /"step":[0-9]+,"loss":/ {
            s = step($0); l = loss($0)
            if (part == 1) { ref[s] = l; next }
            if (s < first || s > last || (s in got)) next
            got[s] = l; n++
        }
        END {
            worst = 0; why = "ok"
            for (s = first; s <= last; s++) {
                if (!(s in got)) { why = "step " s " missing"; break }
                if (!(s in ref)) { why = "reference lacks step " s; break }
                d = got[s] - ref[s]; if (d < 0) d = -d
                r = ref[s] < 0 ? -ref[s] : ref[s]
                rel = d / (r > 1e-30 ? r : 1e-30)
                if (rel != rel || got[s] != got[s]) { why = "NaN at step " s; rel = 1e30 }
                if (rel > worst) worst = rel
                if (rel > rtol && !over) over = s
                printf "%d %.9g %.6g\n", s, got[s], rel > curve
            }
            if (why == "ok" && worst > rtol)
                why = sprintf("diverges from step %d on: up to %.2e > %s", over, worst, rtol)
            printf "%.2e %s\n", worst, why
        }' "$b" "$a"
}

# accuracy NAME: the last eval_accuracy of a run, or "-"
accuracy() {
    sed -n 's/.*"eval_accuracy":\([^,}]*\).*/\1/p' "$out/runs/$(safe "$1").jsonl" 2>/dev/null |
        tail -n 1 | awk 'NF { printf "%.4f", $1; found = 1 } END { if (!found) printf "-" }'
}

# final_loss NAME: the loss of the last step of a run, or "-"
final_loss() {
    sed -n 's/.*"step":[0-9]*,"loss":\([^,}]*\).*/\1/p' "$out/runs/$(safe "$1").jsonl" 2>/dev/null |
        tail -n 1 | awk 'NF { print; found = 1 } END { if (!found) print "-" }'
}

# record NAME NP MESH PLAN MODEL MAXREL ACC SECS VERDICT NOTE
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$results"; }

# diff_bits NAME REF STEP: the bits in which the parameters and optimizer state
# of NAME's and REF's checkpoints of STEP differ ("-" when one is missing)
diff_bits() {
    fa=$(ckpt_at "$out/ckpt/$(safe "$1")" "$3") fb=$(ckpt_at "$out/ckpt/$(safe "$2")" "$3")
    if [ -z "$fa" ] || [ -z "$fb" ] ||
        ! h5dump -b LE -o "$out/bits-a.bin" -g /params -g /optim "$fa" >/dev/null 2>&1 ||
        ! h5dump -b LE -o "$out/bits-b.bin" -g /params -g /optim "$fb" >/dev/null 2>&1; then
        echo "-"
        return
    fi
    python3 - "$out/bits-a.bin" "$out/bits-b.bin" <<'PY'
import sys
a, b = (open(f, 'rb').read() for f in sys.argv[1:3])
n = abs(len(a) - len(b)) * 8 + sum(bin(x ^ y).count('1') for x, y in zip(a, b) if x != y)
print(n)
PY
    rm -f "$out/bits-a.bin" "$out/bits-b.bin"
}

# judge NAME NP MESH PLAN KEY REF FIRST LAST [NOTE]: compares, records a row
judge() {
    eval "model=\$${5}_model"
    note=${9:-}
    if [ "$rc" -ne 0 ]; then
        reason="exit $rc"
        [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && reason="$reason (timed out after ${RUN_TIMEOUT}s?)"
        record "$1" "$2" "$3" "$4" "$model" "-" "$(accuracy "$1")" "$secs" FAIL "${note:+$note; }$reason; see runs/$(safe "$1").log"
        echo "  FAIL $1: $reason"
        sed 's/^/    | /' "$out/runs/$(safe "$1").log" | tail -n 8
        return
    fi
    line=$(compare "$1" "$6" "$7" "$8")
    maxrel=${line%% *} why=${line#* }
    if [ "$why" = ok ] && [ $det -eq 1 ]; then # the final states' bits
        nbits=$(diff_bits "$1" "$6" "$8")
        note="${note:+$note; }$nbits differing bits in the final parameters and optimizer state"
        [ "$nbits" = 0 ] || why="$nbits bits differ"
    fi
    if [ "$why" = ok ]; then v=PASS; else v=FAIL; note="${note:+$note; }$why"; fi
    record "$1" "$2" "$3" "$4" "$model" "$maxrel" "$(accuracy "$1")" "$secs" "$v" "$note"
    echo "  $v $1 ($secs s, max rel diff $maxrel${note:+; $note})"
}

has_ckpt=0
"$prog" train --help 2>/dev/null | grep -q -- "--resume" && has_ckpt=1

echo "regress: $([ $quick -eq 1 ] && echo quick || echo full) run, $STEPS steps (gpt $gpt_steps), models $models; launcher $launcher${hostfile:+ --hostfile $hostfile}; results in $out"
start_all=$(now)

# ---- 1. the matrix: every mesh x plan that fits, both models --------------------
if [ $quick -eq 1 ]; then
    # mesh:plan pairs; each plan once per model
    matrix="2:dp 2:tp 4:fsdp 2x2:dp,tp"
    ppmlp_matrix="2:pp 2x2:pp,dp"
else
    matrix="1:tp 1:fsdp 2:dp 2:tp 2:fsdp 4:dp 4:tp 4:fsdp 1x2:dp,tp 2x1:dp,tp 2x2:dp,tp"
    ppmlp_matrix="2:pp 4:pp 2x2:pp,dp 2x2:pp,tp 2x2:pp,fsdp 2x2x2:pp,dp,tp"
fi
# resume legs: MODEL-KEY:FROM-MESH:FROM-PLAN:TO-MESH:TO-PLAN
if [ $quick -eq 1 ]; then
    legs="mlp:2:dp:2x2:dp,tp pmlp:4:fsdp:1:dp ppmlp:2:pp:1:dp gpt:2:tp:2:dp llama:2:tp:2:dp"
else
    legs="mlp:2:dp:2x2:dp,tp mlp:2x2:dp,tp:1:dp mlp:4:fsdp:2:tp pmlp:2:tp:4:fsdp pmlp:1x2:dp,tp:2x1:dp,tp
          ppmlp:2:pp:2x2:dp,tp ppmlp:1:dp:2x2:pp,dp ppmlp:2x2:pp,tp:4:pp gpt:2:tp:2:dp gpt:2:dp:2x2:dp,tp
          gpt:2:pp:2:dp gpt:2:dp:2x2:pp,dp llama:2:tp:2:dp llama:2:pp:2x2:dp,tp"
fi
# the GPT's mesh x plan pairs (pp: 8 micro-batches)
if [ $quick -eq 1 ]; then
    gpt_matrix="2:dp 2:tp 2:sp 2x2:fsdp,tp 2:pp 2x2:pp,dp"
else
    gpt_matrix="2:dp 2:tp 2:sp 2:tp+sp 2:fsdp 2x2:dp,tp 2x2:fsdp,tp 2:pp 4:pp 2x2:pp,dp 2x2:pp,tp 2x2:pp,fsdp"
fi
gptsmall_matrix="2x2x2:pp,dp,tp"
# the Llama's (1 rank, tp, sp, fsdp, 2x2 dp,tp and pp=2 agree over 100 steps)
if [ $quick -eq 1 ]; then
    llama_matrix="2:tp 2:sp 2x2:dp,tp 2:pp"
else
    llama_matrix="2:dp 2:tp 2:sp 2:tp+sp 2:fsdp 2x2:dp,tp 2x2:fsdp,tp 2:pp 2x2:pp,tp"
fi
if [ $det -eq 1 ]; then # the layouts the deterministic mode takes
    if [ $quick -eq 1 ]; then
        gpt_matrix="2:dp 2:tp 2x2:fsdp,tp 2x2:pp,dp" llama_matrix="2:dp 2:pp"
        legs="gpt:2:tp:2:dp llama:2:dp:2:fsdp"
    else
        gpt_matrix="2:dp 2:tp 2:fsdp 2x2:dp,tp 2x2:fsdp,tp 2:pp 2x2:pp,dp"
        llama_matrix="2:dp 2:fsdp 2:pp 2x2:pp,dp"
        legs="gpt:2:tp:2:dp gpt:2:dp:2x2:pp,dp llama:2:dp:2:fsdp llama:2:pp:2:dp"
    fi
fi
# ckpt_steps DIR: the steps of the complete checkpoints DIR/ckpt-<step>.h5, sorted
ckpt_steps() {
    for f in "$1"/ckpt-*.h5; do [ -f "$f" ] && basename "$f"; done |
        sed -n 's/^ckpt-\([0-9]*\)\.h5$/\1/p' | awk '{ print $1 + 0 }' | sort -n
}
# ckpt_at DIR STEP: the checkpoint file of STEP in DIR (names may pad the step)
ckpt_at() {
    for f in "$1"/ckpt-*.h5; do
        n=$(basename "$f" .h5 | sed -n 's/^ckpt-\([0-9]*\)$/\1/p' | awk '{ print $1 + 0 }')
        [ "$n" = "$2" ] && { echo "$f"; return; }
    done
}
ranks_of() { echo "$1" | awk -F x '{ n = 1; for (i = 1; i <= NF; i++) n *= $i; print n }'; }
# save_leg NAME KEY MESH PLAN: save_dir and save_every when this run starts a
# resume leg, else save_dir empty (given as ${save_dir:+--save "$save_dir" ...}:
# the path stays one argument, spaces and all)
save_leg() {
    save_dir=
    [ $has_ckpt -eq 1 ] || return 0
    # --deterministic: every run's final state, for its bits
    [ $det -eq 1 ] && save_dir=$out/ckpt/$(safe "$1")/ save_every=$(steps_of "$2")
    for leg in $legs; do
        case $leg in "$2:$3:$4:"*) save_dir=$out/ckpt/$(safe "$1")/ save_every=$(($(steps_of "$2") / 2)) ;; esac
    done
}

has_model() { case " $models " in *" $1 "*) return 0 ;; esac; return 1; }
for key in $models; do
    eval "model=\$${key}_model keymatrix=\${${key}_matrix:-\$matrix}"
    echo "== $model"
    ref=$key-1-dp
    save_leg "$ref" "$key" 1 dp
    train "$ref" 1 1 dp "$key" ${save_dir:+--save "$save_dir" --save-every "$save_every"}
    judge "$ref" 1 1 dp "$key" "$ref" 1 "$(steps_of "$key")" "the reference"
    for mp in $keymatrix; do
        mesh=${mp%%:*} plan=${mp#*:}
        name=$key-$mesh-$plan
        save_leg "$name" "$key" "$mesh" "$plan"
        train "$name" "$(ranks_of "$mesh")" "$mesh" "$plan" "$key" \
            ${save_dir:+--save "$save_dir" --save-every "$save_every"}
        judge "$name" "$(ranks_of "$mesh")" "$mesh" "$plan" "$key" "$ref" 1 "$(steps_of "$key")"
    done
done

# ---- 2. save on one mesh, resume on another --------------------------------------
echo "== checkpoint half way on one mesh, resume on another"
det_save=; [ $det -eq 1 ] && det_save=1
for leg in $legs; do
    IFS=: read -r key fmesh fplan tmesh tplan <<EOF
$leg
EOF
    has_model "$key" || continue
    last=$(steps_of "$key")
    MID=$((last / 2))
    eval "model=\$${key}_model"
    from=$key-$fmesh-$fplan
    name="$from>$tmesh-$tplan"
    if [ $has_ckpt -eq 0 ]; then
        record "$name" "$(ranks_of "$tmesh")" "$tmesh" "$tplan" "$model" - - 0 SKIP "meshgrad train has no --save/--resume yet"
        echo "  SKIP $name: meshgrad train has no --save/--resume"
        continue
    fi
    ck=$(ckpt_at "$out/ckpt/$(safe "$from")" "$MID")
    if [ -z "$ck" ]; then
        ck="$out/ckpt/$(safe "$from")/ckpt-<$MID>.h5"
        rc=1 secs=0
        record "$name" "$(ranks_of "$tmesh")" "$tmesh" "$tplan" "$model" - - 0 FAIL "no checkpoint $ck from run $from"
        echo "  FAIL $name: no checkpoint $ck"
        continue
    fi
    train "$name" "$(ranks_of "$tmesh")" "$tmesh" "$tplan" "$key" --resume "$ck" \
        ${det_save:+--save "$out/ckpt/$(safe "$name")/" --save-every "$last"}
    judge "$name" "$(ranks_of "$tmesh")" "$tmesh" "$tplan" "$key" "$key-1-dp" $((MID + 1)) "$last" "resumed at $MID from $fmesh [$fplan]"
done

# ---- 3. kill a rank mid-run, resume from the last checkpoint ----------------------
# rank_pids RANK: the processes of this machine whose environment holds this
# run's MG_REGRESS_TAG and OMPI_COMM_WORLD_RANK=RANK (also found when Open MPI's
# daemons detach from the launcher, as they do on the hosts of multinode-sim.sh)
rank_pids() {
    for f in $(grep -l -a -z -x "MG_REGRESS_TAG=$MG_REGRESS_TAG" /proc/[0-9]*/environ 2>/dev/null); do
        grep -q -a -z -x "OMPI_COMM_WORLD_RANK=$1" "$f" 2>/dev/null || continue
        p=${f#/proc/}
        echo "${p%/environ}"
    done
}
# kill_run NAME NP MESH PLAN VICTIM STEPS: starts the run, kills VICTIM once a
# checkpoint exists and a third of the steps are done; sets rc, secs (from the
# kill to the end of the job), killed (1 when it was killed mid-run), lost (1
# when the victim's process was not found)
kill_run() {
    f=$out/runs/$(safe "$1") dir=$out/ckpt/$(safe "$1")
    rm -rf "$dir"
    MG_REGRESS_TAG=regress-$$-kill-$(date +%s%N)
    # shellcheck disable=SC2086
    launch "$2" train $common $kill_flags --steps "$6" --mesh "$3" --parallel "$4" --metrics "$f.jsonl" \
        --save "$dir/" --save-every $(($6 / 10)) --log-every 10 >"$f.log" 2>&1 &
    job=$!
    third=$(($6 / 3)) killed=0 lost=0 i=0 t0=$(now)
    while kill -0 "$job" 2>/dev/null && [ $i -lt 6000 ]; do
        s=$(sed -n 's/^step \([0-9]*\)\/.*/\1/p' "$f.log" | tail -n 1)
        if [ "${s:-0}" -ge "$third" ] && ls "$dir"/ckpt-*.h5 >/dev/null 2>&1; then
            pids=$(rank_pids "$5")
            if [ -n "$pids" ]; then
                t0=$(now)
                # shellcheck disable=SC2086
                kill -KILL $pids 2>/dev/null && killed=1
                echo "  killed rank $5 (pid $pids) at step ~$s"
            else
                lost=1
                echo "  rank $5 not found among this machine's processes"
            fi
            break
        fi
        sleep 0.05
        i=$((i + 1))
    done
    wait "$job"
    rc=$?
    secs=$(since "$t0")
    MG_REGRESS_TAG=regress-$$
}

echo "== kill a rank mid-run (SIGKILL), resume from the last checkpoint"
if ! has_model mlp; then
    echo "  (not run: --models has no mlp)"
elif [ $has_ckpt -eq 0 ]; then
    record kill - - - "$kill_model" - - 0 SKIP "meshgrad train has no --save/--resume yet"
    echo "  SKIP: meshgrad train has no --save/--resume"
elif [ "$launcher" = srun ]; then
    record kill - - - "$kill_model" - - 0 SKIP "the kill leg finds ranks by PID under mpirun only"
    echo "  SKIP: the kill leg needs --launcher mpirun"
else
    if [ $quick -eq 1 ]; then knp=2 kmesh=2 kplan=dp; else knp=4 kmesh=2x2 kplan=dp,tp; fi
    victim=$((knp - 1)) ksteps=$KILL_STEPS tries=0
    while :; do
        kill_run kill "$knp" "$kmesh" "$kplan" "$victim" "$ksteps"
        [ $killed -eq 1 ] || [ $lost -eq 1 ] || [ $rc -ne 0 ] || [ $tries -ge 2 ] && break
        echo "  the run finished before it could be killed: again with $((ksteps * 4)) steps"
        ksteps=$((ksteps * 4)) tries=$((tries + 1))
    done
    klog=$out/runs/kill.log
    if [ $killed -eq 1 ] && [ "$rc" -ne 0 ] && awk -v s="$secs" 'BEGIN { exit !(s <= 30) }' &&
        grep -q "process rank $victim .*signal 9" "$klog"; then
        v=PASS note="ended $rc in ${secs}s naming rank $victim: $(grep -o "process rank $victim .*signal 9[^.]*" "$klog" | head -n 1)"
    elif [ $killed -eq 0 ]; then
        v=FAIL note="rank $victim was not killed ($([ $lost -eq 1 ] && echo "its process was not found" ||
            echo "the run ended first")); exit $rc"
    else
        v=FAIL note="exit $rc after ${secs}s; rank $victim not named, or too slow (see runs/kill.log)"
    fi
    record kill "$knp" "$kmesh" "$kplan" "$kill_model" - - "$secs" "$v" "$note"
    echo "  $v kill: $note"
    common_k=$common
    common="--data $data --steps $ksteps --batch 30 --seed 11 --threads 1 --log-every 0 --eval-every 0"
    train kill-ref 1 1 dp kill
    judge kill-ref 1 1 dp kill kill-ref 1 "$ksteps" "uninterrupted 1-rank run"
    last=$(ckpt_steps "$out/ckpt/kill" | tail -n 1)
    if [ $killed -eq 0 ]; then
        record kill-resume "$knp" "$kmesh" "$kplan" "$kill_model" - - 0 SKIP "no rank was killed: nothing to resume"
    elif [ -n "$last" ] && [ "$last" -lt "$ksteps" ]; then
        train kill-resume "$knp" "$kmesh" "$kplan" kill --resume "$out/ckpt/kill"
        judge kill-resume "$knp" "$kmesh" "$kplan" kill kill-ref $((last + 1)) "$ksteps" \
            "resumed at $last after the kill; final loss $(final_loss kill-resume), uninterrupted $(final_loss kill-ref)"
    else
        record kill-resume "$knp" "$kmesh" "$kplan" "$kill_model" - - 0 FAIL "no checkpoint short of the end left by the killed run (${last:-none})"
    fi
    common=$common_k
fi

# ---- the table, the summary, the plot ---------------------------------------------
total=$(since "$start_all")
echo
printf '%-28s %5s %5s %-7s %-11s %12s %8s %7s  %s\n' run ranks mesh plan model "max rel diff" accuracy seconds verdict
awk -F '\t' '{ printf "%-28s %5s %5s %-7s %-11s %12s %8s %7s  %s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }' "$results"
pass=$(awk -F '\t' '$9 == "PASS"' "$results" | wc -l)
fail=$(awk -F '\t' '$9 == "FAIL"' "$results" | wc -l)
skip=$(awk -F '\t' '$9 == "SKIP"' "$results" | wc -l)
if [ $det -eq 1 ]; then
    echo "$pass passed, $fail failed, $skip skipped in ${total}s (--deterministic: each step's loss equal to the 1-rank run's, the final state 0 bits apart)"
else
    echo "$pass passed, $fail failed, $skip skipped in ${total}s (tolerance $RTOL relative, each step's loss against the 1-rank run)"
fi
awk -F '\t' '$10 != "" { print "  " $9 " " $1 ": " $10 }' "$results"

png=$out/losses.png
plotted=0
if command -v gnuplot >/dev/null 2>&1; then
    models='' keys='' vars="out='$png'; heading='meshgrad regress.sh: $STEPS steps, launcher $launcher$([ -n "$hostfile" ] && echo ', hostfile')'"
    for key in mlp pmlp ppmlp gpt gptsmall kill; do
        [ $key = kill ] && ref=kill-ref || ref=$key-1-dp
        [ -s "$out/curves/$ref.dat" ] || continue
        files="$out/curves/$ref.dat" titles="$ref(reference)"
        for f in "$out/curves/$key"-*.dat; do
            t=$(basename "$f" .dat)
            [ -s "$f" ] && [ "$t" != "$ref" ] && files="$files $f" titles="$titles $t"
        done
        eval "m=\$${key}_model"
        [ $key = kill ] && m="$m-h256(kill+resume)"
        models="$models $m" keys="$keys $key"
        vars="$vars; files_$key='$files'; titles_$key='$(echo "$titles" | tr _ '>')'"
    done
    vars="$vars; models='$(echo $models)'; keys='$(echo $keys)'"
    here=$(cd "$(dirname "$0")" && pwd)
    if gnuplot -e "$vars" "$here/plot-losses.gp" >"$out/gnuplot.log" 2>&1 && [ -s "$png" ]; then
        plotted=1
        echo "loss curves: $png"
    else
        echo "loss curves: gnuplot failed (see $out/gnuplot.log); no plot"
    fi
else
    echo "loss curves: SKIPPED (gnuplot is not installed: apt-get install gnuplot-nox, or run scripts/setup.sh)"
fi

{
    printf '{"date":"%s","quick":%s,"steps":%s,"launcher":"%s","hostfile":%s,"tolerance":%s,' \
        "$(date -Iseconds)" "$([ $quick -eq 1 ] && echo true || echo false)" "$STEPS" "$launcher" \
        "$([ -n "$hostfile" ] && printf '"%s"' "$hostfile" || echo null)" "$RTOL"
    printf '"seconds":%s,"passed":%s,"failed":%s,"skipped":%s,"plot":%s,"runs":[' "$total" "$pass" "$fail" "$skip" \
        "$([ $plotted -eq 1 ] && printf '"%s"' "$png" || echo null)"
    awk -F '\t' '
        function str(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); return "\"" s "\"" }
        function num(s) { return s == "-" || s == "" ? "null" : s + 0 }
        { printf "%s\n{\"run\":%s,\"ranks\":%s,\"mesh\":%s,\"plan\":%s,\"model\":%s,\"max_rel_diff\":%s,\"final_accuracy\":%s,\"seconds\":%s,\"verdict\":%s,\"note\":%s}",
                 (NR > 1 ? "," : ""), str($1), num($2), str($3), str($4), str($5), num($6), num($7), num($8), str($9), str($10) }' "$results"
    printf '\n]}\n'
} >"$out/summary.json"
echo "summary: $out/summary.json"
[ "$fail" -eq 0 ]
