"""Pipeline-parallel jobs (tracelint.trace.pipeline): the bubble even the bottleneck stage cannot fill (TL603) and
stages of unequal compute that leave the others waiting for one (TL604). Both speak only when the pipeline sets the
step — its bottleneck stage is gpu-bound or pipeline-bound — since a host-bound pipeline's first fix is its host."""
from __future__ import annotations

from collections.abc import Iterable

from tracelint.engine import Config, Finding, TraceLocation
from tracelint.trace.job import Job, rank_list
from tracelint.trace.pipeline import Pipeline
from tracelint.trace.rule import JobRule
from tracelint.trace.rules._common import finding, ms, pct
from tracelint.trace.verdict import GPU_BOUND, PIPELINE_BOUND, Verdict


def _paced(job: Job, verdicts: dict[int, Verdict]) -> Pipeline | None:
    """The job's pipeline when it sets the step (its bottleneck stage is not waiting on its host)."""
    p = job.pipeline
    if p is None:
        return None
    own = verdicts.get(p.bottleneck.rank)
    return p if own is not None and own.kind in (GPU_BOUND, PIPELINE_BOUND) else None


def _shape(p: Pipeline) -> str:
    return f"{len(p.stages)} stages with {p.microbatches} microbatches per step" if p.microbatches else \
        f"{len(p.stages)} stages"


def _location(job: Job, rank: int) -> TraceLocation:
    return TraceLocation(job.path, rank=rank, event=job.ranks[rank].path)


class PipelineBubble(JobRule):
    code = "TL603"

    def check_job(self, job: Job, verdicts: dict[int, Verdict], config: Config) -> Iterable[Finding]:
        p = _paced(job, verdicts)
        if p is None:
            return
        b = p.bottleneck
        if b.bubble_pct < config.threshold("pipeline-bubble-min-pct"):
            return
        shape = _shape(p)
        analytic = ""
        if p.analytic_pct is not None:
            n, m = len(p.stages), p.microbatches
            doubled = 100.0 * (n - 1) / (2 * m + n - 1)
            analytic = (f"; with equal stages GPipe and 1F1B leave (p - 1)/(m + p - 1) = {pct(p.analytic_pct)} idle, "
                        f"{pct(doubled)} with {2 * m} microbatches")
        message = (f"the pipeline's bottleneck, stage {b.index} (rank {b.rank}), computes nothing "
                   f"{pct(b.bubble_pct)} of its step ({ms(b.step_us - b.compute_us)} per step): it waits for "
                   f"{shape} to fill and drain{analytic}; use more microbatches per step (smaller ones, or a larger "
                   "batch) or a schedule with a smaller bubble (ScheduleInterleaved1F1B with several stages per rank, "
                   "ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble)")
        yield finding(self, message, _location(job, b.rank), bottleneck_stage=b.index, bottleneck_rank=b.rank,
                      stage_bubble_pct=b.bubble_pct, pipeline_bubble_pct=p.bubble_pct,
                      pipeline_bubble_analytic_pct=p.analytic_pct, stages=len(p.stages), microbatches=p.microbatches)


class PipelineStageImbalance(JobRule):
    code = "TL604"

    def check_job(self, job: Job, verdicts: dict[int, Verdict], config: Config) -> Iterable[Finding]:
        p = _paced(job, verdicts)
        if p is None or p.imbalance_pct < config.threshold("stage-imbalance-min-pct"):
            return
        b = p.bottleneck
        mean = sum(s.compute_us for s in p.stages) / len(p.stages)
        light = min(p.stages, key=lambda s: (s.compute_us, s.index))
        others = [s for s in p.stages if s is not b]
        waits = sorted(s.p2p_wait_us for s in others)
        step = sum(s.step_us for s in p.stages) / len(p.stages)
        span = ms(waits[0]) if round(waits[0], -2) == round(waits[-1], -2) else \
            f"{waits[0] / 1000:.1f}-{ms(waits[-1])}"
        waited = (f"; {rank_list([s.index for s in others]).replace('rank', 'stage', 1)} wait {span} per step in "
                  "send/recv" if others else "")
        balanced = ""
        if p.balanced_step_us is not None and p.balanced_step_us < step:
            balanced = (f"; with stages of equal compute the step would take about {ms(p.balanced_step_us)} instead "
                        f"of {ms(step)} ({pct(100.0 * (p.balanced_step_us / step - 1.0))})")
        ends = {0: "the first stage also runs the embeddings", len(p.stages) - 1:
                "the last stage also runs the output layer, such as an LM head, and the loss"}
        where = f" ({ends[b.index]}: give it fewer blocks)" if b.index in ends else ""
        message = (f"stage {b.index} (rank {b.rank}) computes {ms(b.compute_us)} per step, {pct(p.imbalance_pct)} "
                   f"more than the mean stage ({ms(mean)}), and the others wait for it{waited}{balanced}: move layers "
                   f"off stage {b.index}{where} toward the lightest, stage {light.index} ({ms(light.compute_us)}) — "
                   "the split points of torch.distributed.pipelining's pipeline() or the modules of each "
                   "PipelineStage")
        yield finding(self, message, _location(job, b.rank), bottleneck_stage=b.index, bottleneck_rank=b.rank,
                      stage_imbalance_pct=p.imbalance_pct, stage_compute_us=b.compute_us,
                      mean_stage_compute_us=round(mean, 1), balanced_step_us=p.balanced_step_us)
