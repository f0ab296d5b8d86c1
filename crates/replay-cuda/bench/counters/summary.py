"""Issue 16's validation table: ours (`kreplay run --tool counters`) against Nsight Compute.

usage: python3 summary.py OUTDIR

Reads OUTDIR/ours_LIST_PROG.json (kreplay's report, its `counters` member a CounterReport)
and OUTDIR/ncu_LIST_PROG.csv (`ncu --csv --print-units base --log-file`, one row per kernel
and metric), pairs the kernels in launch order (ours: dispatch order; ncu: ID), and per
metric counts the kernels whose values are equal, within 2% and within 10%. The class says
which bound the issue asks for: launch and instruction counts equal, memory traffic within
2%, time within 10%. Then our passes and snapshotted bytes beside ncu's replay cost, and the
wall times of the runs (OUTDIR/steps.txt). First, from OUTDIR/list_sass.stdout (`kreplay
run --list-sass --metrics BIG`): how many SASS metrics the chip has and where the list's
`__sass_` metrics were mapped.
"""
import csv
import json
import os
import re
import sys


def num(s):
    s = (s or "").replace(",", "").strip()
    try:
        return float(s)
    except ValueError:
        return None


def ours(path):
    v = json.load(open(path))
    # `--out X.json` holds the counter report itself; the tool's state JSON nests it.
    c = v if "dispatches" in v else (v.get("counters") or {})
    ds = sorted(c.get("dispatches", []), key=lambda d: d["dispatch_id"])
    by = {}
    for s in c.get("samples", []):
        by.setdefault(s["dispatch_id"], {})[s["metric"]] = s["value"]
    rows = [(d, by.get(d["dispatch_id"], {})) for d in ds]
    return rows, c, v


def ncu(path):
    text = open(path, errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(text) if l.startswith('"ID"')), None)
    if start is None:
        return []
    kernels = {}
    for r in csv.DictReader(text[start:]):
        try:
            i = int(r["ID"])
        except (KeyError, ValueError):
            continue
        k = kernels.setdefault(i, {"name": r.get("Kernel Name", ""), "m": {}})
        k["m"][r.get("Metric Name", "")] = num(r.get("Metric Value"))
    return [kernels[i] for i in sorted(kernels)]


def klass(m):
    if m.startswith("launch__") or "inst_executed" in m:
        return "equal"
    if m.startswith("gpu__time") or "cycles" in m:
        return "10%"
    if re.match(r"(dram|lts|l1tex)__", m) and (
        "bytes" in m or "sectors" in m or "requests" in m or "wavefronts" in m or "conflicts" in m
    ) and not m.endswith((".pct", ".ratio")):
        return "2%"
    return "other"


def rel(a, b):
    if a == b:
        return 0.0
    d = max(abs(a), abs(b))
    return abs(a - b) / d if d else 0.0


