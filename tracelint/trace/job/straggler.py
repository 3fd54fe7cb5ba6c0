"""Whether the rank a process group waits for leads because of the job, or maybe because of the profiler.

The profiler slows each rank's host by a different amount (1.4-2.3x on the project's balanced 2-rank DDP and FSDP2
jobs, whose ranks are equal to 0.1 ms without it), so in the trace one rank of a balanced job reaches every
collective last and its peers wait for it. A lead in the trace is therefore not yet a straggler.

**With the unprofiled record.** When every rank of the job carries ``tracelint.profile``'s record of the steps it did
not record (``Recording.distributed``: per rank, the mean unprofiled step and the mean time per step spent waiting in
collectives), the record decides, for the job as a whole: there is a straggler when the largest unprofiled wait is at
least ``straggler-min-wait-pct`` of the unprofiled step, and it is the rank the others wait for — the one that waits
least — provided the trace shows the leader a cause the profiler cannot have made (below: quiet host time or extra
compute beyond the waiting ranks', at least ``straggler-min-wait-pct`` of the step). The record alone is not enough
on host-bound jobs: there a collective kernel starts when its own host launches it and spins until the last host
has launched its own, so the unprofiled GPU-side waits measure how far the hosts run out of phase, not time the
job loses (the project's 2-D TP x FSDP job, equal work on every rank, recorded waits of 0-96 ms on a different rank
in each run). A record-named leader the trace gives no cause is **info**, saying so.

**Without it: the part of a lead the profiler cannot have made.** The profiler costs host time per event it records
(an op, a Python call under ``with_stack``); it neither slows a host that records nothing — a sleep, a blocking read,
a lock, un-instrumented native work — nor the GPU's kernels. So the lead of the waited-for rank X is the job's by
at most:

- its **quiet host time** per step (stretches of ``QUIET_MIN_US``, 1 ms, or longer in which none of its launching
  threads runs a profiled op; tracelint.trace.job.rank_digest) beyond the mean of the ranks that wait for it, plus
- its **compute time** per step (the union of its compute kernels in the step) beyond theirs,

and by at most the wait itself: ``job_lead_us`` = min(wait, quiet excess + compute excess), each excess at least 0.
X is a **straggler** (TL602 warning) when both the wait the group spends on it and ``job_lead_us`` reach
``straggler-min-wait-pct`` of the step. When the wait does and the job's part does not, the lead is what a busier,
more slowed host makes — launch overhead of a profiled host, the very risk TL003 names — and TL602 is **info**: it
says how to check (``tracelint.profile``). On the project's jobs: rank 1 of ``ddp_straggler`` sleeps 30 ms per step
(30 ms quiet, its peer none: a straggler); the balanced jobs' leading ranks are never quiet for a millisecond and
compute what their peers compute (info at most).
"""
from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, NamedTuple

from tracelint.engine import Config

if TYPE_CHECKING:
    from tracelint.trace.job.process_groups import GroupStats
    from tracelint.trace.job.rank_digest import RankDigest

JOB, PROFILER, UNPROFILED_BALANCED, UNEXPLAINED = "job", "profiler", "unprofiled-balanced", "unexplained"


class Lead(NamedTuple):
    """Why the waited-for rank of one group (or of the job, by the unprofiled record) leads."""

    group: tuple | None  # the group's key; None: the job as a whole (the unprofiled record)
    label: str  # the group's kind and ranks, for messages
    rank: int  # the rank waited for
    waiting: tuple[int, ...]  # the ranks that wait for it
    wait_us: float  # per step: the wait it causes (the trace's; the record's largest wait when unprofiled)
    step_us: float  # the step the wait is compared with
    quiet_us: float | None  # per step: its quiet host time beyond the waiting ranks' (None: from the record)
    compute_us: float | None  # per step: its compute beyond theirs
    job_us: float  # the part of the lead the profiler cannot have made
    cause: str  # JOB (a straggler), PROFILER (maybe the profiler's), UNPROFILED_BALANCED (the record says none),
    # UNEXPLAINED (the record's waits, but the trace shows the leader no cause: hosts out of phase)
    unprofiled: bool  # decided by tracelint.profile's record


