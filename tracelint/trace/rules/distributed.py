"""Distributed jobs: communication that nothing overlaps (TL601) and the rank the others wait for (TL602)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from tracelint.engine import Config, Finding, TraceLocation
from tracelint.engine import metrics as M
from tracelint.trace.analysis import TraceAnalysis
from tracelint.trace.comm import top_collective
from tracelint.trace.job import Job, rank_list
from tracelint.trace.rule import JobRule, TraceRule
from tracelint.trace.rules._common import finding, ms, pct
from tracelint.trace.verdict import Verdict


class ExposedCommunication(TraceRule):
    code = "TL601"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        collective = top_collective(analysis)
        found = _exposed(analysis.metrics, collective, (analysis.model.world_size or 1) > 1, config)
        if found is None:
            return
        first = next((c for c in analysis.comm if c.collective == collective), analysis.comm[0])
        loc = analysis.location(step=first.step, start=first.start, end=first.end, event=first.name)
        yield finding(self, found[0], loc, **found[1])

    @staticmethod
    def in_job(alone: Finding, metrics: dict, config: Config) -> Finding | None:
        """The finding of a rank checked alone, once its job has set the rank's ``comm_wait_us`` in ``metrics``:
        the wait is no longer counted as its own exposed communication, so the finding may go (None) or shrink.
        Needs no analysis: a rank analyzed in a worker process comes back as its Report and metrics."""
        if M.COMM_WAIT_US.of(metrics) is None:
            return alone
        found = _exposed(metrics, dict(alone.details).get("collective"), True, config)
        if found is None:
            return None
        return replace(alone, message=found[0], details=tuple(found[1].items()))


def _exposed(m: dict, collective: str | None, multi_rank: bool, config: Config) -> tuple[str, dict] | None:
    """TL601's message and details for a device's metrics, or None when its own exposed communication is small."""
    exposed_us, window_us = M.EXPOSED_COMM_US.of(m), M.GPU_WINDOW_US.of(m)
    if exposed_us is None or not window_us:
        return None
    wait_us = M.COMM_WAIT_US.of(m)  # per step, known when the job's other ranks were read
    steps = max(1, M.STEPS.of(m) or 1)
    # Waiting for a slower rank is exposed too, but overlapping cannot remove it: that is TL602's.
    own_us = max(0.0, exposed_us - (wait_us or 0.0) * steps)
    own_pct = 100.0 * own_us / window_us
    if own_pct < config.threshold("exposed-comm-min-pct"):
        return None
    overlap = M.COMM_OVERLAP_PCT.of(m)
    waited = f", not counting {ms(wait_us)} per step of waiting for other ranks" if wait_us else ""
    if wait_us is None and multi_rank:
        waited = "; part of it may be waiting for other ranks: analyze the folder of all ranks to tell"
    message = (f"communication with no compute beside it takes {pct(own_pct)} of the step window "
               f"({ms(own_us / steps)} per step, mostly {collective or 'peer copies'}{waited}); only "
               f"{pct(overlap)} of the communication overlaps compute: let DDP overlap the gradient all-reduce "
               "with backward (no manual all-reduce after backward or under no_sync; bucket_cap_mb), or prefetch "
               "in FSDP (forward/backward prefetch)")
    return message, dict(exposed_comm_pct=round(own_pct, 2), exposed_comm_us_per_step=round(own_us / steps, 1),
                         comm_overlap_pct=overlap, comm_wait_us=wait_us, collective=collective)


class StragglerRank(JobRule):
    code = "TL602"

    def check_job(self, job: Job, verdicts: dict[int, Verdict], config: Config) -> Iterable[Finding]:
        rank = job.straggler
        if rank is None or job.straggler_wait_us is None:
            return
        step = job.step_us()
        share = 100.0 * job.straggler_wait_us / step if step else None
        own = verdicts.get(rank)
        waiting = sorted(r for r, w in job.waits.items() if w.waits_for == rank and w.wait_us > 0)
        where = sorted({w.collective for w in job.waits.values() if w.waits_for == rank and w.collective})
        cause = f"; its own verdict, the likely cause: {own.evidence}" if own is not None else ""
        verb = "waits" if len(waiting) == 1 else "wait"
        message = (f"rank {rank} is a straggler: {_ranks(waiting)} {verb} for it {ms(job.straggler_wait_us)} per step "
                   f"({pct(share)} of the step) in {'/'.join(where) or 'collectives'}, because it reaches them "
                   f"last{cause}")
        loc = TraceLocation(job.path, rank=rank, event=job.ranks[rank].path)
        yield finding(self, message, loc, straggler_rank=rank, wait_us_per_step=job.straggler_wait_us,
                      wait_pct_of_step=None if share is None else round(share, 2), waiting_ranks=waiting,
                      straggler_verdict=own.kind if own is not None else None)


def _ranks(ranks: list[int]) -> str:
    return rank_list(ranks) if ranks else "the other ranks"
