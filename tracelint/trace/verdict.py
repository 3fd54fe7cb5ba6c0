"""The verdict of one device: what bounds the step, in one word and one line of evidence.

Decision rule, over the metrics of tracelint.engine.metrics (thresholds: tracelint.engine.thresholds.VERDICT):

1. ``unknown`` when there is nothing to judge: no GPU activity at all (a CPU-only trace, a truncated one cut
   before its GPU events, or a CUPTI range-profiler trace: counters per range, no kernel timeline), GPU activity
   but none launched inside the profiled steps, or a GPU window of zero length (every event of zero duration; in a
   trace without ProfilerStep spans the window is the whole trace's GPU activity, and the evidence says so).
2. ``comm-bound`` when the exposed communication other than sends and recvs (``exposed_comm_us`` less
   ``exposed_p2p_us``) is at least ``comm-bound-exposed-pct`` (default 25) of the window: a quarter of the step
   window or more, the device does nothing but communicate — a GPU spinning in an NCCL kernel while it waits for
   another rank is busy, not working. With the other ranks' traces (tracelint.trace.job.ranks) the evidence names the
   wait: ``comm-bound: rank 0 waits 37 ms per step in all_reduce for rank 1``.
   ``pipeline-bound`` when sends and recvs with no compute beside them (``exposed_p2p_us``) fill that share: the
   device is a pipeline stage that waits for its neighbours — the pipeline's fill and drain, a slower stage — which
   no overlapping of communication removes (tracelint.trace.job.pipeline; TL603, TL604). With the job's other ranks the
   evidence names the stage and its wait. A job is ``pipeline-bound`` when its bottleneck stage (the one the
   others wait for) is ``gpu-bound`` or ``pipeline-bound``: the pipeline, not a host, sets the step; a pipeline
   whose bottleneck stage waits on its host keeps that stage's verdict (tracelint.trace.job_summary).
3. ``gpu-bound`` when ``gpu_busy_pct`` >= ``gpu-bound-busy-pct`` (default 80): the device is the bottleneck;
   idle time under a fifth of the step is not worth a different verdict. On the project's H200 fixtures the
   GPU-bound runs read 94-100 % busy, and the run that loses 24 % of its step to one `.item()` per step reads 79 %.
   (The profiler itself slows the host, with_stack most, so host-caused idle time reads a little high.) When
   host-to-device copies fill at least 10 % of the busy time the evidence says so, and likewise when exposed
   communication fills at least 5 % of the window.
4. Otherwise the GPU waits on the host, and the idle split says on what:
   ``input-bound`` when ``idle_data_wait_pct`` >= ``input-bound-data-wait-pct`` (default 50) — the launching
   thread spent at least half of the GPU's idle time inside DataLoader ``__next__``;
   ``cpu-bound`` otherwise — the rest of the idle time is the host synchronizing, launching work, or running
   un-profiled Python; the evidence names the largest of those parts, and the DataLoader wait too where it is
   larger than that part (under the input-bound threshold, it is still the largest single cause).

A trace without ProfilerStep spans is judged over the whole trace, and its evidence says so.

The profiler's own cost. When the trace carries ``tracelint.profile``'s record of the unprofiled step
(tracelint.trace.recording) and the profiled step is ``profiler-inflation-limit`` (default 1.2) times longer or more,
a host-side verdict (``cpu-bound``, ``input-bound``) is checked against the run without the profiler: the GPU's busy
time per step over ``unprofiled_step_ms``. At ``gpu-bound-busy-pct`` or more the verdict is ``gpu-bound``, and the
evidence gives both answers: ``gpu-bound: when not profiled, GPU work 33 of 34 ms per step; the profiled trace reads
cpu-bound because the profiler's host overhead (with_stack, ...) inflated the step 1.9×``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracelint.engine import Config
from tracelint.engine import metrics as M
from tracelint.trace.recording import Recording, gpu_busy_ms_per_step

if TYPE_CHECKING:
    from tracelint.trace.job.pipeline import Stage
    from tracelint.trace.job.process_groups import RankWait

INPUT_BOUND, CPU_BOUND, GPU_BOUND, COMM_BOUND = "input-bound", "cpu-bound", "gpu-bound", "comm-bound"
PIPELINE_BOUND = "pipeline-bound"
UNKNOWN = "unknown"

_HOST_CAUSES = {
    "host_sync": "the host waits in device synchronizations (.item(), .cpu(), synchronize)",
    "allocator": "the caching allocator gives memory back to the driver (cudaFree synchronizes the device)",
    "autotune": "cuDNN/MIOpen search convolution algorithms (cudnn.benchmark warm-up)",
    "launch_overhead": "the host is busy running ops and launching kernels (launch/Python overhead)",
    "other": "the launching thread runs no profiled op (un-profiled Python or waiting)",
    "short_gap": "the gaps are shorter than {gap} µs each, between many small kernels",
}


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: str  # input-bound | cpu-bound | gpu-bound | comm-bound | pipeline-bound | unknown
    evidence: str  # one line, starting with the kind

    def __str__(self) -> str:
        return self.evidence


def _figure(x: float) -> str:
    """A percentage or a duration as the verdict writes it: whole above 10, else one decimal."""
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def _busy_work(metrics: dict) -> str:
    """Where a busy GPU's time goes, as far as the trace says (issue #37): MFU, the GEMMs' share of their dtype's
    peak, and the memory-bound kernels' share of the kernel time when it is large (what torch.compile fuses)."""
    parts = []
    mfu = M.MFU_PCT.of(metrics)
    if mfu is not None:
        parts.append(f"MFU {_figure(mfu)}%")
    peaks = [f"{what} at {_figure(pct)}%" for what, pct in (("GEMMs", M.GEMM_PEAK_PCT.of(metrics)),
                                                      ("convolutions", M.CONV_PEAK_PCT.of(metrics))) if pct is not None]
    if peaks:
        parts.append(f"{', '.join(peaks)} of their dtype's peak")
    memory_bound = M.MEMORY_BOUND_KERNEL_PCT.of(metrics)
    if memory_bound is not None and memory_bound >= MEMORY_BOUND_SAID_PCT:
        parts.append(f"memory-bound kernels {_figure(memory_bound)}% of kernel time")
    return f"; {', '.join(parts)}" if parts else ""


