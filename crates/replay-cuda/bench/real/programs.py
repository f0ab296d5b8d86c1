"""Real programs nobody here wrote the shape of, for `kreplay run` on a GPU.

usage: python programs.py NAME [steps]

Each prints its final result as an exact hexadecimal float (or a digest) on its last line, so
a plain run and a run under replay compare bit for bit.

- grow: a PyTorch TransformerEncoder training step (d_model 256, 4 heads, feed-forward 1024,
  default dropout, 2 layers, AdamW, batch 16x64); run it with
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so the segment grows mid-step and autograd's
  worker thread makes its first launch after the growth.
- capture_thread: one thread captures a CUDA graph in global mode (PyTorch's default) while
  another thread launches ordinary kernels; the graph is then replayed.
- surface: a kernel that read-modify-writes a CUDA array through surf2Dread/surf2Dwrite (CuPy).
- jax: a three-step JAX MLP training loop.
- small: six CuPy kernels (elementwise, reduction, matmul) for comparing counters with ncu's.
"""
import os
import sys
import threading

NAME = sys.argv[1]
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 3


def hexf(x):
    return float(x).hex()


def grow():
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False),
                          nn.Flatten(), nn.Linear(64 * 256, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(16, 64, 256, device="cuda")
    y = torch.randint(0, 10, (16,), device="cuda")
    loss = None
    for _ in range(STEPS):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    print(hexf(loss.item()))


def capture_thread():
    import torch
    torch.manual_seed(0)
    a = torch.randn(1 << 20, device="cuda")
    b = torch.randn(1 << 20, device="cuda")
    stop = threading.Event()
    other = torch.zeros(1 << 20, device="cuda")

    def busy():
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            i = 0
            while (not stop.is_set() or i < 200) and i < 200000:
                other.mul_(0.5).add_(1.0)
                i += 1
        s.synchronize()

    t = threading.Thread(target=busy, daemon=True)
    t.start()
    out = None
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # warm-up, as PyTorch's docs ask
            out = (a * b).sin().sum()
    torch.cuda.current_stream().wait_stream(s)
    for _ in range(20):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = (a * b).sin().sum()
        g.replay()
    stop.set()
    t.join()
    torch.cuda.synchronize()
    print(hexf(out.item() + other.sum().item()))


def surface():
    import cupy as cp
    import numpy as np
    from cupy.cuda import runtime, texture
    w, h = 256, 128
    ch = texture.ChannelFormatDescriptor(32, 0, 0, 0, runtime.cudaChannelFormatKindFloat)
    arr = texture.CUDAarray(ch, w, h, flags=runtime.cudaArraySurfaceLoadStore)
    host = np.arange(w * h, dtype=np.float32).reshape(h, w) / 7.0
    arr.copy_from(host)
    res = texture.ResourceDescriptor(runtime.cudaResourceTypeArray, cuArr=arr)
    surf = texture.SurfaceObject(res)
    k = cp.RawKernel(r'''
extern "C" __global__ void rmw(cudaSurfaceObject_t s, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) { float v; surf2Dread(&v, s, x * 4, y); surf2Dwrite(v * 2.0f + 1.0f, s, x * 4, y); }
}''', "rmw")
    k((w // 16, h // 16), (16, 16), (surf, np.int32(w), np.int32(h)))
    out = np.empty_like(host)
    arr.copy_to(out)
    cp.cuda.Device().synchronize()
    # One execution: every element is 2v+1.
    ok = np.array_equal(out, host * 2.0 + 1.0)
    print("one_execution" if ok else "CORRUPT", hexf(float(out.sum(dtype=np.float64))))


def jax_mlp():
    import jax
    import jax.numpy as jnp
    key = jax.random.PRNGKey(0)
    k1, k2, k3, k4 = jax.random.split(key, 4)
    params = {"w1": jax.random.normal(k1, (784, 512)) * 0.05, "b1": jnp.zeros(512),
              "w2": jax.random.normal(k2, (512, 10)) * 0.05, "b2": jnp.zeros(10)}
    x = jax.random.normal(k3, (256, 784))
    y = jax.random.randint(k4, (256,), 0, 10)

    def loss_fn(p):
        hdn = jax.nn.relu(x @ p["w1"] + p["b1"])
        logits = hdn @ p["w2"] + p["b2"]
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(256), y])

    @jax.jit
    def step(p):
        l, g = jax.value_and_grad(loss_fn)(p)
        return l, jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g)

    loss = None
    for _ in range(STEPS):
        loss, params = step(params)
    loss.block_until_ready()
    print("%.10f" % float(loss), hexf(float(loss)))


def jax_big():
    import jax
    import jax.numpy as jnp
    key = jax.random.PRNGKey(0)
    ks = jax.random.split(key, 8)
    d = 1024
    params = [(jax.random.normal(ks[i], (d, d), dtype=jnp.bfloat16) * 0.03,
               jnp.ones(d, jnp.bfloat16)) for i in range(4)]
    x = jax.random.normal(ks[5], (512, d), dtype=jnp.bfloat16)
    y = jax.random.randint(ks[6], (512,), 0, d)

    def loss_fn(p):
        h = x
        for w, g in p:
            h = jax.nn.gelu(h @ w) * g
            h = h / jnp.sqrt(jnp.mean(h.astype(jnp.float32) ** 2, -1, keepdims=True) + 1e-5).astype(h.dtype)
        logits = h.astype(jnp.float32)
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(512), y])

    @jax.jit
    def step(p):
        l, g = jax.value_and_grad(loss_fn)(p)
        return l, jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g)

    loss = None
    for _ in range(STEPS):
        loss, params = step(params)
    loss.block_until_ready()
    print("%.10f" % float(loss), hexf(float(loss)))


def small():
    import cupy as cp
    cp.random.seed(0)
    a = cp.random.rand(1 << 20, dtype=cp.float32)
    b = cp.random.rand(1 << 20, dtype=cp.float32)
    c = a * b + 1.0
    s = float(c.sum())
    m = cp.random.rand(512, 512, dtype=cp.float32)
    p = m @ m
    cp.cuda.Device().synchronize()
    print(hexf(s + float(p.sum())))


{"grow": grow, "small": small, "jax_big": jax_big, "capture_thread": capture_thread, "surface": surface, "jax": jax_mlp}[NAME]()
