#!/bin/bash
# The counters tool's added time against Nsight Compute's, in one device call: the first 30
# kernels of a GPT-2-shaped training run (gpt2.py), 11 metrics, ours (`kreplay run --tool
# counters`, once per variant: `auto` the defaults, `single` KREPLAY_CUDA_COUNTER_PACKING=single,
# `session` KREPLAY_CUDA_RANGE_OBJECT=session, a new range-profiler object every session: the
# reference) and `ncu --csv --metrics` on the same list, clocks as they are on both sides,
# caches flushed on both. Added time = run time minus the plain run's. Then, per variant, the
# values against ncu's (summary.py), and `--set full` on `../real/programs.py small` per
# variant, whose values are compared with the `session` variant's.
# usage: speed.sh OUTDIR   (kreplay, libkernel_replay.so, summary.py, gpt2.py and
# ../real/programs.py beside it or in ./real). A run is skipped once BUDGET seconds (default
# 480) have passed.
set -u
D=$(cd "$(dirname "$0")" && pwd)
O=${1:-/tmp/kreplay-counters}/speed
mkdir -p "$O"
CUDA=$(ls -d /usr/local/cuda /usr/local/cuda-* 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$CUDA/lib64:$CUDA/extras/CUPTI/lib64:${LD_LIBRARY_PATH:-}
PROGRAMS=$D/programs.py; [ -f "$PROGRAMS" ] || PROGRAMS=$D/../real/programs.py
LIST=smsp__inst_executed.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,launch__grid_size,launch__block_size,dram__bytes_read.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,launch__registers_per_thread,gpu__time_duration.sum,sm__cycles_elapsed.avg,sm__throughput.avg.pct_of_peak_sustained_elapsed
EXTRA=profiler__replayer_passes,profiler__replayer_bytes_mem_backed_up
K="$D/kreplay run --library $D/libkernel_replay.so --clock-control none"
START=$(date +%s)
BUDGET=${BUDGET:-480}
t() { date +%s%N; }
run() {
  local name=$1 lim=$2; shift 2
  if [ $(( $(date +%s) - START )) -gt "$BUDGET" ]; then echo "$name skipped (budget)" | tee -a "$O/steps.txt"; return; fi
  local s; s=$(t)
  timeout -k 5 "$lim" "$@" > "$O/$name.stdout" 2> "$O/$name.stderr"
  echo "$name rc=$? wall_ms=$(( ($(t) - s) / 1000000 ))" | tee -a "$O/steps.txt"
}
GPT="python3 $D/gpt2.py 2"
run plain_gpt 90 $GPT
run plain_gpt2 90 $GPT
export KREPLAY_LOG=info
venv() {
  case $1 in
    single) echo KREPLAY_CUDA_COUNTER_PACKING=single ;;
    session) echo KREPLAY_CUDA_RANGE_OBJECT=session ;;
    kept) echo KREPLAY_CUDA_RANGE_OBJECT=kept ;;
    *) echo KREPLAY_CUDA_RANGE_OBJECT=auto ;;
  esac
}
VARIANTS=${VARIANTS:-auto single session}
for life in $VARIANTS; do
  run "ours_gpt_$life" 120 env $(venv $life) KREPLAY_KERNEL_COUNT=30 $K --tool counters --metrics "$LIST" --out "$O/ours_gpt_$life.json" -- $GPT
done
unset KREPLAY_LOG
run ncu_gpt 120 $CUDA/bin/ncu --csv --print-units base --clock-control none --metrics "$LIST,$EXTRA" -c 30 --log-file "$O/ncu_gpt_auto.csv" $GPT
for life in $VARIANTS; do
  [ "$life" = auto ] || cp "$O/ncu_gpt_auto.csv" "$O/ncu_gpt_$life.csv" 2>/dev/null
  run "full_small_$life" 120 env $(venv $life) KREPLAY_LOG=info $K --tool counters --set full --out "$O/full_small_$life.csv" -- python3 "$PROGRAMS" small
done
python3 "$D/summary.py" "$O" > "$O/summary.md" 2>&1
# Added time per life against ncu's, and the profiler's split (logged with the report).
python3 - "$O" <<'PY' >> "$O/summary.md" 2>&1
import csv, re, sys, os, statistics
o = sys.argv[1]
wall = {}
for line in open(os.path.join(o, "steps.txt")):
    m = re.match(r"(\S+) rc=(\d+) wall_ms=(\d+)", line)
    if m:
        wall[m[1]] = (int(m[2]), int(m[3]) / 1000)
plain = min(wall[k][1] for k in ("plain_gpt", "plain_gpt2") if k in wall)
ncu = wall.get("ncu_gpt", (1, float("nan")))[1] - plain
print(f"\nplain {plain:.1f} s; ncu added {ncu:.1f} s")
lives = [k[len("ours_gpt_"):] for k in wall if k.startswith("ours_gpt_")]
for life in lives:
    rc, w = wall.get(f"ours_gpt_{life}", (1, float("nan")))
    print(f"ours ({life}) rc={rc} added {w - plain:.1f} s = {(w - plain) / ncu:.2f} of ncu's")
    try:
        for line in open(os.path.join(o, f"ours_gpt_{life}.stderr")):
            if "profiler calls" in line:
                print("  " + line.strip()[-300:])
    except OSError:
        pass
def rows(path):
    with open(path) as f:
        lines = [l for l in f if l.startswith('"')]
    by = {}
    for r in csv.DictReader(lines):
        try:
            by[(r["ID"], r["Section Name"], r["Metric Name"])] = float(r["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            pass
    return by
try:
    ref = rows(os.path.join(o, "full_small_session.csv"))
except OSError:
    ref = {}
print(f"\n--set full on programs.py small: {len(ref)} values with an object per session")
for life in (l for l in lives if l != "session"):
    rc, w = wall.get(f"full_small_{life}", (1, float("nan")))
    try:
        got = rows(os.path.join(o, f"full_small_{life}.csv"))
    except OSError:
        print(f"{life}: no csv"); continue
    common = [k for k in ref if k in got]
    def close(a, b, tol):
        return a == b or (b != 0 and abs(a / b - 1) <= tol)
    w1 = sum(close(got[k], ref[k], 0.01) for k in common)
    w5 = sum(close(got[k], ref[k], 0.05) for k in common)
    nan = sum(1 for l in open(os.path.join(o, f"full_small_{life}.csv")) if '"n/a"' in l)
    missing = len(set(ref) - set(got))
    far = sorted((k for k in common if not close(got[k], ref[k], 0.05)), key=lambda k: k[2])[:12]
    print(f"{life}: rc={rc} wall {w:.1f} s (session {wall.get('full_small_session', (0, float('nan')))[1]:.1f} s); "
          f"{len(common)} compared, {w1} within 1%, {w5} within 5%, {missing} missing, {nan} n/a")
    for k in far:
        print(f"   {k[0]} {k[1]} / {k[2]}: {got[k]} vs {ref[k]}")
    for line in open(os.path.join(o, f"full_small_{life}.stderr")):
        if "profiler calls" in line:
            print("  " + line.strip()[-300:])
PY
cat "$O/summary.md"
