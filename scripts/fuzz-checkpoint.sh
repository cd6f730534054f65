#!/bin/sh
# fuzz-checkpoint.sh [--every K] [--jobs J]: hostile and damaged checkpoints
# stay bounded. Makes a real checkpoint (a 5-step run, 12
# datasets, AdamW), then mutates it in 250 or so deterministic ways:
#   - single bit flips spread over the whole file, and runs of 0xff bytes;
#   - truncations to 0, 1, 2 ... bytes and to 1/31 ... 30/31 of the file;
#   - edits through HDF5 (tests/train_ckpt_tool): each dataset rewritten
#     without its checksum or with its chunks never written, a NaN, an infinity
#     or another finite value written into it (checksum recomputed); root
#     attributes set to values that cannot be (step, data position, model,
#     format, version); an unwritten 2^62-element dataset; nested groups;
#   - the file rewritten by h5repack (no filters, gzip, contiguous, the latest
#     format), when h5repack is installed.
# Each mutant is given to `meshgrad ckpt info` and to a resume that saves again
# without training (--steps 5 --resume M --save OUT), each under a 30 s limit.
# A mutant is refused cleanly (both exit 1 or 2, one "meshgrad: error:" line
# each, or the resume refuses and info says why), loaded correctly (the resume
# exits 0 and saves exactly the values the mutant holds: train_ckpt_tool
# compare), a hang (a limit reached), a crash (a signal or another exit code),
# or accepted-and-wrong (the resume exits 0 with other values). The last line:
#   "N refused cleanly, H hangs, C crashes, A accepted-and-wrong (L loaded correctly)"
# exit 0 when H, C and A are 0. --every K runs every K-th mutation only (the
# short run in make check); --jobs J runs J mutants at a time.
# Environment: BUILD (default build), MPIRUN (mpirun), KEEP=1 keeps the files.
set -u
cd "$(dirname "$0")/.." || exit 1
every=1 jobs=1
while [ $# -gt 0 ]; do
    case $1 in
    --every | --jobs)
        # a count >= 1: --every 0 ran every mutation, --jobs x failed in the middle
        case ${2:-} in
        '' | *[!0-9]* | 0*) echo "fuzz-checkpoint: $1 takes a count >= 1, not '${2:-}'" >&2; exit 2 ;;
        esac
        if [ "$1" = --every ]; then every=$2; else jobs=$2; fi
        shift 2 ;;
    -h | --help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: scripts/fuzz-checkpoint.sh [--every K] [--jobs J]" >&2; exit 2 ;;
    esac
done
: "${BUILD:=build}"
build=$(cd "$BUILD" && pwd) || exit 1
prog=$build/meshgrad tool=$build/tests/train_ckpt_tool data=$build/data/digits.h5
[ -x "$tool" ] || { echo "fuzz-checkpoint: build $tool first (make -C build check TESTS=)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mg-fuzz.XXXXXX")
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$tmp"' EXIT
run="--data $data --hidden 16 --batch 32 --log-every 0 --threads 1"
if ! "$prog" train $run --steps 5 --save "$tmp/base.h5" >"$tmp/base.out" 2>&1; then
    cat "$tmp/base.out"
    exit 1
fi
size=$(stat -c %s "$tmp/base.h5")
datasets=$(h5ls -r "$tmp/base.h5" 2>/dev/null | awk '$2 == "Dataset" { sub("^/", "", $1); print $1 }')
[ -n "$datasets" ] || datasets="params/fc1.weight params/fc1.bias params/fc2.weight params/fc2.bias"

# ---- the mutations: one a line, "KIND ARGS" -----------------------------------
{
    k=0
    while [ "$k" -lt 120 ]; do # bit flips all over the file
        echo "flip $(((k * 2654435761 + 12345) % size)) $((k % 8))"
        k=$((k + 1))
    done
    k=0
    while [ "$k" -lt 20 ]; do # 16 bytes of 0xff
        echo "smash $(((k * 40503 + 977) % size))"
        k=$((k + 1))
    done
    for n in 0 1 2 8 96 512 $((size - 1)); do echo "truncate $n"; done
    k=1
    while [ "$k" -le 30 ]; do
        echo "truncate $((size * k / 31))"
        k=$((k + 1))
    done
    for d in $datasets; do
        echo "strip $d"
        echo "unwritten $d"
        echo "set $d 0 nan"
        echo "set $d 1 inf"
        echo "set $d 0 3.5"
    done
    for a in "step abc" "step -1" "step 99999999999999999999" "step 1e3" "step 0x5" \
        "data.cursor 1000000000" "data.epoch 9223372036854775807" "optimizer.step 6" \
        "model.hidden 17" "model 0" "format other" "version 2" "seed x"; do
        echo "set-attr $a"
    done
    echo "huge"
    echo "nest 3000"
    echo "nest 3"
    if command -v h5repack >/dev/null 2>&1; then
        for r in "-f NONE" "-f GZIP=1" "-l CONTI" "-L" "-f SHUF" "-l CHUNK=1x1"; do
            echo "repack $r"
        done
    fi
} | awk -v every="$every" '(NR - 1) % every == 0' >"$tmp/mutations"

