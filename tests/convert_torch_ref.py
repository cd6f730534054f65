"""convert_torch_ref.py: the PyTorch side of tests/test_convert_torch.sh (torch
1.13, numpy, h5py; safetensors files parsed here with json and struct, as no
safetensors package is assumed). Each subcommand prints one line and exits 0
when its comparison holds, 1 otherwise:

  gpt2 DIR LOGITS.h5 TEXT     GPT-2 (Hugging Face's GPT2LMHeadModel, written
                              here: Conv1D weights, c_attn's (3, H, D), GELU
                              tanh, layer norm 1e-5) on DIR/model.safetensors
                              and DIR/config.json, in float64, on TEXT's first
                              n_positions bytes: its logits against meshgrad's
                              (dataset logits of LOGITS.h5), within 1e-5
  llama-hf DIR FIXTURE.h5 TEXT
                              LlamaForCausalLM's forward (written here:
                              rotate-half RoPE, repeat_interleave of k and v,
                              RMS norm, SwiGLU) on DIR's safetensors against
                              llama2.c model.py's forward (PEERS on sys.path)
                              with FIXTURE.h5's parameters: within 1e-5
  model-logits FIXTURE.h5 TEXT OUT
                              model.py's logits (T, V) of TEXT's first ctx
                              bytes, float64, raw to OUT
  close-raw A B T V           two raw (T, V) arrays, float32 (A, run.c's) and
                              float64 (B), within 1e-5
  legacy OUT.bin SD.h5 TIED   a model.py Transformer (random, norms not one),
                              written by export.py's legacy_export to OUT.bin,
                              its state_dict to SD.h5 (float32)
  same-params CKPT.h5 SD.h5   every /params/<name> of a meshgrad checkpoint is
                              SD.h5's <name> bitwise, and no name is missing
  to-bf16 DIR OUTDIR          DIR's safetensors with every tensor rounded to
                              BF16 (torch's rounding), and its config.json
  same-bf16 BF16DIR F32DIR    F32DIR's tensors are BF16DIR's widened, bitwise

Environment: PEERS, the folder of llama2.c's model.py and export.py. """
import json
import math
import os
import struct
import sys

import h5py
import numpy as np
import torch

