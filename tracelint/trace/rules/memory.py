"""Optimizer and memory: zero-filled gradients every step (TL301's twin), device memory left unused (TL302), and an
optimizer step of per-tensor kernels (TL303's twin)."""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from tracelint.engine import Config, Finding
from tracelint.engine import metrics as M
from tracelint.trace.analysis import TraceAnalysis
from tracelint.trace.model import KERNEL
from tracelint.trace.rule import TraceRule
from tracelint.trace.rules._common import finding, in_few_steps, launched_under, mib, ms, pct, refine_source
from tracelint.trace.verdict import CPU_BOUND, Verdict

_ZERO_GRAD = re.compile(r"zero_grad\(")


def _ops_in_steps(model, prefix: str) -> list:
    """The ops named ``prefix...`` (the optimizer's record_function ranges) that start inside a profiled step."""
    names = {name for name in model.op_names() if name.startswith(prefix)}
    return [o for o in model.ops if o.name in names and model.step_at(o.start) is not None] if names else []


class ZeroGradKeepsGrads(TraceRule):
    """GPU work (fill kernels, memsets, ``_foreach_zero_``) launched inside ``Optimizer.zero_grad`` each step."""

    code = "TL301"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        model = analysis.model
        zero_grads = _ops_in_steps(model, "Optimizer.zero_grad")
        if not zero_grads:
            return
        n_steps = len(model.steps) or 1
        steps, fills, gpu_us, first = set(), 0, 0.0, None
        for op in zero_grads:
            work = launched_under(analysis, op.tid, op.start, op.end)
            if work:
                steps.add(model.step_at(op.start))
                fills += len(work)
                gpu_us += sum(g.end - g.start for g in work)
                first = first or (op, work[0])
        if not fills:
            return
        if in_few_steps(analysis, steps, config.threshold("zero-fill-min-steps-pct")):
            return
        op, work = first
        busy = M.GPU_BUSY_US.of(analysis.metrics)
        share = f", {pct(100.0 * gpu_us / busy)} of the GPU's busy time" if busy else ""
        message = (f"`{op.name}` launches {fills / n_steps:.3g} zero-fill kernels/memsets per step "
                   f"({ms(gpu_us / n_steps)} of GPU time per step{share}): the gradients are kept and zero-filled "
                   "(set_to_none=False) instead of being freed")
        loc = analysis.location(step=model.step_at(op.start), op=op)
        loc = replace(loc, source=refine_source(loc.source, analysis.path, _ZERO_GRAD))
        yield finding(self, message, loc,
                      fills_per_step=round(fills / n_steps, 2), fill_gpu_us_per_step=round(gpu_us / n_steps, 1))


class DeviceMemoryUnused(TraceRule):
    """Peak allocated memory far below the device's memory while the GPU is not saturated."""

    code = "TL302"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        m = analysis.metrics
        peak, total, busy = M.PEAK_MEMORY_BYTES.of(m), M.DEVICE_MEMORY_BYTES.of(m), M.GPU_BUSY_PCT.of(m)
        peak_pct = M.PEAK_MEMORY_PCT.of(m)
        if peak is None or not total or busy is None or peak_pct is None:
            return  # judged only with [memory] events (profile_memory=True) and a known device size
        if not analysis.has_steps or verdict.kind != CPU_BOUND:
            # A whole-trace window mixes in setup; an input-bound run needs proportionally more input for a larger
            # batch (the loader is the fix); a GPU-bound run is already saturated.
            return
        if peak_pct >= config.threshold("memory-unused-max-peak-pct") or \
                busy >= config.threshold("memory-unused-max-gpu-busy-pct"):
            return
        message = (f"peak device memory is {mib(peak)} of {mib(total)} ({pct(peak_pct)}) while the GPU is busy "
                   f"{pct(busy)} of the step window: a larger batch (or fewer accumulation micro-steps) would fit "
                   "and keep the GPU busier")
        yield finding(self, message, analysis.location(event="[memory]"), peak_memory_bytes=peak,
                      device_memory_bytes=total, gpu_busy_pct=busy)


_STEP_RE = re.compile(r"optimizer\.step\(|\.step\(")
# Kernels of the multi-tensor (foreach) and fused optimizer paths: torch's multi_tensor_apply_kernel (its fused Adam
# and SGD too), apex's, and fused kernels by name.
_MULTI_TENSOR = re.compile(r"multi_tensor|foreach|fused", re.I)


class OptimizerWithoutForeach(TraceRule):
    """Many kernels per step under ``Optimizer.step#*`` that are not multi-tensor or fused: the per-tensor loop."""

    code = "TL303"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        model = analysis.model
        steps_ops = _ops_in_steps(model, "Optimizer.step#")
        if not steps_ops:
            return
        seen: set[int] = set()  # an event launched under nested step ranges (a wrapper's and the optimizer's) once
        per_tensor, host_us, first = [], 0.0, None
        for op in steps_ops:
            work = [g for g in launched_under(analysis, op.tid, op.start, op.end)
                    if g.kind == KERNEL and id(g) not in seen]
            seen.update(map(id, work))
            single = [g for g in work if not _MULTI_TENSOR.search(g.name)]
            if single:
                per_tensor += single
                host_us += op.end - op.start
                first = first or op
        n_steps = len(model.steps) or 1
        per_step = len(per_tensor) / n_steps
        if per_step < config.threshold("optimizer-per-tensor-kernels-min-per-step"):
            return
        gpu_us = sum(g.end - g.start for g in per_tensor)
        message = (f"`{first.name}` launches {per_step:.0f} per-tensor kernels per step (mean "
                   f"{ms(gpu_us / len(per_tensor))} each, {ms(host_us / n_steps)} of host time in the step range per "
                   "step) and no multi-tensor kernel for them: the optimizer runs its for-loop implementation "
                   "(foreach=False, fused=False, or a torch before 2.0); use the default foreach path or fused=True")
        loc = analysis.location(step=model.step_at(first.start), op=first)
        loc = replace(loc, source=refine_source(loc.source, analysis.path, _STEP_RE))
        yield finding(self, message, loc, per_tensor_kernels_per_step=round(per_step, 1),
                      per_tensor_gpu_us_per_step=round(gpu_us / n_steps, 1),
                      optimizer_host_us_per_step=round(host_us / n_steps, 1))
