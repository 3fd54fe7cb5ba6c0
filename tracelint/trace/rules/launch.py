"""Launch overhead and compilation: a step whose GPU idles between many short kernels while the host launches them
(TL501); a compiled model whose forward breaks into several graphs with eager work between them (TL503); a compiled
model that recompiles inside its steady-state steps (TL504); a GPU-bound eager step whose kernel time goes largely to
memory-bound kernels that torch.compile would fuse (TL505)."""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import replace

from tracelint.engine import Config, Finding, SourceLocation
from tracelint.engine import metrics as M
from tracelint.trace.compiled import GraphBreak, graph_breaks, step_compilations
from tracelint.trace.device_analysis import TraceAnalysis
from tracelint.trace.device_metrics import is_optimizer
from tracelint.trace.kernels import CONV, LAYOUT_CONVERSION, memory_layout
from tracelint.trace.model import KERNEL
from tracelint.trace.recording import step_basis_ms
from tracelint.trace.rule import TraceRule
from tracelint.trace.rules._common import finding, in_few_steps, kernel_location, launched_under, ms, pct
from tracelint.trace.verdict import CPU_BOUND, GPU_BOUND, Verdict


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
                   f"time the host is busy running ops and launching: {advice(m, len(graph_breaks(analysis)))}")
        model = analysis.model
        step = model.steps[0] if model.steps else None
        loc = analysis.location(step=0 if step else None, start=step.start if step else None,
                                end=step.end if step else None, event=f"ProfilerStep#{step.number}" if step else None)
        yield finding(self, message, loc, gpu_idle_pct=round(idle_pct, 2), kernels_per_step=per_step,
                      mean_kernel_us=mean_us, host_us_per_kernel=round(host_per_kernel, 1),
                      launch_delay_us=delay_us, launch_idle_pct=round(launch_pct, 2))


def advice(m: dict, breaks: int = 0) -> str:
    """What removes launch overhead, for the state the step is in: eager, compiled, or already replaying graphs.
    No advice to compile a compiled model; graph breaks named only where TL503 found them (``breaks``)."""
    graph, compiled = M.GRAPH_KERNEL_PCT.of(m) or 0.0, M.COMPILED_KERNEL_PCT.of(m) or 0.0
    fewer = "remove its graph breaks (TL503), " if breaks else ""
    if graph >= 50.0:
        return (f"the step already replays CUDA graphs ({pct(graph)} of the kernel time): capture more of it "
                f"({fewer}the optimizer step inside the graph) or give each launch more work (larger batches)")
    if compiled >= 50.0:
        return (f"the model is already compiled ({pct(compiled)} of the kernel time): let CUDA graphs replace the "
                f"launches (mode=\"reduce-overhead\" in its torch.compile call), {fewer}or use larger batches")
    return "use torch.compile (fusion, CUDA graphs), fused optimizers, or larger batches"


