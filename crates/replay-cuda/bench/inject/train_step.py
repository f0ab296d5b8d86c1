"""Small unmodified PyTorch programs for `kreplay run` on a GPU (issue 13's H200 run).

usage: python train_step.py cnn|transformer|compiled|gemm [steps]

Prints the final loss (or the GEMM's output digest) as an exact hexadecimal float, so a
plain run and a run under replay can be compared bit for bit; on stderr, one `memory` line:
the process's peak resident host memory and the device memory in use at the end (a run under
replay minus a plain run is what the library took).
"""
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


def setup():
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True)


def cnn():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(32, 10),
    ), (lambda: torch.randn(32, 3, 32, 32, device="cuda")), (lambda: torch.randint(0, 10, (32,), device="cuda"))


def transformer():
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True, dropout=0.0)
    enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    model = nn.Sequential(enc, nn.Flatten(), nn.Linear(16 * 64, 10))
    return model, (lambda: torch.randn(8, 16, 64, device="cuda")), (lambda: torch.randint(0, 10, (8,), device="cuda"))


def train(kind, steps):
    setup()
    model, x, y = cnn() if kind == "cnn" else transformer()
    model = model.cuda()
    if kind == "compiled":
        model = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    loss = None
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(x()), y())
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    print(f"{kind} final loss {loss.item().hex()}")


def gemm():
    setup()
    a = torch.randn(1024, 1024, device="cuda")
    b = torch.randn(1024, 1024, device="cuda")
    c = torch.matmul(a, b)
    c = torch.matmul(c, b)
    torch.cuda.synchronize()
    print(f"gemm sum {c.double().sum().item().hex()} c[7,9] {c[7, 9].item().hex()}")


def report_memory():
    rss = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                rss = int(line.split()[1])
    free, total = torch.cuda.mem_get_info()
    print(f"memory peak_rss_kib {rss} device_used_mib {(total - free) >> 20}", file=sys.stderr)


if __name__ == "__main__":
    kind = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    if kind == "gemm":
        gemm()
    else:
        train(kind, steps)
    report_memory()
