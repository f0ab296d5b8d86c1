#!/bin/bash
# Counters on CUDA-graph kernels against Nsight Compute, in one device call: every kernel
# launch of `../real/graphs.py torch_graph` (a `torch.cuda.graph` step replayed; the graph's
# kernel nodes count as launches on both sides), ours (`kreplay run --tool counters`, node
# mode, the default) against `ncu --graph-profiling node`, the same metric list, clocks as
# they are; then summary.py's table over all launches paired in launch order, and the same
# comparison over the launches that ran as graph nodes only (ours' records name the graph).
# usage: graphs.sh OUTDIR   (kreplay, libkernel_replay.so, summary.py, graphs.py beside it)
set -u
D=$(cd "$(dirname "$0")" && pwd)
O=${1:-/tmp/kreplay-counters}/graphs
mkdir -p "$O"
CUDA=$(ls -d /usr/local/cuda /usr/local/cuda-* 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$CUDA/lib64:$CUDA/extras/CUPTI/lib64:${LD_LIBRARY_PATH:-}
G=$D/graphs.py; [ -f "$G" ] || G=$D/../real/graphs.py
LIST=smsp__inst_executed.sum,launch__grid_size,launch__block_size,dram__bytes_read.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,gpu__time_duration.sum
t() { date +%s%N; }
run() {
  local name=$1; shift
  local s; s=$(t)
  timeout -k 5 200 "$@" > "$O/$name.stdout" 2> "$O/$name.stderr"
  echo "$name rc=$? wall_ms=$(( ($(t) - s) / 1000000 ))" | tee -a "$O/steps.txt"
}
run plain_graph python3 "$G" torch_graph
run ours_graph "$D/kreplay" run --library "$D/libkernel_replay.so" --clock-control none --tool counters --metrics "$LIST" --out "$O/ours_graph.json" -- python3 "$G" torch_graph
run ncu_graph "$CUDA/bin/ncu" --csv --print-units base --clock-control none --graph-profiling node --metrics "$LIST" --log-file "$O/ncu_graph.csv" python3 "$G" torch_graph
python3 "$D/summary.py" "$O" > "$O/summary.md" 2>&1
python3 - "$D" "$O" >> "$O/summary.md" 2>&1 <<'PY'
import os, sys
sys.path.insert(0, sys.argv[1])
import summary
o = sys.argv[2]
rows, _, _ = summary.ours(os.path.join(o, "ours_graph.json"))
ks = summary.ncu(os.path.join(o, "ncu_graph.csv"))
pairs = [(d, m, k) for (d, m), k in zip(rows, ks) if d.get("graph") is not None]
print(f"\ngraph-node kernels: ours {sum(d.get('graph') is not None for d, _ in rows)} of {len(rows)}, "
      f"ncu {len(ks)} launches; compared {len(pairs)}")
short = lambda n: n.split("(")[0].split("<")[0].split("::")[-1].split(" ")[-1][:20]
names = sum(1 for d, _, k in pairs if short(k["name"]) != short(d.get("kernel_demangled") or d.get("kernel", "")))
print(f"names that differ: {names}")
print("| metric | kernels | equal | within 2% | within 10% | worst ours / ncu |")
print("|---|---|---|---|---|---|")
for metric in sorted({m for _, ms, _ in pairs for m in ms}):
    r = [(ms[metric], k["m"].get(metric)) for _, ms, k in pairs if metric in ms and k["m"].get(metric) is not None]
    if not r:
        continue
    e = sum(summary.rel(a, b) == 0 for a, b in r)
    w2 = sum(summary.rel(a, b) <= 0.02 for a, b in r)
    w10 = sum(summary.rel(a, b) <= 0.10 for a, b in r)
    a, b = max(r, key=lambda x: summary.rel(*x))
    print(f"| {metric} | {len(r)} | {e} | {w2} | {w10} | {a:g} / {b:g} |")
PY
for f in plain_graph ours_graph; do echo "$f: $(tail -1 "$O/$f.stdout")" >> "$O/summary.md"; done
cat "$O/summary.md"
