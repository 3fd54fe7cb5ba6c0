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
communication time spent waiting for the other ranks (``comm_wait_us``) needs their traces: tracelint.trace.job.ranks.

**Point-to-point.** A send/recv kernel (``ncclDevKernel_SendRecv``) carries no collective args of its own (torch
2.11): what it moves is read from the ``record_param_comms`` ops that c10d recorded on the launching thread since
that thread's previous communication launch, within the step — one op for a lone ``send``/``recv``, several for a
batch (``batch_isend_irecv``, one kernel under ``nccl:coalesced``). Each send or recv names its peer (``Dst Rank`` /
``Src Rank``, a rank of its process group, mapped to the global rank through ``Process Group Ranks``). A kernel with
such ops is a **p2p** kernel; a device with p2p kernels also has:

- ``p2p_time_us``: the length of the union of its p2p kernels' intervals in the window;
- ``exposed_p2p_us``: the part of ``p2p_time_us`` with no compute beside it. On a pipeline stage it is mostly the
  stage waiting for its neighbour (the bubble, a slower stage), not data moving: tracelint.trace.job.p2p_pairs pairs
  each send with its recv across the ranks and splits that time into transfer and wait.

**Process groups.** Each communication kernel belongs to a process group (``Process Group Name`` and ``Process
Group Ranks`` on the kernel or its ``record_param_comms`` op, else ``distributedInfo.pg_config``); ``group_times``
gives, per group, the union of its kernels (communication time) and the part with no compute beside it (exposed).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING, NamedTuple

from tracelint.trace.intervals import merge, overlap
from tracelint.trace.model import KERNEL, MEMCPY, P2P, CommOp, GpuEvent

if TYPE_CHECKING:
    from tracelint.trace.device_analysis import TraceAnalysis

SEND, RECV = "send", "recv"


class P2POp(NamedTuple):
    """One send or recv a p2p kernel carries."""

    kind: str  # SEND or RECV
    peer: int  # the other rank, global
    nelems: int | None


class CommEvent(NamedTuple):
    """One communication kernel or peer copy of the device, launched in a step."""

    start: float
    end: float
    name: str
    collective: str | None  # all_reduce, all_gather, send_recv ... (kernel args, else its name); None for a peer copy
    group: str | None  # the process group's name when the trace gives it
    in_nelems: int | None
    step: int | None  # step index (TraceAnalysis.step_number gives its ProfilerStep number)
    kernel: bool  # a kernel (a collective or send/recv); False for a peer-to-peer copy
    group_desc: str | None = None  # default_pg, mesh_tp, ...
    group_ranks: tuple[int, ...] | None = None  # the group's global ranks, when the trace gives them
    p2p: tuple[P2POp, ...] = ()  # the sends and recvs of a p2p kernel; () for a collective

    @property
    def group_key(self) -> tuple[str | None, tuple[int, ...] | None]:
        """The process group across ranks: its name and ranks (a mesh's tp groups share a name, not their ranks)."""
        return self.group, self.group_ranks


def is_communication(event: GpuEvent, analysis: TraceAnalysis) -> bool:
    if event.kind == KERNEL:
        from tracelint.trace.kernels import COMMUNICATION

        return analysis.kernel_class(event.name).op == COMMUNICATION
    return event.kind == MEMCPY and event.direction == P2P


def communication_metrics(analysis: TraceAnalysis) -> None:
    """Set the communication metrics (module docstring) and ``analysis.comm``, the device's communication events
    launched in the steps (what tracelint.trace.job.ranks matches across ranks)."""
    from tracelint.trace.kernels import collective_name

    m, window = analysis.metrics, analysis.window
    comm, compute = [], []
    judged: dict[tuple[str, str], bool] = {}  # is_communication by (kind, name): it reads nothing else
    for g in analysis.gpu_events:
        key = (g.kind, g.name)
        is_comm = judged.get(key)
        if is_comm is None:
            is_comm = judged[key] = is_communication(g, analysis)
        (comm if is_comm else compute).append(g)
    keys = ("comm_time_us", "comm_pct_of_window", "comm_overlap_pct", "exposed_comm_us", "exposed_comm_pct",
            "compute_busy_pct", "comm_wait_us")
    for key in keys:
        m[key] = None
    if not comm or window is None:
        return
    model = analysis.model
    args = model.collectives
    issued = _IssuedOps(analysis)
    for g in sorted(comm, key=lambda g: g.launch.start if g.launch is not None else g.start):
        if g.step is None:
            continue
        a = args.get(g.correlation) if g.correlation is not None else None
        is_kernel = g.kind == KERNEL
        if not is_kernel:
            analysis.comm.append(CommEvent(g.start, g.end, g.name, None, None, None, g.step, False))
            continue
        ops = issued.since_last_launch(g)
        name = a.collective if a is not None and a.collective else None
        group = a.group if a is not None else None
        desc = a.group_desc if a is not None else None
        ranks = a.group_ranks if a is not None else None
        p2p: tuple[P2POp, ...] = ()
        if name is None and ops:  # a send/recv kernel: its args are on the ops that issued it
            p2p = tuple(op for op in map(_p2p_op, ops, [model] * len(ops)) if op is not None)
            last = ops[-1]
            name = collective_name(g.name) if p2p else last.collective
            group, desc, ranks = group or last.group, desc or last.group_desc, ranks or last.group_ranks
        if ranks is None and group is not None and group in model.process_groups:
            ranks = model.process_groups[group].ranks
            desc = desc or model.process_groups[group].desc
        analysis.comm.append(CommEvent(g.start, g.end, g.name, name or collective_name(g.name), group,
                                       a.in_nelems if a is not None else None, g.step, True, desc, ranks, p2p))
    analysis.comm.sort(key=lambda c: c.start)
    w0, w1 = window
    comm_union = merge((max(g.start, w0), min(g.end, w1)) for g in comm)
    compute_union = analysis.memo("compute-union", lambda _: merge((max(g.start, w0), min(g.end, w1)) for g in compute))
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
    p2p = [c for c in analysis.comm if c.p2p]
    if p2p:  # metrics of scope "rank": only where they apply
        p2p_time, p2p_exposed = _exposed(p2p, window, compute_union)
        m["p2p_time_us"] = round(p2p_time, 1)
        m["exposed_p2p_us"] = round(p2p_exposed, 1)


