#!/usr/bin/env bash
# Compares `kreplay run --tool counters --set full` with `ncu --set full --csv` on one program,
# row by row in launch order (needs a GPU, ncu on PATH, kreplay built in release), both with
# the clock control CLOCK_CONTROL names (default none; base locks clocks, needs root).
# Usage: ncu_sections.sh OUTDIR -- PROGRAM ARGS...
set -euo pipefail
out=${1:?usage: ncu_sections.sh OUTDIR -- PROGRAM ARGS...}
shift
[ "${1:-}" = "--" ] && shift
mkdir -p "$out"
kreplay=${KREPLAY:-target/release/kreplay}
clock=${CLOCK_CONTROL:-none}
start=$(date +%s.%N)
"$@" >/dev/null
plain=$(awk "BEGIN{print $(date +%s.%N) - $start}")
start=$(date +%s.%N)
"$kreplay" run --tool counters --set full --clock-control "$clock" --out "$out/kreplay.csv" -- "$@" >"$out/kreplay.log" 2>&1
ours=$(awk "BEGIN{print $(date +%s.%N) - $start}")
start=$(date +%s.%N)
ncu --set full --csv --print-units base --clock-control "$clock" --metrics profiler__replayer_passes "$@" >"$out/ncu.csv" 2>"$out/ncu.log"
theirs=$(awk "BEGIN{print $(date +%s.%N) - $start}")
echo "plain ${plain}s, kreplay ${ours}s, ncu ${theirs}s"
python3 - "$out/kreplay.csv" "$out/ncu.csv" <<'PY'
# Rows are keyed by (ID, Section Name, Metric Name): ID is the launch's index from 0 on both
# sides, the section and metric names ncu's display names. ncu scales values (usecond, Ghz,
# Mbyte/s, Kbyte); kreplay writes base units (ns, hz, byte/s, byte): both are brought
# to base units before they are compared. kreplay's raw metrics (Section Name "raw") have no
# counterpart in ncu's sections and are left out.
import csv, sys, collections, statistics
TIME = {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
        "s": 1e9, "second": 1e9}
PER = {"s": 1, "second": 1, "ms": 1e3, "msecond": 1e3, "us": 1e6, "usecond": 1e6,
       "ns": 1e9, "nsecond": 1e9}
PREFIX = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
def base(value, unit):
    if unit in TIME:
        return value * TIME[unit], "ns"
    num, _, den = unit.partition("/")
    if den in PER:
        value, den = value * PER[den], "second"
    if len(num) > 1 and num[0] in PREFIX and num[1:].lower() in ("byte", "hz", "cycle", "inst", "sector", "warp", "thread"):
        value, num = value * PREFIX[num[0]], num[1:]
    num = num.lower() if num.lower() == "hz" else num
    return value, num + ("/" + den if den else "")
def rows(path):
    with open(path) as f:
        lines = [l for l in f if l.startswith('"')]
    by = collections.defaultdict(dict)
    for r in csv.DictReader(lines):
        try:
            key = (r["Section Name"], r["Metric Name"])
            if key[0] == "raw":
                continue
            v = float(r["Metric Value"].replace(",", ""))
            by[int(r["ID"])][key] = base(v, r.get("Metric Unit", ""))
        except (KeyError, ValueError):
            pass
    return by
ours, theirs = rows(sys.argv[1]), rows(sys.argv[2])
ids = sorted(set(ours) & set(theirs))
print(f"launches: kreplay {len(ours)}, ncu {len(theirs)}, compared {len(ids)}")
ratios = collections.defaultdict(list)
units = {}
for i in ids:
    a, b = ours[i], theirs[i]
    for k, (v, u) in a.items():
        if k in b and b[k][0]:
            if b[k][1] != u:
                units[k] = f"{u} vs ncu {b[k][1]}"
                continue
            ratios[k].append(v / b[k][0])
print("| section | metric | within 1% | within 5% | median ratio | worst ratio |")
print("|---|---|---|---|---|---|")
for k in sorted(ratios):
    r = ratios[k]
    w1 = sum(abs(x - 1) <= 0.01 for x in r)
    w5 = sum(abs(x - 1) <= 0.05 for x in r)
    worst = max(r, key=lambda x: abs(x - 1))
    print(f"| {k[0]} | {k[1]} | {w1}/{len(r)} | {w5}/{len(r)} | {statistics.median(r):.3f} | {worst:.3f} |")
for k, why in sorted(units.items()):
    print(f"unit mismatch, not compared: {k[0]} / {k[1]}: {why}")
theirs_keys = {k for i in ids for k in theirs[i]}
ours_keys = {k for i in ids for k in ours[i]}
missing = sorted(theirs_keys - ours_keys)
print(f"in ncu's set, not in ours ({len(missing)}): {', '.join(f'{s} / {m}' for s, m in missing)}")
extra = sorted(ours_keys - theirs_keys)
print(f"in ours, not in ncu's ({len(extra)}): {', '.join(f'{s} / {m}' for s, m in extra)}")
PY
