#!/bin/bash
# Isolates what loses the context in `programs.py capture_thread` (one thread captures CUDA
# graphs while another launches) under `kreplay run --tool verify --passes 3`: the default,
# graphs run once, the gather copy off, graph mode, drains beside a capture on, and a run with
# CUDA_LAUNCH_BLOCKING=1 whose first error names the faulting launch.
# usage: run_capture_variants.sh OUTDIR   (kreplay, libkernel_replay.so, programs.py beside it)
set -u
R=$(cd "$(dirname "$0")" && pwd); O=${1:?usage: run_capture_variants.sh OUTDIR}
mkdir -p "$O"
CUDA=$(ls -d /usr/local/cuda /usr/local/cuda-* 2>/dev/null | head -1)
export PATH=$CUDA/bin:$PATH LD_LIBRARY_PATH=$CUDA/lib64:${LD_LIBRARY_PATH:-}
cd $O
v() {
  local name=$1; shift
  env "$@" timeout 40 $R/kreplay run --library $R/libkernel_replay.so --tool verify --passes 3 -- python3 $R/programs.py capture_thread > $O/$name.out 2> $O/$name.err
  echo "== $name rc=$? last=$(tail -1 $O/$name.out)"
  grep -o "outcome=[a-z]* reason=[a-z_]*" $O/$name.err | sort | uniq -c | tr '\n' ';'; echo
  grep -m3 "ILLEGAL\|illegal" $O/$name.err | cut -c1-400
}
v default X=1
v graph_off KREPLAY_GRAPH_PROFILING=off
v no_gather KREPLAY_CUDA_GATHER_COPIES=0
v graph_whole KREPLAY_GRAPH_PROFILING=graph
v beside_capture KREPLAY_CUDA_DRAIN_BESIDE_CAPTURE=1
v blocking CUDA_LAUNCH_BLOCKING=1
grep -B3 -m1 "ILLEGAL" $O/blocking.err | cut -c1-600
tar czf raw6.tar.gz *.err; rm -f *.err
