"""Launch overhead: a step whose GPU idles between many short kernels while the host launches them (TL501)."""
from __future__ import annotations

from collections.abc import Iterable

from tracelint.engine import Config, Finding
from tracelint.engine import metrics as M
from tracelint.trace.analysis import TraceAnalysis
from tracelint.trace.rule import TraceRule
from tracelint.trace.rules._common import finding, pct
from tracelint.trace.verdict import GPU_BOUND, Verdict


class LaunchBoundStep(TraceRule):
    code = "TL501"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        m = analysis.metrics
        busy, per_step, mean_us = M.GPU_BUSY_PCT.of(m), M.KERNELS_PER_STEP.of(m), M.MEAN_KERNEL_US.of(m)
        step_us, delay_us = M.STEP_CPU_US_MEAN.of(m), M.LAUNCH_DELAY_US.of(m)
        if not analysis.has_steps or busy is None or not per_step or mean_us is None or not step_us or delay_us is None:
            return
        if verdict.kind == GPU_BOUND:  # e.g. measured without the profiler (tracelint.profile): not launch-bound
            return
        idle_pct = 100.0 - busy
        # Gaps charged to launching (the thread was running ops/launches) plus the sub-threshold gaps between
        # back-to-back small kernels: both are the GPU outrunning the host's launches.
        launch_pct = (M.IDLE_PCT["launch_overhead"].of(m) or 0.0) + (M.IDLE_PCT["short_gap"].of(m) or 0.0)
        host_per_kernel = step_us / per_step
        if (idle_pct < config.threshold("launch-bound-min-idle-pct")
                or per_step < config.threshold("launch-bound-min-kernels-per-step")
                or launch_pct < config.threshold("launch-bound-min-launch-idle-pct")
                # kernels start right after their launch: nothing is queued, the GPU waits for the host
                or delay_us > config.threshold("launch-bound-max-launch-delay-us")
                # the host spends much longer per kernel than the GPU runs it; "much" because the profiler itself
                # (with_stack, record_shapes) slows the host 2-3x: a GPU-bound run can look launch-bound in its trace
                or host_per_kernel < mean_us * config.threshold("launch-bound-min-host-gpu-ratio")):
            return
        message = (f"launch-bound: the GPU is idle {pct(idle_pct)} of the step window between {per_step:.0f} kernels "
                   f"per step (mean {mean_us:.1f} µs on the GPU, {host_per_kernel:.1f} µs of host time each; a kernel "
                   f"starts {delay_us:.0f} µs after its launch, nothing is queued), and {pct(launch_pct)} of the idle "
                   f"time the host is busy running ops and launching: {advice(m)}")
        model = analysis.model
        step = model.steps[0] if model.steps else None
        loc = analysis.location(step=0 if step else None, start=step.start if step else None,
                                end=step.end if step else None, event=f"ProfilerStep#{step.number}" if step else None)
        yield finding(self, message, loc, gpu_idle_pct=round(idle_pct, 2), kernels_per_step=per_step,
                      mean_kernel_us=mean_us, host_us_per_kernel=round(host_per_kernel, 1),
                      launch_delay_us=delay_us, launch_idle_pct=round(launch_pct, 2))


def advice(m: dict) -> str:
    """What removes launch overhead, for the state the step is in: eager, compiled, or already replaying graphs.
    No advice to compile a compiled model."""
    graph, compiled = M.GRAPH_KERNEL_PCT.of(m) or 0.0, M.COMPILED_KERNEL_PCT.of(m) or 0.0
    regions = M.COMPILED_REGIONS_PER_STEP.of(m)
    breaks = f" ({regions:.0f} compiled regions per step)" if regions else ""
    if graph >= 50.0:
        return (f"the step already replays CUDA graphs ({pct(graph)} of the kernel time): capture more of it (fewer "
                f"graph breaks{breaks}, the optimizer step inside the graph) or give each launch more work (larger "
                "batches)")
    if compiled >= 50.0:
        return (f"the model is already compiled ({pct(compiled)} of the kernel time): use torch.compile(mode="
                f"\"reduce-overhead\") so CUDA graphs replace the launches, remove graph breaks{breaks}, or use "
                "larger batches")
    return "use torch.compile (fusion, CUDA graphs), fused optimizers, or larger batches"
