"""Per-device metrics of a trace model: what the GPU did during the profiled steps, and why it waited.

Every metric computed here is declared, with its unit and its written definition, in ``tracelint.engine.metrics``
(``tracelint metrics`` prints them); a test keeps the two sets equal and checks the values against an independent
computation on real traces (tests/trace/test_metrics_reference.py). Times are µs of the trace clock; GPU work
belongs to the step whose ``ProfilerStep#N`` span contains the start of the call that launched it.
"""
from __future__ import annotations

import re
import statistics
from bisect import bisect_left, bisect_right
from functools import lru_cache
from operator import attrgetter

from tracelint.engine.metrics import IDLE_CAUSES, STEP_PARTS
from tracelint.engine.thresholds import default as threshold_default
from tracelint.trace.device_analysis import Gap, StepStats, TraceAnalysis
from tracelint.trace.intervals import merge, overlap
from tracelint.trace.model import (
    D2H,
    H2D,
    KERNEL,
    MEMCPY,
    PAGEABLE,
    PINNED,
    SYNC_CALLS,
    GpuEvent,
    TraceModel,
    is_backward,
    is_optimizer,
)

_CORE_NAMESPACES = frozenset({"aten", "prim", "prims", "c10d", "c10", "torch", "autograd", "cuda", "cudnn", "miopen",
                              "mkldnn", "quantized", "profiler", "inductor", "_c10d_functional", "c10d_functional",
                              "_quantized", "sparse", "fbgemm", "nccl"})
_name = attrgetter("name")
_WRAPPERS = ("## Call CompiledFxGraph", "CompiledFunction", "Torch-Compiled Region", "## ")
# The caching allocator giving memory back to the driver: cudaFree synchronizes the device.
ALLOCATOR_FREES = frozenset({"cudaFree", "cuMemFree", "cuMemFree_v2", "hipFree", "cudaFreeHost", "hipHostFree",
                             "cuMemFreeHost", "hipFreeHost"})
# Convolution algorithm search (torch.backends.cudnn.benchmark, MIOpen's find step): the library times candidate
# kernels and synchronizes between them.
_AUTOTUNE = re.compile(r"cudnnFind|FindConvolution|miopenFind|cudnnGet\w*AlgorithmMaxCount|cudnnBackendExecute.*Find"
                       r"|benchmark_?algo", re.I)
_SYNC_TOLERANCE_US = 20.0  # the host's sync returns a few µs after the GPU's last work ends


def _containing(union: tuple[list[float], list[float]], ts: float, tolerance: float) -> bool:
    starts, ends = union
    i = bisect_left(ends, ts - tolerance)
    return i < len(starts) and starts[i] <= ts + tolerance


def _pct(part: float | None, whole: float | None) -> float | None:
    if part is None or not whole:
        return None
    return round(100.0 * part / whole, 2)


def _r(x: float | None, digits: int = 1) -> float | None:
    return None if x is None else round(x, digits)


def _whole(x: float | None) -> int | None:
    return None if x is None else round(x)


def is_dataloader_next(name: str) -> bool:
    return "DataLoader" in name and "__next__" in name


def is_host_sync(name: str) -> bool:
    return name in SYNC_CALLS


# ---------------------------------------------------------------------------------------------------------------


