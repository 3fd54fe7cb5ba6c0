"""The timeline record of one device: what the HTML report charts beyond the metrics, bounded in size.

``timeline_of(analysis)`` reduces a TraceAnalysis to plain data whose size does not grow with the trace: the GPU
window cut into at most ``MAX_BUCKETS`` buckets (busy time per bucket, idle time per bucket by the cause of its gap,
host-to-device bytes per bucket from pageable and pinned memory), the device's memory over the trace (allocated and
reserved, at most ``MAX_BUCKETS`` buckets over the samples' span, with the step boundaries and the peak), the steps
(at most ``MAX_STEPS``: their GPU span and host breakdown), GPU time by kernel class and the ``TOP_KERNELS`` kernels
with the most time. Times are µs relative to the window's start, rounded to 0.1 µs. A pipeline stage (a device
with sends and recvs) adds the ``schedule`` of its last profiled step: the job's HTML report draws the stages' rows
one under the other, the schedule diagram people draw by hand.

A gap's time is charged to its main cause (``Gap.cause``, the largest part of its split); idle time outside the
gaps (holes shorter than min-idle-gap-us) is ``short_gap``. The metrics split each gap exactly
(``idle_<cause>_us``); the strip shows where in the window each kind of idle time falls.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tracelint.engine.metrics import IDLE_CAUSES, STEP_PARTS
from tracelint.trace.intervals import merge
from tracelint.trace.job.communication import is_communication
from tracelint.trace.kernels import kernel_group
from tracelint.trace.memory import memory_of
from tracelint.trace.model import H2D, KERNEL, PAGEABLE, PINNED

if TYPE_CHECKING:
    from tracelint.trace.device_analysis import TraceAnalysis

MAX_BUCKETS = 2000
MAX_SEGMENTS = 600  # of a stage's schedule (4 stages x 8 microbatches give about 70)
SEGMENT_JOIN_US = 5.0  # segments of one kind this close are one (the launch gaps between the kernels of a layer)
MAX_STEPS = 2000
TOP_KERNELS = 20
NAME_CHARS = 300  # a kernel name is cut to this many characters (templated names run to thousands)


def timeline_of(analysis: TraceAnalysis, buckets: int = MAX_BUCKETS) -> dict | None:
    """The timeline record of a device's analysis (module docstring); None for a device without a GPU window."""
    if analysis.window is None:
        return None
    w0, w1 = analysis.window
    length = w1 - w0
    n = max(1, min(buckets, math.ceil(length))) if length > 0 else 1
    width = length / n if length > 0 else 1.0
    launched = [g for g in analysis.gpu_events if g.step is not None]

    busy = [0.0] * n
    starts, ends = merge((max(g.start, w0), min(g.end, w1)) for g in analysis.gpu_events)
    for s, e in zip(starts, ends, strict=True):
        _spread(busy, s - w0, e - w0, width)
    idle = {cause: [0.0] * n for cause in IDLE_CAUSES}
    for gap in analysis.gaps:
        _spread(idle[gap.cause], gap.start - w0, gap.end - w0, width)
    charged = idle["short_gap"]
    for i in range(n):
        bucket = min(width, length - i * width) if length > 0 else 0.0
        rest = bucket - busy[i] - sum(idle[c][i] for c in IDLE_CAUSES[:-1])
        charged[i] = rest if rest > 1e-6 else 0.0

    h2d = {PAGEABLE: [0] * n, PINNED: [0] * n}
    for g in launched:
        if g.direction == H2D and g.host_memory in h2d:
            h2d[g.host_memory][_index(g.start - w0, width, n)] += g.bytes or 0

    return {
        "window_us": [w0, w1],
        "bucket_us": width,
        "busy_us": _rounded(busy),
        "idle_us": {cause: _rounded(v) for cause, v in idle.items() if any(v)},
        "h2d_bytes": {kind: v for kind, v in h2d.items() if any(v)},
        "memory": _memory(analysis, w0, buckets),
        "steps": _steps(analysis, w0),
        **_kernels(analysis, launched),
        **({"schedule": schedule} if (schedule := _schedule(analysis)) is not None else {}),
    }


def _schedule(analysis: TraceAnalysis) -> dict | None:
    """A pipeline stage's last profiled step as segments ``[start, end, kind]``, µs from the step's first GPU start
    (``start_us``, on the trace clock): ``forward`` or ``backward`` compute by the thread that launched the kernels
    (autograd runs the backward pass on a thread of its own; the optimizer's kernels count as forward), ``send/recv``
    and other ``communication``; what no segment covers is idle. None for a device without sends and recvs."""
    p2p = {(c.start, c.end) for c in analysis.comm if c.kernel and c.p2p}
    if not p2p or not analysis.steps or analysis.steps[-1].gpu_start is None:
        return None
    step = analysis.steps[-1]
    lo, main = step.gpu_start, analysis.main_tid
    segments: list[list] = []
    for g in analysis.gpu_events:  # sorted by start
        if g.step != step.index:
            continue
        if is_communication(g, analysis):
            kind = "send/recv" if (g.start, g.end) in p2p else "communication"
        else:
            kind = "backward" if g.launch is not None and g.launch.tid != main else "forward"
        a, b = g.start - lo, g.end - lo
        if segments and segments[-1][2] == kind and a <= segments[-1][1] + SEGMENT_JOIN_US:
            segments[-1][1] = max(segments[-1][1], b)
        elif len(segments) < MAX_SEGMENTS:
            segments.append([a, b, kind])
    return {"step": step.number, "start_us": lo, "segments": [[round(a, 1), round(b, 1), k] for a, b, k in segments]}


