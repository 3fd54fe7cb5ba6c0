"""Process groups across the ranks of a job: collectives matched within each group, the waits measured within each
group, and the rank each group waits for.

**Groups.** A communication kernel belongs to the process group it names (``Process Group Name`` with its ``Process
Group Ranks``, on the kernel or its ``record_param_comms`` op; ``distributedInfo.pg_config`` fills in the ranks): the
group's key is its name and ranks, since the tensor-parallel groups of a device mesh share a name on different
ranks. Kernels of a trace that names no group (torch < 2.x) form one group, ``all``. A group's **kind** says what it
is for: the mesh dimension of a ``mesh_<dim>`` description (``tp``, ``dp``), else ``pp`` for sends and recvs, else
``fsdp`` for all-gathers with reduce-scatters, ``dp`` for all-reduces, else its description.

**Matching.** The collectives of each group are put in sequences by ProfilerStep number, in start order; the n-th
collective of a sequence on one rank is the n-th on every other rank of the group — its ranks issue its collectives
in one order. A sequence is matched only when every rank has as many collectives in it and, position by position,
the collective names agree (``Collective name``, else the kernel's name) and so do the message sizes (``In msg
nelems``; not compared for all_to_all and unnamed send_recv, whose sizes may differ by rank). The kernels of the
other sequences are counted as ``collectives_unmatched``. There is no sequence number in the traces (torch 2.11).
Sends and recvs are paired instead (tracelint.trace.job.p2p_pairs).

**Waiting.** A collective cannot finish before its last rank arrives: its arrival is the latest start over the ranks
(on the aligned clock), and a rank's *wait interval* runs from its own start to that arrival, at most to its kernel's
end; the rest of the kernel is transfer. A send and its recv likewise wait for the later of their two starts. A
rank's wait is the **union** of its wait intervals, so waits in collectives that overlap in time (two groups, or
FSDP's prefetched all-gathers on two streams) count once and a rank never waits longer than its step:
``comm_wait_us`` is the union over every group, per step; ``comm_groups`` gives it within each group, with the
group's communication and exposed time (tracelint.trace.job.communication.group_times). ``p2p_wait_us`` is the union
over the sends and recvs, ``p2p_transfer_us`` the rest of their time.

**Whom a group waits for.** Each wait interval is charged to the rank that arrived last (the peer, for a send or
recv). In a group, the waiting a rank causes is, per step, the union of each other member's intervals charged to it,
summed over those members and divided by their number (the mean over the others); the group waits for the rank that
causes the most. Whether that makes it a straggler is tracelint.trace.job.straggler's call.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from tracelint.engine import metrics as M
from tracelint.trace.intervals import merge

if TYPE_CHECKING:
    from tracelint.trace.job.p2p_pairs import Pair
    from tracelint.trace.job.rank_digest import Collective, RankDigest

_SIZE_MAY_DIFFER = frozenset({"send_recv", "all_to_all", None})
ALL = "all"  # the kind of the one group of a trace that names none


@dataclass(frozen=True, slots=True)
class RankWait:
    """How long one rank waits for its peers, per step, and for whom and in what it waits most."""

    rank: int
    wait_us: float  # per step: the union of its wait intervals
    waits_for: int | None
    collective: str | None
    p2p_wait_us: float = 0.0  # per step: the part in sends and recvs (pipeline neighbours)


@dataclass(frozen=True, slots=True)
class GroupRank:
    """One rank's communication in one group, per step."""

    comm_us: float | None  # the union of the group's kernels
    exposed_us: float | None  # the part of it with no compute beside it
    wait_us: float  # the union of its wait intervals in the group
    waits_for: int | None  # the member it waits for most


@dataclass(slots=True)
class GroupStats:
    key: tuple  # (name, ranks)
    kind: str  # tp, dp, fsdp, pp, ...
    desc: str | None
    members: tuple[int, ...]  # the ranks of the group that were read
    p2p: bool = False  # it carries sends and recvs (their waits are a pipeline's, not a straggler's)
    ranks: dict[int, GroupRank] = field(default_factory=dict)
    caused: dict[int, float] = field(default_factory=dict)  # member -> mean wait of the others it causes per step
    waited_for: int | None = None  # the member that causes the most
    wait_us: float | None = None  # that wait, per step

    @property
    def label(self) -> str:
        """``tp [0, 1]``: the kind and the group's ranks; ``all collectives`` when the trace names no group."""
        if self.kind == ALL:
            return "all collectives"
        ranks = self.key[1] or self.members
        return f"{self.kind} [{', '.join(map(str, ranks))}]"


