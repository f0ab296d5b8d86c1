"""A GPT-2-shaped training run (2 layers, 256 wide, 4 heads, context 128, batch 8, AdamW),
STEPS steps (default 2) from a fixed seed; prints the loss of every step and a digest of the
weights as hex, so a run under replay can be compared with a plain one bit for bit.

usage: python3 gpt2.py [STEPS]
"""
import hashlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 2
VOCAB, CTX, WIDTH, HEADS, LAYERS, BATCH = 1024, 128, 256, 4, 2, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.ln2 = nn.LayerNorm(WIDTH)
        self.fc = nn.Linear(WIDTH, 4 * WIDTH)
        self.out = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(WIDTH, dim=2)
        q, k, v = (y.view(b, t, HEADS, c // HEADS).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Embedding(CTX, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def main():
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = Gpt().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    data = torch.randint(0, VOCAB, (BATCH, CTX + 1), device=dev)
    for step in range(STEPS):
        logits = model(data[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), data[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.10f}")
    torch.cuda.synchronize()
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().numpy().tobytes())
    print(h.hexdigest())


if __name__ == "__main__":
    main()
