"""Optimizer and memory: zero-filled gradients every step (TL301's twin) and device memory left unused (TL302)."""
from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import replace

from tracelint.engine import Config, Finding
from tracelint.engine import metrics as M
from tracelint.trace.metrics import TraceAnalysis
from tracelint.trace.model import GpuEvent
from tracelint.trace.rule import TraceRule
from tracelint.trace.rules._common import finding, mib, ms, pct, refine_source
from tracelint.trace.verdict import CPU_BOUND, Verdict

_ZERO_GRAD = re.compile(r"zero_grad\(")


def _launched_under(analysis: TraceAnalysis, tid: object, start: float, end: float,
                    index: dict[object, tuple[list[float], list[GpuEvent]]]) -> list[GpuEvent]:
    starts, events = index.get(tid, ([], []))
    return events[bisect_left(starts, start):bisect_right(starts, end)]


class ZeroGradKeepsGrads(TraceRule):
    """GPU work (fill kernels, memsets, ``_foreach_zero_``) launched inside ``Optimizer.zero_grad`` each step."""

    code = "TL301"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        model = analysis.model
        zero_grads = [o for o in model.ops if o.name.startswith("Optimizer.zero_grad") and
                      model.step_at(o.start) is not None]
        if not zero_grads:
            return
        index: dict[object, tuple[list[float], list[GpuEvent]]] = {}
        for g in sorted((g for g in analysis.gpu_events if g.launch is not None), key=lambda g: g.launch.start):
            starts, events = index.setdefault(g.launch.tid, ([], []))
            starts.append(g.launch.start)
            events.append(g)
        n_steps = len(model.steps) or 1
        steps, fills, gpu_us, first = set(), 0, 0.0, None
        for op in zero_grads:
            work = _launched_under(analysis, op.tid, op.start, op.end, index)
            if work:
                steps.add(model.step_at(op.start))
                fills += len(work)
                gpu_us += sum(g.end - g.start for g in work)
                first = first or (op, work[0])
        if not fills:
            return
        if analysis.has_steps and 100.0 * len(steps) / n_steps < config.threshold("zero-fill-min-steps-pct"):
            return
        op, work = first
        busy = M.GPU_BUSY_US.of(analysis.metrics)
        share = f", {pct(100.0 * gpu_us / busy)} of the GPU's busy time" if busy else ""
        message = (f"`{op.name}` launches {fills / n_steps:.3g} zero-fill kernels/memsets per step "
                   f"({ms(gpu_us / n_steps)} of GPU time per step{share}): the gradients are kept and zero-filled "
                   "(set_to_none=False) instead of being freed")
        loc = analysis.location(step=model.step_at(op.start), op=op)
        loc = replace(loc, source=refine_source(loc.source, analysis.path, _ZERO_GRAD, config.root if config else None))
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
