"""The verdict of one device: what bounds the step, in one word and one line of evidence.

Decision rule, over the metrics of tracelint.trace.metrics (thresholds are config keys of [tool.tracelint.trace]):

1. ``unknown`` when there is nothing to judge: no GPU activity at all (a CPU-only trace, or a truncated one cut
   before its GPU events), GPU activity but none
   launched inside the profiled steps, or a GPU window of zero length.
2. ``gpu-bound`` when ``gpu_busy_pct`` >= ``gpu-bound-busy-pct`` (default 80): the device is the bottleneck;
   idle time under a fifth of the step is not worth a different verdict. On the project's H200 fixtures the
   GPU-bound runs read 94-100 % busy, and the run that loses 24 % of its step to one `.item()` per step reads 79 %.
   (The profiler itself slows the host, with_stack most, so host-caused idle time reads a little high.) When
   host-to-device copies fill at least 10 % of the busy time the evidence says so.
3. Otherwise the GPU waits on the host, and the idle split says on what:
   ``input-bound`` when ``idle_data_wait_pct`` >= ``input-bound-data-wait-pct`` (default 50) — the launching
   thread spent at least half of the GPU's idle time inside DataLoader ``__next__``;
   ``cpu-bound`` otherwise — the rest of the idle time is the host synchronizing, launching work, or running
   un-profiled Python; the evidence names the largest of those parts.

A trace without ProfilerStep spans is judged over the whole trace, and its evidence says so.
"""
from __future__ import annotations

from dataclasses import dataclass

from tracelint.engine import Config

INPUT_BOUND, CPU_BOUND, GPU_BOUND, UNKNOWN = "input-bound", "cpu-bound", "gpu-bound", "unknown"
DEFAULT_GPU_BOUND_BUSY_PCT = 80.0
DEFAULT_INPUT_BOUND_DATA_WAIT_PCT = 50.0

_HOST_CAUSES = {
    "host_sync": "the host waits in device synchronizations (.item(), .cpu(), synchronize)",
    "launch_overhead": "the host is busy running ops and launching kernels (launch/Python overhead)",
    "other": "the launching thread runs no profiled op (un-profiled Python or waiting)",
    "short_gap": "the gaps are shorter than {gap} µs each, between many small kernels",
}


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: str  # input-bound | cpu-bound | gpu-bound | unknown
    evidence: str  # one line, starting with the kind

    def __str__(self) -> str:
        return self.evidence


def _f(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def decide(metrics: dict, config: Config | None = None, *, cpu_only: bool = False, min_gap_us: float = 5.0,
           truncated: bool = False) -> Verdict:
    """The verdict of one device's metrics (see the module docstring for the rule)."""
    config = config or Config()
    busy_limit = config.threshold("gpu-bound-busy-pct", DEFAULT_GPU_BOUND_BUSY_PCT)
    data_limit = config.threshold("input-bound-data-wait-pct", DEFAULT_INPUT_BOUND_DATA_WAIT_PCT)
    where = "of the step window" if metrics.get("has_steps") else "of the trace (no ProfilerStep: whole trace analysed)"

    if cpu_only or not metrics.get("gpu_events"):
        if truncated:  # Kineto writes the CPU events first: a cut file may simply end before the GPU ones
            return Verdict(UNKNOWN, "unknown: no GPU activity in the part of the trace before the cut (truncated file)")
        return Verdict(UNKNOWN, "unknown: no GPU activity in the trace (CPU-only profile)")
    busy = metrics.get("gpu_busy_pct")
    if busy is None or not metrics.get("gpu_window_us"):
        return Verdict(UNKNOWN, "unknown: no GPU activity launched inside the profiled steps")
    if busy >= busy_limit:
        extra = ""
        mm = metrics.get("matmul_time_us") or 0.0
        kernel_time = metrics.get("kernel_time_us") or 0.0
        if kernel_time and mm:
            extra = f"; matmul/conv kernels take {_f(100.0 * mm / kernel_time)}% of kernel time"
        h2d = metrics.get("h2d_pct_of_gpu_busy") or 0.0
        if h2d >= 10.0:
            pageable = (metrics.get("h2d_pageable_bytes") or 0) > (metrics.get("h2d_pinned_bytes") or 0)
            extra += f"; host-to-device copies{' from pageable memory' if pageable else ''} fill {_f(h2d)}% of the busy time"
        return Verdict(GPU_BOUND, f"gpu-bound: GPU busy {_f(busy)}% {where}{extra}")
    idle = 100.0 - busy
    data = metrics.get("idle_data_wait_pct") or 0.0
    if data >= data_limit:
        return Verdict(INPUT_BOUND, f"input-bound: GPU idle {_f(idle)}% {where}; {_f(data)}% of that idle time "
                                    "the main thread waits in DataLoader.__next__")
    cause = max(_HOST_CAUSES, key=lambda c: metrics.get(f"idle_{c}_pct") or 0.0)
    share = metrics.get(f"idle_{cause}_pct") or 0.0
    text = _HOST_CAUSES[cause].format(gap=_f(min_gap_us))
    tail = ""
    if cause in ("launch_overhead", "short_gap") and metrics.get("kernels_per_step"):
        tail = f" ({metrics['kernels_per_step']:.0f} kernels per step, mean {metrics.get('mean_kernel_us') or 0:.1f} µs)"
    return Verdict(CPU_BOUND, f"cpu-bound: GPU idle {_f(idle)}% {where}; {_f(share)}% of that idle time {text}{tail}")