def analyze_device(path: str, model: TraceModel, device: int | None, *, min_gap_us: float | None = None,
                   warnings: tuple[str, ...] = (), truncated: bool = False) -> TraceAnalysis:
    """Compute the metrics of one device (None: a trace with no GPU activity) of a trace model; ``min_gap_us``
    defaults to the declared ``min-idle-gap-us``."""
    if min_gap_us is None:
        min_gap_us = threshold_default("min-idle-gap-us")
    events = [g for g in model.gpu if g.device == device] if device is not None else []
    launched = [g for g in events if g.step is not None]
    window = (min(g.start for g in launched), max(g.end for g in launched)) if launched else None
    n_windows = len(model.steps) or 1

    m: dict[str, object] = {
        "device": device,
        "device_name": device_name(model, device),
        "rank": model.rank,
        "world_size": model.world_size,
        "has_steps": model.has_steps,
        "steps": n_windows,
        "gpu_events": len(events),
    }
    analysis = TraceAnalysis(path, model, device, events, m, [], [], window, warnings=warnings, truncated=truncated)

    busy_starts, busy_ends, first_event = _busy_union(events, window)
    busy = sum(e - s for s, e in zip(busy_starts, busy_ends, strict=True))
    window_us = window[1] - window[0] if window else None
    m["gpu_window_us"] = _r(window_us)
    m["gpu_busy_us"] = _r(busy) if window else None
    m["gpu_busy_pct"] = _pct(busy, window_us)
    idle = (window_us - busy) if window else None
    m["gpu_idle_us"] = _r(idle)

    split, gaps = _idle_causes(model, busy_starts, busy_ends, first_event, min_gap_us)
    analysis.gaps.extend(gaps)
    m["idle_gap_count"] = len(gaps)
    if idle is not None:
        split["short_gap"] = max(0.0, idle - sum(split.values()))
    for cause in IDLE_CAUSES:
        m[f"idle_{cause}_us"] = _r(split.get(cause)) if window else None
        m[f"idle_{cause}_pct"] = _pct(split.get(cause, 0.0), idle) if window else None

    _copy_metrics(m, launched, window, busy, n_windows)
    _kernel_metrics(analysis, launched, n_windows)
    from tracelint.trace.job.communication import communication_metrics

    communication_metrics(analysis)
    from tracelint.trace.compiled import compiled_metrics

    compiled_metrics(analysis, launched, n_windows)
    analysis.steps.extend(_step_stats(model, launched, device))
    _step_metrics(m, analysis.steps, n_windows)
    _memory_metrics(m, analysis, n_windows)
    from tracelint.trace.recording import recording_metrics, unprofiled_memory

    recording_metrics(m, analysis.recording)
    memory = unprofiled_memory(model) or {}
    peak, total = memory.get("max_allocated_mib"), memory.get("device_total_mib")
    m["unprofiled_peak_memory_pct"] = round(100.0 * peak / total, 2) if peak is not None and total else None
    from tracelint.trace.flops import flop_metrics
    from tracelint.trace.roofline import roofline_metrics

    flop_metrics(analysis)
    roofline_metrics(analysis)
    return analysis


UNNAMED_GPU = "unnamed GPU"


def device_name(model: TraceModel, device: int | None) -> str | None:
    """The device's name from deviceProperties; ``unnamed GPU`` when the trace names it nowhere (no entry, or an
    entry without a name); None for no device."""
    if device is None:
        return None
    props = model.devices.get(device)
    return props.name if props is not None and props.name else UNNAMED_GPU


def _busy_union(events: list[GpuEvent], window) -> tuple[list[float], list[float], list[GpuEvent]]:
    """The merged busy intervals inside the window, and the event that opens each of them."""
    starts: list[float] = []
    ends: list[float] = []
    first: list[GpuEvent] = []
    if window is None:
        return starts, ends, first
    w0, w1 = window
    for g in events:  # sorted by start
        s = g.start if g.start > w0 else w0
        e = g.end if g.end < w1 else w1
        if e <= s:
            continue
        if ends and s <= ends[-1]:
            if e > ends[-1]:
                ends[-1] = e
        else:
            starts.append(s)
            ends.append(e)
            first.append(g)
    return starts, ends, first


@lru_cache(maxsize=65536)
def _custom_op(name: str) -> bool:
    namespace, sep, _ = name.partition("::")
    return bool(sep) and namespace.isidentifier() and namespace not in _CORE_NAMESPACES


def is_wrapper(name: str, annotations: frozenset) -> bool:
    """An enclosing span that runs other code rather than doing work itself: a record_function range
    (user_annotation, e.g. ``Optimizer.step#AdamW.step``), a compiled-graph wrapper (``## Call CompiledFxGraph``,
    ``CompiledFunction``, ``Torch-Compiled Region``), or a framework's custom op (``vllm::moe_forward``: an op of a
    namespace other than PyTorch's own, registered from Python with torch.library, whose body is Python code)."""
    return name in annotations or name.startswith(_WRAPPERS) or _custom_op(name)


def _held(union: tuple[list[float], list[float]], a: float, b: float, rest: float) -> float:
    """The part of a gap [a, b] (at most ``rest``) charged to blocking calls: all of it when the gap opens while the
    thread is blocked in one (the call drained the queue: everything until the next launch is its cost), else the
    time the gap overlaps them."""
    if not union[0]:
        return 0.0
    return rest if _containing(union, a, _SYNC_TOLERANCE_US) else min(rest, overlap(union, a, b))


