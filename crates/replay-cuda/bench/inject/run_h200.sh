#!/bin/bash
# issue 13's GPU run: small PyTorch programs plain and under `kreplay run` (one device call).
# usage: run_h200.sh OUTDIR   (kreplay, libkernel_replay.so and train_step.py beside this file)
set -u
D=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-/tmp/kreplay-h200}
mkdir -p "$OUT"
CUDA=$(ls -d /usr/local/cuda /usr/local/cuda-* 2>/dev/null | head -1)
export CUDA_HOME=$CUDA
export LD_LIBRARY_PATH=$CUDA/lib64:${LD_LIBRARY_PATH:-}
PY=${PY:-python3}
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } > "$OUT/gpu.txt" 2>&1
now() { date +%s%N; }
run() {
  local name=$1 t=$2; shift 2
  local s e rc
  s=$(now)
  timeout -k 10 "$t" "$@" > "$OUT/$name.stdout" 2> "$OUT/$name.stderr"
  rc=$?
  e=$(now)
  echo "$name rc=$rc wall_ms=$(( (e - s) / 1000000 ))" | tee -a "$OUT/times.txt"
}
K="$D/kreplay run --library $D/libkernel_replay.so"
for prog in ${PROGS:-gemm cnn transformer}; do
  run "plain_$prog" 120 $PY "$D/train_step.py" "$prog"
  run "verify3_$prog" 150 $K --tool verify --passes 3 --out "$OUT/verify3_$prog.json" -- $PY "$D/train_step.py" "$prog"
done
for prog in ${TIMING38:-}; do
  run "timing38_$prog" 150 $K --tool timing --passes 38 --out "$OUT/timing38_$prog.json" -- $PY "$D/train_step.py" "$prog"
done
run timing3_cnn 120 $K --tool timing --passes 3 --out "$OUT/timing3_cnn.json" -- $PY "$D/train_step.py" cnn
run timing38_cnn 150 $K --tool timing --passes 38 --out "$OUT/timing38_cnn.json" -- $PY "$D/train_step.py" cnn
if [ -n "${COMPILED:-}" ]; then
  run plain_compiled 150 $PY "$D/train_step.py" compiled
  run verify3_compiled 200 $K --tool verify --passes 3 --out "$OUT/verify3_compiled.json" -- $PY "$D/train_step.py" compiled
fi
for i in $(seq 1 "${REPEAT:-0}"); do
  run "repeat${i}_cnn" 60 $K --tool verify --passes 3 -- $PY "$D/train_step.py" cnn
done
echo "== results"
for f in "$OUT"/*.stdout; do echo "$(basename "$f" .stdout): $(tail -1 "$f")"; done
for f in "$OUT"/*.json; do
  $PY - "$f" <<'PYEOF'
import json, sys
v = json.load(open(sys.argv[1]))
s, i = v["summary"], v["interception"]
recs = v["records"]
bad_in = sum(1 for r in recs if r.get("inputs_identical") is False)
bad_out = sum(1 for r in recs if r.get("outputs_identical") is False)
print(sys.argv[1].split("/")[-1], "seen", i["launches_seen"], "submitted", i["submitted"],
      "replayed", s.get("replayed"), "declined", s.get("declined"), "truncated", s.get("truncated"),
      "inputs_differ", bad_in, "outputs_differ", bad_out,
      "layout driver/extra/unknown", i["layout_driver"], i["layout_extra"], i["layout_unknown"],
      "capture", i["stream_capture"], "graph", i["graph_launch"], "coop", i["cooperative"],
      "comm", i["communication"], "allocs", i["alloc_device"], i["alloc_host"], "replay_s", s.get("replay_seconds"))
PYEOF
done
