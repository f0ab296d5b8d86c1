"""CUDA-graph programs for `run_graphs.sh`: each prints a hex digest of its results last, so a
plain run and a run under `kreplay run --tool verify --passes 3` compare bit for bit.

usage: graphs.py torch_graph|torch_compile|jax [STEPS]
"""
import struct
import sys

NAME = sys.argv[1]
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 3


def hexf(x):
    return struct.pack(">d", float(x)).hex()


def digest_tensors(ts):
    import torch

    h = 0.0
    for t in ts:
        h += float(t.detach().double().sum().item())
    return hexf(h)


def torch_graph():
    """A training step captured with torch.cuda.graph and replayed STEPS times."""
    import torch

    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 64, device="cuda")
    y = torch.randint(0, 10, (32,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()
    # Warm-up on a side stream, as PyTorch's documentation asks before capture.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = loss_fn(model(x), y)
        static_loss.backward()
        opt.step()
    for _ in range(STEPS):
        g.replay()
    torch.cuda.synchronize()
    print(hexf(static_loss.item()), digest_tensors(model.parameters()))


def torch_compile():
    """Inference and training steps under torch.compile(mode="reduce-overhead") (CUDA graphs
    through Inductor's cudagraph trees)."""
    import torch

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(16, 64, device="cuda")
    out = None
    for _ in range(STEPS + 2):
        opt.zero_grad(set_to_none=True)
        out = step(x)
        out.square().mean().backward()
        opt.step()
    with torch.no_grad():
        inf = step(x)
    torch.cuda.synchronize()
    print(hexf(out.double().sum().item()), hexf(inf.double().sum().item()),
          digest_tensors(model.parameters()))


def jax_prog():
    """A jitted JAX training loop (XLA command buffers launch CUDA graphs)."""
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    k1, k2, k3 = jax.random.split(key, 3)
    w1 = jax.random.normal(k1, (64, 128)) * 0.1
    w2 = jax.random.normal(k2, (128, 10)) * 0.1
    x = jax.random.normal(k3, (32, 64))
    y = jnp.arange(32) % 10

    def loss(p, x, y):
        h = jax.nn.relu(x @ p[0])
        logits = h @ p[1]
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(32), y])

    @jax.jit
    def step(p, x, y):
        l, g = jax.value_and_grad(loss)(p, x, y)
        return [a - 0.1 * b for a, b in zip(p, g)], l

    p = [w1, w2]
    l = None
    for _ in range(STEPS):
        p, l = step(p, x, y)
    l.block_until_ready()
    print("%.10f" % float(l), hexf(float(l)), hexf(float(sum(jnp.sum(a) for a in p))))


{"torch_graph": torch_graph, "torch_compile": torch_compile, "jax": jax_prog}[NAME]()