def judge(ranks: dict[int, RankDigest], groups: dict[tuple, GroupStats], step_us: float | None,
          config: Config, pipeline: bool = False) -> dict[tuple | None, Lead]:
    """The leads worth a word: per group whose waited-for rank causes at least ``straggler-min-wait-pct`` of the
    step in the trace; or, when every rank carries the unprofiled record, one for the job (key None) when the
    record names a straggler or the trace shows a lead the record does not. Groups of sends and recvs are left out,
    and so is the record of a pipeline job: a stage waits for its neighbours by design (the bubble, the bottleneck
    stage: tracelint.trace.job.pipeline)."""
    limit = config.threshold("straggler-min-wait-pct") / 100.0
    in_trace = {key: g for key, g in groups.items()
                if not g.p2p and g.waited_for is not None and step_us and g.wait_us >= limit * step_us}
    if pipeline:
        return {key: _by_trace(ranks, g, step_us, limit) for key, g in in_trace.items()}
    records = {rank: _record(d) for rank, d in ranks.items()}
    if records and all(records.values()):
        lead = _by_record(records, limit, in_trace)
        if lead is not None and lead.cause == JOB and step_us:
            quiet, compute = _excess(ranks, lead.rank, lead.waiting)
            job = min(lead.wait_us, quiet + compute)
            lead = lead._replace(quiet_us=round(quiet, 1), compute_us=round(compute, 1), job_us=round(job, 1),
                                 cause=JOB if job >= limit * step_us else UNEXPLAINED)
        return {None: lead} if lead is not None else {}
    return {key: _by_trace(ranks, g, step_us, limit) for key, g in in_trace.items()}


def _record(d: RankDigest) -> dict | None:
    """The rank's unprofiled record (tracelint.profile's, 4 keys used), when it has a usable one."""
    record = getattr(d.recording, "distributed", None)
    if not isinstance(record, dict):
        return None
    step, wait = record.get("step_ms"), record.get("wait_ms")
    ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in (step, wait))
    return record if ok and step > 0 else None


def _by_record(records: dict[int, dict], limit: float, in_trace: dict) -> Lead | None:
    waits = {rank: float(r["wait_ms"]) * 1000.0 for rank, r in records.items()}
    step = statistics.fmean(float(r["step_ms"]) for r in records.values()) * 1000.0
    leader = min(waits, key=lambda r: (waits[r], r))
    largest = max(waits.values())
    waiting = tuple(sorted(r for r in waits if r != leader))
    if largest >= limit * step:
        return Lead(None, "the job", leader, waiting, largest, step, None, None, largest, JOB, True)
    if not in_trace:
        return None
    # the trace shows a lead the unprofiled steps do not: say so (info)
    g = max(in_trace.values(), key=lambda g: g.wait_us)
    return Lead(None, "the job", g.waited_for, tuple(r for r in g.members if r != g.waited_for), largest, step,
                None, None, largest, UNPROFILED_BALANCED, True)


def _by_trace(ranks: dict[int, RankDigest], g: GroupStats, step_us: float, limit: float) -> Lead:
    leader = g.waited_for
    waiting = tuple(r for r in g.members if r != leader and g.ranks[r].wait_us > 0) or tuple(
        r for r in g.members if r != leader)

    quiet, compute = _excess(ranks, leader, waiting)
    job = min(g.wait_us, quiet + compute)
    cause = JOB if job >= limit * step_us else PROFILER
    return Lead(g.key, g.label, leader, waiting, g.wait_us, step_us, round(quiet, 1), round(compute, 1),
                round(job, 1), cause, False)


def _excess(ranks: dict[int, RankDigest], leader: int, waiting: tuple[int, ...]) -> tuple[float, float]:
    """The leader's quiet host time and compute time per step beyond the mean of the ranks waiting for it (each at
    least 0): the part of a lead the profiler cannot have made."""

    def per_step(rank: int, field: str) -> float:
        steps = ranks[rank].steps if rank in ranks else ()
        return statistics.fmean(getattr(s, field) for s in steps) if steps else 0.0

    if not waiting:
        return 0.0, 0.0
    quiet = max(0.0, per_step(leader, "quiet_us") - statistics.fmean(per_step(r, "quiet_us") for r in waiting))
    compute = max(0.0, per_step(leader, "compute_us") - statistics.fmean(per_step(r, "compute_us")
                                                                          for r in waiting))
    return quiet, compute
