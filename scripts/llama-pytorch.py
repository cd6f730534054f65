#!/usr/bin/python3
"""llama-pytorch.py: the Llama recipe (data/mobydick-llama.conf) in PyTorch,
on llama2.c's own model.py: byte vocabulary, 4 layers, 4 heads, 2 kv heads,
width 128, SwiGLU of width 352 (multiple_of 32), context 64, tied head;
AdamW (betas 0.9, 0.95, weight decay 0.1 on 2-D parameters), 50 warmup steps
then cosine to 1e-4, clipping at global norm 1, no dropout.

  llama-pytorch.py step [--threads N] [--steps S]   median ms of a training step
  llama-pytorch.py train TEXT [--steps S]           trains; prints val_loss on
                                                    the last 10% of TEXT's bytes

llama2.c's folder: --llama2c DIR, else $MG_LLAMA2C_DIR, else shared/peers/llama2c
beside the checkout or one level up.
"""
import argparse
import gzip
import math
import os
import sys
import time

import torch
import torch.nn.functional as F


def llama2c_dir(given):
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (given, os.environ.get("MG_LLAMA2C_DIR"),
              os.path.join(here, "..", "..", "shared", "peers", "llama2c"),
              os.path.join(here, "..", "shared", "peers", "llama2c")):
        if d and os.path.isfile(os.path.join(d, "model.py")):
            return d
    sys.exit("llama-pytorch.py: llama2.c's model.py not found: give --llama2c DIR")


def lr_at(s, a):
    if s < a.warmup:
        return a.lr * (s + 1) / a.warmup
    t = (s - a.warmup) / max(1, a.steps - a.warmup)
    return a.lr_min + 0.5 * (a.lr - a.lr_min) * (1 + math.cos(math.pi * t))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["step", "train"])
    p.add_argument("text", nargs="?")
    p.add_argument("--llama2c")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lr-min", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    sys.path.insert(0, llama2c_dir(a.llama2c))
    from model import ModelArgs, Transformer  # llama2.c's

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    V, T, B = 256, 64, a.batch
    model = Transformer(ModelArgs(dim=128, n_layers=4, n_heads=4, n_kv_heads=2, vocab_size=V,
                                  multiple_of=32, max_seq_len=T, dropout=0.0))
    model.train()
    decay = [q for q in model.parameters() if q.dim() >= 2]
    rest = [q for q in model.parameters() if q.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        model(x, y)
        loss = model.last_loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    if a.what == "step":
        a.steps = a.steps or 10
        x, y = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
        times = []
        for i in range(a.steps + 2):
            t0 = time.perf_counter()
            step(x, y)
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
        loss = step(x, y)
        if s % 100 == 0 or s == a.steps - 1:
            print("step %d loss %.4f" % (s + 1, loss.item()), flush=True)
    model.eval()
    with torch.no_grad():
        W = (len(val) - 1) // T
        total = 0.0
        for i in range(0, W, 64):
            k = torch.arange(i, min(W, i + 64))
            x = torch.stack([val[j * T:j * T + T] for j in k])
            y = torch.stack([val[j * T + 1:j * T + T + 1] for j in k])
            model(x, y)
            total += model.last_loss.item() * len(k)
    print("val_loss %.4f" % (total / W))


if __name__ == "__main__":
    main()