MEMORY_BOUND_SAID_PCT = 25.0  # below this share the memory-bound kernels are not where a busy GPU's time goes


def _ms(us: float) -> str:
    return f"{_figure(us / 1000)} ms"


def decide(metrics: dict, config: Config | None = None, *, cpu_only: bool = False, truncated: bool = False,
           wait: RankWait | None = None, recording: Recording | None = None, stage: Stage | None = None) -> Verdict:
    """The verdict of one device's metrics (see the module docstring for the rule); ``wait``: the rank's wait for
    its peers, when the job's other ranks were read; ``recording``: what the profiler recorded and cost; ``stage``:
    the rank's stage, when its job is a pipeline."""
    config = config or Config()
    verdict = _decide(metrics, config, cpu_only=cpu_only, truncated=truncated, wait=wait, recording=recording,
                      stage=stage)
    return _unprofiled(verdict, metrics, config, recording)


def _unprofiled(verdict: Verdict, metrics: dict, config: Config, recording: Recording | None) -> Verdict:
    """The verdict checked against the run without the profiler, when the trace carries its step time."""
    inflation, unprofiled = M.PROFILER_INFLATION.of(metrics), M.UNPROFILED_STEP_MS.of(metrics)
    busy_us = M.GPU_BUSY_US.of(metrics)
    if (verdict.kind not in (CPU_BOUND, INPUT_BOUND) or not inflation or not unprofiled or busy_us is None
            or inflation < config.threshold("profiler-inflation-limit")):
        return verdict
    gpu_ms = gpu_busy_ms_per_step(metrics)
    what = ", ".join(recording.heavy) if recording is not None and recording.heavy else "its host overhead"
    if 100.0 * gpu_ms / unprofiled >= config.threshold("gpu-bound-busy-pct"):
        return Verdict(GPU_BOUND, f"gpu-bound: when not profiled, GPU work {_figure(gpu_ms)} of "
                                  f"{_figure(unprofiled)} ms per step{_busy_work(metrics)}; the profiled trace reads "
                                  f"{verdict.kind} because the profiler's host overhead ({what}) inflated the step "
                                  f"{inflation:.1f}×")
    return Verdict(verdict.kind, f"{verdict.evidence}; {verdict.kind} when not profiled too "
                                 f"(GPU work {_figure(gpu_ms)} of {_figure(unprofiled)} ms per step; the profiler "
                                 f"({what}) inflated the step {inflation:.1f}×)")


