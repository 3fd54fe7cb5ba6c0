"""Calibrate TL003's estimate (the verdict may be the profiler's) on compiled and eager GPT training steps.

Run on a machine with CUDA GPUs, from the repository root:

    PYTHONUNBUFFERED=1 python bench/tl003_calibration.py --out /tmp/tl003 [--gpus 0,1] [--only b12 b8 ...]
    python bench/tl003_calibration.py --out /tmp/tl003 --analyze-only   # the table again from the saved traces

For each size and mode (``compiled``: ``torch.compile`` default mode; ``eager``) a fresh worker process on one GPU
builds the GPT-2-style decoder of fixtures/scenarios/gpt_compiled.py at that size (bf16 autocast, fused AdamW,
tokens made on the device), then

1. times it WITHOUT the profiler: warm-up steps (compilation), then 4 blocks of 10 steps with one
   ``torch.cuda.synchronize()`` per block boundary and none per step; the median block gives ``unprofiled ms``;
2. records it with ``torch.profiler`` as most guides recommend (CPU + CUDA, ``record_shapes``, ``with_stack``,
   ``profile_memory``; schedule wait=1, warmup=2, active=2), exported to ``<out>/<size>_<mode>.pt.trace.json.gz``;
   no ``tracelint.profile`` record, so TL003 has to estimate.

The parent runs tracelint's analysis on each trace with the project's configuration and prints per trace: the
unprofiled and profiled step (tracelint's step: the longer of the mean CPU step and the mean GPU span), the
inflation, the GPU work per step over the unprofiled step (the unprofiled run's share: >= 80 % is gpu-bound), the
host time per kernel launched over the GPU time per kernel (TL003's ratio), the share of idle time that is launch
overhead, the verdict and whether TL003 fired. ``<out>/results.json`` keeps every number.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# name -> (width, depth, heads, batch, seq); b12 is the compiled GPT fixture's size (fixtures/scenarios/gpt_*.py)
SIZES = {
    "b12": (768, 12, 12, 12, 1024),
    "b8": (768, 12, 12, 8, 1024),
    "b4": (768, 12, 12, 4, 1024),
    "small": (512, 8, 8, 4, 512),
}
MODES = ("compiled", "eager")
VOCAB = 50304
SCHEDULE = {"wait": 1, "warmup": 2, "active": 2, "repeat": 1}
BLOCKS, BLOCK, WARMUP = 4, 10, 8


def worker(size: str, mode: str, out: Path) -> dict:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    width, depth, heads, batch, seq = SIZES[size]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(VOCAB, width), nn.Embedding(seq, width)
            self.blocks = nn.ModuleList(Block() for _ in range(depth))
            self.ln_f, self.head = nn.LayerNorm(width), nn.Linear(width, VOCAB, bias=False)
            self.head.weight = self.tok.weight

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    torch.manual_seed(0)
    model = GPT().cuda()
    if mode == "compiled":
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)

    def step():
        tokens = torch.randint(0, VOCAB, (batch, seq + 1), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(tokens[:, :-1]).reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    t0 = time.perf_counter()
    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    marks = [time.perf_counter()]
    for _ in range(BLOCKS):
        for _ in range(BLOCK):
            step()
        torch.cuda.synchronize()
        marks.append(time.perf_counter())
    blocks = [(b - a) * 1e3 / BLOCK for a, b in zip(marks, marks[1:], strict=False)]
    name = f"{size}_{mode}"
    plain = out / f"{name}.pt.trace.json"
    from torch.profiler import ProfilerActivity, profile, schedule

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=schedule(**SCHEDULE),
                 record_shapes=True, with_stack=True, profile_memory=True,
                 on_trace_ready=lambda p: p.export_chrome_trace(str(plain))) as prof:
        for _ in range(sum(SCHEDULE[k] for k in ("wait", "warmup", "active")) + 1):
            step()
            prof.step()
    with open(plain, "rb") as src, gzip.GzipFile(out / f"{name}.pt.trace.json.gz", "wb", 9, mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    plain.unlink()
    return {"size": size, "mode": mode, "width": width, "depth": depth, "heads": heads, "batch": batch, "seq": seq,
            "unprofiled_ms": round(statistics.median(blocks), 3), "blocks_ms": [round(b, 3) for b in blocks],
            "warmup_s": round(warm_s, 1), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "trace": f"{name}.pt.trace.json.gz"}


def analyze(out: Path, run: dict) -> dict:
    """tracelint's reading of one trace, with the numbers TL003's estimate uses."""
    sys.path.insert(0, str(REPO))
    from tracelint.engine import metrics as M
    from tracelint.trace import analyze_trace

    report = analyze_trace(out / run["trace"])
    m = report.metrics
    per_step, mean_us, step_us = (M.KERNELS_PER_STEP.of(m), M.MEAN_KERNEL_US.of(m), M.STEP_CPU_US_MEAN.of(m))
    spans = [v for v in (step_us, M.STEP_GPU_SPAN_US_MEAN.of(m)) if v is not None]
    profiled_ms = max(spans) / 1e3 if spans else None
    gpu_ms = (m.get("gpu_busy_us") or 0) / 1e3 / max(m.get("steps") or 1, 1)
    host_us = step_us / per_step if step_us and per_step else None
    # the idle time TL003 counts as host time: launch overhead and short gaps, and `other` in compiled code
    compiled = (m.get("compiled_launch_pct") or 0.0) >= 50.0
    causes = ("launch_overhead", "short_gap") + (("other",) if compiled else ())
    launch = sum(M.IDLE_PCT[c].of(m) or 0.0 for c in causes)
    return {"verdict": report.verdict, "profiled_ms": round(profiled_ms, 2) if profiled_ms else None,
            "inflation": round(profiled_ms / run["unprofiled_ms"], 2) if profiled_ms else None,
            "gpu_ms_per_step": round(gpu_ms, 2),
            "gpu_share_unprofiled_pct": round(100 * gpu_ms / run["unprofiled_ms"], 1),
            "kernels_per_step": per_step, "mean_kernel_us": mean_us,
            "host_us_per_kernel": round(host_us, 1) if host_us else None,
            "host_gpu_ratio": round(host_us / mean_us, 2) if host_us and mean_us else None,
            "host_idle_pct": round(launch, 1), "gpu_busy_pct": M.GPU_BUSY_PCT.of(m),
            "compiled_kernel_pct": m.get("compiled_kernel_pct"), "compiled_launch_pct": m.get("compiled_launch_pct"),
            "tl003": any(f.code == "TL003" for f in report.findings),
            "codes": sorted({f.code for f in report.findings})}


def table(results: list[dict]) -> str:
    cols = [("trace", lambda r: f"{r['size']}_{r['mode']}"), ("unprof ms", "unprofiled_ms"),
            ("prof ms", "profiled_ms"), ("inflation", "inflation"), ("GPU ms", "gpu_ms_per_step"),
            ("GPU/unprof %", "gpu_share_unprofiled_pct"), ("kern/step", "kernels_per_step"),
            ("host/kernel us", "host_us_per_kernel"), ("GPU/kernel us", "mean_kernel_us"),
            ("host/GPU", "host_gpu_ratio"), ("host idle %", "host_idle_pct"), ("verdict", "verdict"),
            ("TL003", lambda r: "yes" if r.get("tl003") else "no")]
    rows = [[c for c, _ in cols]]
    for r in results:
        rows.append([str(get(r) if callable(get) else r.get(get, "-")) for _, get in cols])
    widths = [max(len(row[i]) for row in rows) for i in range(len(cols))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpus", default="0", help="comma list: one worker at a time on each")
    ap.add_argument("--only", nargs="+", choices=list(SIZES))
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--timeout", type=int, default=400, help="seconds per worker")
    ap.add_argument("--analyze-only", action="store_true")
    ap.add_argument("--worker", nargs=2, metavar=("SIZE", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.worker:
        res = worker(*args.worker, out)
        (out / f"{args.worker[0]}_{args.worker[1]}.run.json").write_text(json.dumps(res))
        return 0
    jobs = [(s, m) for m in args.modes for s in (args.only or list(SIZES))]  # compiled first: the long ones
    if not args.analyze_only:
        free, running = [g.strip() for g in args.gpus.split(",")], []
        while jobs or running:
            while jobs and free:
                (size, mode), gpu = jobs.pop(0), free.pop(0)
                env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu, PYTHONUNBUFFERED="1")
                cmd = [sys.executable, __file__, "--out", str(out), "--worker", size, mode]
                running.append((subprocess.Popen(cmd, env=env), gpu, time.monotonic(), f"{size}_{mode}"))
                print(f"[{size}_{mode}] started on GPU {gpu}", flush=True)
            for item in list(running):
                proc, gpu, started, name = item
                late = time.monotonic() - started > args.timeout
                if proc.poll() is None and not late:
                    continue
                if late and proc.poll() is None:
                    proc.kill()
                    print(f"[{name}] killed after {args.timeout} s", flush=True)
                proc.wait()
                print(f"[{name}] done (exit {proc.returncode}, {time.monotonic() - started:.0f} s)", flush=True)
                running.remove(item)
                free.append(gpu)
            time.sleep(0.5)
    results = []
    for path in sorted(out.glob("*.run.json")):
        run = json.loads(path.read_text())
        if (out / run["trace"]).exists():
            results.append({**run, **analyze(out, run)})
    results.sort(key=lambda r: (r["mode"], list(SIZES).index(r["size"])))
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
