"""report.py LOGS [--json FILE] [--rehearsal]: the GPU kit's table, from the
logs run.sh left in LOGS (--rehearsal: run.sh --rehearse ran the "cuda" steps
on the CPU; every line says so and the JSON status is "rehearsal"). Each row: what was measured, its threshold, PASS / FAIL / "not built"
(a part this meshgrad does not have) / "not run" (its step was skipped or
failed before measuring). Prints the table; with --json writes the same rows
as one JSON object. Exit 0 when no row failed or went unmeasured, else 1.
Python 3 standard library only (the GPU machine's python3)."""
import json
import os
import re
import sys

LOSS_FP32 = 1e-4   # loss curve, cuda vs cpu, fp32 (the threshold)
LOSS_LOOSE = 1e-3  # tf32 vs fp32 and bf16 vs bf16 (10 and 7 bit mantissas)
BF16_APART = 1e-5  # bf16 must differ from fp32 by more than this (it ran)
OPS_TOL = 1e-4
GEMM_RATIO = 0.9   # mg_linear / raw cuBLAS
STEP_RATIO = 1.0   # meshgrad ms / PyTorch ms


class Report:
    def __init__(self, logs):
        self.logs = logs
        self.rows = []

    def read(self, name):
        try:
            with open(os.path.join(self.logs, name), errors="replace") as f:
                return f.read()
        except OSError:
            return None

    def rc(self, step):
        text = self.read(step + ".rc")
        return int(text) if text and text.strip().lstrip("-").isdigit() else None

    def why_not(self, step):
        """None when the step ran and exited 0, else a short reason"""
        rc = self.rc(step)
        if rc is None:
            return "%s did not run" % step
        if rc == 125:
            return "%s skipped: time budget" % step
        if rc in (124, 137):
            return "%s timed out" % step
        if rc != 0:
            log = (self.read(step + ".log") or "").strip().splitlines()
            pick = [l for l in log if re.search(r"error:|FAILED|:F:|:E:|skipping|Error", l)]
            last = (pick or log or [""])[-1].strip()
            return "%s exit %d%s" % (step, rc, (": " + last[:160]) if last else "")
        return None
    def add(self, group, name, value, threshold, ok, detail=""):
        status = {True: "PASS", False: "FAIL", None: "not run"}.get(ok, ok)
        self.rows.append({"group": group, "name": name, "value": value, "threshold": threshold,
                          "status": status, "detail": detail})

    # ---- rows 1, 2, 6a: the test programs' "kernel" tables --------------------------
    def kernel_table(self, step):
        out = []
        for line in (self.read(step + ".log") or "").splitlines():
            m = re.match(r"kernel (\S+)\s+max_rel_err (\S+)\s+tol (\S+)\s+cases (\d+)", line)
            if m:
                out.append((m.group(1), float(m.group(2)), float(m.group(3)), int(m.group(4))))
        return out

    def tests(self):
        for step, group in (("test_cuda", "1 kernels"), ("test_cuda_ops", "2 ops")):
            table = self.kernel_table(step)
            summary = re.findall(r"\d+%: Checks: \d+, Failures: \d+, Errors: \d+",
                                 self.read(step + ".log") or "")
            why = self.why_not(step)
            for name, err, tol, cases in table:
                g = "6 nccl" if name.startswith("nccl") else group
                self.add(g, name.replace("_", " "), "%.3g" % err, "<= %g" % tol, err <= tol,
                         "%d cases" % cases)
            rc = self.rc(step)
            self.add(group, "%s.mpi: every check" % step, summary[-1] if summary else "-",
                     "exit 0", None if rc in (None, 125) else rc == 0, why or "")
        # the families the GPU must have produced: a missing one is a row not run
        names = [n for n, _, _, _ in self.kernel_table("test_cuda_ops")]
        for prefix, group, what in (("cuda_vs_cpu", "2 ops", "ops on cuda vs cpu, every placement"),
                                    ("nccl", "6 nccl", "NCCL collectives through meshgrad's comm")):
            if not any(n.startswith(prefix) for n in names):
                self.add(group, what, "-", "<= tol", None,
                         self.why_not("test_cuda_ops") or "no such lines in test_cuda_ops.log")
        combos = re.findall(r"ops case (\d+): (\d+) combinations", self.read("test_cuda_ops.log") or "")
        if combos:
            self.add("2 ops", "placements per case", ", ".join("%s: %s" % c for c in combos),
                     "-", "info")

    # ---- row 3: loss curves ---------------------------------------------------------------
    def losses(self, step):
        text = self.read(step + ".jsonl")
        if not text:
            return None
        out = {}
        for line in text.splitlines():
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if "loss" in j and "step" in j:
                out[j["step"]] = j["loss"]
        return out

    def worst(self, got, want):
        steps = sorted(want)
        if not steps or any(s not in got for s in steps):
            return None, None
        w, at = -1.0, 0
        for s in steps:
            d = abs(got[s] - want[s]) / max(abs(want[s]), 1e-30)
            if d > w:
                w, at = d, s
        return w, at

    def curve(self, name, got_step, want_step, tol, apart_from=None):
        why = (self.why_not("gpt_data") if got_step.startswith("gpt") else None) \
            or self.why_not(got_step) or self.why_not(want_step)
        got, want = self.losses(got_step), self.losses(want_step)
        if why or not got or not want:
            self.add("3 training", name, "-", "<= %g" % tol, None, why or "no metrics")
            return
        w, at = self.worst(got, want)
        if w is None:
            self.add("3 training", name, "-", "<= %g" % tol, False, "the curves have different steps")
            return
        ok = w <= tol
        detail = "%d steps, worst at step %d" % (len(want), at)
        threshold = "<= %g" % tol
        if apart_from:
            other = self.losses(apart_from)
            a, _ = self.worst(got, other) if other else (None, None)
            threshold += ", > %g from fp32" % BF16_APART
            detail += "; %s from the fp32 cuda curve" % ("%.2e" % a if a is not None else "-")
            ok = ok and a is not None and a > BF16_APART
        self.add("3 training", name, "%.2e" % w, threshold, ok, detail)

    def training(self):
        self.curve("digits: cuda fp32 vs cpu fp32", "digits_cuda", "digits_cpu", LOSS_FP32)
        self.curve("digits: cuda --tf32 vs cpu fp32", "digits_cuda_tf32", "digits_cpu", LOSS_LOOSE)
        self.curve("digits: cuda bf16 vs cpu bf16", "digits_cuda_bf16", "digits_cpu_bf16",
                   LOSS_LOOSE, apart_from="digits_cuda")  # and not fp32 in disguise
        if self.read("gpt_built") is None:
            for name in ("gpt: cuda fp32 vs cpu fp32", "gpt: cuda --tf32 vs cpu fp32"):
                self.add("3 training", name, "-", "-", "not built",
                         "meshgrad train has no --model gpt in this kit")
        else:
            self.curve("gpt: cuda fp32 vs cpu fp32", "gpt_cuda", "gpt_cpu", LOSS_FP32)
            self.curve("gpt: cuda --tf32 vs cpu fp32", "gpt_cuda_tf32", "gpt_cpu", LOSS_LOOSE)

    # ---- rows 4 and 5: benchmarks ------------------------------------------------------------
    def last_json(self, step):
        for line in reversed((self.read(step + ".log") or "").splitlines()):
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    return None
        return None

    def torch_lines(self):
        out = []
        for line in (self.read("torch.log") or "").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def benchmarks(self):
        torch = self.torch_lines()
        mm = {(t["math"], t.get("tensors")): t for t in torch if t.get("kind") == "mm"}
        steps = {t["math"]: t for t in torch if t.get("kind") == "step"}
        terr = [t["error"] for t in torch if t.get("kind") == "error" and "what" not in t]
        for math in ("fp32", "tf32", "bf16"):
            j, why = self.last_json("gemm_" + math), self.why_not("gemm_" + math)
            ctx = mm.get((math, "fp32"))
            detail = ("torch.mm %.3g TFLOP/s" % ctx["tflops"]) if ctx else ""
            if math == "bf16":
                native = mm.get(("bf16", "bf16"))
                detail += "; raw cuBLAS here includes the fp32->bf16 casts"
                if native:
                    detail += "; torch.mm on bf16 tensors %.3g TFLOP/s" % native["tflops"]
            if why or not j:
                self.add("4 gemm", "mg_linear vs raw cuBLAS, " + math, "-", ">= %gx" % GEMM_RATIO,
                         None, why or "no result")
                continue
            self.add("4 gemm", "mg_linear vs raw cuBLAS, " + math,
                     "%.2f vs %.2f TFLOP/s = %.3fx" % (j["mg_gflops"] / 1e3, j["blas_gflops"] / 1e3,
                                                       j["ratio"]),
                     ">= %gx" % GEMM_RATIO, j["ratio"] >= GEMM_RATIO, detail.lstrip("; "))
        for math in ("fp32", "tf32", "bf16"):
            j, why = self.last_json("step_" + math), self.why_not("step_" + math)
            t = steps.get(math)
            name = "MLP step 256x1024-4096-1024, " + math
            if why or not j or not t:
                self.add("5 step", name, "-", "<= %gx PyTorch" % STEP_RATIO, None,
                         why or (terr[0] if terr else self.why_not("torch") or "no result"))
                continue
            r = j["ms_per_step"] / t["ms"]
            self.add("5 step", name, "%.3f vs %.3f ms = %.2fx" % (j["ms_per_step"], t["ms"], r),
                     "<= %gx PyTorch" % STEP_RATIO, r <= STEP_RATIO,
                     "PyTorch eager, float32 matmul precision '%s'" % t.get("precision"))
        self.gpt_steps(torch, terr)

    def train_ms(self, step, skip=10):
        """the median per-step "ms" of a training run's metrics, past its first steps"""
        ms = []
        for line in (self.read(step + ".jsonl") or "").splitlines():
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if "loss" in j and "ms" in j and j.get("step", 0) > skip:
                ms.append(j["ms"])
        ms.sort()
        return ms[len(ms) // 2] if ms else None

    def gpt_steps(self, torch, terr):
        """row 5's GPT: meshgrad's step (bench step --model gpt, or else the per-step
        times of row 3's training runs) against torch_ref.py's, same model"""
        built = self.read("gpt_built")
        if built is None:
            self.add("5 step", "GPT step vs PyTorch", "-", "-", "not built", "no GPT model in this meshgrad")
            return
        f = built.split()[1:]  # --layers L --heads H --embd C --ctx T --batch B
        letter = {"--layers": "L", "--heads": "H", "--embd": "C", "--ctx": "T", "--batch": "B"}
        shape = " ".join(letter.get(k, k) + v for k, v in zip(f[::2], f[1::2]))  # L4 H4 C128 T64 B32
        gpts = {t["math"]: t for t in torch if t.get("kind") == "gpt"}
        gerr = [t["error"] for t in torch if t.get("kind") == "error" and t.get("what") == "gpt"]
        bench = self.rc("gpt_step_fp32") is not None
        for math, train in (("fp32", "gpt_cuda"), ("tf32", "gpt_cuda_tf32")):
            name = "GPT step %s, %s" % (shape, math)
            t = gpts.get(math)
            if bench:
                j, why = self.last_json("gpt_step_" + math), self.why_not("gpt_step_" + math)
                ms, src = (j or {}).get("ms_per_step"), "meshgrad bench step --model gpt"
            else:
                why, ms = self.why_not(train), self.train_ms(train)
                src = ("median per-step ms of row 3's %s run past step 10 (this meshgrad's "
                       "bench step --model gpt has no --device)" % train)
            if why or ms is None or not t:
                self.add("5 step", name, "-", "<= %gx PyTorch" % STEP_RATIO, None,
                         why or (gerr[0] if gerr else terr[0] if terr else
                                 self.why_not("torch") or "no result"))
                continue
            r = ms / t["ms"]
            self.add("5 step", name, "%.3f vs %.3f ms = %.2fx" % (ms, t["ms"], r),
                     "<= %gx PyTorch" % STEP_RATIO, r <= STEP_RATIO,
                     "%s; PyTorch eager (gpt-pytorch.py's model, AdamW, clip 1), '%s'"
                     % (src, t.get("precision")))

    # ---- row 6b: checkpoint from the GPU, resumed on the CPU ------------------------------
    def checkpoint(self):
        name = "ckpt cuda -> cpu"
        why = (self.why_not("ckpt_gpu_save") or self.why_not("ckpt_cpu_resume")
               or self.why_not("ckpt_gpu_resume"))
        if why:
            self.add("6 checkpoint", name, "-", "bitwise", None, why)
            return
        sums = {}
        for step in ("ckpt_cpu_resume", "ckpt_gpu_resume"):
            m = re.findall(r"param checksum ([0-9a-f]{16})", self.read(step + ".log") or "")
            sums[step] = m[-1] if m else None
        same = sums["ckpt_cpu_resume"] is not None and sums["ckpt_cpu_resume"] == sums["ckpt_gpu_resume"]
        self.add("6 checkpoint", name + ": params as loaded on cuda",
                 "%s / %s" % (sums["ckpt_cpu_resume"], sums["ckpt_gpu_resume"]),
                 "equal checksums", same)
        cmp_log = (self.read("ckpt_compare.log") or "").strip().splitlines()
        why = self.why_not("ckpt_compare")
        self.add("6 checkpoint", name + ": re-saved file bitwise",
                 cmp_log[-1][:80] if cmp_log else "-", "bitwise (train_ckpt_tool compare)",
                 why is None, why or "")

    # ---- output --------------------------------------------------------------------------------
    def print_table(self, machine, rehearsal):
        tag = " (cpu rehearsal)" if rehearsal else ""
        print()
        if rehearsal:
            print("REHEARSAL: the 'cuda' runs ran on the CPU. Nothing below is a GPU result.")
        print("meshgrad GPU check: %s" % machine.get("gpu", "?"))
        for k in ("kit", "nvidia-smi", "threads", "seconds"):
            if k in machine:
                print("  %s: %s" % (k, machine[k]))
        for f in machine.get("found", []):
            print("  found: %s" % f)
        cols = [("row", "group", 12), ("check", "name", 52), ("measured", "value", 40),
                ("threshold", "threshold", 34)]
        widths = [min(cap, max([len(h)] + [len(str(r[k])) for r in self.rows])) for h, k, cap in cols]
        self.rows.sort(key=lambda r: r["group"][0])  # stable: the order within a row kept
        line = lambda vals: "  ".join(str(v)[:w].ljust(w) for v, w in zip(vals, widths))
        print(line([h for h, _, _ in cols]) + "  result")
        for r in self.rows:
            print(line([r[k] for _, k, _ in cols]) + "  " + r["status"] + tag)
            long_value = len(str(r["value"])) > widths[2]
            if (r["detail"] and r["status"] != "PASS") or long_value:
                more = ([str(r["value"])] if long_value else []) + ([r["detail"]] if r["detail"] else [])
                print(" " * (widths[0] + 2) + "  (" + "; ".join(more) + ")")
        n = {s: sum(1 for r in self.rows if r["status"] == s) for s in ("PASS", "FAIL", "not run")}
        print()
        print("%d passed, %d failed, %d not run, %d not built or info" %
              (n["PASS"], n["FAIL"], n["not run"], len(self.rows) - sum(n.values())))
        return n


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    logs = argv[1]
    out = argv[argv.index("--json") + 1] if "--json" in argv else None
    r = Report(logs)
    machine = {"found": []}
    for line in (r.read("machine.txt") or "").splitlines():
        k, _, v = line.partition("=")
        if k == "found":
            machine["found"].append(v)
        elif k:
            machine[k] = v
    r.tests()
    r.training()
    r.benchmarks()
    r.checkpoint()
    rehearsal = "--rehearsal" in argv
    n = r.print_table(machine, rehearsal)
    ok = n["FAIL"] == 0 and n["not run"] == 0
    if out:
        torch = [t for t in r.torch_lines() if t.get("kind") == "info"]
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            status = "rehearsal" if rehearsal else "passed" if ok else "failed"
            json.dump({"status": status, "machine": machine,
                       "torch": torch[0] if torch else None, "rows": r.rows,
                       "passed": n["PASS"], "failed": n["FAIL"], "not_run": n["not run"]}, f, indent=1)
            f.write("\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
