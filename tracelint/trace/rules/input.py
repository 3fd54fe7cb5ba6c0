"""The input pipeline seen from the trace: an input-bound step (TL201's twin) and pageable host-to-device copies
(TL202's twin)."""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from tracelint.engine import Config, Finding
from tracelint.engine import metrics as M
from tracelint.trace.metrics import TraceAnalysis, is_dataloader_next
from tracelint.trace.model import H2D, PAGEABLE
from tracelint.trace.rule import TraceRule
from tracelint.trace.rules._common import finding, mib, ms, pct, refine_source
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
        loc = replace(loc, source=refine_source(loc.source, analysis.path, _LOOP, config.root if config else None))
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
            loc = replace(loc, source=refine_source(source, analysis.path, _TO_DEVICE, config.root if config else None))
        yield finding(self, message, loc, pageable_copies_per_step=round(len(copies) / n_steps, 2),
                      pageable_bytes_per_step=round(nbytes / n_steps), pageable_pct_of_window=round(share, 2))
