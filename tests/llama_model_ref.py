"""llama_model_ref.py: the PyTorch side of tests/test_llama_model_torch.sh.

`python3 llama_model_ref.py [--llama2c DIR] CASE...`: each CASE is the prefix
OUT of the files OUT.<rank> that tests/llama_model_dump wrote for one mesh
and plan (the config, the ids and targets, meshgrad's initial parameters,
its loss, its logits unless the plan had pp, and every parameter's
gradient). For each case this builds the same Llama in float64 from
meshgrad's parameters, written out here with llama2.c's model.py math
(RMSNorm, precompute_freqs_cis and apply_rotary_emb, repeat_kv and causal
attention, SwiGLU, the head tied to tok_embeddings unless output.weight is
given), computes the logits, the mean cross-entropy and, by autograd,
every parameter's gradient, and prints one line per case with the largest
relative error of each (the largest difference over the largest reference
value). With --llama2c DIR (llama2.c's folder, holding model.py), model.py's
own Transformer is run too on the same weights (its RMS norm and rope run in
float32 inside; the rest in float64) and meshgrad is held to it as well.
Exit 0 when every error is within 1e-5, 1 otherwise, 2 on a file it cannot
read.
"""
import contextlib
import glob
import io
import math
import struct
import sys

import torch

sys.dont_write_bytecode = True  # importing the reader below leaves no __pycache__ in tests/
from llama_torch_ref import read_dump  # noqa: E402 (the records of llama_ops_dump's format)

TOL = 1e-5
BLOCK = ["attention_norm.weight", "attention.wq.weight", "attention.wk.weight",
         "attention.wv.weight", "attention.wo.weight", "ffn_norm.weight",
         "feed_forward.w1.weight", "feed_forward.w2.weight", "feed_forward.w3.weight"]


def read_case(prefix):
    """{name: float64 tensor} of every OUT.<rank> file of one case"""
    out = {}
    files = sorted(glob.glob(glob.escape(prefix) + ".[0-9]*"))
    if not files:
        raise OSError("no files %s.*" % prefix)
    for path in files:
        out.update(read_dump(path))
    return out


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):
    """x (B, T, H, D): pairs (2i, 2i + 1) turned by t theta^(-2i / D)"""
    d, t = x.shape[-1], x.shape[1]
    freqs = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = torch.outer(torch.arange(t, dtype=torch.float64), freqs)
    cos, sin = angles.cos()[None, :, None, :], angles.sin()[None, :, None, :]
    re, im = x.reshape(x.shape[:-1] + (-1, 2)).unbind(-1)
    return torch.stack([re * cos - im * sin, re * sin + im * cos], dim=-1).flatten(3)


