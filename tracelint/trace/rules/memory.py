"""Optimizer and memory: zero-filled gradients every step (TL301's twin), device memory left unused (TL302), an
optimizer step of per-tensor kernels (TL303's twin), and the memory timeline's findings (issue #40): the caching
allocator going to the driver every step (TL305's twin), memory that grows every step (TL306's twin) and a peak
near the device's capacity (TL309)."""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from tracelint.engine import Config, Finding, SourceLocation
from tracelint.engine import metrics as M
from tracelint.trace.device_analysis import TraceAnalysis
from tracelint.trace.memory import DEVICE_FREES, OPTIMIZER, OTHER, memory_of
from tracelint.trace.model import KERNEL
from tracelint.trace.recording import unprofiled_memory
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


# -- issue #40: the memory timeline's findings (tracelint.trace.memory) ------------------------------------------------

_KEEPS = re.compile(r"\.(append|extend|insert)\(|\+=")  # statements that keep a value past the step


def _unprofiled(analysis: TraceAnalysis) -> dict:
    return unprofiled_memory(analysis.model) or {}


def _times(n: float) -> str:
    return "once" if n == 1 else f"{n:.3g} times"


class GraphKeptAcrossSteps(TraceRule):
    """Device memory allocated that grows by a steady amount every profiled step (TL306's trace twin)."""

    code = "TL306"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        mem = memory_of(analysis)
        at, growth = mem.allocated_at_steps, mem.growth_bytes_per_step
        if growth is None or len(at) < 3:
            return
        deltas = [b - a for a, b in zip(at, at[1:], strict=False)]
        if growth < config.threshold("memory-growth-min-mib-per-step") * 2**20 or min(deltas) < 0.5 * growth:
            return  # too little, or not every step: a cache filling once, a batch of another shape
        unprofiled = _unprofiled(analysis).get("growth_mib_per_step")
        rate = unprofiled * 2**20 if unprofiled is not None and unprofiled > 0 else growth
        total = M.DEVICE_MEMORY_BYTES.of(analysis.metrics)
        full = ""
        if total and total > at[-1]:
            full = (f": at this rate the device's {mib(total)} is full after ~{int((total - at[-1]) / rate):,} more "
                    "steps (an out-of-memory error)")
        truth = f", {mib(rate)} per step without the profiler (tracelint.profile)" if unprofiled is not None else ""
        site, where, source = (mem.sites[0] if mem.sites else None), "", None
        if site is not None:
            if site.file and site.line:
                # a frame that started before the profiler names the line it stood on then: the statement that
                # keeps the tensors is looked for in its function
                source = refine_source(SourceLocation(site.file, site.line), analysis.path, _KEEPS, only_one=True)
            frame = f" under {source.path}:{source.line}" if source is not None else ""
            where = (f"; of what the steps allocate and never free ({mib(mem.unfreed_bytes_per_step)} per step), "
                     f"{mib(site.bytes_per_step)} per step is allocated in `{site.op or '?'}`{frame}")
        message = (f"device memory grows {mib(growth)} every step ({mib(at[0])} → {mib(at[-1])} allocated over "
                   f"{len(deltas)} steps){truth}{full}{where}: tensors kept across steps hold their autograd graphs "
                   "and activations; keep `.detach()`ed values (or Python numbers, after the loop), and run "
                   "evaluation under `torch.no_grad()`")
        loc = analysis.location(event="[memory]")
        if source is not None:
            loc = replace(loc, source=source)
        yield finding(self, message, loc, growth_bytes_per_step=round(growth), growth_steps=len(deltas),
                      unprofiled_growth_mib_per_step=None if unprofiled is None else round(unprofiled, 2),
                      unfreed_bytes_per_step=None if mem.unfreed_bytes_per_step is None
                      else round(mem.unfreed_bytes_per_step),
                      steps_until_full=int((total - at[-1]) / rate) if total and total > at[-1] else None)


