#!/bin/bash
# Issue 16, first GPU call: the counters tool on the CNN's first 20 kernels and on the bench's
# read-modify-write kernel with the basic list, and the candidate list pruned to the metrics
# the chip has (kreplay compiles a list before it starts the program and names every metric
# that cannot be collected).
# usage: smoke.sh OUTDIR   (kreplay, libkernel_replay.so, cuda_bench, train_step.py, lists.sh
# beside this file)
set -u
D=$(cd "$(dirname "$0")" && pwd)
O=${1:-/tmp/kreplay-counters}/smoke
mkdir -p "$O"
CUDA=$(ls -d /usr/local/cuda /usr/local/cuda-* 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$CUDA/lib64:$CUDA/extras/CUPTI/lib64:${LD_LIBRARY_PATH:-}
. "$D/lists.sh"
K="$D/kreplay run --library $D/libkernel_replay.so"
t() { date +%s%N; }
step() { echo "$1 rc=$2 wall_ms=$3" | tee -a "$O/steps.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
L=$CANDIDATES
for i in 1 2 3 4; do
  $K --tool counters --metrics "$L" -- true > "$O/prune$i.txt" 2>&1
  rc=$?
  step "prune$i" $rc 0
  [ $rc -eq 0 ] && break
  bad=$(grep -o '"[A-Za-z0-9_.]*" (' "$O/prune$i.txt" | sed 's/"//g; s/ (//')
  [ -z "$bad" ] && break
  for b in $bad; do L=$(echo ",$L," | sed "s/,$b,/,/g; s/^,//; s/,$//"); done
done
echo "$L" > "$O/big_list.txt"
s=$(t); KREPLAY_KERNEL_COUNT=20 timeout 100 $K --tool counters --set basic --out "$O/ours_basic_cnn.json" -- python3 "$D/train_step.py" cnn 1 > "$O/ours_basic_cnn.stdout" 2> "$O/ours_basic_cnn.stderr"
step ours_basic_cnn $? $(( ($(t) - s) / 1000000 ))
s=$(t); timeout 40 $K --tool counters --set basic --kernel-include kr_rmw --out "$O/ours_basic_rmw.json" -- "$D/cuda_bench" app --alloc-gib 1 --kernel-mib 16 > "$O/ours_basic_rmw.stdout" 2> "$O/ours_basic_rmw.stderr"
step ours_basic_rmw $? $(( ($(t) - s) / 1000000 ))
s=$(t); timeout 40 $K --tool counters --metrics "$L" --kernel-include kr_rmw --out "$O/ours_big_rmw.json" -- "$D/cuda_bench" app --alloc-gib 1 --kernel-mib 16 > "$O/ours_big_rmw.stdout" 2> "$O/ours_big_rmw.stderr"
step ours_big_rmw $? $(( ($(t) - s) / 1000000 ))
s=$(t); timeout 40 "$CUDA/bin/ncu" --csv --print-units base --clock-control none --metrics "$BASIC,profiler__replayer_passes,profiler__replayer_bytes_mem_backed_up" -k regex:kr_rmw -c 1 --log-file "$O/ncu_basic_rmw.csv" "$D/cuda_bench" app --alloc-gib 1 --kernel-mib 16 > "$O/ncu_basic_rmw.stdout" 2>&1
step ncu_basic_rmw $? $(( ($(t) - s) / 1000000 ))
python3 "$D/summary.py" "$O" > "$O/summary.md" 2>&1
cat "$O/summary.md"
