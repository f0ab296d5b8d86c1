#!/bin/bash
# The four programs whose replay once went wrong (PyTorch's expandable segments growing, a
# graph capture beside another thread's launches, surface writes, JAX), each run plainly and
# then REPEAT times (default 20) under `kreplay run --tool verify --passes 3`, the four in
# parallel lanes on the one GPU, in one device call. A run passes when it exits 0 and its last
# line (the program's digest of its result) equals the plain run's; the table counts passes
# and lists the declines' reasons.
# usage: run_twenty.sh OUTDIR   (kreplay, libkernel_replay.so, programs.py, run_soundness.sh
# beside this file). Each lane stops starting runs after BUDGET seconds (default 480).
set -u
D=$(cd "$(dirname "$0")" && pwd)
O=${1:?usage: run_twenty.sh OUTDIR}
mkdir -p "$O"
N=${REPEAT:-20}
for p in grow capture_thread surface jax_noautotune; do
  PROGS=$p REPEAT=$N GDB=0 KLOG=warn BUDGET=${BUDGET:-480} bash "$D/run_soundness.sh" "$O/$p" > "$O/$p.log" 2>&1 &
done
wait
{
  echo "| program | runs | rc 0 and result equal to the plain run's | other |"
  echo "|---|---|---|---|"
  for p in grow capture_thread surface jax_noautotune; do
    t="$O/$p/times.txt"
    plain=$(grep "^plain_" "$t" | sed 's/.* last=//')
    runs=$(grep -c "^verify3_" "$t")
    ok=$(grep "^verify3_" "$t" | grep " rc=0 " | sed 's/.* last=//' | grep -cxF -- "$plain")
    bad=$(grep "^verify3_" "$t" | grep -v " rc=0 .* last=$plain\$" | cut -d' ' -f1,2 | tr '\n' ' ')
    echo "| $p | $runs | $ok | ${bad:-none} |"
  done
  echo
  echo "declined and truncated reasons over all runs (count):"
  grep -ho '"declined":{[^}]*}\|"truncated":{[^}]*}' "$O"/*/verify3_*.json 2>/dev/null | sort | uniq -c
  grep -ho '"freed_regions":[0-9]*' "$O"/*/verify3_*.json 2>/dev/null | sort | uniq -c | sort -rn | head -5
  echo "errors logged:"
  grep -h "ERROR\|panicked\|restore failed\|illegal" "$O"/*/verify3_*.stderr 2>/dev/null | cut -c1-200 | sort | uniq -c | head -20
} > "$O/summary.md"
cat "$O/summary.md"
# Keep what comes back small: the reports are summarised above.
find "$O" -name '*.json' -size +256k -delete
