#!/bin/bash
# `kreplay run` in real jobs on the H200, in one device call: a two-rank `torchrun` job on the
# one GPU (gloo for the collectives) with per-rank reports and a merged one of rank 1 only
# (`--ranks 1`); a run interrupted by `timeout -s INT` (no process may be left behind, and a
# report of what ran must come); the same for a torchrun job; `nsys profile kreplay run`
# (nsys's injection chained after ours); LAUNCHES (default 1000000) launches of a small kernel
# under `--tool timing --passes 2` with the peak RSS of the program and of kreplay.
# usage: run_jobs.sh OUTDIR   (kreplay and libkernel_replay.so beside this file); a short
# summary is printed and kept in OUTDIR/summary.txt. A run is skipped once BUDGET seconds
# (default 500) have passed.
set -u
D=$(cd "$(dirname "$0")" && pwd)
O=${1:?usage: run_jobs.sh OUTDIR}
mkdir -p "$O"
CUDA=$(ls -d /usr/local/cuda /usr/local/cuda-* 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$CUDA/lib64:${LD_LIBRARY_PATH:-}
export PATH=$CUDA/bin:$PATH
PY=${PY:-python3}
START=$(date +%s)
BUDGET=${BUDGET:-500}
K="$D/kreplay run --library $D/libkernel_replay.so"
S="$O/summary.txt"
: > "$S"
say() { echo "$*" | tee -a "$S"; }
left() { [ $(( $(date +%s) - START )) -lt "$BUDGET" ] || { say "$1 skipped (budget)"; return 1; }; }
port() { echo $((29500 + RANDOM % 1000)); }

cat > "$O/gloo_step.py" <<'PY'
# A data-parallel step on one GPU: gradients all-reduced on the host with gloo.
import os, sys, time
import torch, torch.distributed as dist
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.cuda.set_device(0)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 64, device="cuda") + rank
y = torch.randint(0, 10, (32,), device="cuda")
for i in range(steps):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    for p in model.parameters():
        g = p.grad.cpu()
        dist.all_reduce(g)
        p.grad.copy_(g / dist.get_world_size())
    opt.step()
    if i % 100 == 99:
        print(f"rank {rank} step {i + 1}", flush=True)
torch.cuda.synchronize()
print(f"rank {rank} loss {loss.item().hex()}", flush=True)
dist.destroy_process_group()
PY
cat > "$O/launches.py" <<'PY'
# N launches of one small kernel, then this process's peak RSS.
import sys, torch
n = int(sys.argv[1])
x = torch.zeros(1024, device="cuda")
for i in range(n):
    x.add_(1.0)
torch.cuda.synchronize()
print("sum", x.sum().item())
print("app " + [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].strip(), flush=True)
PY
TR="$PY -m torch.distributed.run --nproc-per-node 2 --master-addr 127.0.0.1"
leftover() { pgrep -f "$1" > /dev/null && echo "LEFT BEHIND: $(pgrep -af "$1" | head -3)" || echo "no process left"; }

# 1. torchrun, two ranks on the one GPU: plain, per-rank reports, rank 1 only merged.
if left torchrun; then
  timeout -k 10 120 $TR --master-port "$(port)" "$O/gloo_step.py" > "$O/plain_torchrun.stdout" 2> "$O/plain_torchrun.stderr"
  say "torchrun plain rc=$?: $(grep -c loss "$O/plain_torchrun.stdout") ranks finished"
  timeout -k 10 180 $K --tool timing --passes 3 --out "$O/torchrun_rank%rank%.json" -- \
    $TR --master-port "$(port)" "$O/gloo_step.py" > "$O/torchrun.stdout" 2> "$O/torchrun.stderr"
  say "torchrun under kreplay rc=$?: $(ls "$O"/torchrun_rank*.json 2>/dev/null | wc -l) per-rank reports;" \
    "outputs equal the plain run's: $(cmp -s <(sort "$O/plain_torchrun.stdout") <(sort "$O/torchrun.stdout") && echo yes || echo NO)"
  timeout -k 10 180 $K --tool timing --passes 3 --ranks 1 --out "$O/torchrun_rank1_only.csv" -- \
    $TR --master-port "$(port)" "$O/gloo_step.py" > "$O/torchrun_r1.stdout" 2> "$O/torchrun_r1.stderr"
  say "torchrun --ranks 1 rc=$?: ranks in the CSV: $(cut -d, -f2 "$O/torchrun_rank1_only.csv" 2>/dev/null | sort -u | grep -v rank | tr '\n' ' ')"
  grep -E "^ +(rank|[0-9-]+) " "$O/torchrun.stderr" | head -8 | tee -a "$S"