def compute_of(analysis: TraceAnalysis) -> tuple[list[float], list[float]]:
    """The union of the device's compute intervals (every GPU event that is not communication) in its window
    (``communication_metrics`` keeps the one it makes)."""
    def union(a: TraceAnalysis):
        if a.window is None:
            return [], []
        w0, w1 = a.window
        return merge((max(g.start, w0), min(g.end, w1)) for g in a.gpu_events if not is_communication(g, a))

    return analysis.memo("compute-union", union)


def group_times(analysis: TraceAnalysis) -> dict[tuple, tuple[float, float]]:
    """{group key: (communication µs, exposed µs)} over the window: the union of the group's kernels, and the part
    of it with no compute beside it."""
    if analysis.window is None:
        return {}
    by_group: dict[tuple, list[CommEvent]] = {}
    for c in analysis.comm:
        if c.kernel:
            by_group.setdefault(c.group_key, []).append(c)
    compute = compute_of(analysis)
    return {key: _exposed(events, analysis.window, compute) for key, events in by_group.items()}


def _exposed(events: list, window: tuple[float, float], compute) -> tuple[float, float]:
    """(length of the events' union in the window, the part of it with no compute beside it)."""
    w0, w1 = window
    union = merge((max(c.start, w0), min(c.end, w1)) for c in events)
    total = sum(e - s for s, e in zip(*union, strict=True))
    return total, total - sum(overlap(compute, s, e) for s, e in zip(*union, strict=True))


class _IssuedOps:
    """The record_param_comms ops of each host thread, to find those that issued a communication kernel: the ops on
    its launching thread after the previous communication launch there, within the launch's step."""

    def __init__(self, analysis: TraceAnalysis) -> None:
        self.model = analysis.model
        self.by_tid: dict[object, tuple[list[float], list[CommOp]]] = {}
        for op in self.model.comm_ops:
            starts, ops = self.by_tid.setdefault(op.tid, ([], []))
            starts.append(op.start)
            ops.append(op)
        self.last: dict[object, float] = {}  # tid -> its previous communication launch

    def since_last_launch(self, g: GpuEvent) -> list[CommOp]:
        call = g.launch
        if call is None or call.tid not in self.by_tid:
            return []
        starts, ops = self.by_tid[call.tid]
        after = self.last.get(call.tid, -float("inf"))
        if self.model.steps and g.step is not None:
            after = max(after, self.model.steps[g.step].start)
        self.last[call.tid] = call.start
        return [op for op in ops[bisect_right(starts, after):bisect_left(starts, call.start)]
                if op.collective != "wait"]


def _p2p_op(op: CommOp, model) -> P2POp | None:
    """A send or recv with its peer as a global rank; None for anything else."""
    if op.collective not in (SEND, RECV) or op.peer is None:
        return None
    ranks = op.group_ranks
    if ranks is None and op.group in model.process_groups:
        ranks = model.process_groups[op.group].ranks
    peer = op.peer
    if ranks is not None:
        if not 0 <= peer < len(ranks):
            return None
        peer = ranks[peer]
    return P2POp(op.collective, peer, op.in_nelems)


def _pct(part: float, whole: float) -> float | None:
    return round(100.0 * part / whole, 2) if whole else None


def top_collective(analysis: TraceAnalysis) -> str | None:
    """The collective that takes the most communication time on the device (for messages), sends and recvs whose
    peers are known aside."""
    time: dict[str, float] = {}
    for c in analysis.comm:
        if c.collective and not c.p2p:
            time[c.collective] = time.get(c.collective, 0.0) + (c.end - c.start)
    return max(time, key=time.__getitem__) if time else None
