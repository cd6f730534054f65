"""llama_torch_ref.py: the PyTorch side of tests/test_llama_torch.sh.

`python3 llama_torch_ref.py DUMP...` reads the files that tests/llama_ops_dump
wrote (each case's inputs, r, meshgrad's output and the gradients of
L = sum(out * r)), computes the same in float64 with llama2.c's formulas
(model.py's RMSNorm, precompute_freqs_cis with apply_rotary_emb, and its
attention with repeat_kv and a causal mask, written out here) and autograd,
and prints one line per tensor with its relative error (the largest
difference over the largest reference value). Exit 0 when all are within
1e-5, 1 otherwise, 2 on a file it cannot read.
"""
import math
import struct
import sys

import torch

TOL = 1e-5


def read_dump(path):
    """{name: float64 tensor} of one dump file"""
    out = {}
    with open(path, "rb") as f:
        while True:
            tag = f.read(64)
            if not tag:
                return out
            (nd,) = struct.unpack("<i", f.read(4))
            shape = struct.unpack("<%dq" % nd, f.read(8 * nd)) if nd else ()
            n = math.prod(shape)
            data = struct.unpack("<%df" % n, f.read(4 * n))
            name = tag.rstrip(b"\0").decode()
            out[name] = torch.tensor(data, dtype=torch.float64).reshape(shape)


def rms_norm(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, pos0, theta):
    """x (B, T, H, D): pairs (2i, 2i + 1) turned by (pos0 + t) theta^(-2i / D)"""
    d, t = x.shape[-1], x.shape[1]
    freqs = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = torch.outer(torch.arange(pos0, pos0 + t, dtype=torch.float64), freqs)
    cos, sin = angles.cos()[None, :, None, :], angles.sin()[None, :, None, :]
    re, im = x.reshape(x.shape[:-1] + (-1, 2)).unbind(-1)
    return torch.stack([re * cos - im * sin, re * sin + im * cos], dim=-1).flatten(3)


def attention_gqa(q, k, v):
    """q (B, H, T, D), k and v (B, KV, T, D); causal"""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    t = q.shape[2]
    scores = q @ k.transpose(2, 3) / math.sqrt(q.shape[-1])
    mask = torch.full((t, t), float("-inf"), dtype=torch.float64).triu(1)
    return torch.softmax(scores + mask, dim=-1) @ v


CASES = {  # name: (inputs, the op)
    "rms_norm": (["x", "w"], lambda x, w: rms_norm(x, w)),
    "rope": (["x"], lambda x: rope(x, 3, 10000.0)),
    "rope_far": (["x"], lambda x: rope(x, 11, 500.0)),
    "gqa_kv2": (["q", "k", "v"], attention_gqa),
    "gqa_kv4": (["q", "k", "v"], attention_gqa),
    "gqa_kv1": (["q", "k", "v"], attention_gqa),
}


def rel_err(got, want):
    scale = max(want.abs().max().item(), 1e-30)
    return (got - want).abs().max().item() / scale


def check(path):
    try:
        dump = read_dump(path)
    except (OSError, struct.error, RuntimeError) as e:
        print(f"{path}: cannot read: {e}")
        sys.exit(2)
    ok = True
    for case, (names, op) in CASES.items():
        try:
            ins = [dump[f"{case}/{n}"].clone().requires_grad_(True) for n in names]
            r, out = dump[f"{case}/r"], dump[f"{case}/out"]
            grads = [dump[f"{case}/grad{i}"] for i in range(len(names))]
        except KeyError as e:
            print(f"{path}: {case}: missing {e}")
            ok = False
            continue
        want = op(*ins)
        (want * r).sum().backward()
        pairs = [("out", out, want.detach())]
        pairs += [(f"d{n}", g, x.grad) for n, g, x in zip(names, grads, ins)]
        for what, got, ref in pairs:
            e = rel_err(got, ref) if got.shape == ref.shape else float("inf")
            good = e <= TOL
            ok &= good
            print(f"{path}: {case} {what}: relative error {e:.2e}{'' if good else ' FAILED'}")
    return ok


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    results = [check(p) for p in sys.argv[1:]]
    sys.exit(0 if all(results) else 1)
