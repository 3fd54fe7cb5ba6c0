"""The ranks of one job read together: their collectives matched, each rank's wait for its peers, and the straggler.

**Matching.** Each rank's communication kernels launched in the steps (tracelint.trace.comm; peer copies aside) are
put in sequences by process group (``Process Group Name`` in the kernel's args, which torch 2.x writes; one sequence
when any kernel lacks it) and by ProfilerStep number, in start order. The n-th collective of a sequence on one rank
is the n-th on every other rank that has the sequence — the ranks of a process group issue its collectives in one
order. A sequence is matched only when every rank has as many collectives in it and, position by position, the
collective names agree (``Collective name``, else the kernel's name) and so do the message sizes (``In msg
nelems``; not compared for send/recv and all_to_all, whose sizes may differ by rank). The kernels of the other
sequences are counted as ``collectives_unmatched``. There is no sequence number in the traces (torch 2.11).

**Clocks.** Ranks on one host share a clock. A collective completes at about the same moment on every rank, so the
clock offset of a rank against the lowest rank is the median difference of the ends of their matched collectives.
When an offset is over ``CLOCK_TOLERANCE_US`` the ranks ran on hosts whose clocks disagree: starts are aligned by
those offsets and the report says so. Below it the clocks are taken as shared (on one host the ends agree within a
few µs: 5 µs at most on the 8-rank DLRM traces of the public corpus).

**Waiting.** A collective cannot finish before its last rank arrives. Its arrival is the latest start over the ranks;
the *wait* of a rank is that arrival less its own start, at least 0 and at most its kernel's duration; the rest of
its duration is transfer. ``comm_wait_us`` is a rank's summed wait per step. The rank that arrives last is the one
the others wait for: each collective's mean wait over the other ranks is charged to it. The **straggler** is the
rank charged the most, ``straggler_wait_us`` that charge per step; a job whose largest charge is under
``straggler-min-wait-pct`` of the mean step time is balanced (``straggler_rank`` None).

The job reads each rank's **digest** (``RankDigest``: headline metrics, collectives numbered by ProfilerStep, what the
verdict is decided from), never its events: a rank analyzed in a worker process or on a Dask cluster sends back only
that (tracelint.trace.analyze).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from tracelint.engine import Config
from tracelint.engine import metrics as M

if TYPE_CHECKING:
    from tracelint.trace.analysis import TraceAnalysis
    from tracelint.trace.recording import Recording

CLOCK_TOLERANCE_US = 50.0
_SIZE_MAY_DIFFER = frozenset({"send_recv", "all_to_all", None})


@dataclass(frozen=True, slots=True)
class RankWait:
    """How long one rank waits for its peers, per step, and for whom and in what it waits most."""

    rank: int
    wait_us: float  # per step
    waits_for: int | None
    collective: str | None


class Collective(NamedTuple):
    """One communication kernel of a rank, launched in a step: what matching and waiting read of it."""

    start: float
    end: float
    collective: str | None  # all_reduce, all_gather, ... as in tracelint.trace.comm
    group: str | None
    in_nelems: int | None
    step: int | None  # the ProfilerStep number (not a step index: read without the model)


@dataclass(slots=True)
class RankDigest:
    """What the job needs of one rank's trace, small enough to come back from a worker process: no events."""

    path: str
    rank: int | None
    world_size: int | None
    start: float | None  # µs: the first step, op or GPU event (files profiled minutes apart are not one job)
    metrics: dict  # the headline device's, the dict its summary carries: the job sets comm_wait_us in it
    comm: tuple[Collective, ...]
    recording: Recording  # with the two below, what the verdict is decided again from once the wait is known
    cpu_only: bool
    truncated: bool


def digest_of(analysis: TraceAnalysis, truncated: bool) -> RankDigest:
    """The digest of a rank's headline device (its busiest: the first device of its Report)."""
    model = analysis.model
    firsts = [seq[0].start for seq in (model.steps, model.ops, model.gpu) if seq]
    comm = tuple(Collective(c.start, c.end, c.collective, c.group, c.in_nelems, analysis.step_number(c.step))
                 for c in analysis.comm if c.kernel)
    return RankDigest(analysis.path, analysis.rank, model.world_size, min(firsts) if firsts else None,
                      analysis.metrics, comm, analysis.recording, analysis.device is None, truncated)


@dataclass(slots=True)
class Job:
    ranks: dict[int, RankDigest]  # by rank
    path: str = ""  # the job's directory
    matched: int = 0  # collectives matched (each counted once, not once per rank)
    unmatched: int = 0  # communication kernels, over all ranks, left out of the matching
    offsets: dict[int, float] = field(default_factory=dict)  # µs subtracted from a rank's clock (0: shared)
    offset_max: float | None = None  # the largest estimated offset, applied or not
    aligned: bool = False  # offsets were applied: the ranks' clocks disagree (several hosts)
    waits: dict[int, RankWait] = field(default_factory=dict)
    caused: dict[int, float] = field(default_factory=dict)  # rank -> mean wait of the others per step it causes
    straggler: int | None = None
    straggler_wait_us: float | None = None  # per step

    def step_us(self) -> float | None:
        """The job's mean step time over the ranks."""
        times = [t for t in (step_us(r.metrics) for r in self.ranks.values()) if t]
        return statistics.fmean(times) if times else None


