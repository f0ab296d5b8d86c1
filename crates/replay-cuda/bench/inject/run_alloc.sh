#!/bin/bash
# issue 14's GPU run: the training programs with PyTorch's two other allocators, plain and
# under `kreplay run --tool verify --passes 3` (one device call, about 70 s).
# usage: run_alloc.sh OUTDIR   (kreplay, libkernel_replay.so and train_step.py beside this file)
# Writes per setting and program the plain and replayed outputs, the JSON report, and
# summary.md: output equal to the plain run's, launches seen, dispatches by outcome and reason,
# inputs/outputs that differed across passes, and the interception's mapping / pool counts.
set -u
D=$(cd "$(dirname "$0")" && pwd)
O=${1:-/tmp/kreplay-alloc}
mkdir -p "$O"
CUDA=$(ls -d /usr/local/cuda /usr/local/cuda-* 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$CUDA/lib64:${LD_LIBRARY_PATH:-}
PY=${PY:-python3}
K="$D/kreplay run --library $D/libkernel_replay.so"
for a in expandable_segments:True backend:cudaMallocAsync; do
  n=${a%%:*}
  for p in ${PROGS:-transformer cnn}; do
    PYTORCH_CUDA_ALLOC_CONF=$a timeout 100 $PY "$D/train_step.py" $p > "$O/plain_${p}_$n.stdout" 2> "$O/plain_${p}_$n.stderr"
    PYTORCH_CUDA_ALLOC_CONF=$a timeout 120 $K --tool verify --passes 3 --out "$O/verify3_${p}_$n.json" -- \
      $PY "$D/train_step.py" $p > "$O/verify3_${p}_$n.stdout" 2> "$O/verify3_${p}_$n.stderr"
    echo "$p $n rc=$?"
  done
done
$PY - "$O" <<'PY' | tee "$O/summary.md"
import glob, json, os, sys
o = sys.argv[1]
print("| program_allocator | output = plain | seen | dispatches by outcome | inputs/outputs differ | mapping and pool counts |")
print("|---|---|---|---|---|---|")
for f in sorted(glob.glob(o + "/verify3_*.json")):
    b = os.path.basename(f)[8:-5]
    def last(n):
        try:
            return (open(f"{o}/{n}_{b}.stdout").read().strip().splitlines() or [None])[-1]
        except OSError:
            return None
    v = json.load(open(f))
    rs, by = v["records"], {}
    for r in rs:
        k = "replayed" if r.get("outcome") == "replayed" else f'{r.get("outcome")}:{r.get("reason")}'
        by[k] = by.get(k, 0) + 1
    i = v.get("interception", {})
    same = "yes" if last("plain") and last("plain") == last("verify3") else "NO"
    din = sum(1 for r in rs if r.get("inputs_identical") is False)
    dout = sum(1 for r in rs if r.get("outputs_identical") is False)
    counts = {k: x for k, x in i.items() if "vmem" in k or "async" in k}
    print(f"| {b} | {same} | {i.get('launches_seen')} | {json.dumps(by)} | {din}/{dout} | {json.dumps(counts)} |")
PY
