"""Debugging tools left on in training, seen in the trace: autograd's anomaly detection (TL701), blocking kernel
launches (``CUDA_LAUNCH_BLOCKING=1``, TL702).

With ``torch.autograd.set_detect_anomaly(True)`` (or inside ``detect_anomaly()``) the autograd engine checks every
gradient a backward node computes for NaN: inside each ``autograd::engine::evaluate_function: <Node>`` op it runs
``aten::isnan``, ``aten::_is_any_true`` and ``aten::item`` — a device-to-host copy and a stream synchronize per
checked output (torch 2.11 on an H200, torch 2.13 on a CPU). Anomaly mode also records a Python stack trace for every
op of the forward (``torch/fx/traceback.py: format_stack``); that runs inside the forward ops and the trace does not
itemize it. ``detect_anomaly(check_nan=False)`` runs no checks: this rule does not see it.

The checks' readbacks read as a user's ``.item()`` (TL101) and their host time as launch overhead (TL501): where
anomaly detection is on, this rule names it and explains those findings away (``TraceRule.explains``).

With ``CUDA_LAUNCH_BLOCKING=1`` every launch call returns only once the GPU has finished its work: the
``cudaLaunchKernel`` / ``cuLaunchKernel`` ends after its kernel ends (100 % of 148 launches per step on the project's
fixture, 2.8 µs after at least; never more than 2.7 % of a step's launches on any other trace the project holds).
The trace does not record the environment: this overlap is the evidence.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import replace
from typing import NamedTuple

from tracelint.engine import Config, Finding
from tracelint.engine import metrics as M
from tracelint.trace.device_analysis import TraceAnalysis
from tracelint.trace.model import MEMCPY, SYNC_CALLS, GpuEvent, Op, RuntimeCall
from tracelint.trace.rule import TraceRule
from tracelint.trace.rules._common import finding, in_few_steps, ms, pct, refine_source
from tracelint.trace.verdict import CPU_BOUND, Verdict

_NODE = "autograd::engine::evaluate_function: "
_ANY = "aten::_is_any_true"  # at::isnan(output)._is_any_true().item<bool>() in the engine's NaN check
_SCAN = 400  # ops looked back for the node around a check (a node's own ops are few)
_SETTING = re.compile(r"detect_anomaly")


class AnomalyCheck(NamedTuple):
    """One NaN check of one backward node's output: ``isnan`` (when found) through ``item`` (when found)."""

    node: Op
    start: float
    end: float
    item: Op | None
    step: int


def anomaly_checks(analysis: TraceAnalysis) -> list[AnomalyCheck]:
    """The anomaly-mode NaN checks inside the steps, on every host thread (computed once per analysis)."""
    return analysis.memo("anomaly-checks", _anomaly_checks)


def _anomaly_checks(analysis: TraceAnalysis) -> list[AnomalyCheck]:
    model = analysis.model
    if _ANY not in model.op_names():
        return []
    checks = []
    for _tid, (_starts, ops) in model.ops_by_tid.items():
        for i, op in enumerate(ops):
            if op.name != _ANY or (step := model.step_at(op.start)) is None:
                continue
            node = next((o for o in reversed(ops[max(0, i - _SCAN):i])
                         if o.name.startswith(_NODE) and o.end >= op.end), None)
            if node is None:
                continue  # not autograd's own check (a user's torch._is_any_true)
            isnan = next((o for o in reversed(ops[max(0, i - 8):i]) if o.name == "aten::isnan"
                          and o.start >= node.start), None)
            item = next((o for o in ops[i + 1:i + 8] if o.name == "aten::item" and o.end <= node.end), None)
            checks.append(AnomalyCheck(node, (isnan or op).start, (item or op).end, item, step))
    checks.sort(key=lambda c: c.start)
    return checks


