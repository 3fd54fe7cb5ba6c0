#!/usr/bin/env python3
"""Issue #37: tracelint's model FLOPs per step against ``torch.utils.flop_counter`` on the same models, for the
fixtures whose model needs torchvision (which CI lacks; the GPT fixtures are checked in CI by
tests/trace/test_flop_reference.py). Not a timed benchmark: it prints counts.

    python bench/flop_reference.py          # needs torch and torchvision (CPU builds do: the model is on "meta")

For ResNet-50 (fixtures/scenarios/conv_nchw_bf16.py: batch 128, 224 x 224, one training step) it prints the
counter's convolution FLOPs (forward and backward) beside those tracelint counts in conv_nchw_bf16's trace and its
channels-last twin's.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def counter_conv_flops(batch: int = 128) -> float:
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode
    from torchvision.models import resnet50

    with torch.device("meta"):
        model = resnet50()
        images = torch.randn(batch, 3, 224, 224)
        labels = torch.randint(0, 1000, (batch,))
    counter = FlopCounterMode(display=False)
    with counter:
        F.cross_entropy(model(images), labels).backward()
    counts = counter.get_flop_counts()["Global"]
    return float(sum(n for op, n in counts.items() if "convolution" in str(op)))


def main() -> int:
    from tracelint.trace import analyze_trace
    from tracelint.trace.flops import CONVOLUTION, step_flops

    reference = counter_conv_flops()
    print(f"torch.utils.flop_counter, ResNet-50 batch 128, one step: convolutions {reference / 1e12:.6f} TFLOP")
    worst = 0.0
    for name in ("conv_nchw_bf16", "conv_nchw_bf16_fixed"):
        (analysis,) = analyze_trace(ROOT / "fixtures" / "traces" / f"{name}.pt.trace.json.gz").analyses
        model = analysis.model
        found = step_flops(model.shaped_ops, [(s.start, s.end) for s in model.steps]).by_kind.get(CONVOLUTION, 0.0)
        off = 100.0 * (found - reference) / reference
        worst = max(worst, abs(off))
        print(f"tracelint, {name}: convolutions {found / 1e12:.6f} TFLOP per step ({off:+.3f} %)")
    print(f"largest difference {worst:.3f} % (issue #37: within 5 %)")
    return 0 if worst <= 5.0 else 1


if __name__ == "__main__":
    sys.exit(main())
