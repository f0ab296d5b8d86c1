#!/usr/bin/env bash
# Compares `kreplay run --tool counters --set full` with `ncu --set full --csv` on one program,
# row by row in launch order (needs a GPU, ncu on PATH, kreplay built in release).
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
"$kreplay" run --tool counters --set full --out "$out/kreplay.csv" -- "$@" >"$out/kreplay.log" 2>&1
ours=$(awk "BEGIN{print $(date +%s.%N) - $start}")
start=$(date +%s.%N)
ncu --set full --csv --clock-control "$clock" --metrics profiler__replayer_passes "$@" >"$out/ncu.csv" 2>"$out/ncu.log"
theirs=$(awk "BEGIN{print $(date +%s.%N) - $start}")
echo "plain ${plain}s, kreplay ${ours}s, ncu ${theirs}s"
python3 - "$out/kreplay.csv" "$out/ncu.csv" <<'PY'
import csv, sys, collections, statistics
def rows(path):
    with open(path) as f:
        lines = [l for l in f if l.startswith('"')]
    by = collections.defaultdict(dict)
    for r in csv.DictReader(lines):
        try:
            by[int(r["ID"])][r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            pass
    return [by[k] for k in sorted(by)]
ours, theirs = rows(sys.argv[1]), rows(sys.argv[2])
ratios = collections.defaultdict(list)
for a, b in zip(ours, theirs):
    for m, v in a.items():
        if m in b and b[m]:
            ratios[m].append(v / b[m])
print("| metric | within 1% | within 5% | median ratio | worst ratio |")
print("|---|---|---|---|---|")
for m in sorted(ratios):
    r = ratios[m]
    w1 = sum(abs(x - 1) <= 0.01 for x in r)
    w5 = sum(abs(x - 1) <= 0.05 for x in r)
    worst = max(r, key=lambda x: abs(x - 1))
    print(f"| `{m}` | {w1}/{len(r)} | {w5}/{len(r)} | {statistics.median(r):.3f} | {worst:.3f} |")
missing = sorted({m for b in theirs for m in b} - set(ratios))
print(f"in ncu's set, not in ours ({len(missing)}): {', '.join(missing)}")
PY