class _Interval(NamedTuple):
    rank: int
    group: tuple
    start: float  # the rank's own clock
    end: float
    waits_for: int
    collective: str | None
    p2p: bool


def group_kind(desc: str | None, name: str | None, collectives: set, p2p: bool) -> str:
    """What a group is for (module docstring)."""
    if desc and desc.startswith("mesh_") and len(desc) > 5:
        return desc[5:]
    if desc is None and name is None and not p2p:
        return ALL
    if p2p:
        return "pp"
    if "all_gather" in collectives and "reduce_scatter" in collectives:
        return "fsdp"
    if "all_reduce" in collectives:
        return "dp"
    return desc or f"group {name}"


def grouping(ranks: dict[int, RankDigest]):
    """The group key of a kernel: its own, unless some collective of the job names no group — then every collective
    is in one group, ``(None, None)`` (sends and recvs keep theirs: their peers say who is in it)."""
    if all(c.group is not None for d in ranks.values() for c in d.comm if not c.p2p):
        return lambda c: c.group_key
    return lambda c: c.group_key if c.p2p else (None, None)


def match_collectives(ranks: dict[int, RankDigest]) -> tuple[list[tuple[tuple, dict[int, Collective]]], int]:
    """The matched collectives, each as (group key, {rank: its kernel}), and how many kernels were left unmatched
    (module docstring)."""
    key_of = grouping(ranks)
    sequences: dict[tuple, dict[int, list[Collective]]] = {}
    for rank, d in ranks.items():
        for c in d.comm:
            if c.p2p:
                continue
            sequences.setdefault((key_of(c), c.step), {}).setdefault(rank, []).append(c)
    matched: list[tuple[tuple, dict[int, Collective]]] = []
    unmatched = 0
    for (group, _), by_rank in sequences.items():
        lengths = {len(events) for events in by_rank.values()}
        if len(by_rank) < 2 or len(lengths) != 1:
            unmatched += sum(len(events) for events in by_rank.values())
            continue
        columns = [dict(zip(by_rank, column, strict=True)) for column in zip(*by_rank.values(), strict=True)]
        if all(_agree(column) for column in columns):
            matched.extend((group, column) for column in columns)
        else:
            unmatched += sum(len(events) for events in by_rank.values())
    return matched, unmatched


def _agree(column: dict[int, Collective]) -> bool:
    names = {c.collective for c in column.values() if c.collective}
    if len(names) > 1:
        return False
    if names & _SIZE_MAY_DIFFER or not names:
        return True
    sizes = {c.in_nelems for c in column.values() if c.in_nelems is not None}
    return len(sizes) <= 1


def measure_waits(ranks: dict[int, RankDigest], offsets: dict[int, float],
                  matched: list[tuple[tuple, dict[int, Collective]]],
                  pairs: list[Pair]) -> tuple[dict[int, RankWait], dict[tuple, GroupStats]]:
    """Each rank's wait (RankWait) and each group's figures (GroupStats), from the matched collectives and the
    paired sends and recvs (module docstring); sets the ranks' ``comm_wait_us``, ``p2p_wait_us``,
    ``p2p_transfer_us`` and ``comm_groups`` metrics."""
    intervals: list[_Interval] = []
    waiters: dict[int, set] = {}  # rank -> groups it was matched in
    for group, column in matched:
        starts = {rank: c.start - offsets.get(rank, 0.0) for rank, c in column.items()}
        last = max(starts, key=lambda r: (starts[r], -r))
        for rank, c in column.items():
            waiters.setdefault(rank, set()).add(group)
            if rank != last:
                wait = min(max(starts[last] - starts[rank], 0.0), c.end - c.start)
                intervals.append(_Interval(rank, group, c.start, c.start + wait, last, c.collective, False))
    for p in pairs:
        sides = ((p.sender, p.send, p.receiver), (p.receiver, p.recv, p.sender))
        starts = {rank: c.start - offsets.get(rank, 0.0) for rank, c, _ in sides}
        arrival = max(starts.values())
        for rank, c, peer in sides:
            waiters.setdefault(rank, set()).add(p.group)
            wait = min(max(arrival - starts[rank], 0.0), c.end - c.start)
            intervals.append(_Interval(rank, p.group, c.start, c.start + wait, peer, c.collective, True))
    by_rank: dict[int, list[_Interval]] = {}
    for iv in intervals:
        by_rank.setdefault(iv.rank, []).append(iv)
    waits: dict[int, RankWait] = {}
    for rank in waiters:
        mine = by_rank.get(rank, [])
        steps = max(1, M.STEPS.of(ranks[rank].metrics) or 1)
        total = _union(mine) / steps
        p2p = _union([iv for iv in mine if iv.p2p]) / steps
        whom = _largest(mine, lambda iv: iv.waits_for)
        where = _largest(mine, lambda iv: iv.collective or "communication")
        waits[rank] = RankWait(rank, round(total, 1), whom, where, round(p2p, 1))
        m = ranks[rank].metrics
        m[M.COMM_WAIT_US.name] = round(total, 1)
        if any(c.p2p for c in ranks[rank].comm):
            m[M.P2P_WAIT_US.name] = round(p2p, 1)
            time = (M.P2P_TIME_US.of(m) or 0.0) / steps
            m[M.P2P_TRANSFER_US.name] = round(max(0.0, time - p2p), 1)
    groups = _group_stats(ranks, waiters, by_rank)
    for rank, d in ranks.items():
        rows = [_row(g, rank) for g in groups.values() if rank in g.ranks]
        if rows:
            d.metrics[M.COMM_GROUPS.name] = rows
    return waits, groups


