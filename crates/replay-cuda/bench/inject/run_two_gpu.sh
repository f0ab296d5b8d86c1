#!/bin/bash
# issue 17's GPU run (the two-GPU kind): the library-mode program on both GPUs, then the
# two-process NCCL step plain, under `kreplay run --tool verify --passes 3` in each process
# (communication kernels excluded: the default), and once with the exclusion off (their later
# passes must truncate at the pass bound, the program still completing with the right result).
# usage: run_two_gpu.sh OUTDIR   (kreplay, libkernel_replay.so, cuda_bench, ddp_step.py beside it)
set -u
D=$(cd "$(dirname "$0")" && pwd)
O=${1:-/tmp/kreplay-two-gpu}
mkdir -p "$O"
CUDA=$(ls -d /usr/local/cuda /usr/local/cuda-* 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$CUDA/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PY:-python3}
( cd "$O" && timeout 120 "$D/cuda_bench" multi --kernel-mib 1024 --passes 8 --pooled-dispatches 10 \
    --out multi.json > multi.log 2>&1; echo "multi rc=$?" ) | tee -a "$O/times.txt"
# One process per GPU; each under its own kreplay when K is set.
step() {
  local name=$1; shift
  local port=$((29500 + RANDOM % 1000)) pids=() r
  for r in 0 1; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout -k 10 150 "$@" > "$O/${name}_$r.stdout" 2> "$O/${name}_$r.stderr" &
    pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}"; echo "$name rank $r rc=$?" | tee -a "$O/times.txt"; done
}
K="$D/kreplay run --library $D/libkernel_replay.so --tool verify --passes 3"
step plain $PY "$D/ddp_step.py"
step verify3 sh -c "$K --out $O/verify3_\$RANK.json -- $PY $D/ddp_step.py"
step verify3_nccl_replayed env KREPLAY_COMMUNICATION_KERNELS=none KREPLAY_PASS_TIMEOUT=2s \
  sh -c "$K --out $O/verify3_nccl_replayed_\$RANK.json -- $PY $D/ddp_step.py"
$PY - "$O" <<'PY' | tee "$O/summary.md"
import json, os, sys
o = sys.argv[1]
def last(n):
    try:
        return (open(f"{o}/{n}.stdout").read().strip().splitlines() or [None])[-1]
    except OSError:
        return None
print("| run | rank | output = plain | dispatches by outcome | communication run once |")
print("|---|---|---|---|---|")
for run in ["verify3", "verify3_nccl_replayed"]:
    for r in (0, 1):
        try:
            v = json.load(open(f"{o}/{run}_{r}.json"))
        except (OSError, ValueError) as e:
            print(f"| {run} | {r} | {last(f'{run}_{r}') == last(f'plain_{r}')} | no report ({e}) | |")
            continue
        by = {}
        for x in v["records"]:
            k = "replayed" if x.get("outcome") == "replayed" else f'{x.get("outcome")}:{x.get("reason")}'
            by[k] = by.get(k, 0) + 1
        same = "yes" if last(f"plain_{r}") and last(f"{run}_{r}") == last(f"plain_{r}") else "NO"
        print(f"| {run} | {r} | {same} | {json.dumps(by)} | {v['interception'].get('communication')} |")
try:
    m = json.load(open(f"{o}/multi.json"))
    print(f"\nmulti: pass={m['pass']} windows open {m['windows_open_s']} overlap {m['overlap_of_either']:.0%}")
except (OSError, ValueError) as e:
    print(f"\nmulti: no result ({e})")
PY
