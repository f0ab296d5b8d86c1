#!/bin/bash
# Counters on CUDA-graph kernels against Nsight Compute, in one device call: the first LAUNCHES
# (default 40) kernel launches of `../real/graphs.py torch_graph` (a `torch.cuda.graph` step
# replayed; the graph's kernel nodes count as launches on both sides), ours (`kreplay run
# --tool counters`, node mode, the default) against `ncu --graph-profiling node`, the same
# metric list, clocks as they are; then summary.py's table, paired in launch order.
# usage: graphs.sh OUTDIR   (kreplay, libkernel_replay.so, summary.py, graphs.py beside it)
set -u
D=$(cd "$(dirname "$0")" && pwd)
O=${1:-/tmp/kreplay-counters}/graphs
mkdir -p "$O"
CUDA=$(ls -d /usr/local/cuda /usr/local/cuda-* 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$CUDA/lib64:$CUDA/extras/CUPTI/lib64:${LD_LIBRARY_PATH:-}
G=$D/graphs.py; [ -f "$G" ] || G=$D/../real/graphs.py
N=${LAUNCHES:-40}
LIST=smsp__inst_executed.sum,launch__grid_size,launch__block_size,dram__bytes_read.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,gpu__time_duration.sum
t() { date +%s%N; }
run() {
  local name=$1; shift
  local s; s=$(t)
  timeout -k 5 200 "$@" > "$O/$name.stdout" 2> "$O/$name.stderr"
  echo "$name rc=$? wall_ms=$(( ($(t) - s) / 1000000 ))" | tee -a "$O/steps.txt"
}
run plain_graph python3 "$G" torch_graph
KREPLAY_KERNEL_COUNT=$N run ours_graph "$D/kreplay" run --library "$D/libkernel_replay.so" --clock-control none --tool counters --metrics "$LIST" --out "$O/ours_graph.json" -- python3 "$G" torch_graph
run ncu_graph "$CUDA/bin/ncu" --csv --print-units base --clock-control none --graph-profiling node --metrics "$LIST" -c "$N" --log-file "$O/ncu_graph.csv" python3 "$G" torch_graph
python3 "$D/summary.py" "$O" > "$O/summary.md" 2>&1
python3 - "$O/ours_graph.json" >> "$O/summary.md" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c = d.get("counters", d)
n = sum(1 for x in c.get("dispatches", []) if x.get("graph") is not None)
print(f"\nours: {len(c.get('dispatches', []))} dispatches with counters, {n} of them graph kernel nodes")
PY
for f in plain_graph ours_graph; do echo "$f: $(tail -1 "$O/$f.stdout")" >> "$O/summary.md"; done
cat "$O/summary.md"
