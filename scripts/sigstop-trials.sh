#!/bin/sh
# sigstop-trials.sh [N]: every stall ends. N trials (default
# 20) of the reproducer: a 2-rank training job with MG_COLLECTIVE_TIMEOUT=10
# (hidden 1024, batch 256, a million steps) is started, and once it trains,
# after 3 s and a little more each trial (so the stop lands in different
# phases of a step: the data loader's read, the backward's all-reduces, the
# per-step agreement...), rank 1 gets SIGSTOP. A trial passes when the job
# ends within 20 s of the stop, non-zero, a "meshgrad: error:" line names
# rank 1 as not answering, no line blames rank 0 (the one that waited), and
# `meshgrad trace analyze` of the flight recorder's dumps says rank 1 is
# behind (rank 0 dumps when its watchdog fires; a stopped rank cannot).
# Prints one line a trial and, last, "K of N SIGSTOP trials ended in <= 20 s
# naming the stopped rank"; exits 0 when K = N.
# Environment: MESHGRAD (default build/meshgrad), DATA (build/data/digits.h5),
# MPIRUN (mpirun), TIMEOUT_S (the collective timeout, 10), LIMIT_S (20).
set -u
cd "$(dirname "$0")/.." || exit 1
case ${1:-20} in
-h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
'' | *[!0-9]* | 0) echo "sigstop-trials.sh: '$1' is not a number of trials >= 1 (usage: sigstop-trials.sh [N])" >&2; exit 2 ;;
esac
trials=${1:-20}
: "${MESHGRAD:=build/meshgrad}" "${DATA:=build/data/digits.h5}" "${MPIRUN:=mpirun}"
: "${TIMEOUT_S:=10}" "${LIMIT_S:=20}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mg-sigstop.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
now() { date +%s.%N; }
. tests/check.sh # rank_pid

passed=0
t=1
while [ "$t" -le "$trials" ]; do
    out=$tmp/out.$t metrics=$tmp/m.$t.jsonl flight=$tmp/flight.$t
    MG_COLLECTIVE_TIMEOUT=$TIMEOUT_S "$MPIRUN" -np 2 "$MESHGRAD" train --data "$DATA" \
        --hidden 1024 --batch 256 --steps 1000000 --log-every 0 --threads 1 \
        --metrics "$metrics" --flight-dir "$flight" >"$out" 2>&1 &
    job=$!
    i=0 # until it trains (at most 60 s)
    while [ "$i" -lt 600 ] && ! grep -q '"loss"' "$metrics" 2>/dev/null; do
        sleep 0.1
        i=$((i + 1))
    done
    sleep "$(awk -v t="$t" 'BEGIN { printf "%.2f", 3 + (t % 10) * 0.137 }')"
    victim=$(rank_pid "$job" 1)
    stopped=$(now)
    [ -n "$victim" ] && kill -STOP "$victim"
    i=0 # the job must end by itself; after LIMIT_S + 30 s it is killed (a failed trial)
    while kill -0 "$job" 2>/dev/null && [ "$i" -lt $(((LIMIT_S + 30) * 10)) ]; do
        sleep 0.1
        i=$((i + 1))
    done
    if kill -0 "$job" 2>/dev/null; then
        [ -n "$victim" ] && kill -CONT "$victim"
        kill -TERM "$job" 2>/dev/null
        sleep 2
        kill -KILL "$job" 2>/dev/null
    fi
    wait "$job"
    rc=$?
    secs=$(awk -v a="$stopped" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
    steps=$(grep -c '"loss"' "$metrics" 2>/dev/null)
    names=$(grep "meshgrad: error:" "$out" | grep -c "rank(s) 1 are not answering")
    blames=$(grep "meshgrad: error:" "$out" | grep -c "rank(s) 0 are not answering\|rank 1 waits")
    analysis=$("$MESHGRAD" trace analyze "$flight" 2>&1 | tail -n 1)
    verdict=FAILED
    if [ -n "$victim" ] && [ "$rc" -ne 0 ] && [ "$names" -ge 1 ] && [ "$blames" -eq 0 ] &&
        printf '%s\n' "$analysis" | grep -q "^Rank 1 is behind: it left no dump" &&
        awk -v s="$secs" -v l="$LIMIT_S" 'BEGIN { exit !(s <= l) }'; then
        verdict=ok
        passed=$((passed + 1))
    fi
    echo "trial $t: $verdict: rank 1 (pid ${victim:-?}) stopped after $steps steps; the job ended" \
        "${secs}s later, exit $rc; $(grep 'meshgrad: error:' "$out" | head -n 1)"
    echo "  analyze: $analysis"
    [ "$verdict" = ok ] || sed 's/^/  | /' "$out" | grep -v '^  | *$' | head -n 20
    t=$((t + 1))
done
echo "$passed of $trials SIGSTOP trials ended in <= ${LIMIT_S} s naming the stopped rank"
[ "$passed" -eq "$trials" ]
