"""The ranks of one job read together: their collectives matched and sends paired with recvs, the clocks, each rank's
wait for its peers per process group, the straggler of each group, and the pipeline when the job is one.

The job reads each rank's **digest** (``RankDigest``: headline metrics, communication kernels numbered by
ProfilerStep with their process group and peers, per-step GPU span, compute and quiet host time — what the verdict
is decided from), never its events: a rank analyzed in a worker process or on a Dask cluster sends back only that
(tracelint.trace.analyze). The work is split by what it reads:

- tracelint.trace.job.process_groups: collectives matched within each process group, the waits (a union of intervals,
  within a group and over all of them), and the rank each group waits for;
- tracelint.trace.job.p2p_pairs: every send paired with its recv;
- tracelint.trace.job.pipeline: stages, microbatches, bubble and bottleneck of a pipeline-parallel job;
- tracelint.trace.job.straggler: whether the rank a group waits for leads because of the job or maybe because of the
  profiler (TL602's severity).

**Clocks.** Ranks on one host share a clock. A collective completes at about the same moment on every rank, so the
clock offset of a rank against the lowest rank is the median difference of the ends of their matched collectives.
When an offset is over ``CLOCK_TOLERANCE_US`` the ranks ran on hosts whose clocks disagree: starts are aligned by
those offsets and the report says so. Below it the clocks are taken as shared (on one host the ends agree within a
few µs: 5 µs at most on the 8-rank DLRM traces of the public corpus). A send and its recv do not end together (a
send can complete before its recv starts), so pairs set no clock: a job of sends and recvs only keeps shared clocks.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from tracelint.engine import Config
from tracelint.engine.display import numbered
from tracelint.trace.job import p2p_pairs, pipeline, process_groups
from tracelint.trace.job.p2p_pairs import Unpaired
from tracelint.trace.job.pipeline import Pipeline
from tracelint.trace.job.process_groups import GroupStats, RankWait
from tracelint.trace.job.rank_digest import Collective, RankDigest, step_us
from tracelint.trace.job.straggler import JOB, Lead, judge

__all__ = ["CLOCK_TOLERANCE_US", "Job", "analyze_job", "rank_list"]

CLOCK_TOLERANCE_US = 50.0


@dataclass(slots=True)
class Job:
    ranks: dict[int, RankDigest]  # by rank
    path: str = ""  # the job's directory
    matched: int = 0  # collectives matched (each counted once, not once per rank)
    unmatched: int = 0  # collective kernels, over all ranks, left out of the matching
    p2p_paired: int = 0  # sends paired with their recvs
    unpaired: list[Unpaired] = field(default_factory=list)  # sends and recvs that could not be paired, and why
    offsets: dict[int, float] = field(default_factory=dict)  # µs subtracted from a rank's clock (0: shared)
    offset_max: float | None = None  # the largest estimated offset, applied or not
    aligned: bool = False  # offsets were applied: the ranks' clocks disagree (several hosts)
    waits: dict[int, RankWait] = field(default_factory=dict)
    groups: dict[tuple, GroupStats] = field(default_factory=dict)  # by group key (tracelint.trace.job.process_groups)
    leads: dict[tuple | None, Lead] = field(default_factory=dict)  # why a group's waited-for rank leads
    pipeline: Pipeline | None = None

    def step_us(self) -> float | None:
        """The job's mean step time over the ranks."""
        times = [t for t in (step_us(r.metrics) for r in self.ranks.values()) if t]
        return statistics.fmean(times) if times else None

    @property
    def waited_for(self) -> GroupStats | None:
        """The group (not of sends and recvs) whose waited-for rank causes the most waiting per step."""
        found = [g for g in self.groups.values() if g.waited_for is not None and not g.p2p]
        return max(found, key=lambda g: (g.wait_us, -g.waited_for)) if found else None

    @property
    def straggler_lead(self) -> Lead | None:
        """The lead that makes a straggler (the job's, not maybe the profiler's), the largest when several."""
        found = [lead for lead in self.leads.values() if lead.cause == JOB]
        return max(found, key=lambda lead: (lead.wait_us, -lead.rank)) if found else None

    @property
    def straggler(self) -> int | None:
        lead = self.straggler_lead
        return None if lead is None else lead.rank


def analyze_job(ranks: dict[int, RankDigest], config: Config | None = None) -> Job:
    """Match the collectives and pair the sends and recvs of the ranks (their digests by rank), estimate the clocks,
    measure the waits per process group, read the pipeline and judge each group's lead; sets each rank's wait
    metrics (``comm_wait_us``, ``p2p_wait_us``, ``p2p_transfer_us``, ``comm_groups``) and its stage's."""
    config = config or Config()
    job = Job(dict(sorted(ranks.items())))
    matched, job.unmatched = process_groups.match_collectives(job.ranks)
    pairs, job.unpaired = p2p_pairs.pair(job.ranks)
    job.matched, job.p2p_paired = len(matched), len(pairs)
    if not matched and not pairs:
        return job
    _clocks(job, [column for _, column in matched])
    job.waits, job.groups = process_groups.measure_waits(job.ranks, job.offsets, matched, pairs)
    job.pipeline = pipeline.read_pipeline(job.ranks, pairs, job.waits)
    job.leads = judge(job.ranks, job.groups, job.step_us(), config, pipeline=job.pipeline is not None)
    return job


def _clocks(job: Job, matched: list[dict[int, Collective]]) -> None:
    if not matched:
        job.offsets = dict.fromkeys(job.ranks, 0.0)
        return
    ref = min(r for column in matched for r in column)
    offsets: dict[int, float] = {}
    for rank in job.ranks:
        diffs = [column[rank].end - column[ref].end for column in matched if rank in column and ref in column]
        offsets[rank] = statistics.median(diffs) if diffs else 0.0
    job.offset_max = round(max(abs(v) for v in offsets.values()), 1)
    job.aligned = job.offset_max > CLOCK_TOLERANCE_US
    job.offsets = offsets if job.aligned else dict.fromkeys(offsets, 0.0)


def rank_list(ranks: list[int]) -> str:
    """``rank 3``, ``ranks 3, 7``, ``ranks 2-127`` (runs of three or more as ranges)."""
    return numbered("rank", ranks)