def _spread(values: list[float], a: float, b: float, width: float) -> None:
    """Add the interval [a, b] (µs from the window start) to the buckets it covers."""
    n = len(values)
    first, last = _index(a, width, n), _index(b, width, n)
    if first == last:
        values[first] += b - a
        return
    values[first] += (first + 1) * width - a
    for i in range(first + 1, last):
        values[i] += width
    values[last] += b - last * width


def _index(t: float, width: float, n: int) -> int:
    return min(n - 1, max(0, int(t // width)))


def _rounded(values: list[float]) -> list[float]:
    return [round(v, 1) for v in values]


def _memory(analysis: TraceAnalysis, w0: float, buckets: int) -> dict | None:
    """The device's memory over the trace, µs from the window start: the span from the first sample (or step) to the
    last cut into at most ``buckets`` buckets, and [time, bytes] of the most memory allocated (``allocated``) and
    reserved (``reserved``) in each bucket that has a sample; the host's step boundaries (``steps``: [number, start]
    of each, at most MAX_STEPS, and ``end``: the last step's end); the peak sample ([time, bytes]) and the memory
    timeline's steady footprint and growth per step. None without samples that carry totals."""
    device = analysis.device
    samples = [s for s in analysis.model.memory if s.device == device and s.total_allocated is not None]
    if not samples:
        return None
    steps = analysis.model.steps
    lo = min(samples[0].ts, steps[0].start) if steps else samples[0].ts
    hi = max(samples[-1].ts, steps[-1].end) if steps else samples[-1].ts
    n = max(1, min(buckets, math.ceil(hi - lo))) if hi > lo else 1
    width = (hi - lo) / n if hi > lo else 1.0
    allocated: dict[int, int] = {}
    reserved: dict[int, int] = {}
    for s in samples:
        i = _index(s.ts - lo, width, n)
        if s.total_allocated > allocated.get(i, -1):
            allocated[i] = s.total_allocated
        if s.total_reserved is not None and s.total_reserved > reserved.get(i, -1):
            reserved[i] = s.total_reserved

    def at(i: int) -> float:
        return round(lo - w0 + (i + 0.5) * width, 1)

    timeline = memory_of(analysis)
    peak = timeline.peak
    stride = max(1, math.ceil(len(steps) / MAX_STEPS))
    return {
        "allocated": [[at(i), allocated[i]] for i in sorted(allocated)],
        "reserved": [[at(i), reserved[i]] for i in sorted(reserved)],
        "steps": [[s.number, round(s.start - w0, 1)] for s in steps[::stride]],
        "end": round(steps[-1].end - w0, 1) if steps else None,
        "peak": [round(peak.ts - w0, 1), peak.total_allocated],
        "steady_bytes": timeline.steady_allocated_bytes,
        "growth_bytes_per_step": timeline.growth_bytes_per_step,
    }


def _steps(analysis: TraceAnalysis, w0: float) -> list[dict]:
    steps = analysis.steps
    stride = max(1, math.ceil(len(steps) / MAX_STEPS))
    out = []
    for s in steps[::stride]:
        out.append({
            "number": s.number,
            "gpu_start_us": None if s.gpu_start is None else round(s.gpu_start - w0, 1),
            "gpu_end_us": None if s.gpu_end is None else round(s.gpu_end - w0, 1),
            "cpu_us": round(s.cpu_us, 1),
            "gpu_span_us": None if s.gpu_span_us is None else round(s.gpu_span_us, 1),
            "breakdown_us": {part: round(s.breakdown[part], 1) for part in STEP_PARTS},
        })
    return out


def _kernels(analysis: TraceAnalysis, launched) -> dict:
    """GPU time by kernel class (tracelint.trace.kernels.kernel_group) and the top kernels."""

    time: dict[str, float] = {}
    count: dict[str, int] = {}
    group: dict[str, str] = {}
    for g in launched:
        time[g.name] = time.get(g.name, 0.0) + (g.end - g.start)
        count[g.name] = count.get(g.name, 0) + 1
        if g.name not in group:
            group[g.name] = kernel_group(g.kind, g.name, analysis)
    by_class: dict[str, float] = {}
    for name, t in time.items():
        by_class[group[name]] = by_class.get(group[name], 0.0) + t
    top = sorted(time, key=time.__getitem__, reverse=True)[:TOP_KERNELS]
    kernels = sum(1 for g in launched if g.kind == KERNEL)
    return {
        "class_us": {k: round(v, 1) for k, v in sorted(by_class.items(), key=lambda kv: -kv[1])},
        "top_kernels": [{"name": name[:NAME_CHARS], "class": group[name], "count": count[name],
                         "total_us": round(time[name], 1)} for name in top],
        "gpu_event_time_us": round(sum(time.values()), 1),
        "kernels": kernels,
    }