def _pipeline_verdict(metrics: dict, p2p_pct: float, p2p_us: float, where: str, wait: RankWait | None,
                      stage: Stage | None) -> Verdict:
    fills = f"sends and recvs with no compute beside them fill {_figure(p2p_pct)}% {where} ({_ms(p2p_us)} per step)"
    compute = M.COMPUTE_BUSY_PCT.of(metrics)
    computes = f"; it computes {_figure(compute)}% of the window" if compute is not None else ""
    if stage is None or wait is None:
        return Verdict(PIPELINE_BOUND, f"pipeline-bound: {fills}{computes}: a pipeline stage waiting for its "
                                       "neighbours (the fill and drain of the pipeline, a slower stage); analyze the "
                                       "folder of all ranks to tell which")
    transfer = M.P2P_TRANSFER_US.of(metrics)
    moved = f", {_ms(transfer)} moving data" if transfer is not None else ""
    return Verdict(PIPELINE_BOUND, f"pipeline-bound: stage {stage.index} (rank {wait.rank}) waits "
                                   f"{_ms(wait.p2p_wait_us)} per step in send/recv for its neighbours"
                                   f"{'' if wait.waits_for is None else f' (most for rank {wait.waits_for})'}"
                                   f"{moved}; {fills}; it computes {_figure(100.0 - stage.bubble_pct)}% of its step")


