"""The memory timeline of a device: what the caching allocator holds at each step boundary, how much that grows per
step, where the peak is (forward, backward or optimizer, and in which op), what the steps allocate and never free
(and where, when the trace has stacks), and how often the allocator goes to the driver. Read from the ``[memory]``
samples (profile_memory=True), the runtime calls and the Python frames; ``tracelint.trace.device_metrics`` turns it into
metrics and the memory rules read the rest (``memory_of(analysis)``).

A sample's ``Total Allocated`` is the allocator's total after it, so the memory allocated at a time ``t`` is that of
the last sample at or before ``t``; before the first sample it is the first sample's total minus its own bytes (the
profiler records every allocation while it runs: nothing changed in between). Measured on the project's H200
fixtures: a loop keeping a validation output with its graph reads +64.08 MiB per step, as
``torch.cuda.memory_allocated()`` does without the profiler.
"""
from __future__ import annotations

import statistics
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from itertools import compress
from operator import countOf, indexOf, itemgetter
from typing import TYPE_CHECKING, NamedTuple

from tracelint.trace.model import MemorySample, Op, RuntimeCall, TraceModel, is_backward, is_optimizer
from tracelint.trace.recording import Recording, recording_of

if TYPE_CHECKING:
    from tracelint.trace.device_analysis import TraceAnalysis

# The runtime and driver calls by which the caching allocator takes memory from the driver and gives it back (the
# frees synchronize the device; the stream-ordered ``*Async`` pair of cudaMallocAsync does not). Seen in real traces:
# cudaMalloc on a footprint that grows, cudaMalloc and cudaFree in every step after torch.cuda.empty_cache().
DEVICE_MALLOCS = frozenset({"cudaMalloc", "cudaMallocAsync", "cuMemAlloc", "cuMemAlloc_v2", "cuMemAllocAsync",
                            "hipMalloc", "hipMallocAsync", "hipExtMallocWithFlags"})
DEVICE_FREES = frozenset({"cudaFree", "cudaFreeAsync", "cuMemFree", "cuMemFree_v2", "cuMemFreeAsync", "hipFree",
                          "hipFreeAsync"})
FORWARD, BACKWARD, OPTIMIZER, OTHER = "forward", "backward", "optimizer", "other"
# Ops that only allocate: an allocation inside one is charged to the op around it (aten::empty_strided under
# aten::_foreach_sqrt is the optimizer's sqrt).
_ALLOCATING = frozenset({"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
                         "aten::new_empty_strided", "aten::resize_"})
_ALLOCATOR_CALLS = DEVICE_MALLOCS | DEVICE_FREES
TOP_SITES = 5
_SCAN = 5000  # ops looked at backwards for the one enclosing a time (ops nest: the innermost is close)
# MemorySample's fields by position (a tuple index is cheaper than a NamedTuple's attribute), and a call's name
_TS, _DEVICE, _TOTAL_ALLOCATED, _TOTAL_RESERVED, _ADDR = (
    itemgetter(MemorySample._fields.index(f)) for f in ("ts", "device", "total_allocated", "total_reserved", "addr"))
_NAME = itemgetter(RuntimeCall._fields.index("name"))


class UnfreedSite(NamedTuple):
    """Where memory that the steps allocate and never free is allocated: the op, the innermost user frame (with
    stacks; None without), the bytes per step and the number of allocations."""

    op: str | None
    file: str | None
    line: int | None
    function: str | None
    bytes_per_step: float
    allocations: int


