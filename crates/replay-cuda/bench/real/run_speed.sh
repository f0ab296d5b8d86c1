#!/bin/bash
# Real programs plainly and under `kreplay run --tool timing` at N=3 and N=38, in one device
# call; final results must be bit-identical before any timing is reported. Then the table.
# usage: run_speed.sh OUTDIR   (kreplay and libkernel_replay.so beside this file).
set -u
D=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-kreplay-speed}
mkdir -p "$OUT"
PY=${PY:-python3}
K="$D/kreplay run --library $D/libkernel_replay.so --tool timing"
I="$D/../inject/train_step.py"
ROWS=()
wall() { local s e; s=$(date +%s%N); "$@"; local rc=$?; e=$(date +%s%N); echo $(( (e - s) / 1000000 )) > "$OUT/.wall"; return $rc; }
prog() {
  local name=$1; shift
  wall "$@" > "$OUT/$name.plain" 2> "$OUT/$name.plain.err" || { echo "$name: plain run failed"; return; }
  local plain_ms; plain_ms=$(cat "$OUT/.wall")
  for n in 3 38; do
    $K --passes $n --out "$OUT/$name.n$n.json" -- "$@" > "$OUT/$name.n$n" 2> "$OUT/$name.n$n.err"
    if [ "$(tail -1 "$OUT/$name.plain")" != "$(tail -1 "$OUT/$name.n$n")" ]; then
      echo "$name: result under N=$n differs from the plain run"; return
    fi
  done
  ROWS+=("$name" "$(awk "BEGIN{print $plain_ms/1000}")" 3 "$OUT/$name.n3.json" 38 "$OUT/$name.n38.json")
}
prog cnn $PY "$I" cnn
prog transformer $PY "$I" transformer
XLA_FLAGS=--xla_gpu_autotune_level=0 XLA_PYTHON_CLIENT_PREALLOCATE=false prog jax $PY "$D/programs.py" jax
$PY "$D/speed_table.py" "${ROWS[@]}" | tee "$OUT/table.md"
