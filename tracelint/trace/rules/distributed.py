"""Distributed jobs: communication that nothing overlaps (TL601), the rank the others wait for (TL602), a
pipeline's bubble (TL603) and unequal stages (TL604), and data parallelism set up the slow way: ``nn.DataParallel``
(TL605) and gradient accumulation whose every micro-step reduces the gradients under DDP or FSDP2 (TL606). The
pipeline rules speak only when the pipeline sets the step (its bottleneck stage is gpu-bound or pipeline-bound): a
host-bound pipeline's first fix is its host.

What the traces of TL605 and TL606 show (2 × H200, torch 2.11, NCCL 2.28; fixtures/traces/ddp36):

- ``nn.DataParallel`` is one process driving every GPU: its autograd functions appear as CPU ops named ``Broadcast``
  (replicate: the parameters and buffers copied to each GPU, NCCL ``ncclDevKernel_Broadcast`` kernels through
  torch.cuda.nccl, no ``record_param_comms``), ``Scatter`` (the batch split: peer copies) and ``Gather`` (outputs
  back to the first GPU), and in backward ``ReduceAddCoalesced`` (gradients summed onto the first GPU: NCCL
  ``Reduce`` kernels), ``GatherBackward`` and ``BroadcastBackward``; the forward runs in one host thread per GPU
  (parallel_apply), sharing the GIL. One trace holds the kernels of all its GPUs.
- DDP records ``DistributedDataParallel.forward`` around each forward and its reducer's bucket all-reduces
  (``record_param_comms`` ``allreduce`` + ``nccl:all_reduce``) on the autograd thread during backward;
  ``Optimizer.step#<Class>.step`` marks each optimizer step. Under ``no_sync()`` a backward launches none.
- FSDP2 (``fully_shard``) records ``FSDP::root_pre_forward`` at the start of each forward and, in backward, a
  ``FSDP::post_backward_reduce`` per unit launching a reduce-scatter (``record_param_comms``
  ``_reduce_scatter_base``); under ``set_requires_gradient_sync(False)`` a backward launches none (its all-gathers
  stay: the parameters are gathered for every forward and backward either way).
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import replace
from typing import NamedTuple

from tracelint.engine import Config, Estimate, Finding, Severity, TraceLocation
from tracelint.engine import metrics as M
from tracelint.engine.display import numbered
from tracelint.trace.device_analysis import TraceAnalysis
from tracelint.trace.intervals import merge, overlap
from tracelint.trace.job.communication import is_communication, top_collective
from tracelint.trace.job.pipeline import Pipeline
from tracelint.trace.job.ranks import Job, rank_list
from tracelint.trace.job.straggler import JOB, UNEXPLAINED, Lead
from tracelint.trace.model import TraceModel
from tracelint.trace.recording import step_basis_ms
from tracelint.trace.rule import JobRule, TraceRule
from tracelint.trace.rules._common import finding, ms, pct
from tracelint.trace.verdict import CPU_BOUND, GPU_BOUND, INPUT_BOUND, PIPELINE_BOUND, Verdict

HOST_BOUND = "host-bound"  # cpu- or input-bound ranks in one job


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
    # Sends and recvs are never counted: a pipeline stage's are mostly waiting for its neighbour (TL603, TL604),
    # and overlapping cannot remove that.
    p2p_us = M.EXPOSED_P2P_US.of(m) or 0.0
    total_wait = M.COMM_WAIT_US.of(m)  # per step, known when the job's other ranks were read
    wait_us = None if total_wait is None else max(0.0, total_wait - (M.P2P_WAIT_US.of(m) or 0.0))
    steps = max(1, M.STEPS.of(m) or 1)
    # Waiting for a slower rank is exposed too, but overlapping cannot remove it: that is TL602's.
    own_us = max(0.0, exposed_us - p2p_us - (wait_us or 0.0) * steps)
    own_pct = 100.0 * own_us / window_us
    if own_pct < config.threshold("exposed-comm-min-pct"):
        return None
    overlap = M.COMM_OVERLAP_PCT.of(m)
    waited = f", not counting {ms(wait_us)} per step of waiting for other ranks" if wait_us else ""
    if p2p_us:
        waited += f"; sends and recvs aside ({ms(p2p_us / steps)} per step)"
    if wait_us is None and multi_rank:
        waited = "; part of it may be waiting for other ranks: analyze the folder of all ranks to tell"
    message = (f"communication with no compute beside it takes {pct(own_pct)} of the step window "
               f"({ms(own_us / steps)} per step, mostly {collective or 'collectives'}{waited}); only "
               f"{pct(overlap)} of the communication overlaps compute: let DDP overlap the gradient all-reduce "
               "with backward (no manual all-reduce after backward or under no_sync; bucket_cap_mb), or prefetch "
               "in FSDP (forward/backward prefetch)")
    return message, dict(exposed_comm_pct=round(own_pct, 2), exposed_comm_us_per_step=round(own_us / steps, 1),
                         comm_overlap_pct=overlap, comm_wait_us=wait_us, collective=collective)


class StragglerRank(JobRule):
    code = "TL602"

    def check_job(self, job: Job, verdicts: dict[int, Verdict], config: Config) -> Iterable[Finding]:
        """A warning per group whose waited-for rank is a straggler; one info for the largest lead that may be
        the profiler's (the others are named in it: a desynchronized job shows one in every group)."""
        leads = sorted((lead for lead in job.leads.values() if lead.rank in job.ranks),
                       key=lambda lead: (-lead.wait_us, lead.rank))
        maybe = [lead for lead in leads if lead.cause != JOB]
        for lead in [lead for lead in leads if lead.cause == JOB] + maybe[:1]:
            own = verdicts.get(lead.rank)
            share = 100.0 * lead.wait_us / lead.step_us if lead.step_us else None
            waiting = list(lead.waiting)
            verb = "waits" if len(waiting) == 1 else "wait"
            where = sorted({w.collective for r, w in job.waits.items()
                            if r in lead.waiting and w.waits_for == lead.rank and w.collective})
            cause = f"; its own verdict, the likely cause: {own.evidence}" if own is not None else ""
            if lead.unprofiled:
                message = self._unprofiled(lead, share, cause, _job_kind(verdicts, job.ranks))
            else:
                how = (f"{_ranks(waiting)} {verb} for it {ms(lead.wait_us)} per step ({pct(share)} of the step) in "
                       f"{'/'.join(where) or 'collectives'}, because it reaches them last")
                if lead.cause == JOB:
                    message = (f"rank {lead.rank} is a straggler in {lead.label}: {how}; the profiler cannot have "
                               f"made {ms(lead.job_us)} per step of that lead: {_extra(lead)}{cause}")
                else:
                    others = [f"rank {o.rank} in {o.label}" for o in maybe[1:]]
                    also = f" (as do {', '.join(others)})" if others else ""
                    message = (f"rank {lead.rank} leads {lead.label} in the trace{also}, but the lead may be the "
                               "profiler's: "
                               f"{how}; yet {_extra(lead, 'only ')}: the rest is host time in profiled ops, which the "
                               "profiler slows 1.5-4×, by a different amount on each rank; to check, profile with "
                               "tracelint.profile(...), which times the steps it does not record on every rank")
            loc = TraceLocation(job.path, rank=lead.rank, event=job.ranks[lead.rank].path)
            found = finding(self, message, loc, straggler_rank=lead.rank, wait_us_per_step=lead.wait_us,
                            wait_pct_of_step=None if share is None else round(share, 2), waiting_ranks=waiting,
                            straggler_verdict=own.kind if own is not None else None, group=lead.label,
                            lead_not_profiler_us=lead.job_us, measured=("unprofiled" if lead.unprofiled
                                                                          else "trace"))
            if lead.cause == JOB:
                found = replace(found, estimate=_paced_estimate(job, [lead.rank, *waiting]))
            yield found if lead.cause == JOB else found.with_severity(Severity.INFO)

    @staticmethod
    def _unprofiled(lead: Lead, share: float | None, cause: str, kind: str | None) -> str:
        verb = "waits" if len(lead.waiting) == 1 else "wait"
        measured = (f"measured without the profiler (tracelint.profile, on the steps it did not record), "
                    f"{_ranks(list(lead.waiting))} {verb} up to {ms(lead.wait_us)} per step in collectives "
                    f"({pct(share)} of the {ms(lead.step_us)} unprofiled step)")
        if lead.cause == JOB:
            return (f"rank {lead.rank} is a straggler: {measured}, and rank {lead.rank} waits the least; in the trace "
                    f"{_extra(lead)}{cause}")
        if lead.cause == UNEXPLAINED:
            return (f"rank {lead.rank} may be waited for: {measured}, and rank {lead.rank} waits the least; but in the "
                    f"trace {_extra(lead, 'only ')}, so nothing the profiler cannot have made explains the lead: "
                    f"{_out_of_phase(kind)}")
        return (f"rank {lead.rank} reaches the collectives last in the trace, but the lead is the profiler's: "
                f"{measured}, under straggler-min-wait-pct")