@dataclass(frozen=True, slots=True)
class MemoryTimeline:
    """One device's memory over a trace (module docstring); every field None (``sites`` empty) where the trace does
    not say: no ``[memory]`` samples, samples without totals (PyTorch <= 1.9) or without addresses, too few steps."""

    device: int | None
    steps: int  # the trace's ProfilerSteps (0 without)
    allocated_at_steps: tuple[int, ...]  # at each step's start, then at the last step's end
    growth_bytes_per_step: float | None  # (last - first of allocated_at_steps) / steps; None under 2 steps
    steady_allocated_bytes: float | None  # median of the allocated at the steps' starts
    peak: MemorySample | None  # the first sample at the largest Total Allocated
    peak_phase: str | None  # FORWARD, BACKWARD, OPTIMIZER or OTHER
    peak_op: str | None  # the innermost op enclosing the peak sample on its thread (allocation-only ops skipped)
    peak_reserved_bytes: int | None  # largest Total Reserved
    unfreed_bytes_per_step: float | None  # see unfreed_steps
    unfreed_steps: int | None  # the steps but the last: what they allocate and the trace never frees, per step
    sites: tuple[UnfreedSite, ...]  # of the unfreed bytes, the TOP_SITES largest, largest first
    allocator_calls: tuple  # the DEVICE_MALLOCS and DEVICE_FREES runtime calls inside the steps, in time order
    mallocs_per_step: float | None  # DEVICE_MALLOCS calls in the steps, per step
    frees_per_step: float | None  # DEVICE_FREES calls in the steps, per step
    empty_cache_per_step: float | None  # torch.cuda.empty_cache() calls in the steps, per step; None without stacks

    @property
    def peak_allocated_bytes(self) -> int | None:
        return None if self.peak is None else self.peak.total_allocated

    @property
    def reserved_over_allocated_pct(self) -> float | None:
        """How far the allocator's largest reservation exceeds its largest allocation, in percent of the latter."""
        peak = self.peak_allocated_bytes
        if not peak or self.peak_reserved_bytes is None:
            return None
        return 100.0 * (self.peak_reserved_bytes - peak) / peak


def memory_of(analysis: TraceAnalysis) -> MemoryTimeline:
    """The memory timeline of an analysis' device, computed once per analysis (the metrics and rules share it)."""
    return analysis.memo("memory", lambda a: memory_timeline(a.model, a.device, a.recording))


def memory_timeline(model: TraceModel, device: int | None, recording: Recording | None = None) -> MemoryTimeline:
    """The memory timeline of ``device`` (None: every device's samples together) in a trace model; ``recording``:
    the model's (recording_of), when the caller has it. A trace holds a sample per allocation and free (92,000 in
    the 250 MB bench trace): the passes over them are map/itemgetter/compress, not Python loops."""
    samples = model.memory  # sorted by ts
    if device is not None and countOf(map(_DEVICE, samples), device) != len(samples):
        samples = [s for s in samples if s.device == device]
    totals = samples
    try:
        peak_bytes = max(map(_TOTAL_ALLOCATED, totals)) if totals else None
    except TypeError:  # some sample without a total (None)
        totals = [s for s in samples if s.total_allocated is not None]
        peak_bytes = max(map(_TOTAL_ALLOCATED, totals)) if totals else None
    if peak_bytes is None:  # (one sample, without a total)
        totals = []
    peak = totals[indexOf(map(_TOTAL_ALLOCATED, totals), peak_bytes)] if totals else None
    try:
        peak_reserved = max(map(_TOTAL_RESERVED, samples)) if samples else None
    except TypeError:
        peak_reserved = max((r for r in map(_TOTAL_RESERVED, samples) if r is not None), default=None)
    steps = model.steps
    at_steps: tuple[int, ...] = ()
    if totals and steps:
        at_steps = tuple(_allocated_at(totals, t) for t in [*model.step_starts, steps[-1].end])
    unfreed, unfreed_steps, sites = _unfreed(model, samples)
    n_windows = len(steps) or 1
    calls: tuple = ()
    if samples:
        calls = tuple(call for call in compress(model.runtime, map(_ALLOCATOR_CALLS.__contains__,
                                                                   map(_NAME, model.runtime)))
                      if model.step_at(call.start) is not None)
    mallocs = sum(1 for call in calls if call.name in DEVICE_MALLOCS)
    frees = len(calls) - mallocs
    # torch.cuda.empty_cache() shows as a python_function frame: counted where the trace has those frames (an
    # inferred with_stack may come from a PyTorch <= 1.9 "Call stack", which shows no such call)
    recording = recording or recording_of(model)
    stacks = bool(model.frames or model.empty_cache_calls) or (
        recording.settings["with_stack"] and "with_stack" not in recording.inferred)
    empty_cache = sum(1 for _, ts in model.empty_cache_calls if model.step_at(ts) is not None)
    return MemoryTimeline(
        device=device,
        steps=len(steps),
        allocated_at_steps=at_steps,
        growth_bytes_per_step=(at_steps[-1] - at_steps[0]) / len(steps) if len(steps) >= 2 and at_steps else None,
        steady_allocated_bytes=statistics.median(at_steps[:-1]) if at_steps else None,
        peak=peak,
        peak_phase=_phase(model, peak) if peak is not None else None,
        peak_op=_op_name(_enclosing(model, peak.tid, peak.ts)) if peak is not None else None,
        peak_reserved_bytes=peak_reserved,
        unfreed_bytes_per_step=unfreed,
        unfreed_steps=unfreed_steps,
        sites=sites,
        allocator_calls=calls,
        mallocs_per_step=mallocs / n_windows if samples else None,
        frees_per_step=frees / n_windows if samples else None,
        empty_cache_per_step=empty_cache / n_windows if samples and stacks else None,
    )


