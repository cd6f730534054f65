# estimate_case.sh: sourced by test_estimate.sh and test_estimate_lm.sh after
# check.sh: case_ NP MESH PLAN [FLAGS...] trains NP ranks for 5 steps and runs
# `plan --estimate` of the same run, then checks every collective's bytes and
# calls per step equal, the peak memory within TOL% and the weights' bf16
# copies to the byte.
TOL=2
common="--data $data --steps 5 --log-every 0 --threads 1"

# field FILE KEY: the number after "KEY": in the file's memory/estimate line
field() { sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" "$1" | head -n 1; }
# bytes FILE COLLECTIVE: its bytes per step
bytes() { sed -n "s/.*\"$2\":{\"bytes\":\([0-9.]*\).*/\1/p" "$1" | head -n 1; }
# calls FILE COLLECTIVE: its calls per step
calls() { sed -n "s/.*\"$2\":{\"bytes\":[0-9.]*,\"calls\":\([0-9.]*\).*/\1/p" "$1" | head -n 1; }
# within A B: B is within TOL% of A (both 0 counts)
within() { awk -v a="$1" -v b="$2" -v t="$TOL" 'BEGIN { d = b - a; if (d < 0) d = -d;
    exit !(a == b || (a > 0 && d <= t / 100 * a)) }'; }

# case NP MESH PLAN [FLAGS...]
case_() {
    np=$1 mesh=$2 plan=$3
    shift 3
    tag="$np ranks, mesh $mesh, $plan${*:+, $*}"
    rm -f "$tmp/m.jsonl"
    if ! "$TIMEOUT" -k 5 120 "$MPIRUN" -np "$np" "$prog" train $common --mesh "$mesh" \
        --parallel "$plan" --metrics "$tmp/m.jsonl" "$@" >"$tmp/out" 2>&1; then
        fail "$tag: train failed"
        sed 's/^/  | /' "$tmp/out"
        return
    fi
    if ! "$prog" plan --estimate $common --mesh "$mesh" --parallel "$plan" "$@" >"$tmp/est" 2>&1; then
        fail "$tag: plan --estimate failed"
        sed 's/^/  | /' "$tmp/est"
        return
    fi
    grep '"memory"' "$tmp/m.jsonl" >"$tmp/measured"
    tail -n 1 "$tmp/est" >"$tmp/estimated"
    m=$(field "$tmp/measured" peak) e=$(field "$tmp/estimated" peak)
    line="memory $m vs $e B"
    ok=0
    within "$m" "$e" || ok=1
    # the weights' bf16 copies (--dtype bf16): laid out as train lays them out, to the byte
    mc=$(field "$tmp/measured" casts) ec=$(field "$tmp/estimated" casts)
    [ "${mc:-0}" = 0 ] && [ "${ec:-0}" = 0 ] || line="$line (bf16 copies $mc vs $ec B)"
    [ "$mc" = "$ec" ] || ok=1
    for k in all_reduce all_gather reduce_scatter all_to_all broadcast barrier send recv; do
        mb=$(bytes "$tmp/measured" $k) eb=$(bytes "$tmp/estimated" $k)
        [ "$mb" = 0.0 ] && [ "$eb" = 0.0 ] && continue
        line="$line; $k $mb vs $eb"
        # the collectives are counted, not estimated: every byte and call
        mc=$(calls "$tmp/measured" $k) ec=$(calls "$tmp/estimated" $k)
        line="$line ($mc vs $ec calls)"
        awk -v a="$mb" -v b="$eb" -v c="$mc" -v d="$ec" 'BEGIN { exit !(a == b && c == d) }' ||
            ok=1
    done
    if [ "$ok" -eq 0 ]; then
        pass "$tag: measured vs estimated: $line"
    else
        fail "$tag: measured vs estimated (memory within $TOL%, collectives exact): $line"
        sed 's/^/  | /' "$tmp/est"
    fi
}