def _stalls_and_idle(analysis: TraceAnalysis, checks: list[AnomalyCheck]) -> tuple[float, float]:
    """The host's time blocked in the checks' synchronizations, and the GPU idle time of the gaps (charged to a host
    sync) that open during one of them: the GPU drained its queue and waits for the host's next launch."""
    calls: dict[object, tuple[list[float], list]] = {}
    for call in analysis.model.runtime:
        if call.name in SYNC_CALLS:
            starts, items = calls.setdefault(call.tid, ([], []))
            starts.append(call.start)
            items.append(call)
    gaps: dict[object, tuple[list[float], list]] = {}
    for gap in analysis.gaps:
        if gap.cause == "host_sync":
            starts, items = gaps.setdefault(gap.tid, ([], []))
            starts.append(gap.start)
            items.append(gap)
    stall = idle = 0.0
    for check in checks:
        item = check.item
        if item is None:
            continue
        starts, items = calls.get(item.tid, ([], []))
        for call in items[bisect_right(starts, item.start - 1e-3):bisect_right(starts, item.end)]:
            stall += call.end - call.start
            g_starts, g_items = gaps.get(call.tid, ([], []))
            idle += sum(g.end - g.start for g in g_items[bisect_right(g_starts, call.start - 20.0):
                                                         bisect_right(g_starts, call.end + 20.0)])
    return stall, idle


class AutogradAnomalyDetection(TraceRule):
    code = "TL701"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        checks = anomaly_checks(analysis)
        if not checks:
            return
        model = analysis.model
        n_steps = len(model.steps) or 1
        steps = {c.step for c in checks}
        if in_few_steps(analysis, steps, config.threshold("anomaly-min-steps-pct")):
            return  # detect_anomaly() around one step of several: debugging, on purpose
        step_us = M.STEP_CPU_US_MEAN.of(analysis.metrics)
        host = sum(c.end - c.start for c in checks)
        stall, idle = _stalls_and_idle(analysis, checks)
        nodes = {c.node for c in checks}
        per_step = len(checks) / n_steps

        def of_step(us: float) -> str:
            return f" ({pct(100.0 * us / n_steps / step_us)} of the step)" if step_us else ""

        if verdict.kind == CPU_BOUND:
            floor, basis = host - stall, "their host time, less the waits, on this host-bound step"
        else:
            floor, basis = idle, "the GPU idle behind their syncs"
        message = (f"autograd anomaly detection is on: the backward checks each gradient for NaN, {per_step:.0f} "
                   f"checks per step in {len(nodes) / n_steps:.0f} backward nodes (isnan, any and a readback: a "
                   f"device sync each), and each forward op records a Python stack trace. The checks take "
                   f"{ms(host / n_steps)} of host time per step{of_step(host)} and the GPU idles "
                   f"{ms(idle / n_steps)} per step behind their syncs. Turn it off outside debugging "
                   "(`torch.autograd.set_detect_anomaly(False)`, no `detect_anomaly()` around the step): the step "
                   f"sheds at least {ms(floor / n_steps)}{of_step(floor)}, {basis}, plus the stack capture of "
                   "every forward op, which the trace does not itemize (on the project's MLP fixture, checks at 17 % "
                   "of the profiled step, the step went from 5.3 to 2.2 ms, 2.4x)")
        first = checks[0]
        loc = analysis.location(step=first.step, op=first.node)
        main = model.main_tid
        if main is not None:  # the backward runs on autograd's thread; the setting is in the training code
            source = analysis.source_at(main, first.start)
            loc = replace(loc, source=refine_source(source, analysis.path, _SETTING) or loc.source)
        yield finding(self, message, loc, nan_checks_per_step=round(per_step, 1),
                      check_host_us_per_step=round(host / n_steps, 1),
                      check_stall_us_per_step=round(stall / n_steps, 1),
                      gpu_idle_us_per_step=round(idle / n_steps, 1),
                      estimated_saving_us_per_step=round(floor / n_steps, 1))

    def explains(self, analysis: TraceAnalysis, finding: Finding) -> bool:
        """TL501: the launch-bound reading is anomaly mode's host work. TL101 (or another readback rule) at an
        ``aten::item`` of a check, with no more readbacks per step than there are checks: those are the checks."""
        if finding.code == "TL501":
            return True
        loc = finding.location
        start = getattr(loc, "start_us", None)
        if start is None or getattr(loc, "event", None) != "aten::item":
            return False
        checks = anomaly_checks(analysis)
        items = [c.item for c in checks if c.item is not None]
        if not any(item.start <= start <= item.end for item in items):
            return False
        n_steps = len(analysis.model.steps) or 1
        return dict(finding.details).get("syncs_per_step", 0.0) <= len(items) / n_steps + 1e-6


