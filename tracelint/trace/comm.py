"""Communication on one device: which GPU work moves data between ranks, and how much of it runs beside compute.

**Communication** is GPU work whose class (tracelint.trace.kernels.classify_kernel) is ``communication`` — NCCL and
RCCL kernels of every collective and of send/recv, PyTorch's symmetric-memory collectives, DeepEP dispatch/combine —
and peer-to-peer copies (``Memcpy PtoP``). **Compute** is every other kernel, copy and memset of the device.

Over the device's GPU window, every interval of the device clipped to it (as for ``gpu_busy_us``):

- ``comm_time_us``: the length of the union of the communication intervals;
- ``comm_pct_of_window``: ``comm_time_us`` as a percent of ``gpu_window_us``;
- ``comm_overlap_pct``: the part of ``comm_time_us`` during which compute runs on the same device (any stream), in
  percent of ``comm_time_us``;
- ``exposed_comm_us`` / ``exposed_comm_pct``: ``comm_time_us`` less that overlap — communication with nothing
  beside it, the time it adds to the step — and its percent of ``gpu_window_us``;
- ``compute_busy_pct``: the length of the union of the compute intervals, as a percent of ``gpu_window_us``. The
  device's busy time is compute plus exposed communication: ``gpu_busy_us = compute + exposed_comm_us``.

A device without communication has None for all of these (its compute busy time is ``gpu_busy_pct``). The part of the
communication time spent waiting for the other ranks (``comm_wait_us``) needs their traces: tracelint.trace.job.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from tracelint.trace.intervals import merge, overlap
from tracelint.trace.model import KERNEL, MEMCPY, P2P, GpuEvent

if TYPE_CHECKING:
    from tracelint.trace.analysis import TraceAnalysis


class CommEvent(NamedTuple):
    """One communication kernel or peer copy of the device, launched in a step."""

    start: float
    end: float
    name: str
    collective: str | None  # all_reduce, all_gather, ... (kernel args, else its name); None for a peer copy
    group: str | None  # the process group's name when the trace gives it
    in_nelems: int | None
    step: int | None  # step index (TraceAnalysis.step_number gives its ProfilerStep number)
    kernel: bool  # a kernel (a collective or send/recv); False for a peer-to-peer copy


def is_communication(event: GpuEvent, analysis: TraceAnalysis) -> bool:
    if event.kind == KERNEL:
        from tracelint.trace.kernels import COMMUNICATION

        return analysis.kernel_class(event.name).op == COMMUNICATION
    return event.kind == MEMCPY and event.direction == P2P


def communication_metrics(analysis: TraceAnalysis) -> None:
    """Set the communication metrics (module docstring) and ``analysis.comm``, the device's communication events
    launched in the steps (what tracelint.trace.job matches across ranks)."""
    from tracelint.trace.kernels import collective_name

    m, window = analysis.metrics, analysis.window
    comm, compute = [], []
    for g in analysis.gpu_events:
        (comm if is_communication(g, analysis) else compute).append(g)
    keys = ("comm_time_us", "comm_pct_of_window", "comm_overlap_pct", "exposed_comm_us", "exposed_comm_pct",
            "compute_busy_pct", "comm_wait_us")
    for key in keys:
        m[key] = None
    if not comm or window is None:
        return
    args = analysis.model.collectives
    for g in comm:
        if g.step is None:
            continue
        a = args.get(g.correlation) if g.correlation is not None else None
        is_kernel = g.kind == KERNEL
        name = (a.collective if a is not None and a.collective else collective_name(g.name)) if is_kernel else None
        analysis.comm.append(CommEvent(g.start, g.end, g.name, name, a.group if a is not None else None,
                                       a.in_nelems if a is not None else None, g.step, is_kernel))
    w0, w1 = window
    comm_union = merge((max(g.start, w0), min(g.end, w1)) for g in comm)
    compute_union = merge((max(g.start, w0), min(g.end, w1)) for g in compute)
    comm_us = sum(e - s for s, e in zip(*comm_union, strict=True))
    compute_us = sum(e - s for s, e in zip(*compute_union, strict=True))
    beside = sum(overlap(compute_union, s, e) for s, e in zip(*comm_union, strict=True))
    exposed = comm_us - beside
    length = w1 - w0
    m["comm_time_us"] = round(comm_us, 1)
    m["comm_pct_of_window"] = _pct(comm_us, length)
    m["comm_overlap_pct"] = _pct(beside, comm_us)
    m["exposed_comm_us"] = round(exposed, 1)
    m["exposed_comm_pct"] = _pct(exposed, length)
    m["compute_busy_pct"] = _pct(compute_us, length)


def _pct(part: float, whole: float) -> float | None:
    return round(100.0 * part / whole, 2) if whole else None


def top_collective(analysis: TraceAnalysis) -> str | None:
    """The collective that takes the most communication time on the device (for messages)."""
    time: dict[str, float] = {}
    for c in analysis.comm:
        if c.collective:
            time[c.collective] = time.get(c.collective, 0.0) + (c.end - c.start)
    return max(time, key=time.__getitem__) if time else None