def forward(p, cfg, ids):
    """logits (B, T, V) of model.py's Transformer, written out in float64,
    and the gradients of p's tensors (after a backward)"""
    L, H, KV, C = (int(v) for v in cfg[:4])
    theta, eps = float(cfg[9]), float(cfg[10])
    D = C // H
    x = p["tok_embeddings.weight"][ids]
    B, T, _ = x.shape
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for l in range(L):
        w = {k: p["layers.%d.%s" % (l, k)] for k in BLOCK}
        h = rms_norm(x, w["attention_norm.weight"], eps)
        q = rope((h @ w["attention.wq.weight"].T).view(B, T, H, D), theta)
        k = rope((h @ w["attention.wk.weight"].T).view(B, T, KV, D), theta)
        v = (h @ w["attention.wv.weight"].T).view(B, T, KV, D)
        k = k.repeat_interleave(H // KV, dim=2)  # repeat_kv
        v = v.repeat_interleave(H // KV, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        scores = q @ k.transpose(2, 3) / math.sqrt(D) + mask
        a = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + a @ w["attention.wo.weight"].T
        h = rms_norm(x, w["ffn_norm.weight"], eps)
        f = (torch.nn.functional.silu(h @ w["feed_forward.w1.weight"].T) *
             (h @ w["feed_forward.w3.weight"].T))
        x = x + f @ w["feed_forward.w2.weight"].T
    x = rms_norm(x, p["norm.weight"], eps)
    logits = x @ p.get("output.weight", p["tok_embeddings.weight"]).T
    return logits, lambda: {n: t.grad for n, t in p.items()}


def model_py(folder, cfg):
    """forward(p, cfg, ids) by llama2.c's own model.py in float64, with the
    gradients on model.py's parameters (copied back into p's .grad)"""
    sys.path.insert(0, folder)
    import model as llama2c  # llama2.c's model.py

    L, H, KV, C, F, T, V = (int(v) for v in cfg[:7])
    args = llama2c.ModelArgs(dim=C, n_layers=L, n_heads=H, n_kv_heads=KV, vocab_size=V,
                             hidden_dim=F, norm_eps=float(cfg[10]), max_seq_len=T, dropout=0.0)

    def run(p, _cfg, ids):
        with contextlib.redirect_stdout(io.StringIO()):  # its note on slow attention
            m = llama2c.Transformer(args).double()
        if "output.weight" in p:  # untied: a head of its own
            m.output.weight = torch.nn.Parameter(torch.empty(V, C, dtype=torch.float64))
        params = dict(m.named_parameters())
        with torch.no_grad():
            for name, q in params.items():
                q.copy_(p[name])
        m.eval()
        h = m.tok_embeddings(ids)
        for layer in m.layers:
            h = layer(h, m.freqs_cos[:T], m.freqs_sin[:T])
        logits = m.output(m.norm(h))

        def grads():
            return {name: q.grad for name, q in params.items()}
        return logits, grads

    return run


def rel_err(got, want):
    scale = max(want.abs().max().item(), 1e-30)
    return (got - want).abs().max().item() / scale


def check(prefix, fwd, who):
    d = read_case(prefix)
    cfg = d["config"].tolist()
    ids = d["ids"].long()
    targets = d["targets"].long()
    names = [n[len("param/"):] for n in d if n.startswith("param/")]
    L = int(cfg[0])
    want = 2 + 9 * L + (0 if cfg[8] else 1)
    if len(names) != want:
        print("%s: %d parameters in the dump, want %d" % (prefix, len(names), want))
        return False
    p = {n: d["param/" + n].clone().requires_grad_(True) for n in names}
    logits, grads = fwd(p, cfg, ids)
    V = logits.shape[-1]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()
    got = grads()
    errs = {"loss": rel_err(d["loss"], loss.detach().reshape(1))}
    if "logits" in d:
        errs["logits"] = rel_err(d["logits"], logits.detach())
    worst_name, worst = "", 0.0
    for n in names:
        e = rel_err(d["grad/" + n], got[n])
        if e >= worst:
            worst_name, worst = n, e
    errs["gradients"] = worst
    ok = all(e <= TOL for e in errs.values())
    print("%s %s: loss %.6f; %s (worst gradient: %s, of %d)%s" % (
        prefix.rsplit("/", 1)[-1], who, loss.item(),
        ", ".join("%s %.2e" % kv for kv in errs.items()), worst_name, len(names),
        "" if "logits" in d else "; no logits under pp"))
    return ok


def main(argv):
    folder = None
    if len(argv) > 2 and argv[1] == "--llama2c":
        folder, argv = argv[2], argv[2:]
    ok, unread = True, False
    for prefix in argv[1:]:
        try:
            ok &= check(prefix, forward, "vs float64")
            if folder:
                cfg = read_case(prefix)["config"].tolist()
                ok &= check(prefix, model_py(folder, cfg), "vs model.py")
        except (OSError, struct.error, RuntimeError, KeyError) as e:
            print("%s: cannot read it: %s" % (prefix, e))
            unread = True
    return 2 if unread else 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