def _paced_estimate(job: Job, ranks: list[int]) -> Estimate | None:
    """What the job's step would be if the straggler kept pace (issue #38: a what-if, not the waiters' spin time,
    which overlaps their own work): the largest of the group's ranks' own GPU compute per step (compute_busy_pct of
    the GPU window: kernels, copies and memsets that are not communication), against the job's step, the slowest
    rank's (unprofiled when its trace has it). Measured on ../shared/traces/multi-gpu/ddp-2xh100: 40.7 ms per step
    estimated for the straggler job, 39.2 ms measured for the same job without the straggler (ddp_default)."""
    paced: list[float] = []
    steps: list[float] = []
    unprofiled = False
    for rank in ranks:
        digest = job.ranks.get(rank)
        if digest is None:
            return None
        m = digest.metrics
        busy, window, n = M.COMPUTE_BUSY_PCT.of(m), M.GPU_WINDOW_US.of(m), M.STEPS.of(m) or 1
        step, timed = step_basis_ms(m)
        unprofiled |= timed
        if busy is None or not window or not step:
            return None
        paced.append(busy / 100.0 * window / n / 1000.0)
        steps.append(float(step))
    S, after = max(steps), max(paced)
    if after >= S:
        return None
    which = "unprofiled" if unprofiled else "profiled"
    basis = ("the job's step if the straggler kept pace: the largest of its group's ranks' own GPU compute per step "
             f"({after:.1f} ms), against the slowest rank's {which} step")
    return Estimate(S - after, S, basis)