class GraphBreakInCompiledStep(TraceRule):
    code = "TL503"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        breaks = graph_breaks(analysis)
        if not breaks:
            return
        model = analysis.model
        n_steps = len(model.steps) or 1
        if in_few_steps(analysis, {b.step for b in breaks}, config.threshold("graph-break-min-steps-pct")):
            return  # a break in one step of several: a rare path, not the steady state
        step_us = M.STEP_CPU_US_MEAN.of(analysis.metrics)
        host = sum(b.end - b.start for b in breaks)
        waits = sum(b.sync_us for b in breaks)
        idle = sum(_gpu_idle(analysis, b) for b in breaks)
        graphs = _graph_calls(analysis) / n_steps
        if verdict.kind == CPU_BOUND:
            floor, basis = host - waits, "the host time between the graphs, less its waits, on this host-bound step"
        else:
            floor, basis = idle, "the GPU idle around the breaks"

        def of_step(us: float) -> str:
            return f" ({pct(100.0 * us / n_steps / step_us)} of the step)" if step_us else ""

        first = breaks[0]
        ops = ", ".join(dict.fromkeys(op for b in breaks for op in b.eager_ops)) or "Dynamo's own calls"
        where = f" at {first.source.path}:{first.source.line}" if first.source else ""
        message = (f"graph break in a compiled model{where}: each step runs {graphs:.0f} compiled graphs, the "
                   f"compiled frame's call split {len(breaks) / n_steps:.0f} time(s) per step with eager work "
                   f"between the graphs ({ops}). The host spends {ms(host / n_steps)} per step between them"
                   f"{of_step(host)}, {ms(waits / n_steps)} of it waiting in a sync, and the GPU idles "
                   f"{ms(idle / n_steps)} per step around them. Keep the forward traceable (a tensor on the device "
                   "instead of .item()/.tolist()/print, torch._dynamo.config.capture_scalar_outputs=True for "
                   "scalars, no Python branch on a tensor; TORCH_LOGS=graph_breaks lists them): the step sheds at "
                   f"least {ms(floor / n_steps)}{of_step(floor)}, {basis}, plus the fusion across the break, which "
                   "the trace does not itemize")
        loc = analysis.location(step=first.step, start=first.start, end=first.end, event=first.region.name,
                                tid=first.tid)
        if first.source is not None:
            loc = replace(loc, source=first.source)
        yield finding(self, message, loc, compiled_graphs_per_step=round(graphs, 1),
                      graph_breaks_per_step=round(len(breaks) / n_steps, 1),
                      eager_host_us_per_step=round(host / n_steps, 1),
                      sync_wait_us_per_step=round(waits / n_steps, 1),
                      gpu_idle_us_per_step=round(idle / n_steps, 1),
                      estimated_saving_us_per_step=round(floor / n_steps, 1))

    def explains(self, analysis: TraceAnalysis, finding: Finding) -> bool:
        """A readback rule's finding (TL1xx) inside a break's eager stretch, with no more syncs per step than
        breaks: the sync is the code that breaks the graph, named once, here."""
        loc = finding.location
        start = getattr(loc, "start_us", None)
        if start is None or not finding.code.startswith("TL1"):
            return False
        breaks = graph_breaks(analysis)
        if not any(b.start <= start <= b.end for b in breaks):
            return False
        n_steps = len(analysis.model.steps) or 1
        return dict(finding.details).get("syncs_per_step", 0.0) <= len(breaks) / n_steps + 1e-6


class RecompilationInSteadyState(TraceRule):
    code = "TL504"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        model = analysis.model
        if not analysis.has_steps:
            return  # without steps, compilation cannot be told from the run's warm-up
        # A step that only compiles frames for the first time (F/0) is warm-up or a new code path's first call; a
        # recompilation in one step of several (automatic dynamic shapes turning a changed size symbolic) is a stray.
        found = [c for c in step_compilations(analysis) if c.recompiles]
        n_steps = len(model.steps)
        if len(found) < 2 or in_few_steps(analysis, found, config.threshold("recompile-min-steps-pct")):
            return
        compile_us = sum(c.compile_us for c in found) / n_steps
        step_us = M.STEP_CPU_US_MEAN.of(analysis.metrics)
        share = f" ({pct(100.0 * compile_us / step_us)} of the step)" if step_us else ""
        ids = ", ".join(dict.fromkeys(i for c in found for i in c.ids)) or "not named in this trace"
        first = found[0]
        frame = first.frame
        where = (f"; the stacks put the compiled call inside {frame.func} ({frame.file}:{frame.line}, the frame's "
                 "line as the trace records it)") if frame is not None else ""
        message = (f"recompilation in steady state: Dynamo and Inductor compile inside {len(found)} of {n_steps} "
                   f"profiled steps, {ms(compile_us)} per step{share} (compile ids {ids}: frame/recompilation)"
                   f"{where}. The trace does not record the guard that failed (TORCH_LOGS=recompiles prints it): "
                   "usually a Python int or float argument or attribute that changes every step, or a changing "
                   "shape under dynamic=False. Pass the value as a tensor, torch._dynamo.mark_dynamic the changing "
                   "dimension, or compile with dynamic=True: each step sheds up to the compile time inside it, "
                   f"{ms(compile_us)}. After recompile_limit (8) recompilations Dynamo runs the frame eagerly, "
                   "silently")
        loc = analysis.location(step=first.step, start=first.first.start, end=first.first.end,
                                event=first.first.name, tid=first.first.tid)
        if frame is not None:
            loc = replace(loc, source=SourceLocation(frame.file, frame.line))
        yield finding(self, message, loc, compiling_steps=len(found), profiled_steps=n_steps,
                      compile_us_per_step=round(compile_us, 1), compile_ids=ids,
                      estimated_saving_us_per_step=round(compile_us, 1))


