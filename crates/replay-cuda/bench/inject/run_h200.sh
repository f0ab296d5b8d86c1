#!/bin/bash
# issue 13's GPU run: small PyTorch programs plain and under `kreplay run` (one device call).
# usage: run_h200.sh OUTDIR   (kreplay, libkernel_replay.so, train_step.py and summary.py
# beside this file). Per program (PROGS, default all four): plain, verify N=3, timing N=3,
# timing N=38 (timing N=3 only for the programs in T3, default all); then REPEAT runs of the CNN under verify N=3. A run is skipped once BUDGET
# seconds (default 480) have passed, so the call ends inside the device's 10 minutes.
set -u
D=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-/tmp/kreplay-h200}
mkdir -p "$OUT"
CUDA=$(ls -d /usr/local/cuda /usr/local/cuda-* 2>/dev/null | head -1)
export CUDA_HOME=$CUDA
export LD_LIBRARY_PATH=$CUDA/lib64:${LD_LIBRARY_PATH:-}
PY=${PY:-python3}
START=$(date +%s)
BUDGET=${BUDGET:-480}
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  ls "$CUDA"/lib64/libcupti.so* "$CUDA"/extras/CUPTI/lib64/libcupti.so* 2>/dev/null | sed "s|$CUDA|CUDA|"; } > "$OUT/gpu.txt" 2>&1
now() { date +%s%N; }
run() {
  local name=$1 t=$2; shift 2
  local s e rc
  if [ $(( $(date +%s) - START )) -gt "$BUDGET" ]; then
    echo "$name skipped (budget)" | tee -a "$OUT/times.txt"; return
  fi
  s=$(now)
  timeout -k 10 "$t" "$@" > "$OUT/$name.stdout" 2> "$OUT/$name.stderr"
  rc=$?
  e=$(now)
  echo "$name rc=$rc wall_ms=$(( (e - s) / 1000000 ))" | tee -a "$OUT/times.txt"
}
K="$D/kreplay run --library $D/libkernel_replay.so"
for prog in ${PROGS:-gemm cnn transformer compiled}; do
  run "plain_$prog" 120 $PY "$D/train_step.py" "$prog"
  run "verify3_$prog" 150 $K --tool verify --passes 3 --out "$OUT/verify3_$prog.json" -- $PY "$D/train_step.py" "$prog"
  case " ${T3:-gemm cnn transformer compiled} " in *" $prog "*)
  run "timing3_$prog" 150 $K --tool timing --passes 3 --out "$OUT/timing3_$prog.json" -- $PY "$D/train_step.py" "$prog";; esac
  run "timing38_$prog" 150 $K --tool timing --passes 38 --out "$OUT/timing38_$prog.json" -- $PY "$D/train_step.py" "$prog"
done
for i in $(seq 1 "${REPEAT:-0}"); do
  run "repeat${i}_cnn" 60 $K --tool verify --passes 3 -- $PY "$D/train_step.py" cnn
done
$PY "$D/summary.py" "$OUT" | tee "$OUT/summary.md"
