"""Compiled and graph-captured code on one device: how much of the kernel time and of the launches comes from
``torch.compile``d regions and from CUDA graph replays.

- A **compiled region** is a host span that runs a compiled graph: ``## Call CompiledFxGraph <hash>`` (torch 2.x,
  forward and backward each), ``Torch-Compiled Region: N/M``, ``CompiledFunction`` / ``CompiledFunctionBackward``.
  Nested ones merge: ``compiled_regions_per_step`` counts the merged spans per thread inside the steps, per step — a
  graph break splits one region into more, each launched separately.
- A kernel is **compiled** when its launch call starts inside a compiled region of its thread, or when it is a Triton
  kernel (``triton_*``: Inductor's, launched through ``cuLaunchKernel``), wherever it was launched.
- A kernel is **graph-replayed** when the call that launched it is a graph launch (``cudaGraphLaunch``,
  ``cuGraphLaunch``, ``hipGraphLaunch``): Kineto joins a replayed graph's kernels to that call.

- A **graph break** shows inside one top-level ``Torch-Compiled Region: N/M`` (the compiled frame's call) as more than
  one compiled graph call (``CompiledFunction``, ``## Call CompiledFxGraph``) with eager work between them and a
  nested region of the resume frame, whose Python frame names the breaking line:
  ``train.py(57): torch_dynamo_resume_in_forward_at_57`` (torch 2.11 on an H200, torch 2.13 on a CPU). Without a
  break the region holds one call. ``graph_breaks`` lists the stretches between the calls.
- A **compilation inside a step** shows as Dynamo's and Inductor's compile spans (``dynamo``, ``inductor_compile``,
  ...) with ``compile_id=F/C`` ops naming it: ``step_compilations`` gives each compiling step's compile time and ids.

``compiled_kernel_pct`` / ``graph_kernel_pct``: their share of the kernel time launched in the steps;
``compiled_launch_pct``: the compiled kernels' share of the kernels launched in the steps; ``graph_launches_per_step``:
graph launch calls per step. All are None when the device ran no compiled or graph-replayed kernel.
"""
from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING, NamedTuple

from tracelint.engine import SourceLocation
from tracelint.trace.intervals import merge
from tracelint.trace.model import KERNEL, SYNC_CALLS, Frame, GpuEvent, Op

if TYPE_CHECKING:
    from tracelint.trace.device_analysis import TraceAnalysis

COMPILED_REGION = re.compile(r"^(?:## Call CompiledFxGraph|Torch-Compiled Region|CompiledFunction)")
FRAME_REGION = "Torch-Compiled Region"  # Dynamo's call of one compiled frame (its resume frames nest inside)
GRAPH_CALL = re.compile(r"^(?:CompiledFunction$|## Call CompiledFxGraph)")
RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<func>.+)_at_(?P<line>\d+)$")
GRAPH_LAUNCHES = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch", "cudaGraphLaunch_v10000"})


