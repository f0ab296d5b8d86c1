#!/bin/bash
# Real programs under `kreplay run` on one GPU, in one device call: each plain, then under
# replay; a crash under replay is re-run under cuda-gdb for its backtrace.
# usage: run_soundness.sh OUTDIR   (kreplay and libkernel_replay.so beside this file).
# PROGS (default all), REPEAT (default 1: runs under replay per program), BUDGET seconds
# (default 500) after which runs are skipped so the call ends inside the device's limit.
set -u
D=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-kreplay-soundness}
mkdir -p "$OUT"
CUDA=$(ls -d /usr/local/cuda /usr/local/cuda-* 2>/dev/null | head -1)
export CUDA_HOME=$CUDA
export LD_LIBRARY_PATH=$CUDA/lib64:${LD_LIBRARY_PATH:-}
PY=${PY:-python3}
START=$(date +%s)
BUDGET=${BUDGET:-500}
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$OUT/apps-before.txt" 2>&1
run() {
  local name=$1 t=$2; shift 2
  if [ $(( $(date +%s) - START )) -gt "$BUDGET" ]; then
    echo "$name skipped (budget)" | tee -a "$OUT/times.txt"; return
  fi
  local s e rc
  s=$(date +%s%N)
  timeout -k 10 "$t" "$@" > "$OUT/$name.stdout" 2> "$OUT/$name.stderr"
  rc=$?
  e=$(date +%s%N)
  echo "$name rc=$rc wall_ms=$(( (e - s) / 1000000 )) last=$(tail -1 "$OUT/$name.stdout" 2>/dev/null)" | tee -a "$OUT/times.txt"
  return $rc
}
K="$D/kreplay run --library $D/libkernel_replay.so"
P="$D/programs.py"
backtrace() {
  local name=$1; shift
  printf 'set follow-fork-mode child\nset detach-on-fork on\nset pagination off\nrun\nbt 40\ninfo threads\n' > "$OUT/gdb.cmds"
  timeout -k 10 240 "$CUDA/bin/cuda-gdb" -batch -x "$OUT/gdb.cmds" --args "$@" > "$OUT/$name.gdb" 2>&1
}
for prog in ${PROGS:-grow capture_thread surface jax jax_noautotune jax_big}; do
  envs=()
  arg=$prog
  case $prog in
    grow) envs=(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) ;;
    jax|jax_big) envs=(XLA_PYTHON_CLIENT_PREALLOCATE=false) ;;
    jax_noautotune) arg=jax; envs=(XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_autotune_level=0) ;;
  esac
  run "plain_$prog" 120 env "${envs[@]}" $PY "$P" "$arg"
  for i in $(seq 1 "${REPEAT:-1}"); do
    run "${TOOL:-verify}3_${prog}_$i" 200 env "${envs[@]}" KREPLAY_LOG=${KLOG:-info} $K --tool ${TOOL:-verify} --passes 3 --out "$OUT/${TOOL:-verify}3_${prog}_$i.json" -- $PY "$P" "$arg"
    rc=$?
    if [ "$rc" -ne 0 ] && [ "$i" -eq 1 ] && [ "${GDB:-1}" = 1 ]; then
      backtrace "verify3_$prog" env "${envs[@]}" KREPLAY_LOG=debug $K --tool verify --passes 3 -- $PY "$P" "$arg"
    fi
  done
  case $prog in jax|jax_big)
    run "autotune_plain_$prog" 120 env "${envs[@]}" XLA_FLAGS=--xla_gpu_dump_autotune_results_to=$OUT/autotune_plain_$prog.txt $PY "$P" $prog
    run "autotune_replay_$prog" 200 env "${envs[@]}" XLA_FLAGS=--xla_gpu_dump_autotune_results_to=$OUT/autotune_replay_$prog.txt $K --tool verify --passes 3 -- $PY "$P" $prog
    if cmp -s "$OUT/autotune_plain_$prog.txt" "$OUT/autotune_replay_$prog.txt"; then
      echo "autotune_$prog: the autotuner chose the same under replay" | tee -a "$OUT/times.txt"
    else
      echo "autotune_$prog: the autotuner chose differently under replay" | tee -a "$OUT/times.txt"
    fi
    ;;
  esac
done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$OUT/apps-after.txt" 2>&1
echo "== summary"; cat "$OUT/times.txt"
