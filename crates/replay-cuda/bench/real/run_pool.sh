#!/bin/bash
# JAX with its default preallocated pool (75% of the GPU in one allocation) plainly and under
# `kreplay run --tool verify --passes 3` with each `KREPLAY_OUTSIDE_CHECK` value: wall times,
# last lines (results), the records' phase split, in one device call.
# usage: run_pool.sh OUTDIR [CHECKS...]   (kreplay, libkernel_replay.so, programs.py beside it;
# CHECKS default: never first every; each run is bounded by LIMIT seconds, default 150)
set -u
D=$(cd "$(dirname "$0")" && pwd); O=${1:?usage: run_pool.sh OUTDIR [CHECKS...]}; shift
CHECKS=${*:-never first every}
mkdir -p "$O"
PY=${PY:-python3}
LIMIT=${LIMIT:-150}
PROG=${PROG:-jax}
t() { local s e; s=$(date +%s%N); "$@"; local rc=$?; e=$(date +%s%N); echo "rc=$rc wall=$(( (e - s) / 1000000 )) ms"; }
echo "plain: $(t timeout $LIMIT $PY "$D/programs.py" $PROG > "$O/plain.out" 2> "$O/plain.err") last=$(tail -1 "$O/plain.out")"
for c in $CHECKS; do
  r=$(KREPLAY_OUTSIDE_CHECK=$c t timeout $LIMIT "$D/kreplay" run --library "$D/libkernel_replay.so" --tool verify --passes 3 --out "$O/$c.json" -- $PY "$D/programs.py" $PROG > "$O/$c.out" 2> "$O/$c.err")
  echo "$c: $r last=$(tail -1 "$O/$c.out")"
  grep -h "^replay time\|^summary" "$O/$c.err" | cut -c1-400
done
