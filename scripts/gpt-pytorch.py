#!/usr/bin/python3
"""gpt-pytorch.py: the GPT recipe of data/mobydick.conf in PyTorch, the
reference meshgrad's GPT is measured against. GPT-2's architecture and init, byte vocabulary, AdamW (betas 0.9,
0.95, eps 1e-8, weight decay 0.1 on the 2-D parameters as nanoGPT groups them,
as meshgrad train does; --decay-all: on every parameter), warmup then cosine
to lr/10, clipping at global norm 1, no dropout.

  gpt-pytorch.py step [--threads N] [--steps S] [--dtype fp32|bf16]
                                                  median ms of a training step
                                                  (as `meshgrad bench step --model gpt`);
                                                  bf16: under CPU autocast (bf16 matmuls,
                                                  fp32 weights, optimizer and loss)
  gpt-pytorch.py train TEXT.txt[.gz] [--steps 1000] [--threads N]
                                                  the recipe; prints the val loss
Runs with Debian's python3-torch (/usr/bin/python3). Same flags as meshgrad's:
--layers 4 --heads 4 --embd 128 --ctx 64 --batch 32 --lr 1e-3 --dtype fp32|bf16.
"""
import argparse
import gzip
import math
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # a traceback told a user less than this
    sys.exit(f"gpt-pytorch.py: error: PyTorch is not installed ({e}): install Debian's "
             "python3-torch (apt-get install python3-torch) and run it with /usr/bin/python3")


class Block(nn.Module):
    def __init__(self, C, H, L):
        super().__init__()
        self.H = H
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        for m in (self.qkv, self.fc):
            nn.init.normal_(m.weight, std=0.02)
        for m in (self.proj, self.fc2):
            nn.init.normal_(m.weight, std=0.02 / math.sqrt(2 * L))
        for m in (self.qkv, self.proj, self.fc, self.fc2):
            nn.init.zeros_(m.bias)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.H)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, C, H, L):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(C, H, L) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()


def lr_at(s, a):
    if s < a.warmup:
        return a.lr * (s + 1) / a.warmup
    p = (s - a.warmup) / (a.steps - a.warmup)
    return a.lr_min + (a.lr - a.lr_min) * 0.5 * (1 + math.cos(math.pi * p))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["step", "train"])
    p.add_argument("text", nargs="?")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--embd", type=int, default=128)
    p.add_argument("--ctx", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lr-min", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--decay-all", action="store_true")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    V, T, B = 256, a.ctx, a.batch
    model = GPT(V, T, a.embd, a.heads, a.layers)
    decay = [q for q in model.parameters() if a.decay_all or q.dim() >= 2]
    rest = [q for q in model.parameters() if not (a.decay_all or q.dim() >= 2)]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    if a.what == "step":
        a.steps = a.steps or 10
        x, y = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
        times = []
        for i in range(a.steps + 2):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
                logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, V), y.view(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if i >= 2:
                times.append(time.perf_counter() - t0)
        times.sort()
        print("%.3f" % (1e3 * times[len(times) // 2]))
        return
    a.steps = a.steps or 1000
    raw = (gzip.open if a.text.endswith(".gz") else open)(a.text, "rb").read()
    data = torch.tensor(list(raw), dtype=torch.long)
    n = int(0.9 * len(data))
    train, val = data[:n], data[n:]
    for s in range(a.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(s, a)
        starts = torch.randint(0, len(train) - T - 1, (B,))
        x = torch.stack([train[i:i + T] for i in starts])
        y = torch.stack([train[i + 1:i + T + 1] for i in starts])
        loss = F.cross_entropy(model(x).view(-1, V), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if s % 100 == 0 or s == a.steps - 1:
            print("step %d loss %.4f" % (s + 1, loss.item()), flush=True)
    with torch.no_grad():
        W = (len(val) - 1) // T
        total = 0.0
        for i in range(0, W, 64):
            k = torch.arange(i, min(W, i + 64))
            x = torch.stack([val[j * T:j * T + T] for j in k])
            y = torch.stack([val[j * T + 1:j * T + T + 1] for j in k])
            total += F.cross_entropy(model(x).view(-1, V), y.view(-1)).item() * len(k)
    print("val_loss %.4f" % (total / W))


if __name__ == "__main__":
    main()
