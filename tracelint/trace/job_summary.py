"""The job summary: one more Report after the ranks of a job, with the spread of the ranks, who waits for whom, the
pipeline when the job is one, the job's verdict and the job rules' findings.

The job's verdict: for a pipeline (tracelint.trace.job.pipeline), ``pipeline-bound`` when its bottleneck stage (the one
the others wait for) is ``gpu-bound`` or ``pipeline-bound`` — the pipeline sets the step — else the bottleneck
stage's verdict (a host-bound pipeline stays ``cpu-bound``); otherwise the straggler's when the job has one (it is
what to fix), else the slowest rank's (largest mean step time).
"""
from __future__ import annotations

from tracelint.engine import Config, Finding, TraceSummary
from tracelint.engine import metrics as M
from tracelint.engine.display import numbered
from tracelint.trace.job.ranks import Job, rank_list
from tracelint.trace.report import Report
from tracelint.trace.rule import JobRule, enabled_rules
from tracelint.trace.verdict import GPU_BOUND, PIPELINE_BOUND, Verdict

_UNPAIRED_SHOWN = 3


def summarize_job(directory: str, members: list[Report], job: Job, config: Config,
                  missing: str | None = None) -> Report:
    """The job summary (module docstring); ``missing``: the note on the ranks without a Report."""
    def step_time(report: Report) -> float:
        m = report.metrics
        return M.STEP_CPU_US_MEAN.of(m) or M.STEP_GPU_SPAN_US_MEAN.of(m) or 0.0

    ordered = sorted(members, key=step_time)
    fastest, slowest = ordered[0], ordered[-1]
    slow_t, fast_t = step_time(slowest), step_time(fastest)
    spread = round(100.0 * (slow_t - fast_t) / fast_t, 1) if fast_t else None
    busy = [M.GPU_BUSY_PCT.of(r.metrics) for r in members if M.GPU_BUSY_PCT.of(r.metrics) is not None]
    waits = [w.wait_us for w in job.waits.values()]
    group = job.waited_for
    lead = job.straggler_lead
    metrics = {
        "ranks": len(members),
        "world_size": job.ranks[slowest.summaries[0].rank].world_size,
        "slowest_rank": slowest.summaries[0].rank,
        "fastest_rank": fastest.summaries[0].rank,
        "step_cpu_us_max": slow_t,
        "step_cpu_us_min": fast_t,
        "step_spread_pct": spread,
        "gpu_busy_pct_min": min(busy) if busy else None,
        "gpu_busy_pct_max": max(busy) if busy else None,
        "verdicts": {r.summaries[0].rank: r.verdict for r in members},
        "waited_for_rank": group.waited_for if group is not None else None,
        "straggler_rank": job.straggler,
        "straggler_wait_us": lead.wait_us if lead is not None else group.wait_us if group is not None else None,
        "comm_wait_us_max": max(waits) if waits else None,
        "collectives_matched": job.matched,
        "collectives_unmatched": job.unmatched,
        "clock_offset_us_max": job.offset_max,
    }
    p2p = bool(job.p2p_paired or job.unpaired)  # the job's sends and recvs: None without any
    metrics[M.P2P_MATCHED.name] = job.p2p_paired if p2p else None
    metrics[M.P2P_UNMATCHED.name] = sum(u.count for u in job.unpaired) if p2p else None
    metrics.update(_pipeline_metrics(job))
    by_rank = {r.summaries[0].rank: r for r in members}
    verdicts = {rank: Verdict(r.verdict, r.evidence) for rank, r in by_rank.items()}
    verdict = _verdict(job, by_rank, slowest, slow_t, spread)
    notes: tuple[str, ...] = (missing,) if missing else ()
    if job.aligned:
        notes += (f"the ranks' clocks disagree by up to {job.offset_max / 1000:.2f} ms (several hosts): starts were "
                  "aligned on the ends of the matched collectives",)
    if job.unpaired:
        count = sum(u.count for u in job.unpaired)
        shown = "; ".join(map(str, job.unpaired[:_UNPAIRED_SHOWN]))
        more = f"; and {len(job.unpaired) - _UNPAIRED_SHOWN} more" if len(job.unpaired) > _UNPAIRED_SHOWN else ""
        notes += (f"{count} send{'s' if count != 1 else ''}/recvs could not be paired with their peer's: "
                  f"{shown}{more}",)
    findings: list[Finding] = []
    for rule in enabled_rules(config, JobRule):
        for finding in rule.check_job(job, verdicts, config):
            kept = config.apply(finding)
            if kept is not None:
                findings.append(kept)
    findings.sort(key=Finding.sort_key)
    summary = TraceSummary(directory, verdict.kind, verdict.evidence, metrics, rank=None, warnings=notes)
    return Report(directory, [summary], findings, notes)


