#!/bin/bash
# The real-program runs of one device call: the soundness programs repeated (surface writes,
# a capture beside another thread's launches, PyTorch's growing expandable segments under
# verify and timing, JAX with and without autotuning's timing), then the real-jobs script.
# usage: run_final.sh OUTDIR  (kreplay, libkernel_replay.so and the scripts beside this file)
set -u
D=$(cd "$(dirname "$0")" && pwd)
O=${1:?usage: run_final.sh OUTDIR}
mkdir -p "$O"
S="$D/run_soundness.sh"
PROGS=surface REPEAT=${R_SURFACE:-10} GDB=0 BUDGET=60 bash "$S" "$O/surface" > /dev/null 2>&1
PROGS=capture_thread REPEAT=${R_CAPTURE:-6} GDB=0 BUDGET=80 bash "$S" "$O/capture" > /dev/null 2>&1
PROGS=grow REPEAT=${R_GROW:-4} GDB=0 BUDGET=90 bash "$S" "$O/grow" > /dev/null 2>&1
PROGS=grow TOOL=timing REPEAT=1 GDB=0 BUDGET=30 bash "$S" "$O/grow_timing" > /dev/null 2>&1
PROGS="jax_big jax" REPEAT=1 GDB=0 BUDGET=100 bash "$S" "$O/jax" > /dev/null 2>&1
for d in surface capture grow grow_timing jax; do
  echo "== $d"; cat "$O/$d/times.txt"
  grep -h "^note:\|Delay kernel timed out" "$O/$d"/*.stderr 2>/dev/null | sort | uniq -c | cut -c1-200
  grep -ho '"declined":{[^}]*}\|"truncated":{[^}]*}' "$O/$d"/*.stderr 2>/dev/null | sort | uniq -c
  grep -ho '"behind_host_wait":[0-9]*\|"beside_capture":[0-9]*' "$O/$d"/*.stderr 2>/dev/null | sort | uniq -c
done
if [ -x "$D/run_jobs.sh" ]; then BUDGET=${JOBS_BUDGET:-150} LAUNCHES=${LAUNCHES:-200000} bash "$D/run_jobs.sh" "$O/jobs" > "$O/jobs.log" 2>&1; echo "== jobs"; cat "$O/jobs/summary.txt"; fi
