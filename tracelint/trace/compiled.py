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

``compiled_kernel_pct`` / ``graph_kernel_pct``: their share of the kernel time launched in the steps;
``compiled_launch_pct``: the compiled kernels' share of the kernels launched in the steps; ``graph_launches_per_step``:
graph launch calls per step. All are None when the device ran no compiled or graph-replayed kernel.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tracelint.trace.intervals import merge
from tracelint.trace.model import KERNEL, GpuEvent

if TYPE_CHECKING:
    from tracelint.trace.analysis import TraceAnalysis

COMPILED_REGION = re.compile(r"^(?:## Call CompiledFxGraph|Torch-Compiled Region|CompiledFunction)")
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
    total = compiled = graph = 0.0
    compiled_n = 0
    triton: dict[str, bool] = {}  # by kernel name
    for k in kernels:
        d = k.end - k.start
        total += d
        launch = k.launch
        if launch is not None and launch.name in GRAPH_LAUNCHES:
            graph += d
        is_triton = triton.get(k.name)
        if is_triton is None:
            is_triton = triton[k.name] = analysis.kernel_class(k.name).family.startswith("triton")
        if is_triton or (launch is not None and _inside(regions.get(launch.tid), launch.start)):
            compiled += d
            compiled_n += 1
    graph_calls = sum(1 for c in model.runtime if c.name in GRAPH_LAUNCHES and model.step_at(c.start) is not None)
    count = sum(len(starts) for starts, _ in regions.values())
    m["compiled_kernel_pct"] = round(100.0 * compiled / total, 2) if compiled and total else None
    m["compiled_launch_pct"] = round(100.0 * compiled_n / len(kernels), 2) if compiled_n else None
    m["compiled_regions_per_step"] = round(count / n_windows, 1) if count else None
    m["graph_kernel_pct"] = round(100.0 * graph / total, 2) if graph and total else None
    m["graph_launches_per_step"] = round(graph_calls / n_windows, 1) if graph_calls else None


def _inside(union: tuple[list[float], list[float]] | None, ts: float) -> bool:
    if not union:
        return False
    from bisect import bisect_right

    starts, ends = union
    i = bisect_right(starts, ts) - 1
    return i >= 0 and ts <= ends[i]