def compare(name, out):
    o_path = os.path.join(out, f"ours_{name}.json")
    n_path = os.path.join(out, f"ncu_{name}.csv")
    if not os.path.exists(o_path):
        print(f"\n### {name}: no report of ours")
        return
    rows, c, v = ours(o_path)
    print(f"\n### {name}")
    print(
        f"ours: {len(rows)} dispatches, {len(c.get('samples', []))} samples, {c.get('passes')} passes planned "
        f"(host API single config: {(v.get('counter_plan') or {}).get('single_config_passes')}), "
        f"{len(v.get('counter_errors') or [])} errors"
    )
    for e in (v.get("counter_errors") or [])[:5]:
        print(f"  error: dispatch {e['dispatch_id']}: {e['error']}")
    if not os.path.exists(n_path):
        print("no ncu CSV")
        return
    nk = ncu(n_path)
    n = min(len(rows), len(nk))
    print(f"ncu: {len(nk)} kernels; compared: {n}")
    metrics = [m["name"] for m in c.get("metrics", [])]
    print("\n| metric | class | kernels | equal | within 2% | within 10% | max rel diff | max abs diff | worst ours / ncu |")
    print("|---|---|---|---|---|---|---|---|---|")
    for m in metrics:
        pairs = []
        for i in range(n):
            a = rows[i][1].get(m)
            b = nk[i]["m"].get(m)
            if a is not None and b is not None:
                pairs.append((a, b))
        if not pairs:
            print(f"| {m} | {klass(m)} | 0 | | | | | | |")
            continue
        eq = sum(1 for a, b in pairs if a == b)
        w2 = sum(1 for a, b in pairs if rel(a, b) <= 0.02)
        w10 = sum(1 for a, b in pairs if rel(a, b) <= 0.10)
        worst = max(pairs, key=lambda p: rel(*p))
        print(
            f"| {m} | {klass(m)} | {len(pairs)} | {eq} | {w2} | {w10} | {rel(*worst):.3%} | {max(abs(a - b) for a, b in pairs):g} | {worst[0]:g} / {worst[1]:g} |"
        )
    pair = ("smsp__sass_inst_executed.sum", "smsp__inst_executed.sum")
    both = [(r[1][pair[0]], r[1][pair[1]]) for r in rows if pair[0] in r[1] and pair[1] in r[1]]
    if both:
        eq = sum(1 for a, b in both if a == b)
        print(f"\nours, patched count against hardware count ({pair[0]} = {pair[1]}): {eq} of {len(both)} kernels equal")
    names_differ = sum(
        1 for i in range(n) if rows[i][0]["kernel_demangled"].split("(")[0].split("<")[0].split("::")[-1][:20]
        not in nk[i]["name"]
    )
    print(f"\nkernel names that do not match in order: {names_differ} of {n}")
    print("\n| kernel # | ours: passes | ours: bytes snapshotted | ncu: profiler__replayer_passes | ncu: profiler__replayer_bytes_mem_backed_up |")
    print("|---|---|---|---|---|")
    for i in range(min(n, 20)):
        d = rows[i][0]
        m = nk[i]["m"]
        print(
            f"| {i} | {d['passes']} | {d['snapshot_bytes']} | {m.get('profiler__replayer_passes')} | {m.get('profiler__replayer_bytes_mem_backed_up')} |"
        )


def sass_probe(out):
    p = os.path.join(out, "list_sass.stdout")
    if not os.path.exists(p):
        return
    text = open(p, errors="replace").read()
    lines = text.splitlines()
    print("### SASS metrics (kreplay run --list-sass)\n")
    print(lines[0] if lines else "(empty)")
    start = text.find("{")
    if start >= 0:
        try:
            plan = json.loads(text[start:])
        except ValueError:
            plan = {}
        s = plan.get("sass") or {}
        print(f"\nSASS pass {s.get('first_pass')} of {plan.get('passes')} (granularity {s.get('granularity')}):\n")
        print("| metric | SASS API metric | rollup |\n|---|---|---|")
        for m in s.get("metrics", []):
            print(f"| {m['name']} | {m['api_name']} | {m['rollup']} |")
    err = os.path.join(out, "list_sass.stderr")
    if os.path.exists(err) and os.path.getsize(err):
        print("\n" + open(err, errors="replace").read().strip()[:2000])


def main():
    out = sys.argv[1]
    sass_probe(out)
    refused = os.path.join(out, "refused.txt")
    if os.path.exists(refused) and os.path.getsize(refused):
        print("\n### Left out of our lists (refused at start; ncu was asked for them)\n")
        for line in open(refused, errors="replace").read().splitlines():
            print(f"- {line}")
        print()
    names = sorted(
        {f[5:-5] for f in os.listdir(out) if f.startswith("ours_") and f.endswith(".json")}
        | {f[4:-4] for f in os.listdir(out) if f.startswith("ncu_") and f.endswith(".csv")}
    )
    for name in names:
        compare(name, out)
    steps = os.path.join(out, "steps.txt")
    if os.path.exists(steps):
        print("\n### wall times\n\n| run | rc | wall s |\n|---|---|---|")
        for line in open(steps):
            p = line.split()
            if len(p) >= 3:
                print(f"| {p[0]} | {p[1][3:]} | {int(p[2][8:]) / 1000:.2f} |")


if __name__ == "__main__":
    main()
