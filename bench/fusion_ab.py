#!/usr/bin/env python3
"""TL505's calibration check: a ResNet-50 training step eager vs torch.compile'd, measured without the profiler.

    python bench/fusion_ab.py [--out FILE]        # on a GPU: fp32 batch 256 and bf16 batch 128, NCHW

The configurations are the project's ResNet-50 fixtures' (fixtures/scenarios/pageable_copies_fixed.py: fp32, batch
256; conv_nchw_bf16.py: bf16 autocast, batch 128), with synthetic batches already on the device (the fixtures' data
loading is not what compiling changes). Each variant runs in a fresh process: warm-up steps (compilation included),
then 4 blocks of 10 steps with one synchronize at each block boundary; the median block's time per step is reported
(the method of fixtures/make_traces.py's ground truth). TL505 estimates the gain from a trace as 29 % of the fusable
kernels' time (tracelint/trace/rules/fusion.py); the fixtures' traces give that time, this script the gain.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

CONFIGS = {"fp32-b256": ("fp32", 256), "bf16-b128": ("bf16", 128)}


def _run(config: str, compiled: bool) -> dict:
    import torch
    import torch.nn.functional as F
    from torchvision.models import resnet50

    precision, batch = CONFIGS[config]
    torch.manual_seed(0)
    model = resnet50().cuda()
    step_model = torch.compile(model) if compiled else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    images = torch.randn(batch, 3, 224, 224, device="cuda")
    labels = torch.randint(0, 1000, (batch,), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = F.cross_entropy(step_model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(20 if compiled else 10):
        step()
    torch.cuda.synchronize()
    blocks = []
    for _ in range(4):
        start = time.perf_counter()
        for _ in range(10):
            step()
        torch.cuda.synchronize()
        blocks.append((time.perf_counter() - start) * 1000.0 / 10)
    return {"config": config, "compiled": compiled, "median_ms": round(statistics.median(blocks), 3),
            "blocks_ms": [round(b, 3) for b in blocks], "torch": torch.__version__,
            "device": torch.cuda.get_device_name()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the results as JSON here too")
    parser.add_argument("--one", nargs=2, metavar=("CONFIG", "COMPILED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_run(args.one[0], args.one[1] == "1")))
        return
    results = []
    for config in CONFIGS:
        for compiled in (False, True):
            out = subprocess.run([sys.executable, __file__, "--one", config, "1" if compiled else "0"],
                                 capture_output=True, text=True, check=True).stdout
            results.append(json.loads(out.strip().splitlines()[-1]))
            print(results[-1], flush=True)
    for config in CONFIGS:
        eager, comp = (next(r for r in results if r["config"] == config and r["compiled"] is c) for c in (False, True))
        print(f"{config}: eager {eager['median_ms']} ms, compiled {comp['median_ms']} ms per step, "
              f"{eager['median_ms'] / comp['median_ms']:.2f}x, saved {eager['median_ms'] - comp['median_ms']:.1f} ms")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