TOL = 1e-5


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = data[base + b:base + e]
        if t["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4").copy()
        elif t["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"{path}: dtype {t['dtype']}")
        out[name] = torch.from_numpy(a.reshape(t["shape"]))
    return out


def write_safetensors(path, tensors, dtype):
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        if dtype == "BF16":
            raw = t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            raw = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - (len(text) + 8) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def text_ids(path, n):
    with open(path, "rb") as f:
        return torch.tensor(list(f.read()[:n]), dtype=torch.long)


def worst(a, b):
    """max |a - b| / max(1, |b|) and where"""
    d = (a.double() - b.double()).abs() / b.double().abs().clamp(min=1.0)
    return d.max().item(), tuple(int(i) for i in np.unravel_index(int(d.argmax()), d.shape))


def report(what, a, b):
    w, at = worst(a, b)
    ok = w <= TOL
    print(f"{what}: {'ok' if ok else 'FAILED'}, worst relative difference {w:.2e} at {at} "
          f"(tolerance {TOL:g})")
    return 0 if ok else 1


def gpt2(argv):
    d, logits_path, text = argv
    cfg = json.load(open(os.path.join(d, "config.json")))
    w = {k.removeprefix("transformer."): v.double() for k, v in
         read_safetensors(os.path.join(d, "model.safetensors")).items()}
    C, H, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    D, eps = C // H, cfg.get("layer_norm_epsilon", 1e-5)
    ids = text_ids(text, cfg["n_positions"])
    T = len(ids)

    def ln(x, p):
        return torch.nn.functional.layer_norm(x, (C,), w[p + ".weight"], w[p + ".bias"], eps)

    def conv1d(x, p):  # Conv1D: x (T, in) @ weight (in, out) + bias
        return x @ w[p + ".weight"] + w[p + ".bias"]

    def gelu_new(x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    x = w["wte.weight"][ids] + w["wpe.weight"][:T]
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for l in range(L):
        p = f"h.{l}"
        qkv = conv1d(ln(x, p + ".ln_1"), p + ".attn.c_attn")  # (T, 3C): (3, H, D)
        q, k, v = (qkv[:, i * C:(i + 1) * C].view(T, H, D).transpose(0, 1) for i in range(3))
        att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(D) + mask, dim=-1)
        y = (att @ v).transpose(0, 1).reshape(T, C)
        x = x + conv1d(y, p + ".attn.c_proj")
        m = gelu_new(conv1d(ln(x, p + ".ln_2"), p + ".mlp.c_fc"))
        x = x + conv1d(m, p + ".mlp.c_proj")
    ref = ln(x, "ln_f") @ w["wte.weight"].T
    got = torch.from_numpy(h5py.File(logits_path, "r")["logits"][()])
    if got.shape != ref.shape:
        print(f"gpt2: FAILED, meshgrad's logits are {tuple(got.shape)}, the reference's {tuple(ref.shape)}")
        return 1
    return report(f"GPT-2 in PyTorch (float64) on the exported safetensors, {T} tokens", got, ref)


def model_py(fixture, T=None):
    """llama2.c's Transformer with FIXTURE.h5's parameters (float64) and its ctx."""
    sys.path.insert(0, os.environ["PEERS"])
    from model import ModelArgs, Transformer
    f = h5py.File(fixture, "r")
    a = {k: f.attrs[k].decode() if isinstance(f.attrs[k], bytes) else str(f.attrs[k])
         for k in f.attrs}
    args = ModelArgs(dim=int(a["model.embd"]), n_layers=int(a["model.layers"]),
                     n_heads=int(a["model.heads"]), n_kv_heads=int(a["model.kv_heads"]),
                     vocab_size=int(a["model.vocab"]), hidden_dim=int(a["model.hidden"]),
                     norm_eps=float(a["model.norm_eps"]), max_seq_len=int(a["model.ctx"]))
    torch.manual_seed(0)
    m = Transformer(args)
    sd = {}
    f["params"].visititems(lambda k, v: sd.__setitem__(k, torch.from_numpy(v[()]))
                           if isinstance(v, h5py.Dataset) else None)
    if "output.weight" not in sd:  # tied: the head is the embedding
        sd["output.weight"] = sd["tok_embeddings.weight"]
    else:  # untied: model.py ties them at construction; give the head its own
        m.output.weight = torch.nn.Parameter(torch.empty_like(m.output.weight))
    missing, unexpected = m.load_state_dict(sd, strict=False)
    if [k for k in missing if k != "output.weight" and not k.endswith(".mask")] or unexpected:
        raise SystemExit(f"model.py: missing {missing}, unexpected {unexpected}")
    return m.double().eval(), args


def model_logits(m, ids):
    with torch.no_grad():
        return m(ids[None], ids[None])[0]  # targets given: every position's logits


def llama_hf(argv):
    d, fixture, text = argv
    cfg = json.load(open(os.path.join(d, "config.json")))
    w = {k: v.double() for k, v in read_safetensors(os.path.join(d, "model.safetensors")).items()}
    C, H, KV, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    D, eps, theta = C // H, cfg["rms_norm_eps"], cfg["rope_theta"]
    ids = text_ids(text, cfg["max_position_embeddings"])
    T = len(ids)

    def rms(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)

    def rope(x):  # HF's rotate_half: (x1, x2) halves of each head
        x1, x2 = x[..., :D // 2], x[..., D // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    x = w["model.embed_tokens.weight"][ids]
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for l in range(L):
        p = f"model.layers.{l}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(T, H, D).transpose(0, 1)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(T, KV, D).transpose(0, 1)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(T, KV, D).transpose(0, 1)
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(H // KV, 0), v.repeat_interleave(H // KV, 0)
        att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(D) + mask, dim=-1)
        y = (att @ v).transpose(0, 1).reshape(T, H * D)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        g = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
        x = x + g @ w[p + "mlp.down_proj.weight"].T
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    hf = rms(x, w["model.norm.weight"]) @ head.T
    m, _ = model_py(fixture)
    ref = model_logits(m, ids)
    return report(f"LlamaForCausalLM's forward on the exported safetensors against llama2.c "
                  f"model.py's on the checkpoint (H {H}, KV {KV}, tied {cfg['tie_word_embeddings']}), "
                  f"{T} tokens", hf, ref)


def model_logits_cmd(argv):
    fixture, text, out = argv
    m, args = model_py(fixture)
    ref = model_logits(m, text_ids(text, args.max_seq_len))
    ref.numpy().astype("<f8").tofile(out)
    print(f"model.py: logits {tuple(ref.shape)} written")
    return 0


def close_raw(argv):
    a, b, T, V = argv[0], argv[1], int(argv[2]), int(argv[3])
    got = torch.from_numpy(np.fromfile(a, dtype="<f4").reshape(T, V))
    ref = torch.from_numpy(np.fromfile(b, dtype="<f8").reshape(T, V))
    return report(f"llama2.c run.c's forward on the llama2c export against model.py's, {T} tokens",
                  got, ref)


def legacy(argv):
    out, sd_path, tied = argv[0], argv[1], argv[2] == "1"
    sys.path.insert(0, os.environ["PEERS"])
    from model import ModelArgs, Transformer
    import export
    torch.manual_seed(1234)
    args = ModelArgs(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=64, hidden_dim=None,
                     multiple_of=32, max_seq_len=16)
    m = Transformer(args)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.rand_like(p))
        if not tied:
            m.output.weight = torch.nn.Parameter(0.02 * torch.randn_like(m.output.weight))
    export.legacy_export(m, out)
    with h5py.File(sd_path, "w") as f:  # parameters (a tied head once, as the embedding)
        for n, p in m.named_parameters():
            f[n] = p.detach().float().numpy()
    print(f"legacy_export wrote {out} (tied {tied}, hidden {m.layers[0].feed_forward.w1.weight.shape[0]})")
    return 0


def same_params(argv):
    ckpt, sd_path = argv
    c, s = h5py.File(ckpt, "r"), h5py.File(sd_path, "r")
    names = []
    s.visititems(lambda k, v: names.append(k) if isinstance(v, h5py.Dataset) else None)
    mine = []
    c["params"].visititems(lambda k, v: mine.append(k) if isinstance(v, h5py.Dataset) else None)
    bad = [n for n in names if n not in c["params"] or
           not np.array_equal(c["params"][n][()].view(np.uint32), s[n][()].view(np.uint32))]
    extra = sorted(set(mine) - set(names))
    ok = not bad and not extra
    print(f"imported parameters against the state_dict: {'ok' if ok else 'FAILED'}, "
          f"{len(names)} compared bitwise" + (f", differ: {bad[:3]}" if bad else "") +
          (f", extra: {extra[:3]}" if extra else ""))
    return 0 if ok else 1


def to_bf16(argv):
    d, out = argv
    t = read_safetensors(os.path.join(d, "model.safetensors"))
    write_safetensors(os.path.join(out, "model.safetensors"), t, "BF16")
    with open(os.path.join(d, "config.json")) as f, open(os.path.join(out, "config.json"), "w") as g:
        g.write(f.read())
    print(f"{len(t)} tensors written as BF16")
    return 0


def same_bf16(argv):
    a = read_safetensors(os.path.join(argv[0], "model.safetensors"))
    b = read_safetensors(os.path.join(argv[1], "model.safetensors"))
    bad = [n for n in a if n not in b or not torch.equal(a[n].view(torch.int32), b[n].view(torch.int32))]
    ok = not bad and set(a) == set(b)
    print(f"BF16 import, exported as F32: {'ok' if ok else 'FAILED'}, {len(a)} tensors bitwise "
          f"the BF16 values widened" + (f", differ: {bad[:3]}" if bad else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    torch.set_num_threads(1)
    cmds = {"gpt2": gpt2, "llama-hf": llama_hf, "model-logits": model_logits_cmd,
            "close-raw": close_raw, "legacy": legacy, "same-params": same_params,
            "to-bf16": to_bf16, "same-bf16": same_bf16}
    sys.exit(cmds[sys.argv[1]](sys.argv[2:]))