def step_us(m: dict) -> float | None:
    """A rank's mean step time from its metrics: the longer of its CPU step span and the GPU span of its steps (a
    host that runs ahead of its GPU has short CPU steps), else its window per step."""
    value = max(M.STEP_CPU_US_MEAN.of(m) or 0.0, M.STEP_GPU_SPAN_US_MEAN.of(m) or 0.0)
    if not value and M.GPU_WINDOW_US.of(m):
        value = M.GPU_WINDOW_US.of(m) / max(1, M.STEPS.of(m) or 1)
    return value


def analyze_job(ranks: dict[int, RankDigest], config: Config | None = None) -> Job:
    """Match the collectives of the ranks (their digests by rank), estimate the clocks, and charge the waits; sets
    each rank's ``comm_wait_us`` metric."""
    config = config or Config()
    job = Job(dict(sorted(ranks.items())))
    matched = _match(job)
    if not matched:
        return job
    _clocks(job, matched)
    _waits(job, matched, config)
    return job


def _match(job: Job) -> list[dict[int, Collective]]:
    kernels = {r: d.comm for r, d in job.ranks.items()}
    by_group = all(c.group is not None for events in kernels.values() for c in events)
    sequences: dict[tuple, dict[int, list[Collective]]] = {}
    for rank, events in kernels.items():
        for c in events:
            key = (c.group if by_group else "", c.step)
            sequences.setdefault(key, {}).setdefault(rank, []).append(c)
    matched: list[dict[int, Collective]] = []
    for by_rank in sequences.values():
        lengths = {len(events) for events in by_rank.values()}
        if len(by_rank) < 2 or len(lengths) != 1:
            job.unmatched += sum(len(events) for events in by_rank.values())
            continue
        columns = [dict(zip(by_rank, column, strict=True)) for column in zip(*by_rank.values(), strict=True)]
        if all(_agree(column) for column in columns):
            matched.extend(columns)
        else:
            job.unmatched += sum(len(events) for events in by_rank.values())
    job.matched = len(matched)
    return matched


def _agree(column: dict[int, Collective]) -> bool:
    names = {c.collective for c in column.values() if c.collective}
    if len(names) > 1:
        return False
    if names & _SIZE_MAY_DIFFER or not names:
        return True
    sizes = {c.in_nelems for c in column.values() if c.in_nelems is not None}
    return len(sizes) <= 1


def _clocks(job: Job, matched: list[dict[int, Collective]]) -> None:
    ref = min(r for column in matched for r in column)
    offsets: dict[int, float] = {}
    for rank in job.ranks:
        diffs = [column[rank].end - column[ref].end for column in matched if rank in column and ref in column]
        offsets[rank] = statistics.median(diffs) if diffs else 0.0
    job.offset_max = round(max(abs(v) for v in offsets.values()), 1)
    job.aligned = job.offset_max > CLOCK_TOLERANCE_US
    job.offsets = offsets if job.aligned else {rank: 0.0 for rank in offsets}


def _waits(job: Job, matched: list[dict[int, Collective]], config: Config) -> None:
    total: dict[int, float] = {}
    waits_for: dict[int, dict[int, float]] = {}
    waits_in: dict[int, dict[str, float]] = {}
    caused: dict[int, float] = {}
    for column in matched:
        starts = {rank: c.start - job.offsets[rank] for rank, c in column.items()}
        last = max(starts, key=lambda r: (starts[r], -r))
        arrival = starts[last]
        charged = 0.0
        for rank, c in column.items():
            total.setdefault(rank, 0.0)
            if rank == last:
                continue
            wait = min(max(arrival - starts[rank], 0.0), c.end - c.start)
            total[rank] += wait
            charged += wait
            per = waits_for.setdefault(rank, {})
            per[last] = per.get(last, 0.0) + wait
            where = waits_in.setdefault(rank, {})
            name = c.collective or "communication"
            where[name] = where.get(name, 0.0) + wait
        caused[last] = caused.get(last, 0.0) + charged / (len(column) - 1)
    for rank, wait in total.items():
        metrics = job.ranks[rank].metrics
        steps = max(1, M.STEPS.of(metrics) or 1)
        per_step = round(wait / steps, 1)
        metrics[M.COMM_WAIT_US.name] = per_step
        whom = waits_for.get(rank) or {}
        where = waits_in.get(rank) or {}
        job.waits[rank] = RankWait(rank, per_step, max(whom, key=whom.__getitem__) if whom else None,
                                   max(where, key=where.__getitem__) if where else None)
    for rank, wait in caused.items():
        steps = max(1, M.STEPS.of(job.ranks[rank].metrics) or 1)
        job.caused[rank] = round(wait / steps, 1)
    if job.caused:
        worst = max(job.caused, key=lambda r: (job.caused[r], -r))
        job.straggler_wait_us = job.caused[worst]
        step = job.step_us()
        if step and job.caused[worst] >= config.threshold("straggler-min-wait-pct") / 100.0 * step:
            job.straggler = worst


def rank_list(ranks: list[int]) -> str:
    """``rank 3``, ``ranks 3, 7``, ``ranks 2-127`` (runs of three or more as ranges)."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    parts = [f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs]
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(parts)
