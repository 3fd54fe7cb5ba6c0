"""The input pipeline seen from the trace: an input-bound step (TL201's twin), pageable host-to-device copies
(TL202's twin), and tensors filled on the host then copied to the device every step (TL204's twin)."""
from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from tracelint.engine import Config, Finding
from tracelint.engine import metrics as M
from tracelint.trace.device_analysis import TraceAnalysis
from tracelint.trace.device_metrics import is_dataloader_next
from tracelint.trace.model import H2D, PAGEABLE, GpuEvent, Op
from tracelint.trace.rule import TraceRule
from tracelint.trace.rules._common import finding, in_few_steps, mib, ms, pct, refine_source
from tracelint.trace.rules.sync import enclosing_ops
from tracelint.trace.verdict import Verdict

_TO_DEVICE = re.compile(r"\.to\(|\.cuda\(")
_LOOP = re.compile(r"^\s*for .* in |next\(")


class DataloaderWithoutWorkers(TraceRule):
    """The GPU idles while the launching thread waits in DataLoader ``__next__`` (metrics' ``idle_data_wait``)."""

    code = "TL201"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        m = analysis.metrics
        busy, data_pct = M.GPU_BUSY_PCT.of(m), M.IDLE_PCT["data_wait"].of(m)
        if busy is None or data_pct is None:
            return
        idle_pct = 100.0 - busy
        if data_pct < config.threshold("dataloader-min-wait-pct") or \
                idle_pct < config.threshold("dataloader-min-gpu-idle-pct"):
            return
        model = analysis.model
        waits = [o for o in model.ops_on(model.main_tid)[1] if is_dataloader_next(o.name) and
                 model.step_at(o.start) is not None]
        if not waits:
            return
        n_steps = len(model.steps) or 1
        per_step = sum(o.end - o.start for o in waits) / n_steps
        longest = max(waits, key=lambda o: o.end - o.start)
        if "SingleProcess" in longest.name:
            why = "the DataLoader loads and collates every batch in the training process (num_workers=0)"
        else:
            why = "the DataLoader's worker processes do not keep up (more workers, cheaper transforms, caching)"
        message = (f"input-bound: the GPU is idle {pct(idle_pct)} of the step window, and for {pct(data_pct)} of "
                   f"that idle time the main thread waits in `{longest.name}` ({ms(per_step)} per step): {why}")
        loc = analysis.location(step=model.step_at(longest.start), op=longest)
        loc = replace(loc, source=refine_source(loc.source, analysis.path, _LOOP))
        yield finding(self, message, loc, gpu_idle_pct=round(idle_pct, 2), data_wait_pct_of_idle=data_pct,
                      data_wait_us_per_step=round(per_step, 1))


class DataloaderWithoutPinnedMemory(TraceRule):
    """Host-to-device copies from pageable memory: staged through a driver buffer and synchronous to the host."""

    code = "TL202"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        m = analysis.metrics
        window = M.GPU_WINDOW_US.of(m)
        copies = [g for g in analysis.gpu_events if g.step is not None and g.direction == H2D
                  and g.host_memory == PAGEABLE]
        if not copies or not window or not analysis.has_steps:
            return  # without steps, the model's one-time upload (module.to(device)) would count as input
        n_steps = len(analysis.model.steps) or 1
        time_us = sum(g.end - g.start for g in copies)
        nbytes = sum(g.bytes or 0 for g in copies)
        share = 100.0 * time_us / window
        if share < config.threshold("pageable-h2d-min-pct"):
            return
        biggest = max(copies, key=lambda g: g.end - g.start)
        gbps = (biggest.bytes or 0) / (biggest.end - biggest.start) / 1e3 if biggest.end > biggest.start else None
        rate = f", {gbps:.1f} GB/s" if gbps else ""
        message = (f"{len(copies) / n_steps:.3g} host-to-device copies per step come from pageable memory "
                   f"({mib(nbytes / n_steps)} and {ms(time_us / n_steps)} per step, {pct(share)} of the GPU window"
                   f"{rate} for the largest): each one is staged by the driver and blocks the host; use "
                   "pin_memory=True and .to(device, non_blocking=True)")
        loc = analysis.location(step=biggest.step, start=biggest.start, end=biggest.end, event=biggest.name)
        if biggest.launch is not None:
            source = analysis.source_at(biggest.launch.tid, biggest.launch.start)
            loc = replace(loc, source=refine_source(source, analysis.path, _TO_DEVICE))
        yield finding(self, message, loc, pageable_copies_per_step=round(len(copies) / n_steps, 2),
                      pageable_bytes_per_step=round(nbytes / n_steps), pageable_pct_of_window=round(share, 2))


# Creation ops that fill a tensor where it is made (what ``torch.zeros(...)`` and friends record), and the copy ops
# that ``.cuda()`` / ``.to(device)`` record (outermost first in a trace: aten::to > aten::_to_copy > aten::copy_).
_CREATION_OPS = frozenset(f"aten::{name}" for name in (
    "zeros", "ones", "empty", "full", "arange", "eye", "linspace", "logspace", "randn", "rand", "randint",
    "randperm", "normal"))
_COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_", "aten::cuda"})
_RIGHT_AFTER_US = 50.0  # Python between ``torch.zeros(...)`` returning and ``.cuda()`` starting
_SCAN = 64  # ops looked at before the copy (the creation op and its children are the nearest)
_CREATION_CALL = re.compile(r"torch\.(?:" + "|".join(n.split("::")[1] for n in sorted(_CREATION_OPS)) + r")\(")


@dataclass(slots=True)
class _BuiltOnHost:
    """Host-built tensors copied to the device at one place: a source line, or the creation op's name."""

    creation: Op
    copy: Op
    first: GpuEvent
    count: int = 0
    nbytes: int = 0
    copy_us: float = 0.0
    host_us: float = 0.0  # the copy ops' host time: the copy and the wait for the GPU it blocks on
    steps: set = field(default_factory=set)
    copies: set = field(default_factory=set)  # the copy ops counted (one op may launch several copies)


class TensorBuiltOnHost(TraceRule):
    """A host-to-device copy whose copy op starts right after a creation op on the same thread (the op before it at
    its level is ``aten::zeros`` / ``aten::arange`` / ``aten::randn`` ..., which launched nothing), in at least
    ``host-built-min-steps-pct`` percent of the steps, when the copy ops' host time (the copy and the wait it blocks
    on) is at least ``host-built-min-step-pct`` percent of the step: a 4 µs copy of a few bytes is not worth a
    warning."""

    code = "TL204"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        if not analysis.has_steps:
            return  # without steps, tensors built once (buffers, a mask) would look like a per-step pattern
        sites: dict[tuple, _BuiltOnHost] = {}
        for g in analysis.gpu_events:
            if g.step is None or g.direction != H2D or g.launch is None:
                continue
            chain = [o for o in enclosing_ops(analysis, g.launch.tid, g.launch.start) if o.name in _COPY_OPS]
            if not chain:
                continue
            copy = chain[-1]  # the outermost: what the user called
            creation = _op_before(analysis, copy)
            if creation is None or creation.name not in _CREATION_OPS:
                continue
            source = analysis.source_at(copy.tid, copy.start, copy)
            key = (source.path, source.line) if source else (creation.name,)
            site = sites.get(key)
            if site is None:
                site = sites[key] = _BuiltOnHost(creation, copy, g)
            site.count += 1
            site.nbytes += g.bytes or 0
            site.copy_us += g.end - g.start
            if id(copy) not in site.copies:
                site.copies.add(id(copy))
                site.host_us += copy.end - copy.start
            site.steps.add(g.step)
        n_steps = len(analysis.model.steps) or 1
        step_us = M.STEP_CPU_US_MEAN.of(analysis.metrics) or 0.0
        for site in sites.values():
            if in_few_steps(analysis, site.steps, config.threshold("host-built-min-steps-pct")):
                continue
            if not step_us or 100.0 * site.host_us / n_steps / step_us < config.threshold("host-built-min-step-pct"):
                continue
            per_step, nbytes, copy_us = site.count / n_steps, site.nbytes / n_steps, site.copy_us / n_steps
            message = (f"`{site.creation.name}` fills a tensor on the host and `{site.copy.name}` copies it to the "
                       f"device right after, in {len(site.steps)} of {n_steps} steps ({mib(nbytes)} and "
                       f"{ms(copy_us)} of copy per step): a blocking copy that waits for the GPU each time; create "
                       "the tensor on the device (device=)")
            loc = analysis.location(step=site.first.step, op=site.copy)
            source = refine_source(loc.source, analysis.path, _CREATION_CALL)
            loc = replace(loc, event=site.creation.name, source=source)
            yield finding(self, message, loc, op=site.creation.name, copies_per_step=round(per_step, 2),
                          bytes_per_step=round(nbytes), copy_us_per_step=round(copy_us, 1),
                          host_pct_of_step=round(100.0 * site.host_us / n_steps / step_us, 2),
                          steps_with_copy=len(site.steps), steps=n_steps)


def _op_before(analysis: TraceAnalysis, op: Op) -> Op | None:
    """The op that ended last before ``op`` started on its thread, at its level (an enclosing op is skipped; of a
    creation op and its children, which end together, the outermost), if it ended right before."""
    starts, ops = analysis.model.ops_on(op.tid)
    best: Op | None = None
    hi = bisect_left(starts, op.start)
    for j in range(hi - 1, max(-1, hi - 1 - _SCAN), -1):
        other = ops[j]
        if other.end > op.start:
            continue  # it encloses ``op``
        if best is None or other.end > best.end or (other.end == best.end and other.start < best.start):
            best = other  # later, or a parent of the best so far
    return best if best is not None and op.start - best.end <= _RIGHT_AFTER_US else None
