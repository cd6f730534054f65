#!/usr/bin/env python3
"""check_trace.py FILE RANKS [MIN_FLOWS]: checks a Chrome trace written by
meshgrad --trace (tests/test_trace.sh): valid JSON; a process, named, for every
rank 0..RANKS-1 and no other; every flow start ("s") has exactly one end ("f")
of the same id and the other way round (at least MIN_FLOWS of them); on every
thread of every process the spans ("X") nest (each inside the one enclosing it
or after it), and on the lanes of things in flight (tid > 0) none overlaps
another; every rank has its step spans. Prints one line; exits 1 on a failure."""
import json
import sys


def main():
    path, ranks = sys.argv[1], int(sys.argv[2])
    min_flows = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    with open(path) as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    pids = sorted({e["pid"] for e in ev})
    assert pids == list(range(ranks)), "processes %s, want 0..%d" % (pids, ranks - 1)
    named = sorted(e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name")
    assert named == list(range(ranks)), "process names %s" % named
    starts = sorted(e["id"] for e in ev if e["ph"] == "s")
    ends = sorted(e["id"] for e in ev if e["ph"] == "f")
    assert starts == ends, "%d flow starts, %d ends, unmatched %s" % (
        len(starts), len(ends), sorted(set(starts) ^ set(ends))[:5])
    assert len(set(starts)) == len(starts), "a flow id is used twice"
    assert len(starts) >= min_flows, "%d flows, want at least %d" % (len(starts), min_flows)
    spans = {}
    for e in ev:
        if e["ph"] == "X":
            a = round(e["ts"] * 1000)  # ns: ts and dur are written with 3 decimals of us
            spans.setdefault((e["pid"], e["tid"]), []).append((a, a + round(e["dur"] * 1000), e["name"]))
    for key, v in spans.items():
        v.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for a, b, name in v:
            while stack and stack[-1][1] <= a:
                stack.pop()
            assert not stack or b <= stack[-1][1], "on %s, %s %s crosses %s" % (key, name, (a, b), stack[-1])
            if key[1] > 0:
                assert not stack, "on lane %s, %s overlaps %s" % (key, name, stack[-1])
            stack.append((a, b, name))
    for r in range(ranks):
        assert any(e.get("cat") == "step" and e["pid"] == r for e in ev), "rank %d has no step" % r
    cats = sorted({e.get("cat") for e in ev if e["ph"] == "X"})
    print("%d events of %d ranks, %d flows, spans nest; categories %s" % (len(ev), ranks, len(starts), ",".join(cats)))


if __name__ == "__main__":
    try:
        main()
    except (AssertionError, KeyError, ValueError) as err:
        print("check_trace: %s" % err)
        sys.exit(1)
