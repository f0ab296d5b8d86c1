#!/bin/bash
# One dispatch captured from a real program and replayed standalone (SPEC §13), in one device
# call: a CuPy kernel, a cuBLAS GEMM and a Triton kernel of a PyTorch step (`torch.compile`).
# Each is captured (`kreplay capture`), replayed with `--tool verify --passes 3` (outputs equal
# to the captured ones) and `--tool timing --passes 100`, and the same kernel is timed inside
# the program (`kreplay run --tool timing --passes 100`) for the comparison of medians.
# usage: run_capture_replay.sh OUTDIR   (kreplay, libkernel_replay.so, programs.py beside it)
set -u
D=$(cd "$(dirname "$0")" && pwd); O=${1:?usage: run_capture_replay.sh OUTDIR}
mkdir -p "$O"
CUDA=$(ls -d /usr/local/cuda /usr/local/cuda-* 2>/dev/null | head -1)
export PATH=$CUDA/bin:$PATH LD_LIBRARY_PATH=$CUDA/lib64:${LD_LIBRARY_PATH:-}
PY=${PY:-python3}
K="$D/kreplay"
L="--library $D/libkernel_replay.so"
cat > "$O/step.py" <<'PY'
# A small training step: a cuBLAS GEMM (linear layers) and Triton kernels (torch.compile).
import torch
torch.manual_seed(0)
w = torch.randn(512, 512, device="cuda", requires_grad=True)
x = torch.randn(256, 512, device="cuda")
@torch.compile
def act(h):
    return torch.nn.functional.gelu(h) * 1.5 + 0.25
opt = torch.optim.SGD([w], lr=0.01)
for _ in range(3):
    opt.zero_grad()
    loss = act(x @ w).square().mean()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
print(float(loss).hex())
PY
# case NAME PATTERN PROGRAM...: the first launch whose name matches PATTERN.
case_() {
  local name=$1 pat=$2; shift 2
  local c="$O/$name.capture"
  rm -rf "$c"
  timeout 120 $K capture $L --kernel-include "$pat" --launch-index 1 --out "$c" -- "$@" > "$O/$name.capture.out" 2> "$O/$name.capture.err"
  echo "== $name capture rc=$? files=$(ls "$c" 2>/dev/null | tr '\n' ' ')"
  tail -3 "$O/$name.capture.err" | cut -c1-300
  timeout 60 $K replay "$c" --tool verify --passes 3 > "$O/$name.verify.out" 2>&1
  echo "-- $name replay verify rc=$?"; tail -6 "$O/$name.verify.out" | cut -c1-300
  timeout 60 $K replay "$c" --tool timing --passes 100 > "$O/$name.timing.out" 2>&1
  echo "-- $name replay timing rc=$?"; grep -i "median\|relocat" "$O/$name.timing.out" | cut -c1-300
  timeout 120 $K run $L --tool timing --passes 100 --kernel-include "$pat" --out "$O/$name.inprog.json" -- "$@" > "$O/$name.inprog.out" 2> "$O/$name.inprog.err"
  echo "-- $name in program rc=$?"
}
cd "$O"
case_ cupy cupy_ $PY "$D/programs.py" small
$PY "$O/step.py" > "$O/step.plain" 2>&1; echo "step plain: $(tail -1 "$O/step.plain")"
# Name patterns of the step's kernels, from one timing run's CSV.
timeout 120 $K run $L --tool timing --passes 2 --out "$O/step.csv" -- $PY "$O/step.py" > /dev/null 2> "$O/step.err"
grep -o '"[^"]*\(gemm\|nvjet\|xmma\|triton\)[^"]*"' "$O/step.csv" | sort | uniq -c | sort -rn | head -8 | cut -c1-160
GEMM=$(grep -o 'nvjet[a-z0-9_]*\|sm[0-9]*_xmma_gemm[a-z0-9_]*\|cutlass_[0-9a-z_]*gemm[a-z0-9_]*\|ampere_[a-z0-9_]*gemm[a-z0-9_]*' "$O/step.csv" | head -1)
TRI=$(grep -o 'triton_[a-z0-9_]*' "$O/step.csv" | head -1)
echo "gemm pattern: ${GEMM:-none}; triton pattern: ${TRI:-none}"
[ -n "$GEMM" ] && case_ gemm "$GEMM" $PY "$O/step.py"
[ -n "$TRI" ] && case_ triton "$TRI" $PY "$O/step.py"
# Everything but the captures themselves, in one archive beside OUTDIR.
tar czf "$O.logs.tar.gz" --exclude='*.capture' -C "$O" .
