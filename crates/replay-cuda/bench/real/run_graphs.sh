#!/bin/bash
# CUDA-graph programs under `kreplay run --tool verify --passes 3` on one GPU, in one device
# call: each program plain, then under replay in node mode (the default) and in graph mode;
# the last line of each run (the program's hex digests) must equal the plain run's, and every
# graph kernel must have been replayed (records with a `graph` field, no graph launch run
# once except by a reason the summary lists).
# usage: run_graphs.sh OUTDIR   (kreplay, libkernel_replay.so, graphs.py beside this file).
# PROGS (default: torch_graph torch_compile jax), BUDGET seconds (default 500).
set -u
D=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-kreplay-graphs}
mkdir -p "$OUT"
CUDA=$(ls -d /usr/local/cuda /usr/local/cuda-* 2>/dev/null | head -1)
export CUDA_HOME=$CUDA
export LD_LIBRARY_PATH=$CUDA/lib64:${LD_LIBRARY_PATH:-}
PY=${PY:-python3}
START=$(date +%s)
BUDGET=${BUDGET:-500}
K="$D/kreplay run --library $D/libkernel_replay.so"
P="$D/graphs.py"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$OUT/apps-before.txt" 2>&1
run() {
  local name=$1; shift
  if [ $(( $(date +%s) - START )) -gt "$BUDGET" ]; then
    echo "$name skipped (budget)" | tee -a "$OUT/times.txt"; return 1
  fi
  local s e rc
  s=$(date +%s%N)
  timeout -k 10 200 "$@" > "$OUT/$name.stdout" 2> "$OUT/$name.stderr"
  rc=$?
  e=$(date +%s%N)
  echo "$name rc=$rc wall_ms=$(( (e - s) / 1000000 ))" | tee -a "$OUT/times.txt"
  return $rc
}
for prog in ${PROGS:-torch_graph torch_compile jax}; do
  envs=()
  case $prog in jax) envs=(XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_autotune_level=0) ;; esac
  run "plain_$prog" env "${envs[@]}" $PY "$P" "$prog"
  want=$(tail -1 "$OUT/plain_$prog.stdout" 2>/dev/null)
  for mode in node graph; do
    name="verify3_${mode}_$prog"
    run "$name" env "${envs[@]}" $K --tool verify --passes 3 --graph-profiling $mode \
      --out "$OUT/$name.json" -- $PY "$P" "$prog"
    got=$(tail -1 "$OUT/$name.stdout" 2>/dev/null)
    if [ -n "$want" ] && [ "$got" = "$want" ]; then verdict=identical; else verdict="DIFFERENT ($got vs $want)"; fi
    graph_records=$(grep -o '"graph":[0-9]*' "$OUT/$name.json" 2>/dev/null | wc -l)
    replayed=$(grep -o '"graph":[0-9]*[^}]*"outcome":"replayed"\|"outcome":"replayed"[^}]*"graph":[0-9]*' "$OUT/$name.json" 2>/dev/null | wc -l)
    once=$(grep -ho '"graph_run_once":{[^}]*}' "$OUT/$name.json" "$OUT/$name.stderr" 2>/dev/null | head -1)
    echo "$name: $verdict; graph records $graph_records (replayed $replayed); ${once:-graph_run_once: none}" | tee -a "$OUT/summary.txt"
  done
done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$OUT/apps-after.txt" 2>&1
echo "== summary"; cat "$OUT/summary.txt"