_PHASE = ("the GPU-side waits measure how far the hosts run out of phase (a collective spins from its own launch to "
          "the last rank's), not time the job loses")


def _out_of_phase(kind: str | None) -> str:
    """Why recorded waits that the trace gives no cause for may mean little, as far as the job's verdict says."""
    if kind in (CPU_BOUND, INPUT_BOUND, HOST_BOUND):
        return f"on this {kind} job {_PHASE}; compare the ranks' host time per step"
    if kind == GPU_BOUND:
        return ("on this gpu-bound job a GPU-side wait is time the waiting rank loses, yet the leader computes no "
                "more than its waiters in the profiled steps, so the cause lies outside them; compare the ranks' GPU "
                "time per step without the profiler")
    return f"if the job is host-bound, {_PHASE}; compare the ranks' host and GPU time per step"


def _job_kind(verdicts: dict[int, Verdict], ranks) -> str | None:
    """The verdict the job's ranks share (``host-bound`` for cpu- and input-bound ones); None when they differ or
    none is known."""
    kinds = {v.kind for rank, v in verdicts.items() if rank in ranks}
    if len(kinds) > 1 and kinds <= {CPU_BOUND, INPUT_BOUND}:
        return HOST_BOUND
    return kinds.pop() if len(kinds) == 1 else None


def _extra(lead: Lead, only: str = "") -> str:
    """What the profiler cannot have made of a lead: the leader's extra quiet host time and compute."""
    whom = _ranks(list(lead.waiting))
    return (f"its host sits quiet (no profiled op for a millisecond or more) {only}{ms(lead.quiet_us)} per step longer "
            f"than {whom}'s, and its GPU computes {only}{ms(lead.compute_us)} per step more")