_PIPELINE = (M.PIPELINE_STAGES, M.PIPELINE_MICROBATCHES, M.PIPELINE_BUBBLE_PCT, M.PIPELINE_BUBBLE_ANALYTIC_PCT,
             M.BOTTLENECK_STAGE, M.BOTTLENECK_RANK, M.STAGE_IMBALANCE_PCT, M.PIPELINE_BALANCED_STEP_US)


def _pipeline_metrics(job: Job) -> dict:
    """The pipeline's metrics, None for a job that is no pipeline."""
    p = job.pipeline
    values = (len(p.stages), p.microbatches, p.bubble_pct, p.analytic_pct, p.bottleneck.index, p.bottleneck.rank,
              p.imbalance_pct, p.balanced_step_us) if p is not None else (None,) * len(_PIPELINE)
    return dict(zip((m.name for m in _PIPELINE), values, strict=True))


def _verdict(job: Job, by_rank: dict[int, Report], slowest: Report, slow_t: float, spread: float | None) -> Verdict:
    if job.pipeline is not None and job.pipeline.bottleneck.rank in by_rank:
        return _pipeline_verdict(job, by_rank)
    lead = job.straggler_lead
    if lead is not None and lead.rank in by_rank:
        straggler = by_rank[lead.rank]
        whom = rank_list(list(lead.waiting)) if len(lead.waiting) < 4 else f"{len(lead.waiting)} ranks"
        verb = "waits" if len(lead.waiting) == 1 else "wait"
        where = {w.collective for w in job.waits.values() if w.waits_for == lead.rank and w.collective}
        how = " (measured without the profiler)" if lead.unprofiled else f" in {lead.label}"
        return Verdict(straggler.verdict, f"{straggler.verdict}: rank {lead.rank} is the straggler{how}: {whom} "
                                          f"{verb} for it {lead.wait_us / 1000:.1f} ms per step"
                                          f"{' in ' + '/'.join(sorted(where)) if where else ''}; rank {lead.rank}: "
                                          f"{straggler.evidence.partition(': ')[2]}")
    rank = slowest.summaries[0].rank
    return Verdict(slowest.verdict, f"{slowest.verdict}: slowest of {len(by_rank)} ranks is rank {rank} "
                                    f"({slow_t / 1000:.1f} ms per step, {spread if spread is not None else '?'}% over "
                                    f"the fastest); {slowest.evidence.partition(': ')[2]}")


def _pipeline_verdict(job: Job, by_rank: dict[int, Report]) -> Verdict:
    """``stage 3 (rank 3) computes 79% of its step ...``: the bottleneck, the others' waits, the bubble."""
    p = job.pipeline
    b = p.bottleneck
    own = by_rank[b.rank]
    others = [s for s in p.stages if s is not b]
    waits = [100.0 * s.p2p_wait_us / s.step_us for s in others if s.step_us]
    computes = [100.0 - s.bubble_pct for s in others]
    shape = (f"{len(p.stages)} stages × {p.microbatches} microbatches" if p.microbatches
             else f"{len(p.stages)} stages")
    than = f"{abs(p.imbalance_pct):.0f}% {'more' if p.imbalance_pct >= 0 else 'less'} than the mean stage"
    by = " run by torch.distributed.pipelining" if p.frames else ""
    text = (f"stage {b.index} (rank {b.rank}), the bottleneck of {shape}{by} (the stage the others wait for), "
            f"computes {100.0 - b.bubble_pct:.0f}% of its step, {than}")
    if others:
        stages = numbered("stage", [s.index for s in others])
        text += f"; {stages} compute {_span(computes)}% and wait {_span(waits)}% of their step in send/recv"
    text += f"; the stages compute nothing {p.bubble_pct:.0f}% of the time"
    if p.analytic_pct is not None:
        text += f", where equal stages would leave {p.analytic_pct:.0f}% (the GPipe/1F1B bubble of {shape})"
    if own.verdict in (GPU_BOUND, PIPELINE_BOUND):
        return Verdict(PIPELINE_BOUND, f"pipeline-bound: {text}")
    return Verdict(own.verdict, f"{own.verdict}: a pipeline whose bottleneck stage waits on its host: {text}; "
                                f"rank {b.rank}: {own.evidence.partition(': ')[2]}")


def _span(values: list[float]) -> str:
    lo, hi = round(min(values)), round(max(values))
    return f"{lo}" if lo == hi else f"{lo}-{hi}"