def _idle_causes(model: TraceModel, starts, ends, first, min_gap_us: float) -> tuple[dict[str, float], list[Gap]]:
    main_tid = model.main_tid
    # tid -> (DataLoader waits, syncs, allocator frees, algorithm searches, activity), each a merged union
    unions: dict[object, tuple] = {}
    annotations = model.annotations

    calls_by_tid: dict[object, list] = {}
    for call in model.runtime:
        calls_by_tid.setdefault(call.tid, []).append(call)

    def unions_of(tid):
        found = unions.get(tid)
        if found is None:
            ops = model.ops_on(tid)[1]
            calls = calls_by_tid.get(tid, [])
            # each name is judged once (names are interned: a thread repeats a few hundred of them per step)
            op_names, call_names = set(map(_name, ops)), set(map(_name, calls))
            loader = {n for n in op_names if is_dataloader_next(n)}
            autotune = {n for n in op_names | call_names if _AUTOTUNE.search(n)}
            wrappers = {n for n in op_names if is_wrapper(n, annotations)}
            data = [(o.start, o.end) for o in ops if o.name in loader] if loader else []
            found = unions[tid] = (
                merge(data),
                merge((c.start, c.end) for c in calls if c.name in SYNC_CALLS),
                merge((c.start, c.end) for c in calls if c.name in ALLOCATOR_FREES),
                merge((o.start, o.end) for o in [*ops, *calls] if o.name in autotune) if autotune else merge(()),
                # the thread's own work: ops and runtime calls, not the spans that only enclose other code (the
                # DataLoader's are kept: their time is subtracted as data_wait below)
                merge([(o.start, o.end) for o in ops if o.name not in wrappers]
                      + [(c.start, c.end) for c in calls] + data),
            )
        return found

    totals = dict.fromkeys(IDLE_CAUSES[:-1], 0.0)
    gaps: list[Gap] = []
    for i in range(1, len(starts)):
        a, b = ends[i - 1], starts[i]
        if b - a < min_gap_us:
            continue
        opener = first[i]
        tid = opener.launch.tid if opener.launch is not None else main_tid
        data, syncs, frees, search, active = unions.get(tid) or unions_of(tid)
        d = overlap(data, a, b) if data[0] else 0.0
        rest = (b - a) - d
        h = _held(syncs, a, b, rest)
        rest -= h
        f = _held(frees, a, b, rest)
        rest -= f
        t = min(rest, overlap(search, a, b)) if search[0] else 0.0
        rest -= t
        lo = ot = 0.0
        if rest > 0:
            lo = min(rest, max(0.0, overlap(active, a, b) - d - h - f - t))
            ot = rest - lo
        parts = (d, h, f, t, lo, ot)
        for cause, part in zip(IDLE_CAUSES, parts, strict=False):
            totals[cause] += part
        gaps.append(Gap(a, b, IDLE_CAUSES[parts.index(max(parts))], tid, opener.step))
    return totals, gaps


def _copy_metrics(m: dict, launched: list[GpuEvent], window, busy: float, n_windows: int) -> None:
    h2d = [g for g in launched if g.kind == MEMCPY and g.direction == H2D]
    pageable = [g for g in h2d if g.host_memory == PAGEABLE]
    pinned = [g for g in h2d if g.host_memory == PINNED]

    def total_bytes(items):
        return sum(g.bytes or 0 for g in items)

    def total_time(items):
        return _r(sum(g.end - g.start for g in items))

    m["h2d_count"] = len(h2d)
    m["h2d_bytes"] = total_bytes(h2d)
    m["h2d_time_us"] = total_time(h2d)
    m["h2d_pageable_bytes"] = total_bytes(pageable)
    m["h2d_pageable_time_us"] = total_time(pageable)
    m["h2d_pinned_bytes"] = total_bytes(pinned)
    m["h2d_pinned_time_us"] = total_time(pinned)
    if window:
        w0, w1 = window
        starts, ends = merge((max(g.start, w0), min(g.end, w1)) for g in h2d)
        m["h2d_pct_of_gpu_busy"] = _pct(sum(e - s for s, e in zip(starts, ends, strict=True)), busy)
    else:
        m["h2d_pct_of_gpu_busy"] = None
    dtoh = sum(1 for g in launched if g.kind == MEMCPY and g.direction == D2H)
    m["dtoh_count"] = dtoh
    m["dtoh_per_step"] = round(dtoh / n_windows, 2)