def _ranks(ranks: list[int]) -> str:
    return rank_list(ranks) if ranks else "the other ranks"


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
        waited = (f"; {numbered('stage', [s.index for s in others])} wait {span} per step in "
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


# DataParallel's autograd functions (torch/nn/parallel/_functions.py) and their backward nodes, as the profiler
# names them (THPFunction_apply records the class name)
_DP_OPS = frozenset({"Broadcast", "Scatter", "Gather", "ReduceAddCoalesced", "BroadcastBackward", "GatherBackward",
                     "ScatterBackward"})
_OPT_STEP = "Optimizer.step#"


class _Accumulation(NamedTuple):
    """How a data-parallel wrapper shows in a trace: the op that starts each forward (a micro-step) on the main
    thread, the collective that reduces the gradients in backward, and how the user skips it."""

    forward: str
    collective: str
    wrapper: str
    reduces: str  # the wrapper's reduction, as the message says it
    skip: str
    measured: str  # the project's pair
    host_path: str | None = None  # the wrapper's host spans around each reduction, when they are worth counting


_ACCUMULATIONS = (
    _Accumulation("DistributedDataParallel.forward", "all_reduce", "DDP", "bucket all-reduces",
                  "under `with model.no_sync():`",
                  "ResNet-50, 4 micro-steps on 2 × H200: 137.5 -> 131.8 and 135.8 -> 133.1 ms per step in two "
                  "recordings, 1.02-1.04×; the issue's job gained 1.58×"),
    # FSDP2 (fully_shard): one root_pre_forward per forward, a reduce-scatter per FSDP unit in each backward unless
    # set_requires_gradient_sync(False) keeps the unsharded gradients until the last micro-step
    _Accumulation("FSDP::root_pre_forward", "reduce_scatter", "FSDP2", "reduce-scatters",
                  "with `model.set_requires_gradient_sync(False)` (True again for the last), which holds unsharded "
                  "gradients until then",
                  "ResNet-50 under fully_shard, 4 micro-steps on 2 × H200: 295.2 -> 241.4 ms per step, 1.22×",
                  "FSDP::post_backward_reduce"),
)


def _per_device_work(analysis: TraceAnalysis) -> dict[int, float]:
    """Busy time (union of kernels, copies, memsets) per device of the GPU work launched inside the steps."""
    model = analysis.model
    spans: dict[int, list[tuple[float, float]]] = {}
    for g in model.gpu:
        if g.launch is not None and model.step_at(g.launch.start) is not None:
            spans.setdefault(g.device, []).append((g.start, g.end))
    out = {}
    for device, intervals in spans.items():
        starts, ends = merge(intervals)
        out[device] = sum(e - s for s, e in zip(starts, ends, strict=True))
    return out


class DataParallelModule(TraceRule):
    code = "TL605"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        model = analysis.model
        names = model.op_names()
        if "Broadcast" not in names or "Gather" not in names:
            return
        devices = model.devices_with_activity()
        if len(devices) < 2 or analysis.device != devices[0]:
            return  # one finding per trace, on the first GPU (DataParallel's output device)
        ops = [op for op in model.ops if op.name in _DP_OPS and model.step_at(op.start) is not None]
        if not ops:
            return
        n_steps = len(model.steps) or 1
        by_tid: dict[object, list[tuple[float, float]]] = {}
        for op in ops:
            by_tid.setdefault(op.tid, []).append((op.start, op.end))
        dp_host = sum(e - s for spans in by_tid.values() for s, e in zip(*merge(spans), strict=True)) / n_steps
        work = _per_device_work(analysis)
        gpu_us = max(work.values(), default=0.0) / n_steps
        step_us = M.STEP_CPU_US_MEAN.of(analysis.metrics)
        unprofiled = analysis.recording.unprofiled_step_ms
        step_txt = f"a {ms(step_us)} profiled step" if step_us else "the step"
        if unprofiled:
            step_txt += f" ({unprofiled:.1f} ms without the profiler)"
        base_us = unprofiled * 1e3 if unprofiled else step_us
        bound = f" ({base_us / gpu_us:.1f}× at most)" if base_us and gpu_us and base_us > gpu_us else ""
        message = (f"nn.DataParallel drives {len(devices)} GPUs from one process: each step replicates the model "
                   f"(Broadcast), scatters the batch, runs the forward in a host thread per GPU, "
                   f"all sharing one GIL, and gathers the outputs on GPU {devices[0]}; its Broadcast/Scatter/"
                   f"Gather/ReduceAddCoalesced ops take {ms(dp_host)} of host time per step, and the busiest GPU works "
                   f"{ms(gpu_us)} in {step_txt}. Use DistributedDataParallel, one process per GPU (torchrun): no "
                   "replication or gather per step, gradients all-reduced during backward, a host thread and GIL "
                   f"per GPU; the step can approach the GPUs' own work, {ms(gpu_us)}{bound}, bounded below by it "
                   "(the project's ResNet-50 pair on 2 × H200: 97.1 and 117.0 -> 33.9 ms per step in two recordings, "
                   "2.9-3.5×)")
        first = ops[0]
        loc = analysis.location(step=model.step_at(first.start), op=first)
        yield finding(self, message, loc, gpus=len(devices), dp_host_us_per_step=round(dp_host, 1),
                      gpu_work_us_per_step=round(gpu_us, 1), step_us=step_us,
                      unprofiled_step_ms=unprofiled)


class GradientAccumulationWithoutNoSync(TraceRule):
    code = "TL606"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        model = analysis.model
        main = model.main_tid
        names = model.op_names()
        kind = next((a for a in _ACCUMULATIONS if a.forward in names), None)
        if kind is None or main is None:
            return
        _, main_ops = model.ops_on(main)
        forwards = [op.start for op in main_ops if op.name == kind.forward]
        opt_steps = [op for op in main_ops if op.name.startswith(_OPT_STEP)]
        # the reductions by their launch: the backward's host time decides the micro-step, not the GPU's
        reduces = sorted(g.launch.start for g in analysis.gpu_events if g.launch is not None
                         and (args := model.collectives.get(g.correlation)) is not None
                         and args.collective == kind.collective)
        if len(forwards) < 2 or not opt_steps or not reduces:
            return
        windows = total = redundant = micro = 0
        prev = float("-inf")
        extra_windows: list[tuple[float, float]] = []  # the micro-steps whose reductions are redundant
        for opt in opt_steps:
            fwd = [t for t in forwards if prev < t <= opt.start]
            prev = opt.end
            if len(fwd) < 2 or model.step_at(opt.start) is None:
                continue
            bounds = fwd + [opt.start]
            counts = [sum(1 for t in reduces if a <= t < b) for a, b in zip(bounds, bounds[1:], strict=False)]
            reducing = [i for i, c in enumerate(counts) if c]
            windows += 1
            micro += len(fwd)
            total += sum(counts)
            if len(reducing) >= 2:
                redundant += sum(counts[i] for i in reducing[:-1])
                extra_windows += [(bounds[i], bounds[i + 1]) for i in reducing[:-1]]
        if not redundant:
            return
        n_steps = len(model.steps) or 1
        k = micro / windows
        # The reduction kernels' time on this device and the part with no compute beside it; the redundant ones
        # are their share by count (the buckets or units are the same in every backward).
        spans = [(c.start, c.end) for c in analysis.comm if c.kernel and c.collective == kind.collective]
        compute = merge((g.start, g.end) for g in analysis.gpu_events if not is_communication(g, analysis))
        starts, ends = merge(spans)
        red_all_us = sum(e - s for s, e in zip(starts, ends, strict=True))
        exposed_us = red_all_us - sum(overlap(compute, s, e) for s, e in zip(starts, ends, strict=True))
        share = redundant / total if total else 0.0
        red_us, red_exposed = share * red_all_us / n_steps, share * exposed_us / n_steps
        host_us = _host_time(model, kind.host_path, extra_windows) / n_steps if kind.host_path else 0.0
        host_bound = verdict.kind in (CPU_BOUND, INPUT_BOUND)
        gain_us = max(red_exposed, host_us) if host_bound else red_exposed
        host = ""
        if host_us:
            host = (f"; {kind.wrapper}'s host code around them ({kind.host_path}) takes {ms(host_us)} per step"
                    + (", and this rank is host-bound" if host_bound else ""))
        message = (f"gradient accumulation over {k:.0f} micro-steps per optimizer step, and {kind.wrapper} reduces "
                   f"the gradients in each backward: {redundant / windows:.0f} of {total / windows:.0f} "
                   f"{kind.reduces} per optimizer step are redundant (one reduction after the last micro-step gives "
                   f"the same gradients); their kernels take about {ms(red_us)} per step, {ms(red_exposed)} of it "
                   f"with no compute beside it ({pct(100.0 * share)} of this rank's {kind.reduces} by count){host}. "
                   f"Run the first micro-steps' forward and backward {kind.skip}: the step sheds up to "
                   f"{ms(gain_us)}, "
                   + ("that host time (read under the profiler, which slows host code)" if gain_us > red_exposed
                      else "the exposed part (an upper bound: an NCCL kernel spins while it waits for the other "
                      "ranks, and the profiler makes ranks arrive apart), plus whatever the overlapped part slows "
                      "backward by sharing the GPU")
                   + f" (the project's {kind.measured})")
        first_extra = extra_windows[0][0]
        loc = analysis.location(step=model.step_at(first_extra), start=first_extra, event=kind.forward, tid=main)
        yield finding(self, message, loc, wrapper=kind.wrapper, collective=kind.collective, micro_steps=round(k, 1),
                      reductions_per_step=round(total / windows, 1),
                      redundant_reductions_per_step=round(redundant / windows, 1),
                      redundant_reduction_us_per_step=round(red_us, 1),
                      redundant_exposed_us_per_step=round(red_exposed, 1), redundant_host_us_per_step=round(host_us, 1))


def _host_time(model: TraceModel, prefix: str, windows: list[tuple[float, float]]) -> float:
    """The host time (union per thread) of the ops named ``prefix...`` that start inside one of ``windows``."""
    starts = [a for a, _ in windows]
    by_tid: dict[object, list[tuple[float, float]]] = {}
    for op in model.ops:
        if op.name.startswith(prefix) and (i := bisect_right(starts, op.start) - 1) >= 0 and op.start < windows[i][1]:
            by_tid.setdefault(op.tid, []).append((op.start, op.end))
    return sum(e - s for spans in by_tid.values() for s, e in zip(*merge(spans), strict=True))