class BlockingLaunch(NamedTuple):
    """A launch call in the steps and the GPU work it launched; ``blocks`` when the call ends after all of it."""

    call: RuntimeCall
    work: tuple[GpuEvent, ...]
    step: int

    @property
    def blocks(self) -> bool:
        return self.call.end >= max(g.end for g in self.work)

    @property
    def wait_us(self) -> float:
        """The host's time in the call after the GPU started the work: what it would not wait with a queued launch."""
        return max(0.0, self.call.end - min(g.start for g in self.work)) if self.blocks else 0.0


def launches_in_steps(analysis: TraceAnalysis) -> list[BlockingLaunch]:
    """The kernel and memset launches of the analysed device inside the steps. Copies are left out: a copy from or
    to pageable memory blocks the host whatever the setting (TL202, the readbacks of TL1xx)."""
    work: dict[RuntimeCall, list[GpuEvent]] = {}
    for g in analysis.gpu_events:
        if g.launch is not None and g.step is not None and g.kind != MEMCPY:
            work.setdefault(g.launch, []).append(g)
    return [BlockingLaunch(call, tuple(events), events[0].step) for call, events in work.items()]


class CudaLaunchBlocking(TraceRule):
    code = "TL702"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        launches = launches_in_steps(analysis)
        n_steps = len(analysis.model.steps) or 1
        blocking = [launch for launch in launches if launch.blocks]
        if (not launches or len(launches) / n_steps < config.threshold("launch-blocking-min-launches-per-step")
                or 100.0 * len(blocking) / len(launches) < config.threshold("launch-blocking-min-pct")):
            return
        m = analysis.metrics
        step_us = M.STEP_CPU_US_MEAN.of(m)
        busy, idle = (M.GPU_BUSY_US.of(m) or 0.0) / n_steps, (M.GPU_IDLE_US.of(m) or 0.0) / n_steps
        wait = sum(launch.wait_us for launch in blocking) / n_steps
        share = 100.0 * len(blocking) / len(launches)
        message = (f"kernel launches block (CUDA_LAUNCH_BLOCKING=1, or a debugger that sets it): "
                   f"{len(blocking) / n_steps:.0f} of {len(launches) / n_steps:.0f} launches per step ({pct(share)}) "
                   "return only after the GPU has finished their work, where a queued launch returns before its "
                   "kernel starts. The GPU never has more than one kernel queued and idles "
                   f"{ms(idle)} per step between kernels while the host prepares the next launch; the host waits "
                   f"{ms(wait)} per step inside the launch calls for kernels already running. Unset it outside "
                   "debugging (`os.environ[\"CUDA_LAUNCH_BLOCKING\"]` in the script, or the job's environment)")
        saving = None
        if step_us:
            estimate = max(step_us - wait, busy)
            saving = step_us - estimate
            message += (f": with the launches queued, the step can approach max(host time less those waits "
                        f"{ms(step_us - wait)}, GPU busy {ms(busy)}) = {ms(estimate)} against the profiled "
                        f"{ms(step_us)}, at least {ms(saving)} ({pct(100.0 * saving / step_us)}) per step. An "
                        "estimate that counts only the waits: blocking launches slow the host's other work too, which "
                        "the trace does not separate (the project's MLP fixture went from 7.75 to 3.99 ms per step "
                        "unprofiled, 1.94x, with an estimate of 9 %)")
        first = blocking[0]
        loc = analysis.location(step=first.step, start=first.call.start, end=first.call.end, event=first.call.name,
                                tid=first.call.tid)
        yield finding(self, message, loc, blocking_launches_per_step=round(len(blocking) / n_steps, 1),
                      launches_per_step=round(len(launches) / n_steps, 1), blocking_pct=round(share, 1),
                      launch_wait_us_per_step=round(wait, 1), gpu_idle_us_per_step=round(idle, 1),
                      gpu_busy_us_per_step=round(busy, 1),
                      estimated_saving_us_per_step=None if saving is None else round(saving, 1))

    def explains(self, analysis: TraceAnalysis, finding: Finding) -> bool:
        """TL501: the GPU idles between kernels because each launch waits for the last kernel, not because launching
        is slow. The setting adds no synchronize calls to the trace, so no sync finding is its symptom."""
        return finding.code == "TL501"