def _gpu_idle(analysis: TraceAnalysis, brk: GraphBreak) -> float:
    """The GPU idle between the work the thread launched up to the end of the break and the first work it launched
    after it, in the same step: what the break's sync and eager stretch left the GPU without."""
    step = analysis.model.steps[brk.step] if analysis.model.steps else None
    before = launched_under(analysis, brk.tid, brk.region.start, brk.end)
    after = launched_under(analysis, brk.tid, brk.end, step.end if step else brk.region.end)
    if not before or not after:
        return 0.0
    return max(0.0, min(g.start for g in after) - max(g.end for g in before))


def _graph_calls(analysis: TraceAnalysis) -> int:
    """The compiled graphs run in the steps, forward and backward: one ``## Call CompiledFxGraph`` each."""
    model = analysis.model
    return sum(1 for op in model.ops if op.name.startswith("## Call CompiledFxGraph")
               and model.step_at(op.start) is not None) or \
        sum(1 for op in model.ops if op.name in ("CompiledFunction", "CompiledFunctionBackward")
            and model.step_at(op.start) is not None)


# The share of an eager step's fusable kernel time (_fusable) that torch.compile saved on the project's GPT-2-small
# fixture pair (gpt_eager_bf16 / gpt_compiled, bf16, batch 12 x 1024, H200, torch 2.11; their tlprofile traces):
# 15.40 ms per step eager, 10.91 ms compiled (inductor's fused Triton kernels included), 29.2 % less; the step
# measured without the profiler went from 34.08 to 29.48 ms (the 4.5 ms the GPU's kernel time lost).
FUSION_SAVING = 0.29
# The same for a convolutional network, whose memory-bound kernels (batch norm, ReLU, residual adds) inductor fuses
# around the convolutions (and whose convolutions it may move to channels_last): ResNet-50, fp32, batch 256, synthetic
# batches on the device (bench/fusion_ab.py, H200, torch 2.11): 116.51 ms per step eager, 66.99 ms compiled (1.74x),
# 49.5 ms saved, 75.7 % of the 65.38 ms per step of fusable kernels the fixture with that model and batch shows
# (pageable_copies_fixed). bf16 at batch 128 (conv_nchw_bf16): 55.46 -> 30.51 ms, 24.96 ms saved; the estimate from
# its trace (0.757 x 36.87 ms) is 27.9 ms, 12 % above.
CONV_FUSION_SAVING = 0.757
CONV_NET_MIN_PCT = 5.0  # convolution kernels' share of the kernel time from which a step is a conv net's (ResNet-50
# bf16: 9.7 %, its implicit-GEMM convolutions aside; a transformer: 0)
COMPILED_MAX_PCT = 10.0  # a step with more compiled kernel time than this is compiled already: no advice to compile