class EmptyCacheInLoop(TraceRule):
    """The caching allocator giving memory back to the driver and taking it again inside the steps (TL305's trace
    twin): cudaFree / cudaMalloc every step, from torch.cuda.empty_cache() or a cache emptied to satisfy an
    allocation."""

    code = "TL305"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        mem = memory_of(analysis)
        if not mem.frees_per_step or not analysis.has_steps:
            return
        model, calls = analysis.model, mem.allocator_calls
        steps = {model.step_at(c.start) for c in calls if c.name in DEVICE_FREES}
        if in_few_steps(analysis, steps, config.threshold("allocator-churn-min-steps-pct")):
            return
        n_steps = len(model.steps)
        host_us = sum(c.end - c.start for c in calls) / n_steps
        first = min((c for c in calls if c.name in DEVICE_FREES), key=lambda c: c.start)
        cleared = mem.empty_cache_per_step
        cause = (f"torch.cuda.empty_cache() is called {_times(cleared)} per step: remove it from the loop (the "
                 "allocator reuses its cached blocks; empty_cache only helps another process on the same GPU)"
                 if cleared else
                 "the allocator empties its cache when an allocation does not fit (memory near capacity) or "
                 "torch.cuda.empty_cache() is called in the loop")
        message = (f"the caching allocator gives device memory back to the driver {_times(mem.frees_per_step)} per "
                   f"step and takes it again {_times(mem.mallocs_per_step)} (cudaFree / cudaMalloc: "
                   f"{ms(host_us)} of host time per step, each free a device synchronization): {cause}")
        yield finding(self, message, analysis.location(step=model.step_at(first.start), tid=first.tid,
                                                        start=first.start, end=first.end, event=first.name),
                      frees_per_step=round(mem.frees_per_step, 2), mallocs_per_step=round(mem.mallocs_per_step, 2),
                      empty_cache_per_step=None if cleared is None else round(cleared, 2),
                      churn_host_us_per_step=round(host_us, 1))


class MemoryNearCapacity(TraceRule):
    """The device's memory nearly full at the peak of the steps: allocated (or reserved by the caching allocator)
    within ``memory-near-capacity-pct`` of its capacity."""

    code = "TL309"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        mem = memory_of(analysis)
        total = M.DEVICE_MEMORY_BYTES.of(analysis.metrics)
        peak, reserved = mem.peak_allocated_bytes, mem.peak_reserved_bytes
        if not total or peak is None or not analysis.has_steps:
            return
        held = max(peak, reserved or 0)
        if 100.0 * held / total < config.threshold("memory-near-capacity-pct"):
            return
        unprofiled = _unprofiled(analysis).get("max_allocated_mib")
        truth = (f"; {pct(100.0 * unprofiled * 2**20 / total)} of the device when not profiled (tracelint.profile)"
                 if unprofiled is not None else "")
        phase = mem.peak_phase or OTHER
        where = f" in {phase}" + (f" (`{mem.peak_op}`)" if mem.peak_op else "")
        advice = ("the optimizer's state: keep it in a lower precision or 8-bit (bitsandbytes, torchao), or shard it "
                  "across ranks (FSDP, ZeRO)" if phase == OPTIMIZER else
                  "activations: activation checkpointing (torch.utils.checkpoint around blocks: a fraction of the "
                  "memory for recomputing the forward; on the project's fixture 88 % -> 35 % of an H200 for a 1.26x "
                  "longer step), or smaller micro-batches with gradient accumulation")
        held_words = f"{mib(peak)} allocated" + (f", {mib(reserved)} reserved" if reserved else "")
        message = (f"peak device memory {held_words} of {mib(total)} ({pct(100.0 * held / total)}){where}{truth}: "
                   "little margin is left, and a larger input, a longer sequence or a fragmented cache ends the run "
                   f"out of memory. What the peak holds is {advice}")
        loc = analysis.location(event="[memory]")
        if mem.peak is not None:
            loc = analysis.location(step=analysis.model.step_at(mem.peak.ts), tid=mem.peak.tid, start=mem.peak.ts,
                                    event=mem.peak_op or "[memory]")
        yield finding(self, message, loc, peak_memory_bytes=peak, peak_reserved_bytes=reserved,
                      device_memory_bytes=total, peak_pct=round(100.0 * held / total, 1), peak_phase=phase,
                      unprofiled_max_allocated_mib=unprofiled)