# mutate N LINE: $tmp/m.N.h5 from base.h5 and the mutation; 1 when it cannot be made
mutate() {
    f=$tmp/m.$1.h5
    set -- $2
    cp "$tmp/base.h5" "$f"
    case $1 in
    flip)
        b=$(od -An -tu1 -j "$2" -N1 "$f" | tr -d ' ')
        printf "$(printf '\\%03o' $((b ^ (1 << $3))))" | dd of="$f" bs=1 seek="$2" conv=notrunc 2>/dev/null ;;
    smash) printf '\377\377\377\377\377\377\377\377\377\377\377\377\377\377\377\377' |
        dd of="$f" bs=1 seek="$2" conv=notrunc 2>/dev/null ;;
    truncate) truncate -s "$2" "$f" ;;
    repack) shift; h5repack "$@" "$tmp/base.h5" "$f.r" >/dev/null 2>&1 && mv "$f.r" "$f" ;;
    *) kind=$1; shift; "$tool" "$kind" "$f" "$@" >/dev/null 2>&1 ;;
    esac
}

# classify N: runs info and the resume on mutant N, prints "VERDICT N LINE"
classify() {
    n=$1 f=$tmp/m.$1.h5 out=$tmp/o.$1.h5
    timeout -k 5 30 "$prog" ckpt info "$f" >"$tmp/i.$n" 2>&1
    irc=$?
    timeout -k 5 30 "$prog" train $run --steps 5 --resume "$f" --save "$out" >"$tmp/r.$n" 2>&1
    rrc=$?
    ierr=$(grep -c "meshgrad: error:" "$tmp/i.$n") rerr=$(grep -c "meshgrad: error:" "$tmp/r.$n")
    if [ $irc -eq 124 ] || [ $irc -eq 137 ] || [ $rrc -eq 124 ] || [ $rrc -eq 137 ]; then
        v=hang
    elif [ $irc -gt 2 ] || [ $rrc -gt 2 ] || grep -qiE "segmentation|core dumped|Aborted|AddressSanitizer" \
        "$tmp/i.$n" "$tmp/r.$n"; then
        v=crash
    elif [ $rrc -eq 0 ]; then
        if "$tool" compare "$out" "$f" >/dev/null 2>&1; then v=correct; else v=wrong; fi
    elif [ "$rerr" -eq 1 ] && { [ $irc -eq 0 ] || [ "$ierr" -eq 1 ]; }; then
        v=refused
    else
        v=crash # a failure without exactly one message
    fi
    echo "$v $n $(sed -n "${n}p" "$tmp/mutations")"
}

total=$(wc -l <"$tmp/mutations")
n=1
while [ "$n" -le "$total" ]; do
    mutate "$n" "$(sed -n "${n}p" "$tmp/mutations")"
    n=$((n + 1))
done
n=1
while [ "$n" -le "$total" ]; do # $jobs mutants at a time
    classify "$n" >"$tmp/v.$n" &
    [ $((n % jobs)) -eq 0 ] && wait
    n=$((n + 1))
done
wait
n=1
while [ "$n" -le "$total" ]; do
    cat "$tmp/v.$n"
    n=$((n + 1))
done >"$tmp/verdicts"
grep -v "^\(refused\|correct\) " "$tmp/verdicts" | sed 's/^/  /'
for v in refused hang crash wrong correct; do
    eval "$v=\$(grep -c '^$v ' \"\$tmp/verdicts\")"
done
echo "fuzz-checkpoint: $total mutations of a $size-byte checkpoint"
echo "$refused refused cleanly, $hang hangs, $crash crashes, $wrong accepted-and-wrong ($correct loaded correctly)"
[ "$hang" -eq 0 ] && [ "$crash" -eq 0 ] && [ "$wrong" -eq 0 ]
