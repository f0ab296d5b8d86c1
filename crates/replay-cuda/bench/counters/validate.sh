#!/bin/bash
# Issue 16's validation on the H200 (one device call): ours (`kreplay run --tool counters`;
# `__sass_` metrics through CUPTI's SASS Metrics API in a pass of their own)
# against Nsight Compute (`ncu --csv --metrics LIST`, with profiler__replayer_passes and
# profiler__replayer_bytes_mem_backed_up added) on the first 20 kernels of one CNN training
# step and on the bench's read-modify-write kernel, for the issue's list (BASIC) and a list
# that needs at least 8 passes (BIG), the SASS list on the RMW kernel (SASS), then summary.py's
# table.
# Both collect with caches flushed before each pass (ours: KREPLAY_CACHE_CONTROL=flush, set by
# kreplay; ncu: its default --cache-control all) and clocks as they are (ncu: --clock-control
# none; its default would lock them to base, which changes every time metric).
# usage: validate.sh OUTDIR   (kreplay, libkernel_replay.so, cuda_bench, train_step.py,
# lists.sh, summary.py beside this file). A run is skipped once BUDGET seconds (default 170)
# have passed.
set -u
D=$(cd "$(dirname "$0")" && pwd)
O=${1:-/tmp/kreplay-counters}/validate
mkdir -p "$O"
CUDA=$(ls -d /usr/local/cuda /usr/local/cuda-* 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$CUDA/lib64:$CUDA/extras/CUPTI/lib64:${LD_LIBRARY_PATH:-}
. "$D/lists.sh"
NCU="$CUDA/bin/ncu --csv --print-units base --clock-control none"
EXTRA=profiler__replayer_passes,profiler__replayer_bytes_mem_backed_up
K="$D/kreplay run --library $D/libkernel_replay.so"
START=$(date +%s)
BUDGET=${BUDGET:-170}
t() { date +%s%N; }
run() {
  local name=$1 lim=$2; shift 2
  if [ $(( $(date +%s) - START )) -gt "$BUDGET" ]; then echo "$name skipped (budget)" | tee -a "$O/steps.txt"; return; fi
  local s; s=$(t)
  timeout -k 5 "$lim" "$@" > "$O/$name.stdout" 2> "$O/$name.stderr"
  echo "$name rc=$? wall_ms=$(( ($(t) - s) / 1000000 ))" | tee -a "$O/steps.txt"
}
# Ours collects what the chip allows: metrics `kreplay` refuses at start (named, exit 2, no
# program started) are left out of our list and written to refused.txt; ncu gets the list whole.
collectable() {
  local l=$1 out bad b i
  for i in 1 2 3 4; do
    out=$($K --tool counters --metrics "$l" -- true 2>&1) && break
    bad=$(echo "$out" | grep -o '"[A-Za-z0-9_.]*" (' | sed 's/"//g; s/ (//')
    [ -z "$bad" ] && break
    for b in $bad; do
      echo "$b: $(echo "$out" | grep -o "\"$b\" ([^)]*)" | head -1)" >> "$O/refused.txt"
      l=$(echo ",$l," | sed "s/,$b,/,/g; s/^,//; s/,$//")
    done
  done
  echo "$l"
}
CNN="python3 $D/train_step.py cnn 1"
RMW="$D/cuda_bench app --alloc-gib 1 --kernel-mib 16"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
echo "BASIC=$BASIC" > "$O/lists.txt"; echo "BIG=$BIG" >> "$O/lists.txt"; echo "SASS=$SASS" >> "$O/lists.txt"
# The chip's SASS metrics (the names `__sass_` metrics map to) and BIG's plan, SASS pass included.
OBASIC=$(collectable "$BASIC"); OBIG=$(collectable "$BIG"); OSASS=$(collectable "$SASS")
sort -u -o "$O/refused.txt" "$O/refused.txt" 2>/dev/null
run list_sass 30 $D/kreplay run --list-sass --metrics "$OBIG"
run plain_cnn 60 $CNN
run plain_rmw 30 $RMW
export KREPLAY_KERNEL_COUNT=20
run ours_basic_cnn 60 $K --tool counters --metrics "$OBASIC" --out "$O/ours_basic_cnn.json" -- $CNN
run ncu_basic_cnn 90 $NCU --metrics "$BASIC,$EXTRA" -c 20 --log-file "$O/ncu_basic_cnn.csv" $CNN
run ours_big_cnn 60 $K --tool counters --metrics "$OBIG" --out "$O/ours_big_cnn.json" -- $CNN
unset KREPLAY_KERNEL_COUNT
run ours_basic_rmw 30 $K --tool counters --metrics "$OBASIC" --kernel-include kr_rmw --out "$O/ours_basic_rmw.json" -- $RMW
run ncu_basic_rmw 30 $NCU --metrics "$BASIC,$EXTRA" -k regex:kr_rmw -c 1 --log-file "$O/ncu_basic_rmw.csv" $RMW
run ours_sass_rmw 30 $K --tool counters --metrics "$OSASS" --kernel-include kr_rmw --out "$O/ours_sass_rmw.json" -- $RMW
run ncu_sass_rmw 30 $NCU --metrics "$SASS,$EXTRA" -k regex:kr_rmw -c 1 --log-file "$O/ncu_sass_rmw.csv" $RMW
run ours_big_rmw 30 $K --tool counters --metrics "$OBIG" --kernel-include kr_rmw --out "$O/ours_big_rmw.json" -- $RMW
run ncu_big_rmw 40 $NCU --metrics "$BIG,$EXTRA" -k regex:kr_rmw -c 1 --log-file "$O/ncu_big_rmw.csv" $RMW
run ncu_big_cnn 100 $NCU --metrics "$BIG,$EXTRA" -c 20 --log-file "$O/ncu_big_cnn.csv" $CNN
python3 "$D/summary.py" "$O" > "$O/summary.md" 2>&1
cat "$O/summary.md"