class UnfusedMemoryBoundKernels(TraceRule):
    """Memory-bound kernels (elementwise, normalization, softmax, reductions) take at least
    ``fusion-min-memory-bound-pct`` of the kernel time of a GPU-bound step that runs no compiled (Triton) kernels:
    torch.compile would fuse them. The estimate is FUSION_SAVING of their time."""

    code = "TL505"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        m = analysis.metrics
        if verdict.kind != GPU_BOUND:
            return  # the GPU does not set the step: fewer GPU microseconds buy nothing
        if (M.COMPILED_KERNEL_PCT.of(m) or 0) >= COMPILED_MAX_PCT or M.GRAPH_KERNEL_PCT.of(m):
            return  # compiled (or replayed as CUDA graphs) already
        kernel_us = M.KERNEL_TIME_US.of(m)
        if not kernel_us:
            return
        by_name, conv_us = _fusable(analysis)
        fusable_us = sum(g.end - g.start for items in by_name.values() for g in items)
        share = 100.0 * fusable_us / kernel_us
        if share < config.threshold("fusion-min-memory-bound-pct"):
            return
        n_steps = len(analysis.model.steps) or 1
        memory_us = fusable_us / n_steps
        conv_net = 100.0 * conv_us / kernel_us >= CONV_NET_MIN_PCT
        rate = CONV_FUSION_SAVING if conv_net else FUSION_SAVING
        saving = rate * memory_us
        basis = ("what compiling saved on the project's ResNet-50 (fp32, batch 256, H200: 116.5 -> 67.0 ms per step "
                 "without the profiler, 1.74x)" if conv_net else
                 "what compiling saved on the project's GPT-2-small fixture (bf16, H200: 34.1 -> 29.5 ms per step "
                 "without the profiler, 1.16x)")
        step, unprofiled = step_basis_ms(m)
        step = (step or 0.0) * 1000.0
        of_step = f" ({pct(100.0 * saving / step)} of the {ms(step)} step{'' if unprofiled else ' as profiled'})" \
            if step else ""
        top_name, top = max(by_name.items(), key=lambda kv: sum(g.end - g.start for g in kv[1]))
        short = top_name if len(top_name) <= 80 else top_name[:77] + "..."
        message = (f"memory-bound kernels (elementwise, normalization, softmax, reductions; the optimizer's and "
                   f"layout conversions aside) take {pct(share)} of the kernel time of this GPU-bound step in eager "
                   f"mode ({ms(memory_us)} per step, "
                   f"{len(by_name)} kernels; largest: `{short}`): each one reads and writes its tensors through "
                   "memory. torch.compile fuses chains of them into a few kernels (`model = torch.compile(model)`): "
                   f"an estimated {ms(saving)} per step saved{of_step}, {100 * rate:.0f} % of their time, {basis}")
        loc = kernel_location(analysis, top, top_name)
        yield finding(self, message, loc, fusable_pct_of_kernel_time=round(share, 2),
                      fusable_us_per_step=round(memory_us, 1),
                      estimated_saving_us_per_step=round(saving, 1))


def _fusable(analysis: TraceAnalysis) -> tuple[dict[str, list], float]:
    """The memory-bound kernels of the steps that compiling the model would fuse, by name: not the optimizer's
    (launched inside ``Optimizer.step``: torch.compile(model) leaves it as it is) and not a layout conversion between
    NCHW and NHWC (TL405's); and the steps' convolution kernel time (whether the step is a conv net's)."""
    model = analysis.model
    names = {name for name in model.op_names() if is_optimizer(name)}
    spans: dict[object, tuple[list[float], list[float]]] = {}
    for op in model.ops if names else ():
        if op.name in names:
            starts, ends = spans.setdefault(op.tid, ([], []))
            starts.append(op.start)
            ends.append(op.end)
    for starts, ends in spans.values():  # (Optimizer.step spans of one thread do not overlap)
        order = sorted(range(len(starts)), key=starts.__getitem__)
        starts[:], ends[:] = [starts[i] for i in order], [ends[i] for i in order]
    kinds: dict[str, str | None] = {}  # by kernel name: "fusable", "conv" or None
    by_name: dict[str, list] = {}
    conv_us = 0.0
    for g in analysis.gpu_events:
        # unpacked as a tuple: attribute access on a million NamedTuples is the cost of this loop
        g_kind, name, _, _, start, end, _, _, launch, step = g
        if g_kind != KERNEL or step is None:
            continue
        kind = kinds.get(name, "")
        if kind == "":
            kc = analysis.kernel_class(name)
            kind = kinds[name] = "conv" if kc.op == CONV else \
                "fusable" if kc.memory_bound and memory_layout(name) != LAYOUT_CONVERSION else None
        if kind is None:
            continue
        if kind == "conv":
            conv_us += end - start
            continue
        if launch is not None and launch[1] in spans:
            starts, ends = spans[launch[1]]
            i = bisect_right(starts, launch[2]) - 1
            if i >= 0 and launch[2] <= ends[i]:
                continue  # launched inside Optimizer.step
        by_name.setdefault(name, []).append(g)
    return by_name, conv_us