def compiled_metrics(analysis: TraceAnalysis, launched: list[GpuEvent], n_windows: int) -> None:
    m, model = analysis.metrics, analysis.model
    regions: dict[object, tuple[list[float], list[float]]] = {}
    spans: dict[object, list[tuple[float, float]]] = {}
    region_names = {name for name in model.op_names() if COMPILED_REGION.match(name)}
    for op in model.ops if region_names else ():
        if op.name in region_names and model.step_at(op.start) is not None:
            spans.setdefault(op.tid, []).append((op.start, op.end))
    for tid, items in spans.items():
        regions[tid] = merge(items)
    kernels = [g for g in launched if g.kind == KERNEL]
    total = compiled = graph = template = 0.0
    compiled_n = 0
    triton: dict[str, str | None] = {}  # by kernel name: its Triton family ("triton", "triton-template"), or None
    for k in kernels:
        d = k.end - k.start
        total += d
        launch = k.launch
        replayed = launch is not None and launch.name in GRAPH_LAUNCHES
        if replayed:
            graph += d
        family = triton.get(k.name, "")
        if family == "":
            family = analysis.kernel_class(k.name).family
            family = triton[k.name] = family if family.startswith("triton") else None
        if family is not None or (launch is not None and _inside(regions.get(launch.tid), launch.start)):
            compiled += d
            compiled_n += 1
        if family == "triton-template" and not replayed:
            template += d
    graph_calls = sum(1 for c in model.runtime if c.name in GRAPH_LAUNCHES and model.step_at(c.start) is not None)
    count = sum(len(starts) for starts, _ in regions.values())
    m["compiled_kernel_pct"] = round(100.0 * compiled / total, 2) if compiled and total else None
    m["compiled_launch_pct"] = round(100.0 * compiled_n / len(kernels), 2) if compiled_n else None
    m["compiled_regions_per_step"] = round(count / n_windows, 1) if count else None
    m["graph_kernel_pct"] = round(100.0 * graph / total, 2) if graph and total else None
    m["graph_launches_per_step"] = round(graph_calls / n_windows, 1) if graph_calls else None
    # Work no op's shapes give (tracelint.trace.flops): Inductor's template kernels (its GEMMs, convolutions and flex
    # attention in Triton) and graph replays; only where the trace has shapes at all
    m["flop_unattributed_pct"] = round(100.0 * (template + graph) / total, 2) if model.shaped_ops and total else None


class GraphBreak(NamedTuple):
    """The eager stretch between two compiled graph calls of one compiled frame's call (a graph break), on the host
    thread ``tid`` in step index ``step``: from the end of one call to the start of the next."""

    tid: object
    step: int
    region: Op  # the top-level Torch-Compiled Region around both calls
    start: float
    end: float
    eager_ops: tuple[str, ...]  # the outermost CPU ops in the stretch (aten::item, ...), in order
    sync_us: float  # host time blocked in synchronizations in the stretch
    source: SourceLocation | None  # the breaking line: the resume frame's, else None


def graph_breaks(analysis: TraceAnalysis) -> list[GraphBreak]:
    """The graph breaks inside the steps, on every host thread, by start (computed once per analysis)."""
    return analysis.memo("graph-breaks", _graph_breaks)


def _graph_breaks(analysis: TraceAnalysis) -> list[GraphBreak]:
    model = analysis.model
    if not any(name.startswith(FRAME_REGION) for name in model.op_names()):
        return []
    syncs: dict[object, list] = {}
    for call in model.runtime:
        if call.name in SYNC_CALLS:
            syncs.setdefault(call.tid, []).append(call)
    found = []
    for tid, (starts, ops) in model.ops_by_tid.items():
        end_of_region = float("-inf")
        for i, op in enumerate(ops):
            if not op.name.startswith(FRAME_REGION) or op.start <= end_of_region:
                continue  # a nested region (a resume frame) is read with its top-level one
            end_of_region = op.end
            step = model.step_at(op.start)
            if step is None:
                continue
            inner = ops[i + 1:bisect_right(starts, op.end)]
            calls, covered = [], float("-inf")
            for o in inner:  # the outermost graph calls (CompiledFunction holds its ## Call CompiledFxGraph)
                if GRAPH_CALL.match(o.name) and o.start > covered:
                    calls.append(o)
                    covered = o.end
            if len(calls) < 2:
                continue
            source = _resume_line(model, tid, op)
            for before, after in zip(calls, calls[1:], strict=False):
                eager: dict[str, None] = {}
                last = float("-inf")
                for o in inner:
                    if o.start < before.end or o.end > after.start or o.start <= last \
                            or o.name.startswith(FRAME_REGION):
                        continue  # a resume frame's region is entered: its Dynamo ops are skipped below
                    last = o.end
                    if o.name not in _DYNAMO_OPS:
                        eager[o.name] = None
                waits = sum(c.end - c.start for c in syncs.get(tid, ()) if before.end <= c.start < after.start)
                found.append(GraphBreak(tid, step, op, before.end, after.start, tuple(eager), waits, source))
    found.sort(key=lambda b: b.start)
    return found