def _kernel_metrics(analysis: TraceAnalysis, launched: list[GpuEvent], n_windows: int) -> None:
    from tracelint.trace.kernels import ATTENTION, CONV, MATMUL

    m = analysis.metrics
    kernels = [g for g in launched if g.kind == KERNEL]
    total = tc = mm = mm_tc = mm_fp32 = attention = memory = 0.0
    classes: dict[str, object] = {}  # analysis.kernel_class by name, without a method call per kernel
    for k in kernels:
        d = k.end - k.start
        kc = classes.get(k.name)
        if kc is None:
            kc = classes[k.name] = analysis.kernel_class(k.name)
        total += d
        if kc.op == ATTENTION:
            attention += d
        elif kc.memory_bound:
            memory += d
        if kc.tensor_core:
            tc += d
        if kc.op in (MATMUL, CONV):
            mm += d
            if kc.tensor_core:
                mm_tc += d
            elif kc.fp32_off_tensor_cores:
                mm_fp32 += d
    delays = [k.start - k.launch.start for k in kernels if k.launch is not None]
    m["kernel_count"] = len(kernels)
    m["kernels_per_step"] = round(len(kernels) / n_windows, 1)
    m["kernel_time_us"] = _r(total)
    m["mean_kernel_us"] = _r(total / len(kernels), 2) if kernels else None
    m["launch_delay_us"] = _r(statistics.median(delays)) if delays else None
    m["tensor_core_pct"] = _pct(tc, total)
    m["matmul_time_us"] = _r(mm)
    m["matmul_tensor_core_pct"] = _pct(mm_tc, mm)
    m["fp32_matmul_off_tc_pct"] = _pct(mm_fp32, mm)
    m["attention_pct"] = _pct(attention, total)
    m["memory_bound_kernel_pct"] = _pct(memory, total)


def _step_stats(model: TraceModel, launched: list[GpuEvent], device: int | None) -> list[StepStats]:
    if model.steps:
        spans = [(i, s.number, s.start, s.end) for i, s in enumerate(model.steps)]
    else:
        firsts = [x[0].start for x in (model.ops, model.runtime, model.gpu) if x]
        lasts = [max(x.end for x in seq) for seq in (model.ops, model.runtime, model.gpu) if seq]
        if not firsts:
            return []
        spans = [(0, None, min(firsts), max(lasts))]
    n = len(spans)
    gpu_lo: list[float | None] = [None] * n
    gpu_hi: list[float | None] = [None] * n
    kernels = [0] * n
    dtoh = [0] * n
    for g in launched:
        i = g.step
        if gpu_lo[i] is None or g.start < gpu_lo[i]:
            gpu_lo[i] = g.start
        if gpu_hi[i] is None or g.end > gpu_hi[i]:
            gpu_hi[i] = g.end
        if g.kind == KERNEL:
            kernels[i] += 1
        elif g.direction == D2H:
            dtoh[i] += 1
    syncs = [0] * n
    for c in model.runtime:
        if c.name in SYNC_CALLS:
            i = model.step_at(c.start)
            if i is not None:
                syncs[i] += 1
    allocs = _allocations_per_step(model, device)
    breakdowns = _breakdowns(model, spans)
    return [StepStats(i, number, s, e, gpu_lo[i], gpu_hi[i], kernels[i], dtoh[i], syncs[i], allocs[i], breakdowns[i])
            for i, number, s, e in spans]


def _breakdowns(model: TraceModel, spans) -> list[dict]:
    main = model.main_tid
    main_ops = model.ops_on(main)[1]
    names = model.op_names()
    loader = {n for n in names if is_dataloader_next(n)}
    optimizer = {n for n in names if is_optimizer(n)}
    autograd = {n for n in names if is_backward(n)}
    data = merge((o.start, o.end) for o in main_ops if o.name in loader)
    optim = merge((o.start, o.end) for o in main_ops if o.name in optimizer)
    backward = [o for o in model.ops if o.name in autograd]  # sorted by start
    bw_starts = [o.start for o in backward]
    out = []
    for _, _, s, e in spans:
        length = e - s
        d = overlap(data, s, e)
        opt = overlap(optim, s, e)
        lo, hi = bisect_left(bw_starts, s), bisect_right(bw_starts, e)
        if lo < hi:
            b0 = backward[lo].start
            b1 = min(e, max(o.end for o in backward[lo:hi]))
            bw = max(0.0, (b1 - b0) - overlap(data, b0, b1) - overlap(optim, b0, b1))
        else:
            b0 = e
            bw = 0.0
        # forward begins where the last data wait before the backward ends (or at the step start)
        i = bisect_right(data[1], b0) - 1
        f0 = data[1][i] if i >= 0 and data[1][i] >= s else s
        fw = max(0.0, (b0 - f0) - overlap(optim, f0, b0) - overlap(data, f0, b0))
        other = max(0.0, length - d - opt - bw - fw)
        out.append({"data": d, "forward": fw, "backward": bw, "optimizer": opt, "other": other})
    return out


