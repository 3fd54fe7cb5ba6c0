"""What the job needs of one rank's trace (``RankDigest``), small enough to come back from a worker process: headline
metrics, communication kernels numbered by ProfilerStep with their process group and peers, and per step the GPU
span, the compute in it and the host's quiet time. The ranks are read together from these (tracelint.trace.job.ranks),
never from their events.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import compress
from operator import itemgetter, sub
from typing import TYPE_CHECKING, NamedTuple

from tracelint.engine import metrics as M
from tracelint.trace.intervals import overlap
from tracelint.trace.job.communication import P2POp, compute_of, group_times

if TYPE_CHECKING:
    from tracelint.trace.device_analysis import TraceAnalysis
    from tracelint.trace.recording import Recording

# A stretch this long with no profiled op on any launching thread is no per-op cost of the profiler (microseconds
# per op; with_stack's Python frames tens of µs per call): the host sleeps, waits or runs un-profiled work.
QUIET_MIN_US = 1000.0
_START, _END = itemgetter(2), itemgetter(3)  # of an Op or a RuntimeCall


class Collective(NamedTuple):
    """One communication kernel of a rank, launched in a step: what matching and waiting read of it."""

    start: float
    end: float
    collective: str | None  # all_reduce, all_gather, send_recv ... as in tracelint.trace.job.communication
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
    # The ops and runtime calls (a launch or a sync is no quiet time) of those threads. With their starts and their
    # ends each sorted, the union of the intervals has a hole after the k-th end exactly where the (k+1)-th start
    # comes later (all of the first k+1 intervals are over by then): sorts and maps, no loop over the events.
    busy = [op for op in model.ops if op.tid in tids]
    busy += [c for c in model.runtime if c.tid in tids]
    steps, step_starts = model.steps, model.step_starts
    starts = sorted(map(_START, busy))
    ends = sorted(map(_END, busy))
    starts.append(max(steps[-1].end, ends[-1] if ends else steps[-1].end))  # the stretch after the last one
    ends.insert(0, steps[0].start)  # and the stretch before the first
    starts.insert(0, steps[0].start)
    quiet = [0.0] * len(steps)
    for k in compress(range(len(ends)), map(QUIET_MIN_US.__le__, map(sub, starts[1:], ends))):
        a, b = ends[k], starts[k + 1]
        j = max(0, bisect_right(step_starts, a) - 1)
        while j < len(steps) and steps[j].start < b:
            lo, hi = max(a, steps[j].start), min(b, steps[j].end)
            if hi > lo:
                quiet[j] += hi - lo
            j += 1
    return quiet


def step_us(m: dict) -> float | None:
    """A rank's mean step time from its metrics: the longer of its CPU step span and the GPU span of its steps (a
    host that runs ahead of its GPU has short CPU steps), else its window per step."""
    value = max(M.STEP_CPU_US_MEAN.of(m) or 0.0, M.STEP_GPU_SPAN_US_MEAN.of(m) or 0.0)
    if not value and M.GPU_WINDOW_US.of(m):
        value = M.GPU_WINDOW_US.of(m) / max(1, M.STEPS.of(m) or 1)
    return value
