"""Pipeline parallelism: the stages of a job whose ranks hand activations down a chain, and what the pipeline costs.

**Detection.** The paired sends and recvs (tracelint.trace.job.p2p_pairs) link ranks; when every rank of the job that
sends or receives has at most two neighbours and they form one chain (or one ring: a looped schedule whose last rank
sends back to the first), the job is a pipeline. Stage 0 is the end of the chain that sends first in the step (it has no
activation to wait for); stages are numbered down the chain. Traces recorded with stacks show torch's pipelining
schedules (``torch/distributed/pipelining/`` frames): the report names them when present, and a chain is enough
without them. ``pipeline_microbatches`` (m) is the number of activations stage 0 sends to stage 1 per step.

**Per stage** (per step, the mean over the rank's steps; the *step* is the rank's mean step time as everywhere in
tracelint: the longer of its mean CPU step span and the mean GPU span of a step — first start to last end of the GPU
work launched in it —, since a host that runs ahead of its GPU has short CPU steps):

- ``stage_compute_us``: the union of its compute intervals (every kernel, copy and memset that is not
  communication) within each step's GPU span;
- ``stage_bubble_pct``: the part of the step in which the stage computes nothing — it waits for the pipeline to fill
  or drain, for a slower stage, or for its host — as a percent of the step;
- ``p2p_wait_us`` / ``p2p_transfer_us``: its sends' and recvs' time waiting for the neighbour and moving data
  (tracelint.trace.job.process_groups).

**The job.** ``pipeline_bubble_pct`` is the part of the stages' time in which they compute nothing: 100 × (1 − Σ
compute / Σ step) over the stages. For p equal stages and m microbatches, GPipe and 1F1B leave
``pipeline_bubble_analytic_pct`` = 100 × (p − 1) / (m + p − 1) of every stage idle (fill and drain); what the
measured bubble has beyond that comes from unequal stages or from the host. The **bottleneck stage** is the one the
others wait for: the stage that waits least in send/recv per step (in percent of its step). On a GPU-bound pipeline
it is the stage that computes the most; on a host-bound one it is the stage whose host is slowest, whatever it
computes. ``stage_imbalance_pct`` = 100 × (its compute / the mean stage compute − 1); with stages of equal compute
the step would take about the mean compute × (m + p − 1) / m (``pipeline_balanced_step_us``).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from tracelint.engine import metrics as M
from tracelint.trace.job.communication import SEND
from tracelint.trace.job.rank_digest import step_us

if TYPE_CHECKING:
    from tracelint.trace.job.p2p_pairs import Pair
    from tracelint.trace.job.process_groups import RankWait
    from tracelint.trace.job.rank_digest import RankDigest


class Stage(NamedTuple):
    index: int
    rank: int
    compute_us: float  # per step
    step_us: float  # the rank's mean step (tracelint.trace.job.rank_digest.step_us)
    bubble_pct: float
    p2p_wait_us: float  # per step
    p2p_transfer_us: float | None


@dataclass(frozen=True, slots=True)
class Pipeline:
    stages: tuple[Stage, ...]  # in stage order
    microbatches: int | None  # per step, stage 0 to stage 1
    ring: bool  # the last stage sends back to the first (a looped, interleaved schedule)
    frames: bool  # torch.distributed.pipelining frames in the traces
    bubble_pct: float
    analytic_pct: float | None  # (p - 1) / (m + p - 1), for a chain whose m is known
    bottleneck: Stage  # the stage the others wait for
    imbalance_pct: float
    balanced_step_us: float | None  # the step with stages of equal compute (module docstring)

    def stage_of(self, rank: int) -> Stage | None:
        return next((s for s in self.stages if s.rank == rank), None)


def read_pipeline(ranks: dict[int, RankDigest], pairs: list[Pair], waits: dict[int, RankWait]) -> Pipeline | None:
    """The job's pipeline (module docstring), or None when its sends and recvs form no chain; sets the stages'
    metrics (``pipeline_stage``, ``stage_compute_us``, ``stage_bubble_pct``)."""
    order = _chain(ranks, pairs)
    if order is None:
        return None
    chain, ring = order
    stages = []
    for index, rank in enumerate(chain):
        d = ranks[rank]
        step = step_us(d.metrics)
        if not step or not any(s.gpu_start is not None for s in d.steps):
            return None
        compute = statistics.fmean(s.compute_us for s in d.steps if s.gpu_start is not None)
        wait = waits[rank].p2p_wait_us if rank in waits else 0.0
        stage = Stage(index, rank, round(compute, 1), round(step, 1), round(100.0 * (step - compute) / step, 2),
                      wait, M.P2P_TRANSFER_US.of(d.metrics))
        stages.append(stage)
        d.metrics[M.PIPELINE_STAGE.name] = index
        d.metrics[M.STAGE_COMPUTE_US.name] = stage.compute_us
        d.metrics[M.STAGE_BUBBLE_PCT.name] = stage.bubble_pct
    p = len(stages)
    forward = [pr for pr in pairs if pr.sender == chain[0] and pr.receiver == chain[1]]
    steps = max(1, len({pr.step for pr in forward}))
    m = round(len(forward) / steps) if forward else None
    total = sum(s.compute_us for s in stages)
    bubble = 100.0 * (1.0 - total / sum(s.step_us for s in stages))
    bottleneck = min(stages, key=lambda s: (s.p2p_wait_us / s.step_us, -s.compute_us, s.index))
    mean = total / p
    imbalance = 100.0 * (bottleneck.compute_us / mean - 1.0) if mean else 0.0
    analytic = 100.0 * (p - 1) / (m + p - 1) if m and not ring else None
    balanced = mean * (m + p - 1) / m if m and not ring else None
    frames = any(ranks[r].pipelining_frames for r in chain)
    return Pipeline(tuple(stages), m, ring, frames, round(bubble, 2), None if analytic is None else round(analytic, 2),
                    bottleneck, round(imbalance, 2), None if balanced is None else round(balanced, 1))


def _chain(ranks: dict[int, RankDigest], pairs: list[Pair]) -> tuple[list[int], bool] | None:
    """The ranks in stage order and whether they form a ring; None when the pairs link no chain of 2 or more."""
    neighbours: dict[int, set[int]] = {}
    for pr in pairs:
        neighbours.setdefault(pr.sender, set()).add(pr.receiver)
        neighbours.setdefault(pr.receiver, set()).add(pr.sender)
    if len(neighbours) < 2 or any(len(n) > 2 for n in neighbours.values()):
        return None
    ends = sorted(r for r, n in neighbours.items() if len(n) == 1)
    ring = not ends
    if ring:
        candidates = sorted(neighbours)
    elif len(ends) == 2:
        candidates = ends
    else:
        return None
    first = next((r for r in candidates if _sends_first(ranks[r])), candidates[0])
    chain = [first]
    previous = None
    # down the chain: from the first stage to the neighbour it sends its first activation to
    nxt = _first_peer(ranks[first]) if ring else next(iter(neighbours[first]))
    while nxt is not None and nxt not in chain:
        chain.append(nxt)
        previous, current = chain[-2], nxt
        rest = neighbours[current] - {previous}
        nxt = next(iter(rest)) if rest else None
    if len(chain) != len(neighbours):
        return None  # two chains, not one
    return chain, ring


def _sends_first(d: RankDigest) -> bool:
    """Whether the rank's first p2p kernel of its first step starts with a send (stage 0 waits for no activation)."""
    first = next((c for c in d.comm if c.p2p), None)
    return first is not None and first.p2p[0].kind == SEND


def _first_peer(d: RankDigest) -> int | None:
    first = next((c for c in d.comm if c.p2p and c.p2p[0].kind == SEND), None)
    return first.p2p[0].peer if first is not None else None
