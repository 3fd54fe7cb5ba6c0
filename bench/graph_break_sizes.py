"""What TL503's fix buys at two sizes: the compiled_graph_break pair (fixtures/scenarios) timed without the profiler,
each variant in a fresh process (torch.compile caches nothing between them), at the fixture's size (host-bound: 3.4
ms of GPU work in a 13 ms step) and at a GPU-bound size where the host runs ahead of the GPU unless the break's
`.item()` makes it wait.

    python bench/graph_break_sizes.py            # on a CUDA machine: one line per size, bad vs fixed and the ratio

Not a test: it needs a GPU and prints what it measured (median of blocks, one synchronize per block boundary).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"fixture": {}, "gpu-bound": {"WIDTH": 1024, "DEPTH": 16, "BATCH": 16, "SEQ": 1024, "HEADS": 16}}
CHILD = """
import importlib.util, json, statistics, sys, time
import torch
spec = importlib.util.spec_from_file_location("scenario", sys.argv[1])
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
for name, value in json.loads(sys.argv[2]).items():
    setattr(module, name, value)
marks, count, warmup, block, blocks = [], 0, 15, 20, 5
def on_step():
    global count
    count += 1
    if count >= warmup and (count - warmup) % block == 0:
        torch.cuda.synchronize(); marks.append(time.perf_counter())
module.train(warmup + block * blocks, on_step=on_step)
per = [(b - a) * 1e3 / block for a, b in zip(marks, marks[1:])]
print(json.dumps({"median_ms": statistics.median(per), "min_ms": min(per), "max_ms": max(per)}))
"""


def main() -> None:
    results = {}
    for size, constants in SIZES.items():
        row = {}
        for variant in ("compiled_graph_break", "compiled_graph_break_fixed"):
            script = ROOT / "fixtures" / "scenarios" / f"{variant}.py"
            out = subprocess.run([sys.executable, "-c", CHILD, str(script), json.dumps(constants)],
                                 capture_output=True, text=True, check=True).stdout
            row[variant] = json.loads(out.strip().splitlines()[-1])
        bad, fixed = (row[v]["median_ms"] for v in ("compiled_graph_break", "compiled_graph_break_fixed"))
        results[size] = {"constants": constants, **row, "speedup": round(bad / fixed, 3)}
        print(f"{size}: with the break {bad:.2f} ms, without {fixed:.2f} ms per step: {bad / fixed:.2f}x", flush=True)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