def _group_stats(ranks: dict[int, RankDigest], waiters: dict[int, set],
                 by_rank: dict[int, list[_Interval]]) -> dict[tuple, GroupStats]:
    groups: dict[tuple, GroupStats] = {}
    what: dict[tuple, tuple[set, bool, str | None]] = {}
    key_of = grouping(ranks)
    for d in ranks.values():
        for c in d.comm:
            key = key_of(c)
            names, p2p, desc = what.setdefault(key, (set(), False, c.group_desc))
            names.add(c.collective)
            what[key] = (names, p2p or bool(c.p2p), desc or c.group_desc)
    for key, (names, p2p, desc) in what.items():
        members = tuple(sorted(r for r, keys in waiters.items() if key in keys))
        if not members:
            continue
        stats = GroupStats(key, group_kind(desc, key[0], names, p2p), desc, members, p2p)
        for rank in members:
            d = ranks[rank]
            steps = max(1, M.STEPS.of(d.metrics) or 1)
            mine = [iv for iv in by_rank.get(rank, []) if iv.group == key]
            # a trace that names no group: its one group is all of its communication
            comm, exposed = d.group_times.get(key) or ((M.COMM_TIME_US.of(d.metrics), M.EXPOSED_COMM_US.of(
                d.metrics)) if key == (None, None) else (None, None))
            stats.ranks[rank] = GroupRank(None if comm is None else round(comm / steps, 1),
                                          None if exposed is None else round(exposed / steps, 1),
                                          round(_union(mine) / steps, 1), _largest(mine, lambda iv: iv.waits_for))
            for peer in {iv.waits_for for iv in mine}:
                share = _union([iv for iv in mine if iv.waits_for == peer]) / steps / max(1, len(members) - 1)
                stats.caused[peer] = stats.caused.get(peer, 0.0) + share
        if stats.caused:
            worst = max(stats.caused, key=lambda r: (stats.caused[r], -r))
            stats.waited_for, stats.wait_us = worst, round(stats.caused[worst], 1)
        groups[key] = stats
    return groups


def _row(group: GroupStats, rank: int) -> dict:
    """A rank's row of one group (the ``comm_groups`` metric)."""
    mine = group.ranks[rank]
    return {"group": group.key[0], "kind": group.kind, "ranks": list(group.key[1] or group.members),
            "comm_us": mine.comm_us, "exposed_us": mine.exposed_us, "wait_us": mine.wait_us,
            "waits_for": mine.waits_for}


def _union(intervals: list[_Interval]) -> float:
    starts, ends = merge((iv.start, iv.end) for iv in intervals)
    return sum(e - s for s, e in zip(starts, ends, strict=True))


def _largest(intervals: list[_Interval], key) -> object | None:
    """The value of ``key`` whose intervals cover the most time (None when nothing waits)."""
    time: dict[object, float] = {}
    for iv in intervals:
        if iv.end > iv.start:
            time[key(iv)] = time.get(key(iv), 0.0) + iv.end - iv.start
    return max(time, key=lambda k: (time[k], str(k))) if time else None
