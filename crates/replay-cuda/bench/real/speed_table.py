"""The per-dispatch / per-pass table of real programs from `kreplay run --out X.json` files.

usage: python speed_table.py NAME PLAIN_WALL_S N1 FILE1.json N2 FILE2.json [NAME ...]

For each program, the summary's `replay_seconds` at two pass counts is solved for a fixed cost
per dispatch plus a cost per pass: total(N) = D * (a + b * N). Prints one markdown row per
program with the summary's phase split (share of `phases.window`) at the larger N.
"""
import json
import sys

PHASES = ["drain", "plan", "capture", "launch", "wait", "check", "restore", "callbacks", "finish"]


def summary(path):
    with open(path) as f:
        doc = json.load(f)
    return doc["summary"]


def solve(n1, s1, n2, s2):
    """(dispatches, per dispatch s, per pass s, captured bytes per dispatch) from two summaries."""
    d = s1["dispatches"] or 1
    t1, t2 = s1["replay_seconds"] / d, s2["replay_seconds"] / (s2["dispatches"] or 1)
    b = (t2 - t1) / (n2 - n1) if n2 != n1 else 0.0
    a = t1 - b * n1
    return d, a, b, s1["captured_bytes"] / d


def split(s):
    p = s.get("phases") or {}
    w = p.get("window") or 0.0
    if w <= 0:
        return "-"
    return ", ".join("%s %.0f%%" % (k, 100.0 * p.get(k, 0.0) / w) for k in PHASES if p.get(k))


def row(name, plain, n1, f1, n2, f2):
    s1, s2 = summary(f1), summary(f2)
    d, a, b, cap = solve(n1, s1, n2, s2)
    return "| %s (%.1f s) | %d | %.2f ms | %.0f us | %.1f MB | %s |" % (
        name, plain, d, a * 1e3, b * 1e6, cap / 1e6, split(s2 if n2 > n1 else s1))


def main(argv):
    print("| program (plain wall) | dispatches | per dispatch | per pass | captured per dispatch | phases |")
    print("|---|---|---|---|---|---|")
    while len(argv) >= 6:
        name, plain, n1, f1, n2, f2 = argv[:6]
        argv = argv[6:]
        print(row(name, float(plain), int(n1), f1, int(n2), f2))


if __name__ == "__main__":
    main(sys.argv[1:])
