"""Verdicts and tool-level notes (TL0xx): no ProfilerStep spans (TL001), a truncated file (TL002), and the CI gate
(TL010): trace metrics checked against the limits the user set in [tool.tracelint.trace] / --threshold."""
from __future__ import annotations

from collections.abc import Iterable

from tracelint.engine import Config, Finding, TraceLocation
from tracelint.engine import metrics as M
from tracelint.trace.device_analysis import TraceAnalysis
from tracelint.trace.recording import step_ms
from tracelint.trace.rule import TraceRule
from tracelint.trace.rules._common import finding
from tracelint.trace.verdict import Verdict


class TraceWithoutSteps(TraceRule):
    code = "TL001"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        model = analysis.model
        if analysis.has_steps or not (model.ops or model.gpu):
            return
        yield finding(self, "the trace has no ProfilerStep#N spans (profiled without schedule= / prof.step()): the "
                      "whole trace, setup and warm-up included, is analysed as one step",
                      TraceLocation(analysis.path, rank=analysis.rank))


class TraceTruncated(TraceRule):
    code = "TL002"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        if not analysis.truncated:
            return
        note = next((w for w in analysis.warnings if "trunc" in w or "end" in w), None)
        steps = len(analysis.model.steps)
        kept = f"{steps} complete step{'s' if steps != 1 else ''} read" if steps else "no complete step read"
        yield finding(self, f"the trace file ends early{f' ({note})' if note else ''}; {kept}, the report covers the "
                      "events before the cut", TraceLocation(analysis.path, rank=analysis.rank))


def _idle_pct(m: dict) -> float | None:
    busy = M.GPU_BUSY_PCT.of(m)
    return None if busy is None else round(100.0 - busy, 2)


def _step_ms(m: dict) -> float | None:
    spans = [v for v in (M.STEP_CPU_US_MEAN.of(m), M.STEP_GPU_SPAN_US_MEAN.of(m)) if v is not None]
    return round(max(spans) / 1000.0, 3) if spans else None


# The gate metrics that are not stored in a report, from the ones that are (definitions: tracelint.engine.metrics).
_DERIVED = {M.GPU_IDLE_PCT.name: _idle_pct, M.STEP_MS.name: _step_ms}
_UNIT_TEXT = {"pct": " %", "ms": " ms", "us": " µs"}


class TraceThresholdBreach(TraceRule):
    """Every metric of the registry with a ``gate`` key, checked when the user sets that key."""

    code = "TL010"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        m = analysis.metrics
        devices = {g.device for g in analysis.model.gpu}
        on = f" on device {analysis.device}" if len(devices) > 1 and analysis.device is not None else ""
        for metric in M.gates():
            limit = config.threshold(metric.gate)
            if limit is None:
                continue  # a gate is only checked when the user sets it
            derive = _DERIVED.get(metric.name)
            value = derive(m) if derive else metric.of(m)
            if value is None:
                continue  # nothing to measure (no GPU work, no matmuls, ...)
            upper = metric.gate.startswith("max-")
            if (value > limit) if upper else (value < limit):
                side = "above" if upper else "below"
                unit = _UNIT_TEXT.get(metric.unit, "")
                message = f"{metric.name} is {value:g}{unit}{on}, {side} the limit {metric.gate} = {limit:g}"
                yield finding(self, message, TraceLocation(analysis.path, rank=analysis.rank, event=metric.name),
                              metric=metric.name, value=value, limit=limit)


# A step whose kernels are mostly launched by compiled code (Inductor's generated wrapper) is slowed by with_stack far
# more than eager code: 3.2-6x against 1.5-2.3x on the project's GPT steps (bench/tl003_calibration.py), and the
# host time between its launches is spent in that wrapper's Python, which the idle causes count as `other`.
COMPILED_LAUNCH_MIN_PCT = 50.0


