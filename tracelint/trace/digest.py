"""What the job needs of one rank's trace (``RankDigest``), small enough to come back from a worker process: headline
metrics, communication kernels numbered by ProfilerStep with their process group and peers, and per step the GPU
span, the compute in it and the host's quiet time. The ranks are read together from these (tracelint.trace.job),
never from their events.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from heapq import merge as merge_sorted
from typing import TYPE_CHECKING, NamedTuple

from tracelint.engine import metrics as M
from tracelint.trace.comm import P2POp, compute_of, group_times
from tracelint.trace.intervals import overlap

if TYPE_CHECKING:
    from tracelint.trace.analysis import TraceAnalysis
    from tracelint.trace.recording import Recording

# A stretch this long with no profiled op on any launching thread is no per-op cost of the profiler (microseconds
# per op; with_stack's Python frames tens of µs per call): the host sleeps, waits or runs un-profiled work.
QUIET_MIN_US = 1000.0


class Collective(NamedTuple):
    """One communication kernel of a rank, launched in a step: what matching and waiting read of it."""

    start: float
    end: float
    collective: str | None  # all_reduce, all_gather, send_recv ... as in tracelint.trace.comm
    group: str | None
    in_nelems: int | None
    step: int | None  # the ProfilerStep number (not a step index: read without the model)
    group_ranks: tuple[int, ...] | None = None
    group_desc: str | None = None
    p2p: tuple[P2POp, ...] = ()  # the sends and recvs of a p2p kernel

    @property
    def group_key(self) -> tuple[str | None, tuple[int, ...] | None]:
        return self.group, self.group_ranks


class StepDigest(NamedTuple):
    """One profiled step of a rank: its GPU span, the compute in it, and the host's quiet time."""

    number: int | None
    gpu_start: float | None
    gpu_end: float | None
    compute_us: float  # the union of compute intervals within the GPU span
    quiet_us: float  # host stretches of QUIET_MIN_US or longer with no profiled op on a launching thread


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
    steps: tuple[StepDigest, ...] = ()
    group_times: dict = field(default_factory=dict)  # group key -> (communication µs, exposed µs) over the window
    pipelining_frames: int = 0


def digest_of(analysis: TraceAnalysis, truncated: bool) -> RankDigest:
    """The digest of a rank's headline device (its busiest: the first device of its Report). The per-step figures
    are only gathered for a rank of a job (a rank and a world size over one): a lone trace never needs them."""
    model = analysis.model
    firsts = [seq[0].start for seq in (model.steps, model.ops, model.gpu) if seq]
    comm = tuple(Collective(c.start, c.end, c.collective, c.group, c.in_nelems, analysis.step_number(c.step),
                            c.group_ranks, c.group_desc, c.p2p)
                 for c in analysis.comm if c.kernel)
    in_job = model.rank is not None and (model.world_size or 0) > 1
    return RankDigest(analysis.path, analysis.rank, model.world_size, min(firsts) if firsts else None,
                      analysis.metrics, comm, analysis.recording, analysis.device is None, truncated,
                      _step_digests(analysis) if in_job else (), group_times(analysis) if in_job else {},
                      model.pipelining_frames)


def _step_digests(analysis: TraceAnalysis) -> tuple[StepDigest, ...]:
    compute = compute_of(analysis)
    quiet = _quiet_host(analysis)
    out = []
    for i, s in enumerate(analysis.steps):
        busy = overlap(compute, s.gpu_start, s.gpu_end) if s.gpu_start is not None else 0.0
        out.append(StepDigest(s.number, s.gpu_start, s.gpu_end, busy, quiet[i] if i < len(quiet) else 0.0))
    return tuple(out)


def _quiet_host(analysis: TraceAnalysis) -> list[float]:
    """Per step (CPU span): the stretches of QUIET_MIN_US or longer in which no thread that launched the device's
    work runs a profiled op, record_function range or runtime call. A range counts even where it encloses no op:
    the Python it runs there (``Optimizer.zero_grad``'s loop over parameters) is what ``with_stack`` slows; a sleep
    inside a range of the user's is therefore not seen as quiet (the lead is then called maybe the profiler's)."""
    model = analysis.model
    if not model.steps:
        return []
    tids = {g.launch.tid for g in analysis.gpu_events if g.launch is not None and g.step is not None}
    calls = [c for c in model.runtime if c.tid in tids]  # a launch or a sync outside any op is no quiet time
    ops = merge_sorted(calls, *(model.ops_on(tid)[1] for tid in tids), key=lambda op: op.start)
    steps = model.steps
    starts = model.step_starts
    quiet = [0.0] * len(steps)
    reach = -float("inf")

    def add(a: float, b: float) -> None:
        i = max(0, bisect_right(starts, a) - 1)
        while i < len(steps) and steps[i].start < b:
            lo, hi = max(a, steps[i].start), min(b, steps[i].end)
            if hi - lo > 0:
                quiet[i] += hi - lo
            i += 1

    for op in ops:
        if op.start - reach >= QUIET_MIN_US:
            add(max(reach, steps[0].start), op.start)
        reach = max(reach, op.end)
    if steps[-1].end - reach >= QUIET_MIN_US:
        add(max(reach, steps[0].start), steps[-1].end)
    return quiet


def step_us(m: dict) -> float | None:
    """A rank's mean step time from its metrics: the longer of its CPU step span and the GPU span of its steps (a
    host that runs ahead of its GPU has short CPU steps), else its window per step."""
    value = max(M.STEP_CPU_US_MEAN.of(m) or 0.0, M.STEP_GPU_SPAN_US_MEAN.of(m) or 0.0)
    if not value and M.GPU_WINDOW_US.of(m):
        value = M.GPU_WINDOW_US.of(m) / max(1, M.STEPS.of(m) or 1)
    return value
