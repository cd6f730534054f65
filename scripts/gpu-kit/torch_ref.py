"""torch_ref.py: the PyTorch eager side of the GPU kit's rows 4 and 5, on the
same GPU and shapes as `meshgrad bench` (run with the machine's python3).

  step  the MLP step of `meshgrad bench step`: x (256, 1024) -> Linear(1024,
        4096) -> ReLU -> Linear(4096, 1024), MSE against a fixed target, SGD
        with momentum 0.9 (lr 1e-3); median ms per step over 50 steps after 5
        warm-up ones, the GPU synchronized after each step. Matmul math: fp32
        (TF32 off), TF32, and bf16 ("medium": fp32 tensors, bf16 products,
        fp32 sums: what meshgrad's --dtype bf16 does).
  gpt   the GPT step of `meshgrad bench step --model gpt` (--gpt L,H,C,T,B:
        layers, heads, embd, ctx, batch; the recipe's 4,4,128,64,32 by
        default): scripts/gpt-pytorch.py's model (imported, not copied),
        cross-entropy on fixed random bytes, backward, clipping at norm 1,
        AdamW (lr 1e-3, betas 0.9, 0.95, eps 1e-8, weight decay 0.1); median
        ms per step, fp32 and TF32, as the MLP step
  mm    torch.mm 4096^3 in the same three maths, and on bf16 tensors (the GEMM
        with no fp32 -> bf16 casts), TFLOP/s: context for row 4.

Prints one JSON object per line: {"kind": "info", ...}, then one per
measurement, {"kind": "step"|"gpt"|"mm", "math": ..., "ms": ...}.
--rehearse (run.sh --rehearse): on the CPU, small GEMMs, few steps.
--gpt L,H,C,T,B: the GPT step's shape (run.sh passes the one row 3 trains).
"""
import importlib.util
import json
import os
import statistics
import sys
import time
import warnings

warnings.filterwarnings("ignore")


def emit(**kw):
    print(json.dumps(kw), flush=True)


def load_gpt():
    """the GPT class of gpt-pytorch.py: beside this file (the kit) or one up (the repo)"""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, "gpt-pytorch.py"), os.path.join(here, "..", "gpt-pytorch.py")):
        if os.path.exists(path):
            spec = importlib.util.spec_from_file_location("gpt_pytorch", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod.GPT
    raise FileNotFoundError("gpt-pytorch.py not found beside %s or one folder up" % here)


def gpt_step(torch, dev, math, shape, timed, set_math, rehearse):
    """the median ms of one GPT training step, as meshgrad's (see the top)"""
    import torch.nn.functional as F
    L, H, C, T, B = shape
    V = 256
    set_math(math)
    torch.manual_seed(0)
    model = load_gpt()(V, T, C, H, L).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1)
    x = torch.randint(0, V, (B, T), device=dev)
    y = torch.randint(0, V, (B, T), device=dev)

    def one_step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).view(-1, V), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    s = timed(one_step, 2 if rehearse else 5, 3 if rehearse else 50)
    return dict(kind="gpt", math=math, precision=torch.get_float32_matmul_precision(),
                shape="layers=%d heads=%d embd=%d ctx=%d batch=%d" % (L, H, C, T, B), ms=s * 1e3)


def main():
    try:
        import torch
    except Exception as e:  # no torch: say so, the report marks the rows
        emit(kind="error", error="cannot import torch: %s" % e)
        return 1
    rehearse = "--rehearse" in sys.argv
    gpt_shape = (4, 4, 128, 64, 32)  # the recipe's (data/mobydick.conf)
    if "--gpt" in sys.argv:
        gpt_shape = tuple(int(v) for v in sys.argv[sys.argv.index("--gpt") + 1].split(","))
    if not rehearse and not torch.cuda.is_available():
        emit(kind="error", error="torch sees no CUDA device (torch %s)" % torch.__version__)
        return 1
    dev = torch.device("cpu" if rehearse else "cuda")
    sync = (lambda: None) if rehearse else torch.cuda.synchronize
    steps, n = (3, 512) if rehearse else (50, 4096)
    nccl = None
    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:
        pass
    emit(kind="info", torch=torch.__version__, cuda=torch.version.cuda, nccl=nccl,
         gpu="cpu (rehearsal)" if rehearse else torch.cuda.get_device_name(0))

    precisions = {"fp32": "highest", "tf32": "high", "bf16": "medium"}

    def set_math(math):  # (this also sets torch.backends.cuda.matmul.allow_tf32)
        torch.set_float32_matmul_precision(precisions[math])

    def timed(fn, warm, iters):
        for _ in range(warm):
            fn()
        sync()
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    torch.manual_seed(0)
    x = torch.randn(256, 1024, device=dev)
    target = torch.rand(256, 1024, device=dev)
    for math in ("fp32", "tf32", "bf16"):
        set_math(math)
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                    torch.nn.Linear(4096, 1024)).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        loss_fn = torch.nn.MSELoss()

        def one_step():
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), target)
            loss.backward()
            opt.step()

        s = timed(one_step, 2 if rehearse else 5, steps)
        flops = 3 * 2.0 * 256 * (1024 * 4096 + 4096 * 1024)
        emit(kind="step", math=math, precision=torch.get_float32_matmul_precision(),
             ms=s * 1e3, tflops=flops / s * 1e-12)

    for math in ("fp32", "tf32"):
        try:
            emit(**gpt_step(torch, dev, math, gpt_shape, timed, set_math, rehearse))
        except Exception as e:  # the report marks the GPT rows with the reason
            emit(kind="error", what="gpt", math=math, error="GPT step: %s: %s" % (type(e).__name__, e))

    a = torch.randn(n, n, device=dev)
    b = torch.randn(n, n, device=dev)
    for math in ("fp32", "tf32", "bf16"):
        set_math(math)
        s = timed(lambda: torch.mm(a, b), 3, steps if rehearse else 20)
        emit(kind="mm", math=math, tensors="fp32", ms=s * 1e3, tflops=2.0 * n ** 3 / s * 1e-12)
    set_math("fp32")
    a16, b16 = a.bfloat16(), b.bfloat16()
    s = timed(lambda: torch.mm(a16, b16), 3, steps if rehearse else 20)
    emit(kind="mm", math="bf16", tensors="bf16", ms=s * 1e3, tflops=2.0 * n ** 3 / s * 1e-12)
    return 0


if __name__ == "__main__":
    sys.exit(main())