def _decide(metrics: dict, config: Config, *, cpu_only: bool, truncated: bool, wait: RankWait | None,
            recording: Recording | None, stage: Stage | None) -> Verdict:
    busy_limit = config.threshold("gpu-bound-busy-pct")
    data_limit = config.threshold("input-bound-data-wait-pct")
    min_gap_us = config.threshold("min-idle-gap-us")
    has_steps = M.HAS_STEPS.of(metrics)
    where = "of the step window" if has_steps else "of the trace (no ProfilerStep: whole trace analysed)"

    if cpu_only or not M.GPU_EVENTS.of(metrics):
        ranges = recording.profiler_ranges if recording is not None else 0
        if ranges:
            what = f"{ranges:,} range{'s' if ranges != 1 else ''} of per-range counters"
            return Verdict(UNKNOWN, f"unknown: a CUPTI range-profiler trace ({what}, no kernel timeline): tracelint "
                                    "needs a timeline trace — record without experimental_config profiler_metrics")
        if truncated:  # Kineto writes the CPU events first: a cut file may simply end before the GPU ones
            return Verdict(UNKNOWN, "unknown: no GPU activity in the part of the trace before the cut (truncated file)")
        return Verdict(UNKNOWN, "unknown: no GPU activity in the trace (CPU-only profile)")
    busy = M.GPU_BUSY_PCT.of(metrics)
    if busy is None or not M.GPU_WINDOW_US.of(metrics):
        if not has_steps:  # every GPU event is in the one window: the whole trace
            n = M.GPU_EVENTS.of(metrics)
            events = f"its {n:,} GPU events span" if n != 1 else "its one GPU event spans"
            return Verdict(UNKNOWN, "unknown: the trace has no ProfilerStep# annotations; measured over the whole "
                                    f"trace, {events} no time (each of zero duration)")
        if M.GPU_WINDOW_US.of(metrics) is None:
            return Verdict(UNKNOWN, "unknown: no GPU activity launched inside the profiled steps")
        return Verdict(UNKNOWN, "unknown: the GPU activity launched inside the profiled steps spans no time (each "
                                "event of zero duration)")
    exposed = M.EXPOSED_COMM_PCT.of(metrics)
    window_us = M.GPU_WINDOW_US.of(metrics)
    p2p_us = M.EXPOSED_P2P_US.of(metrics) or 0.0
    p2p_pct = 100.0 * p2p_us / window_us
    steps = max(1, M.STEPS.of(metrics) or 1)
    limit = config.threshold("comm-bound-exposed-pct")
    if exposed is not None and exposed - p2p_pct >= limit:
        own = (M.EXPOSED_COMM_US.of(metrics) or 0.0) - p2p_us
        fills = (f"communication with no compute beside it fills {_figure(exposed - p2p_pct)}% {where} "
                 f"({_ms(own / steps)} per step{', sends and recvs aside' if p2p_us else ''})")
        if wait is not None and wait.waits_for is not None and wait.wait_us - wait.p2p_wait_us > 0:
            return Verdict(COMM_BOUND, f"comm-bound: rank {wait.rank} waits {_ms(wait.wait_us - wait.p2p_wait_us)} "
                                       f"per step in {wait.collective or 'collectives'} for rank {wait.waits_for}; "
                                       f"{fills}")
        overlap = M.COMM_OVERLAP_PCT.of(metrics)
        tail = f"; {_figure(overlap)}% of the communication overlaps compute" if overlap is not None else ""
        return Verdict(COMM_BOUND, f"comm-bound: {fills}{tail}")
    if p2p_pct >= limit:
        return _pipeline_verdict(metrics, p2p_pct, p2p_us / steps, where, wait, stage)
    if busy >= busy_limit:
        extra = ""
        mm = M.MATMUL_TIME_US.of(metrics) or 0.0
        kernel_time = M.KERNEL_TIME_US.of(metrics) or 0.0
        if kernel_time and mm:
            extra = f"; matmul/conv kernels take {_figure(100.0 * mm / kernel_time)}% of kernel time"
        h2d = M.H2D_PCT_OF_GPU_BUSY.of(metrics) or 0.0
        if h2d >= 10.0:
            pageable = (M.H2D_PAGEABLE_BYTES.of(metrics) or 0) > (M.H2D_PINNED_BYTES.of(metrics) or 0)
            extra += (f"; host-to-device copies{' from pageable memory' if pageable else ''} "
                      f"fill {_figure(h2d)}% of the busy time")
        if exposed is not None and exposed - p2p_pct >= 5.0:
            extra += f"; communication with no compute beside it fills {_figure(exposed - p2p_pct)}% of the window"
        if p2p_pct >= 5.0:
            extra += f"; sends and recvs with no compute beside them fill {_figure(p2p_pct)}% of the window"
        return Verdict(GPU_BOUND, f"gpu-bound: GPU busy {_figure(busy)}% {where}{_busy_work(metrics)}{extra}")
    idle = 100.0 - busy
    data = M.IDLE_PCT["data_wait"].of(metrics) or 0.0
    if data >= data_limit:
        return Verdict(INPUT_BOUND, f"input-bound: GPU idle {_figure(idle)}% {where}; {_figure(data)}% of that "
                                    "idle time the main thread waits in DataLoader.__next__")
    cause = max(_HOST_CAUSES, key=lambda c: M.IDLE_PCT[c].of(metrics) or 0.0)
    share = M.IDLE_PCT[cause].of(metrics) or 0.0
    text = _HOST_CAUSES[cause].format(gap=_figure(min_gap_us))
    tail = ""
    per_step = M.KERNELS_PER_STEP.of(metrics)
    if cause in ("launch_overhead", "short_gap") and per_step:
        tail = f" ({per_step:.0f} kernels per step, mean {M.MEAN_KERNEL_US.of(metrics) or 0:.1f} µs)"
    if data > share:  # under the input-bound threshold, yet more than the host part named: say both
        tail += (f"; {_figure(data)}% of it the main thread waits in DataLoader.__next__ (input-bound from "
                 f"{_figure(data_limit)}%)")
    return Verdict(CPU_BOUND, f"cpu-bound: GPU idle {_figure(idle)}% {where}; {_figure(share)}% of that idle time "
                              f"{text}{tail}")