def _allocated_at(samples: list[MemorySample], t: float) -> int:
    """The memory allocated at time ``t`` (module docstring)."""
    i = bisect_right(samples, t, key=_TS) - 1
    if i >= 0:
        return samples[i].total_allocated
    return samples[0].total_allocated - samples[0].bytes


def _enclosing(model: TraceModel, tid: object, ts: float) -> list[Op]:
    """The ops on ``tid`` that contain host time ``ts``, innermost first (looking back at most _SCAN ops)."""
    starts, ops = model.ops_on(tid)
    i = bisect_right(starts, ts) - 1
    return [ops[j] for j in range(i, max(-1, i - _SCAN), -1) if ops[j].end >= ts]


def _op_name(chain: list[Op]) -> str | None:
    for op in chain:
        if op.name not in _ALLOCATING:
            return op.name
    return chain[0].name if chain else None


def _phase(model: TraceModel, sample: MemorySample) -> str:
    """BACKWARD inside an autograd op (the engine's evaluate_function, a grad node), OPTIMIZER inside an optimizer
    range (``Optimizer.step#…``), else FORWARD inside a step and OTHER outside the steps (or without steps). Every op
    of the thread since its step began is looked at: an optimizer range may enclose thousands of ops."""
    starts, ops = model.ops_on(sample.tid)
    step = model.step_at(sample.ts)
    first = bisect_left(starts, model.steps[step].start) if model.steps and step is not None else 0
    names = {op.name for op in ops[first:bisect_right(starts, sample.ts)] if op.end >= sample.ts}
    if any(is_backward(n) for n in names):
        return BACKWARD
    if any(is_optimizer(n) for n in names):
        return OPTIMIZER
    return FORWARD if model.steps and step is not None else OTHER


def _unfreed(model: TraceModel, samples: list[MemorySample]) -> tuple[float | None, int | None,
                                                                      tuple[UnfreedSite, ...]]:
    """(bytes per step, steps, top sites) of the allocations made in a step other than the last that no later free
    of the same address gives back within the trace. The last step is left out: what it allocates (its gradients,
    its loss) is freed by the step after it, which the trace does not hold (measured on the H200 fixtures: 33 MiB of
    a small MLP's last step, against 0.08 MiB per step of the steps before it). None under 2 steps or without the
    samples' addresses (PyTorch <= 1.9)."""
    steps = model.steps
    # an address is still allocated at the end when its last sample allocates (a free gives the address back)
    last = dict(zip(map(_ADDR, samples), samples, strict=True))
    last.pop(None, None)
    if len(steps) < 2 or not last:
        return None, None, ()
    counted = len(steps) - 1
    total = 0
    by_site: dict[tuple, list[int]] = {}
    for s in last.values():
        if s.bytes <= 0:
            continue
        step = model.step_at(s.ts)
        if step is None or step >= counted:
            continue
        total += s.bytes
        chain = _enclosing(model, s.tid, s.ts)
        frame = model.user_frame(s.tid, s.ts)
        key = (_op_name(chain), *((frame.file, frame.line, frame.func) if frame is not None else (None,) * 3))
        site = by_site.setdefault(key, [0, 0])
        site[0] += s.bytes
        site[1] += 1
    top = sorted(by_site.items(), key=lambda kv: (-kv[1][0], str(kv[0])))[:TOP_SITES]
    return total / counted, counted, tuple(UnfreedSite(*key, nbytes / counted, n) for key, (nbytes, n) in top)
