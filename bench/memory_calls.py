"""What the memory rules' patterns cost per step (issue #40 item 3: TL306, TL307, TL308), on one CUDA GPU.

    python bench/memory_calls.py [--json OUT]

The model is the issue #40 fixtures' (fixtures/scenarios/empty_cache_per_step.py): an 8-layer MLP of width 1024, batch
256, TF32 matmuls, AdamW. Each variant runs 20 warm-up steps, then 5 blocks of 50 steps with one
``torch.cuda.synchronize()`` per block and none per step (DESIGN.md: a per-step synchronize would hide the syncs under
test); the median block gives ms per step. Before them, the host time of one call of each memory query
(``us_per_call``: 200 calls, median of 5 repeats) with the model's tensors and cached blocks in place. Memory is
``torch.cuda.memory_allocated()`` at the block boundaries (growth per step over the timed steps) and
``max_memory_allocated()`` over them (the peak); host memory (RSS) grows visibly only while the heap has no free
pages an earlier variant left, so ``total_loss`` runs right after the first ``plain``.

- ``plain``: the fixture's step;
- TL308: the step plus one call per step of ``memory_allocated()`` (a counter, not reported), ``memory_stats()``,
  ``memory_summary()``, ``memory_snapshot()``, and ``_record_memory_history()`` then ``_snapshot()`` (history on, as
  the memory-visualizer recipe sets it) and ``_dump_snapshot(path)``;
- TL307: ``loss.backward(retain_graph=True)`` (the graph's saved activations live until the next step's loss
  replaces it);
- TL306: ``total += loss`` after ``loss.backward()`` (PyTorch's FAQ: each step adds a node to ``total``'s graph).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time

WARMUP, BLOCKS, BLOCK = 20, 5, 50
MIB = 2 ** 20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)
    torch.set_float32_matmul_precision("high")
    layers = []
    for _ in range(8):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(1024, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dump = os.path.join(tempfile.mkdtemp(), "snapshot.pickle")

    def step(variant: str, state: dict) -> None:
        x = torch.randn(256, 1024, device="cuda")
        y = torch.randint(0, 10, (256,), device="cuda")
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward(retain_graph=variant == "retain_graph")
        opt.step()
        if variant == "retain_graph":
            state["keep"] = loss  # the loop's ``loss`` name: alive until the next step's forward rebinds it
        elif variant == "total_loss":
            state["total"] = state.get("total", 0) + loss
        elif variant == "memory_allocated":
            torch.cuda.memory_allocated()
        elif variant == "memory_stats":
            torch.cuda.memory_stats()
        elif variant == "memory_summary":
            torch.cuda.memory_summary()
        elif variant == "memory_snapshot":
            torch.cuda.memory_snapshot()
        elif variant == "_snapshot_with_history":
            torch.cuda.memory._snapshot()
        elif variant == "_dump_snapshot_with_history":
            torch.cuda.memory._dump_snapshot(dump)

    def run(variant: str) -> dict:
        history = variant.endswith("_with_history")
        if history:
            torch.cuda.memory._record_memory_history(max_entries=100_000)
        state: dict = {}
        for _ in range(WARMUP):
            step(variant, state)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start_mem, start_rss = torch.cuda.memory_allocated(), _rss()
        blocks = []
        for _ in range(BLOCKS):
            t0 = time.perf_counter()
            for _ in range(BLOCK):
                step(variant, state)
            torch.cuda.synchronize()
            blocks.append((time.perf_counter() - t0) * 1e3 / BLOCK)
        steps = BLOCKS * BLOCK
        row = {"variant": variant, "ms_per_step": round(statistics.median(blocks), 3),
               "blocks": [round(b, 3) for b in blocks],
               "growth_kib_per_step": round((torch.cuda.memory_allocated() - start_mem) / 1024 / steps, 2),
               "host_rss_growth_kib_per_step": round((_rss() - start_rss) / steps, 2),
               "peak_mib": round(torch.cuda.max_memory_allocated() / MIB, 1)}
        if history:
            torch.cuda.memory._record_memory_history(enabled=None)
        state.clear()
        torch.cuda.synchronize()
        return row

    calls = {"memory_allocated": torch.cuda.memory_allocated, "max_memory_allocated": torch.cuda.max_memory_allocated,
             "memory_stats": torch.cuda.memory_stats, "memory_summary": torch.cuda.memory_summary,
             "memory_snapshot": torch.cuda.memory_snapshot}
    for _ in range(WARMUP):
        step("plain", {})
    torch.cuda.synchronize()
    per_call = {}
    for name, fn in calls.items():  # host time of one call, with the model's tensors and cached blocks in place
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(200):
                fn()
            times.append((time.perf_counter() - t0) * 1e6 / 200)
        per_call[name] = round(statistics.median(times), 1)
    print(json.dumps({"us_per_call": per_call}), flush=True)

    # total_loss first: host memory grows visibly only while the heap has no free pages an earlier variant left
    variants = ["plain", "total_loss", "retain_graph", "memory_allocated", "memory_stats", "memory_summary",
                "memory_snapshot", "_snapshot_with_history", "_dump_snapshot_with_history", "plain"]
    rows = []
    for variant in variants:
        row = run(variant)
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "us_per_call": per_call,
              "rows": rows}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k not in ("rows", "us_per_call")}))


def _rss() -> int:
    """The process's resident set in KiB, now (Linux: /proc/self/statm), else its peak (ru_maxrss)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


if __name__ == "__main__":
    sys.exit(main())
