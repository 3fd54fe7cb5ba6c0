"""Precision and Tensor Cores: fp32 matmul/conv time on the CUDA cores of a GPU that has Tensor Cores (TL401), and
attention computed by separate matmul and softmax kernels instead of a fused Tensor Core kernel (TL402)."""
from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import replace

from tracelint.engine import Config, Finding
from tracelint.engine import metrics as M
from tracelint.trace.kernels import name_arch
from tracelint.trace.metrics import TraceAnalysis
from tracelint.trace.model import KERNEL
from tracelint.trace.rule import TraceRule
from tracelint.trace.rules._common import finding, ms, pct
from tracelint.trace.verdict import Verdict


def _arch(analysis: TraceAnalysis, kernel_names: Iterable[str]) -> int | None:
    props = analysis.model.devices.get(analysis.device) if analysis.device is not None else None
    if props is not None and props.compute_major is not None:
        return props.compute_major
    return max((a for a in map(name_arch, kernel_names) if a is not None), default=None)


class Fp32MatmulOffTensorCores(TraceRule):
    code = "TL401"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        # Measured against the step window, not the busy time: on an input- or host-bound run the GPU idles anyway
        # and faster matmuls would not shorten the step.
        window = M.GPU_WINDOW_US.of(analysis.metrics)
        if not window:
            return
        per_name: dict[str, list] = {}
        for g in analysis.gpu_events:
            if g.kind == KERNEL and g.step is not None and analysis.kernel_class(g.name).fp32_off_tensor_cores:
                per_name.setdefault(g.name, []).append(g)
        if not per_name:
            return
        arch = _arch(analysis, per_name)
        if arch is None or arch < 7:
            return  # no Tensor Cores to move to (or the device is unknown)
        total = sum(g.end - g.start for items in per_name.values() for g in items)
        share = 100.0 * total / window
        if share < config.threshold("fp32-matmul-min-pct"):
            return
        n_steps = len(analysis.model.steps) or 1
        top_name, top = max(per_name.items(), key=lambda kv: sum(g.end - g.start for g in kv[1]))
        top_us = sum(g.end - g.start for g in top)
        short = top_name if len(top_name) <= 80 else top_name[:77] + "..."
        if arch >= 8:
            fix = "enable TF32 (torch.set_float32_matmul_precision('high')) or bf16 autocast"
        else:
            fix = "use fp16 autocast with a GradScaler (this GPU has no TF32/bf16 Tensor Core path)"
        message = (f"fp32 matmul/conv kernels run on the CUDA cores, off the Tensor Cores, for {pct(share)} of the "
                   f"step window ({ms(total / n_steps)} per step; largest: `{short}`, {ms(top_us / n_steps)} per "
                   f"step): {fix}")
        first = min(top, key=lambda g: g.start)
        loc = analysis.location(step=first.step, start=first.start, end=first.end, event=top_name)
        if first.launch is not None:
            loc = replace(loc, source=analysis.source_at(first.launch.tid, first.launch.start))
        yield finding(self, message, loc, fp32_off_tc_pct_of_window=round(share, 2),
                      fp32_off_tc_us_per_step=round(total / n_steps, 1), kernels=len(per_name))


_LOG_SOFTMAX = re.compile(r"log_?soft_?max", re.I)
# softmax_warp_forward<input_t, output_t, acc_t, log2_elements, is_log_softmax, ...>: the fifth argument
_WARP_LOG = re.compile(r"softmax_warp_(?:forward|backward)<[^<>,]+,[^<>,]+,[^<>,]+,\s*\d+,\s*true")


def _is_log_softmax(analysis: TraceAnalysis, kernel) -> bool:
    """A log_softmax (a loss's cross-entropy): by the op that launched it (aten::_log_softmax*), else by its name."""
    if _LOG_SOFTMAX.search(kernel.name) or _WARP_LOG.search(kernel.name):
        return True
    launch = kernel.launch
    if launch is None:
        return False
    starts, ops = analysis.model.ops_on(launch.tid)
    i = bisect_right(starts, launch.start) - 1
    for op in ops[max(0, i - 200): i + 1]:
        if op.end >= launch.start and "softmax" in op.name and _LOG_SOFTMAX.search(op.name):
            return True
    return False


class UnfusedAttention(TraceRule):
    """Attention on the math path: softmax kernels between batched matmuls every step, and no fused attention
    kernel anywhere in the steps."""

    code = "TL402"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        from tracelint.trace.kernels import MATMUL, SOFTMAX

        m = analysis.metrics
        total = M.KERNEL_TIME_US.of(m)
        if not analysis.has_steps or not total or (M.ATTENTION_PCT.of(m) or 0.0) > 0:
            return
        softmax: list = []
        matmul_us = 0.0
        for g in analysis.gpu_events:
            if g.kind != KERNEL or g.step is None:
                continue
            kc = analysis.kernel_class(g.name)
            if kc.op == SOFTMAX and not _is_log_softmax(analysis, g):  # a loss's log_softmax is not attention
                softmax.append(g)
            elif kc.op == MATMUL:
                matmul_us += g.end - g.start
        steps = len(analysis.model.steps)
        per_step = len(softmax) / steps
        if per_step < config.threshold("unfused-attention-min-softmax-per-step") or not matmul_us:
            return
        softmax_us = sum(g.end - g.start for g in softmax)
        share = 100.0 * softmax_us / total
        if share < config.threshold("unfused-attention-min-softmax-pct"):
            return
        message = (f"attention runs on the unfused math path: {per_step:.0f} softmax kernels per step between batched "
                   f"matmuls ({pct(share)} of kernel time in softmax alone, {ms(softmax_us / steps)} per step) and no "
                   "fused attention kernel; use torch.nn.functional.scaled_dot_product_attention (FlashAttention, "
                   "memory-efficient or cuDNN kernels: the score matrix never goes to memory)")
        first = softmax[0]
        launch = first.launch
        loc = analysis.location(step=first.step, start=launch.start if launch else first.start,
                                end=launch.end if launch else first.end, event=first.name,
                                tid=launch.tid if launch else None)
        yield finding(self, message, loc, softmax_per_step=round(per_step, 1),
                      softmax_pct_of_kernel_time=round(share, 2), softmax_us_per_step=round(softmax_us / steps, 1))