def _step_metrics(m: dict, steps: list[StepStats], n_windows: int) -> None:
    if not steps:
        m["step_cpu_us_mean"] = m["step_gpu_span_us_mean"] = None
        for part in STEP_PARTS:
            m[f"breakdown_{part}_us"] = m[f"breakdown_{part}_pct"] = None
        m["host_syncs_per_step"] = None
        return
    cpu = statistics.fmean(s.cpu_us for s in steps)
    spans = [s.gpu_span_us for s in steps if s.gpu_span_us is not None]
    m["step_cpu_us_mean"] = _r(cpu)
    m["step_gpu_span_us_mean"] = _r(statistics.fmean(spans)) if spans else None
    for part in STEP_PARTS:
        mean = statistics.fmean(s.breakdown[part] for s in steps)
        m[f"breakdown_{part}_us"] = _r(mean)
        m[f"breakdown_{part}_pct"] = _pct(mean, cpu)
    m["host_syncs_per_step"] = round(sum(s.host_syncs for s in steps) / n_windows, 2)


def _memory_metrics(m: dict, analysis: TraceAnalysis, n_windows: int) -> None:
    from tracelint.trace.memory import memory_of

    model, device = analysis.model, analysis.device
    timeline = memory_of(analysis)
    peak = timeline.peak_allocated_bytes
    props = model.devices.get(device) if device is not None else None
    total_mem = props.total_memory_bytes if props else None
    m["peak_memory_bytes"] = peak
    m["device_memory_bytes"] = total_mem
    m["peak_memory_pct"] = _pct(peak, total_mem)
    if any(device is None or s.device == device for s in model.memory):
        allocs = sum(_allocations_per_step(model, device))
        m["allocations_per_step"] = round(allocs / n_windows, 1)
    else:
        m["allocations_per_step"] = None
    m["memory_growth_bytes_per_step"] = _whole(timeline.growth_bytes_per_step)
    m["memory_growth_steps"] = timeline.steps if timeline.growth_bytes_per_step is not None else None
    m["memory_unfreed_bytes_per_step"] = _whole(timeline.unfreed_bytes_per_step)
    m["memory_steady_allocated_bytes"] = _whole(timeline.steady_allocated_bytes)
    m["peak_reserved_bytes"] = timeline.peak_reserved_bytes
    m["reserved_over_allocated_pct"] = _r(timeline.reserved_over_allocated_pct, 2)
    m["memory_peak_phase"] = timeline.peak_phase
    m["memory_peak_op"] = timeline.peak_op
    m["device_mallocs_per_step"] = _r(timeline.mallocs_per_step, 2)
    m["device_frees_per_step"] = _r(timeline.frees_per_step, 2)
    m["empty_cache_calls_per_step"] = _r(timeline.empty_cache_per_step, 2)


def _allocations_per_step(model: TraceModel, device: int | None) -> list[int]:
    """Device allocations (``[memory]`` samples with positive bytes) in each step as ``model.step_at`` assigns
    them — a sample in step i lies in [start i, end i] and before step i+1 starts — counted by bisecting the
    time-sorted samples instead of looking each one up (one window without steps)."""
    times = [s.ts for s in model.memory if s.bytes > 0 and (device is None or s.device == device)]
    steps = model.steps
    if not steps:
        return [len(times)]
    starts = model.step_starts
    counts = []
    for i, step in enumerate(steps):
        lo = bisect_left(times, step.start)
        hi = bisect_right(times, step.end)
        if i + 1 < len(steps):
            hi = min(hi, bisect_left(times, starts[i + 1]))
        counts.append(max(0, hi - lo))
    return counts