fi

# 2. Interrupted: one process, then a torchrun job, each sent SIGINT by `timeout` mid-run.
if left interrupted; then
  timeout -s INT 25 $K --tool timing --passes 2 -- $PY "$O/launches.py" 100000000 \
    > "$O/interrupted.stdout" 2> "$O/interrupted.stderr"
  say "interrupted single process rc=$? ($(leftover launches.py))"
  grep "kreplay run:" "$O/interrupted.stderr" | grep -v "^kreplay run: tool" | head -4 | tee -a "$S"
  timeout -s INT 40 $K --tool timing --passes 2 -- $TR --master-port "$(port)" "$O/gloo_step.py" 100000000 \
    > "$O/interrupted_torchrun.stdout" 2> "$O/interrupted_torchrun.stderr"
  sleep 2
  say "interrupted torchrun rc=$? ($(leftover gloo_step.py))"
  grep "kreplay run:" "$O/interrupted_torchrun.stderr" | grep -v "^kreplay run: tool" | head -4 | tee -a "$S"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader > "$O/gpu_apps_after.txt" 2>&1
  say "GPU processes after the interrupted runs: $(grep -c . "$O/gpu_apps_after.txt")"
fi

# 3. Under Nsight Systems.
if left nsys; then
  if command -v nsys > /dev/null; then
    timeout -k 10 200 nsys profile --force-overwrite true -o "$O/nsys_run" \
      $K --tool timing --passes 2 -- $PY "$O/launches.py" 1000 > "$O/nsys.stdout" 2> "$O/nsys.stderr"
    rc=$?
    nsys stats --report cuda_gpu_kern_sum "$O/nsys_run.nsys-rep" > "$O/nsys_stats.txt" 2>&1
    say "nsys profile kreplay run rc=$rc; chained: $(grep -c 'is chained' "$O/nsys.stderr");" \
      "replayed: $(grep -o '"replayed":[0-9]*' "$O/nsys.stderr" | head -1); nsys saw kernels: $(grep -c -i elementwise "$O/nsys_stats.txt")"
  else
    say "nsys not found"
  fi
fi

# 4. Many launches: peak RSS of the program and of kreplay.
if left launches; then
  N=${LAUNCHES:-1000000}
  timeout -k 10 "$(( BUDGET - ($(date +%s) - START) + 30 ))" $K --tool timing --passes 2 -- \
    $PY "$O/launches.py" "$N" > "$O/launches.stdout" 2> "$O/launches.stderr" &
  KP=$!
  while kill -0 "$KP" 2> /dev/null; do
    grep VmHWM "/proc/$KP/status" > "$O/kreplay_hwm.txt" 2> /dev/null
    sleep 1
  done
  wait "$KP"
  say "$N launches rc=$?: $(grep VmHWM "$O/launches.stdout" || echo 'app VmHWM -'); kreplay $(cat "$O/kreplay_hwm.txt" 2> /dev/null);" \
    "$(grep -o '"replayed":[0-9]*' "$O/launches.stderr" | head -1)"
  grep "kreplay run:" "$O/launches.stderr" | grep -v "^kreplay run: tool" | head -2 | tee -a "$S"
fi
echo "total $(( $(date +%s) - START )) s" | tee -a "$S"
