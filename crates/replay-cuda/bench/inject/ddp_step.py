"""A two-process PyTorch training step with an NCCL all-reduce (issue 17's GPU run).

usage: torchrun --nproc_per_node=2 ddp_step.py [steps]   (or one process per GPU by hand with
RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set)

Prints, per rank, the all-reduced tensor's sum and the final loss as exact hexadecimal floats,
so a plain run and a run under replay can be compared bit for bit.
"""
import os
import sys

# NVLink multicast stays off (the machine's rule), also where a launcher resets the environment.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402


def main(steps):
    rank = int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).cuda()
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator(device="cuda").manual_seed(1 + rank)
    loss = None
    for _ in range(steps):
        x = torch.randn(32, 64, device="cuda", generator=g)
        y = torch.randint(0, 10, (32,), device="cuda", generator=g)
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
    t = torch.arange(1024, dtype=torch.float32, device="cuda") * (rank + 1)
    dist.all_reduce(t)
    torch.cuda.synchronize()
    print(f"rank {rank} allreduce {t.double().sum().item().hex()} loss {loss.item().hex()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