class ProfilerOverhead(TraceRule):
    """The verdict may describe the profiler rather than the run: measured (tracelint.profile's record of the
    unprofiled step) or, without that record, estimated from the host and GPU time per kernel, with a limit of its own
    for compiled code."""

    code = "TL003"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        m = analysis.metrics
        recording = analysis.recording
        heavy = ", ".join(recording.heavy) or "its default settings"
        loc = TraceLocation(analysis.path, rank=analysis.rank)
        inflation, unprofiled = M.PROFILER_INFLATION.of(m), M.UNPROFILED_STEP_MS.of(m)
        if inflation is not None and unprofiled is not None:
            if inflation < config.threshold("profiler-inflation-limit"):
                return
            profiled = unprofiled * inflation
            if verdict.evidence.startswith(f"{verdict.kind}: when not profiled,"):
                then = (f"the verdict follows the unprofiled run ({verdict.kind}); the host-side figures of this "
                        "trace (idle causes, launch overhead) describe the profiler's cost as much as the run")
            else:
                then = f"the verdict ({verdict.kind}) holds without the profiler too"
            yield finding(self, f"the profiler inflated the step {inflation:.1f}× ({profiled:.1f} ms profiled, "
                          f"{unprofiled:.1f} ms not, measured by tracelint.profile; recorded with {heavy}): {then}",
                          loc, profiler_inflation=inflation, unprofiled_step_ms=unprofiled,
                          profiled_step_ms=round(profiled, 1), settings=recording.heavy)
            return
        profiled = step_ms(m)
        if unprofiled is not None and profiled:  # a record, and no inflation from it: the timed steps were slower
            why = ("the timed steps held work the recorded ones did not (start-up, a changing workload)"
                   if profiled < 0.9 * unprofiled else "recording cost nothing that shows")
            yield finding(self, f"the profiler's cost is not measurable here: the steps timed without it took "
                          f"{unprofiled:.1f} ms, the profiled ones {profiled:.1f} ms (tracelint.profile; recorded "
                          f"with {heavy}): {why}; the verdict ({verdict.kind}) is the trace's alone", loc,
                          unprofiled_step_ms=unprofiled, profiled_step_ms=round(profiled, 1), settings=recording.heavy)
            return
        # Without the record: a host-bound verdict on a trace recorded with the host-slowing settings is at risk
        # when the host spends little more time per kernel than the GPU runs one.
        if verdict.kind != "cpu-bound" or not recording.heavy or not analysis.has_steps:
            return
        per_step, mean_us = M.KERNELS_PER_STEP.of(m), M.MEAN_KERNEL_US.of(m)
        step = M.STEP_CPU_US_MEAN.of(m)
        compiled = (M.COMPILED_LAUNCH_PCT.of(m) or 0.0) >= COMPILED_LAUNCH_MIN_PCT
        causes = ("launch_overhead", "short_gap", "other") if compiled else ("launch_overhead", "short_gap")
        host_share = sum(M.IDLE_PCT[cause].of(m) or 0.0 for cause in causes)
        if not per_step or not mean_us or not step or host_share < 50.0:
            return
        host_us = step / per_step
        ratio = host_us / mean_us
        key = "profiler-risk-max-host-gpu-ratio" + ("-compiled" if compiled else "")
        if ratio >= config.threshold(key):
            return
        slows = ("slow compiled code's host 3-6× (Inductor's wrapper, measured on compiled GPT-2 steps)" if compiled
                 else "commonly slow the host 1.5-4×")
        yield finding(self, f"the cpu-bound verdict may be the profiler's: the host spends {host_us:.0f} µs per kernel "
                      f"launched against {mean_us:.0f} µs of GPU time per kernel ({ratio:.1f}×), and {heavy} {slows}; "
                      "to check, profile with tracelint.profile(...), which times the steps it does not record, or "
                      "again without with_stack", loc, host_us_per_kernel=round(host_us, 1), mean_kernel_us=mean_us,
                      host_gpu_ratio=round(ratio, 2), settings=recording.heavy,
                      **({"compiled": True} if compiled else {}))