# Dynamo's own ops around a compiled call (guards, the wrapper's prologue): not the user's eager work
_DYNAMO_OPS = frozenset({"TorchDynamo Cache Lookup", "Pregraph bytecode", "AOTDispatcher Runtime Wrapper Prologue"})


def _resume_line(model, tid: object, region: Op) -> SourceLocation | None:
    """The breaking line, from the resume frame's name (``torch_dynamo_resume_in_forward_at_57``) inside the region;
    None when the break is in library code (its frames are not kept)."""
    starts, frames = model.frames_by_tid.get(tid, ([], []))
    for frame in frames[bisect_left(starts, region.start):bisect_right(starts, region.end)]:
        m = RESUME.match(frame.func)
        if m is not None:
            return SourceLocation(frame.file, int(m.group("line")))
    return None


def _inside(union: tuple[list[float], list[float]] | None, ts: float) -> bool:
    if not union:
        return False
    from bisect import bisect_right

    starts, ends = union
    i = bisect_right(starts, ts) - 1
    return i >= 0 and ts <= ends[i]


# Dynamo's and Inductor's compile spans as cpu_ops (torch 2.11 on an H200, 2.13 on a CPU): ``dynamo`` around
# ``entire_frame_compile`` around ``backend_compile`` around ``inductor_compile`` on the calling thread, the
# backward's ``inductor_compile`` on autograd's thread, ``<phase> (dynamo_timed)`` spans inside them, and instants
# ``<phase>_data: compile_id=F/C`` naming the compilation (frame F's C-th recompilation; 0/0: its first compile).
COMPILE_OPS = frozenset({"dynamo", "entire_frame_compile", "backend_compile", "inductor_compile", "compile_fx_inner"})
COMPILE_ID = re.compile(r"compile_id=(?P<id>\d+/\d+)")
REGION_ID = re.compile(r"^Torch-Compiled Region: (?P<id>\d+/\d+)")


class StepCompilation(NamedTuple):
    """The compilation inside one profiled step (index ``step``): its wall time (the union of the compile spans on
    every thread), the compile ids ``F/C`` compiled in it, the first compile span, and the innermost user frame
    around it (with_stack traces; its line is the frame's as the trace gives it, not the compiled call's)."""

    step: int
    compile_us: float
    ids: tuple[str, ...]
    first: Op
    frame: Frame | None

    @property
    def recompiles(self) -> bool:
        """A recompilation: a compile id past a frame's first (``F/C``, C > 0), or no id to tell (older torch)."""
        return not self.ids or any(not i.endswith("/0") for i in self.ids)


def step_compilations(analysis: TraceAnalysis) -> list[StepCompilation]:
    """The profiled steps that compile, by step (computed once per analysis)."""
    return analysis.memo("step-compilations", _step_compilations)


def _step_compilations(analysis: TraceAnalysis) -> list[StepCompilation]:
    model = analysis.model
    if not any(n in COMPILE_OPS or n.endswith(" (dynamo_timed)") for n in model.op_names()):
        return []
    spans: dict[int, list[Op]] = {}
    ids: dict[int, dict[str, None]] = {}
    regions: dict[int, list[Op]] = {}
    for op in model.ops:
        step = model.step_at(op.start)
        if step is None:
            continue
        if op.name in COMPILE_OPS or op.name.endswith(" (dynamo_timed)"):
            spans.setdefault(step, []).append(op)
        elif (m := COMPILE_ID.search(op.name)) is not None:
            ids.setdefault(step, {})[m.group("id")] = None
        elif REGION_ID.match(op.name):
            regions.setdefault(step, []).append(op)
    found = []
    for step, ops in sorted(spans.items()):
        starts, ends = merge([(o.start, o.end) for o in ops])
        first = min(ops, key=lambda o: o.start)
        named = ids.get(step) or {  # without the instants: the regions run after the first compile span
            REGION_ID.match(r.name).group("id"): None for r in regions.get(step, ()) if r.start >= first.start}
        found.append(StepCompilation(step, sum(e - s for s, e in zip(starts, ends, strict=True)), tuple(named),
                                     first, model.user_frame(first.tid, first.start)))
    return found
