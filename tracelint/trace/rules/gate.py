"""The CI gate (TL010): trace metrics checked against limits the user set in [tool.tracelint.trace] / --threshold."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from tracelint.engine import Config, Finding, TraceLocation
from tracelint.trace.metrics import TraceAnalysis
from tracelint.trace.rule import TraceRule
from tracelint.trace.rules._common import finding


def _idle_pct(m: dict) -> float | None:
    busy = m.get("gpu_busy_pct")
    return None if busy is None else round(100.0 - busy, 2)


def _step_ms(m: dict) -> float | None:
    # The step time is the longer of the host's ProfilerStep span and the GPU span of the work it launched: a
    # GPU-bound run's host runs ahead of the GPU, an input-bound run's GPU finishes early.
    spans = [v for v in (m.get("step_cpu_us_mean"), m.get("step_gpu_span_us_mean")) if v is not None]
    return round(max(spans) / 1000.0, 3) if spans else None


class Gate(NamedTuple):
    key: str
    metric: str
    value: Callable[[dict], float | None]
    upper: bool  # True: the limit is a maximum
    unit: str


GATES = (
    Gate("min-gpu-busy-pct", "gpu_busy_pct", lambda m: m.get("gpu_busy_pct"), False, " %"),
    Gate("max-idle-pct", "gpu_idle_pct", _idle_pct, True, " %"),
    Gate("max-h2d-pct-of-gpu-busy", "h2d_pct_of_gpu_busy", lambda m: m.get("h2d_pct_of_gpu_busy"), True, " %"),
    Gate("min-matmul-tensor-core-pct", "matmul_tensor_core_pct", lambda m: m.get("matmul_tensor_core_pct"), False,
         " %"),
    Gate("max-step-ms", "step_ms", _step_ms, True, " ms"),
    Gate("max-syncs-per-step", "host_syncs_per_step", lambda m: m.get("host_syncs_per_step"), True, ""),
    Gate("max-kernels-per-step", "kernels_per_step", lambda m: m.get("kernels_per_step"), True, ""),
)


class ThresholdBreach(TraceRule):
    code = "TL010"

    def check(self, analysis: TraceAnalysis, config: Config) -> Iterable[Finding]:
        if config is None:
            return
        m = analysis.metrics
        devices = {g.device for g in analysis.model.gpu}
        on = f" on device {analysis.device}" if len(devices) > 1 and analysis.device is not None else ""
        for gate in GATES:
            limit = config.threshold(gate.key)
            if limit is None:
                continue  # a gate is only checked when the user sets it
            value = gate.value(m)
            if value is None:
                continue  # nothing to measure (no GPU work, no matmuls, ...)
            if (value > limit) if gate.upper else (value < limit):
                side = "above" if gate.upper else "below"
                message = (f"{gate.metric} is {value:g}{gate.unit}{on}, {side} the limit {gate.key} = {limit:g}")
                yield finding(self, message, TraceLocation(analysis.path, rank=analysis.rank, event=gate.metric),
                              metric=gate.metric, value=value, limit=limit)
