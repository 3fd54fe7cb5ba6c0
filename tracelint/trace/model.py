"""The trace model: one streaming pass over a profiler trace's events into compact, time-sorted records.

Only what the metrics and the trace rules need is kept (a few small tuples per event, names interned), so a
250 MB trace of a million events fits in a few hundred MB: CPU-side ``ProfilerStep#N`` spans, CPU ops and
annotations, CUDA/HIP runtime and driver calls (launches are joined to their GPU work by ``args.correlation``),
GPU activity (kernels, copies, memsets), ``cuda_sync`` events, user-code ``python_function`` frames, ``[memory]``
samples and the top-level device / distributed facts. PyTorch <= 1.9 categories (``Operator``, ``Runtime``,
``Kernel``, ``Memcpy``, ``Memset``) are read the same way. Devices are numbered as HIP/CUDA number them (the ids
of deviceProperties): a roctracer trace's HSA agent indices are mapped to them (``_hip_ordinals``). CUPTI
range-profiler events are only counted: they carry counters, not a timeline.

GPU work is assigned to a step by its launch (the GPU lags the CPU: on a GPU-bound run a step's host span is a
fraction of the GPU time it launches), never by time overlap: a GPU event belongs to the step whose CPU
``ProfilerStep#N`` span contains the start of the runtime/driver call that launched it. A trace without steps is
one window (step 0) and says so in ``has_steps``.

Records are NamedTuples rather than frozen dataclasses: they are built a million times in the one hot loop, and a
tuple is both the cheapest to build and the smallest to keep.
"""
from __future__ import annotations

import re
import sys
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import islice, repeat
from operator import itemgetter
from typing import NamedTuple

KERNEL, MEMCPY, MEMSET = "kernel", "memcpy", "memset"

_GPU_KIND = {
    "kernel": KERNEL, "Kernel": KERNEL,
    "gpu_memcpy": MEMCPY, "Memcpy": MEMCPY,
    "gpu_memset": MEMSET, "Memset": MEMSET,
}
_OP, _RUNTIME, _GPU, _PYFRAME, _SYNC, _INSTANT, _ANNOTATION, _RANGE = range(8)
_CATEGORY = {
    "cpu_op": _OP, "user_annotation": _ANNOTATION, "Operator": _OP,
    "cuda_runtime": _RUNTIME, "cuda_driver": _RUNTIME, "Runtime": _RUNTIME,
    "python_function": _PYFRAME,
    "cuda_sync": _SYNC,
    "cpu_instant_event": _INSTANT, None: _INSTANT,
    "cuda_profiler_range": _RANGE,
    **{cat: _GPU for cat in _GPU_KIND},
}
# The args of a CUPTI range-profiler event that are not counters.
_RANGE_NOT_COUNTERS = frozenset({"correlation", "External id"})
_EMPTY: dict = {}
_STEP_RE = re.compile(r"ProfilerStep#(\d+)$")
_FRAME_RE = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.*)$")
# Frames of these places are library code; a finding's source line is the innermost frame outside them. Kineto
# writes paths relative to the sys.path entry they were found under ("torch/nn/modules/module.py", "typing.py"),
# so library code is also recognised by its first path component: the standard library and common packages.
_LIBRARY_MARKERS = ("site-packages", "dist-packages", "/lib/python", "\\Lib\\", "<")
_LIBRARY_ROOTS = frozenset(sys.stdlib_module_names) | frozenset({
    "torch", "torchvision", "torchaudio", "torchtext", "functorch", "triton", "numpy", "scipy", "pandas", "PIL",
    "transformers", "accelerate", "datasets", "huggingface_hub", "lightning", "pytorch_lightning", "lightning_fabric",
    "deepspeed", "timm", "apex", "einops", "xformers", "flash_attn", "torchmetrics", "tqdm", "wandb", "tensorboard",
    "hydra", "omegaconf", "fairscale", "megatron", "_pytest", "pytest", "pluggy", "typing_extensions", "packaging",
})


@lru_cache(maxsize=65536)
def is_library_file(file: str) -> bool:
    """Whether a frame's file is library code (never a finding's source line)."""
    if not file or any(m in file for m in _LIBRARY_MARKERS):
        return True
    first = re.split(r"[/\\]", file.lstrip("./\\"), maxsplit=1)[0]
    return first.removesuffix(".py") in _LIBRARY_ROOTS


@lru_cache(maxsize=65536)
def parse_user_frame(name: str) -> tuple[str, int, str] | None:
    """(file, line, function) of a ``path(line): function`` frame name of user code; None for library code."""
    m = _FRAME_RE.match(name)
    if m is None or is_library_file(m.group("file")):
        return None
    return m.group("file"), int(m.group("line")), m.group("func")


# Host calls that block until the device is done. The asynchronous copy an `.item()` issues is followed by a
# stream synchronize, which is what is matched; a plain cudaMemcpy / hipMemcpy(WithStream) blocks by itself.
SYNC_CALLS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent_sync",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize",
    "cudaMemcpy", "hipMemcpy", "hipMemcpyWithStream", "cudaMemcpy2D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol",
})

class Op(NamedTuple):
    """A CPU op or annotation (cpu_op, user_annotation, Operator) on one host thread."""

    name: str
    tid: object
    start: float
    end: float
    stack: str | None  # innermost user frame from a PyTorch <= 1.9 "Call stack" arg, when there is one


# ATen matmul ops whose argument shapes and dtypes (``Input Dims`` / ``Input type``, written with record_shapes=True)
# the model keeps, as ShapedOps: the GEMM shapes a rule judges (TL404).
GEMM_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"})


class ShapedOp(NamedTuple):
    """A GEMM op (``GEMM_OPS``) with the shapes and dtypes of its inputs; an input that is not a tensor has ``()``
    dims (a scalar, a list, a value the trace wrote oddly) and its type as written (``Scalar``, ``""``)."""

    name: str
    tid: object
    start: float
    end: float
    dims: tuple[tuple[int, ...], ...]
    types: tuple[str, ...]


def _shapes(args: dict) -> tuple[tuple[tuple[int, ...], ...], tuple[str, ...]] | None:
    """(dims, types) of an op's ``Input Dims`` / ``Input type`` args; None when the trace has no usable shapes."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if dims.__class__ is not list or types.__class__ is not list:
        return None
    shapes = tuple(tuple(d) if d.__class__ is list and all(x.__class__ is int and 0 <= x < _I64 for x in d) else ()
                   for d in dims[:8])
    return shapes, tuple(t if t.__class__ is str else "" for t in types[:8])


class RuntimeCall(NamedTuple):
    """A CUDA/HIP runtime or driver call (cudaLaunchKernel, cuLaunchKernel, cudaStreamSynchronize, ...)."""

    name: str
    tid: object
    start: float
    end: float
    correlation: int | None


class GpuEvent(NamedTuple):
    """A kernel, copy or memset on one device; ``step`` is the index into ``TraceModel.steps`` of its launch."""

    kind: str
    name: str
    device: int
    stream: object
    start: float
    end: float
    correlation: int | None
    bytes: int | None
    launch: RuntimeCall | None
    step: int | None

    @property
    def direction(self) -> str | None:
        """H2D, D2H, D2D or P2P for a copy (``copy_direction``), None for anything else."""
        return copy_direction(self.name) if self.kind == MEMCPY else None

    @property
    def host_memory(self) -> str | None:
        """PAGEABLE or PINNED for a copy that names its host side, else None (ROCm names neither)."""
        return _host_memory(self.name) if self.kind == MEMCPY else None


# Copy directions and host memory kinds, from the copy's name: CUDA writes ``Memcpy HtoD (Pageable -> Device)``,
# ``Memcpy DtoH (Device -> Pinned)``, ``Memcpy DtoD (Device -> Device)``; ROCm ``Memcpy HtoD (Host -> Device)`` or
# only ``(Host -> Device)``. This is the one place that reads them.
H2D, D2H, D2D, P2P = "HtoD", "DtoH", "DtoD", "PtoP"
PAGEABLE, PINNED = "pageable", "pinned"
# A copy between two devices (``Memcpy PtoP (Device -> Device)``) is communication, told apart first.
_DIRECTION_WORDS = ((P2P, ("PtoP",)), (H2D, ("HtoD", "Host -> Device")), (D2H, ("DtoH", "Device -> Host")),
                    (D2D, ("DtoD", "Device -> Device")))


@lru_cache(maxsize=4096)
def copy_direction(name: str) -> str | None:
    """H2D, D2H, D2D or P2P for a copy's name; None when the name says no direction."""
    for direction, words in _DIRECTION_WORDS:
        if any(w in name for w in words):
            return direction
    return None


@lru_cache(maxsize=4096)
def _host_memory(name: str) -> str | None:
    return PAGEABLE if "Pageable" in name else PINNED if "Pinned" in name else None


class SyncEvent(NamedTuple):
    """A ``cuda_sync`` event: the device-side record of a host synchronization."""

    name: str
    device: int
    start: float
    end: float
    correlation: int | None


class CollectiveArgs(NamedTuple):
    """What torch 2.x writes in the args of an NCCL kernel (``Collective name``, ``Process Group Name``,
    ``In msg nelems``, ...): the collective, its process group and message size. Older traces have none."""

    collective: str | None  # one spelling: all_reduce, all_gather, ... (tracelint.trace.kernels.collective_name)
    group: str | None  # the process group's name ("0", "1", ...)
    in_nelems: int | None
    out_nelems: int | None
    dtype: str | None
    group_size: int | None


def _collective_args(args: dict, correlation: int | None) -> tuple:
    """(correlation, *CollectiveArgs) of a kernel's args, tolerant of any value."""
    from tracelint.trace.kernels import collective_name

    name = args.get("Collective name")
    group = args.get("Process Group Name")
    dtype = args.get("dtype")
    return (correlation, collective_name(name) if isinstance(name, str) else None,
            group if isinstance(group, str) else _int_str(group), _int(args.get("In msg nelems")),
            _int(args.get("Out msg nelems")), dtype if isinstance(dtype, str) else None, _int(args.get("Group size")))


class Frame(NamedTuple):
    """A ``python_function`` frame of user code (with_stack=True), e.g. ``train.py(42): step``."""

    tid: object
    start: float
    end: float
    file: str
    line: int
    func: str


class MemorySample(NamedTuple):
    """A ``[memory]`` instant event of a device allocator: ``bytes`` > 0 allocates, < 0 frees."""

    ts: float
    device: int
    bytes: int
    total_allocated: int | None


class Step(NamedTuple):
    number: int
    tid: object
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class DeviceProps:
    id: int
    name: str | None
    total_memory_bytes: int | None
    compute_major: int | None
    sm_count: int | None


@dataclass(slots=True)
class TraceModel:
    """Everything kept from one trace file (one rank), sorted by start time within each list."""

    steps: list[Step] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    runtime: list[RuntimeCall] = field(default_factory=list)
    gpu: list[GpuEvent] = field(default_factory=list)
    syncs: list[SyncEvent] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    memory: list[MemorySample] = field(default_factory=list)
    devices: dict[int, DeviceProps] = field(default_factory=dict)  # by HIP/CUDA ordinal, as deviceProperties lists
    device_agents: dict[int, int] = field(default_factory=dict)  # ordinal -> the ROCm agent index the trace wrote
    collectives: dict[int, CollectiveArgs] = field(default_factory=dict)  # by the kernel's correlation id
    meta_settings: dict = field(default_factory=dict)  # the profiler settings among the top-level keys
    tracelint_record: dict | None = None  # the top-level "tracelint" key written by tracelint.profile
    shaped_ops: list[ShapedOp] = field(default_factory=list)  # GEMM ops with their input shapes (record_shapes)
    annotations: frozenset = frozenset()  # names of the ops that are user_annotation ranges (record_function)
    # CUPTI range-profiler events (``cuda_profiler_range``, experimental_config profiler_metrics): counters per range
    # or per kernel replay, with no kernel timeline
    profiler_ranges: int = 0
    range_counters: tuple[str, ...] = ()  # the counters they carry (``smsp__sass_thread_inst_executed_op_*.sum``)
    rank: int | None = None
    world_size: int | None = None
    base_time_ns: int | None = None
    skipped_events: int = 0  # events dropped because a field they need could not be used (problems says why)
    # (reason, whether the event was dropped) -> (events, index of the first): one warning each (problem_warnings)
    problems: dict[tuple[str, bool], tuple[int, int]] = field(default_factory=dict)
    meta_problems: list[str] = field(default_factory=list)  # top-level fields of the wrong shape, ignored
    # derived indexes, built by finish()
    _step_starts: list[float] = field(default_factory=list, repr=False)
    _frames_by_tid: dict[object, tuple[list[float], list[Frame]]] = field(default_factory=dict, repr=False)
    _ops_by_tid: dict[object, tuple[list[float], list[Op]]] = field(default_factory=dict, repr=False)

    @property
    def has_steps(self) -> bool:
        return bool(self.steps)

    @property
    def main_tid(self) -> object | None:
        """The training loop's thread: the one holding the ProfilerStep spans, else the one launching most."""
        if self.steps:
            return self.steps[0].tid
        counts: dict[object, int] = {}
        for call in self.runtime:
            counts[call.tid] = counts.get(call.tid, 0) + 1
        if not counts:
            counts = {}
            for op in self.ops:
                counts[op.tid] = counts.get(op.tid, 0) + 1
        return max(counts, key=counts.__getitem__) if counts else None

    def step_at(self, ts: float) -> int | None:
        """Index into ``steps`` of the CPU step span containing host time ``ts`` (0 when the trace has no steps)."""
        if not self.steps:
            return 0
        i = bisect_right(self._step_starts, ts) - 1
        return i if i >= 0 and ts <= self.steps[i].end else None

    def ops_on(self, tid: object) -> tuple[list[float], list[Op]]:
        """(sorted starts, ops) of one thread."""
        return self._ops_by_tid.get(tid, ([], []))

    def user_frame(self, tid: object, ts: float) -> Frame | None:
        """The innermost user-code python_function frame on ``tid`` that contains host time ``ts``."""
        starts, frames = self._frames_by_tid.get(tid, ([], []))
        i = bisect_right(starts, ts) - 1
        # Frames nest, so the first one found backwards that still contains ts is the innermost; the bound keeps a
        # pathological trace (a long-lived outer frame behind many short ones) from turning this into a scan.
        for j in range(i, max(-1, i - 5000), -1):
            if frames[j].end >= ts:
                return frames[j]
        return None

    def devices_with_activity(self) -> list[int]:
        return sorted({e.device for e in self.gpu})


# ---- reading events: every field is untrusted ---------------------------------------------------------------------
#
# What survives has the types the rest relies on: str names, finite float times (int where the trace wrote ints)
# within range, durations >= 0, hashable thread ids (int or str), int-or-None correlation ids and byte counts, int
# device ids, all integers within 64 bits. An event that cannot be used is dropped and counted by reason; a field
# that is optional and wrong (a correlation id that is a list, args that are not an object) is ignored and counted.

_I64 = 1 << 63
_MAX_TS = 1e18  # µs: ~31,700 years; anything beyond is no clock (and would overflow sums of times)
_MAX_DUR = 1e12  # µs: 11.6 days; a profiler records seconds to hours (CUPTI's wrapped 2^64 ns durations are 1.8e13)


def _int(value) -> int | None:
    """An integer within 64 bits (a number, or a string holding one), else None."""
    if value.__class__ is not int:
        if value is None or isinstance(value, (bool, dict, list)):
            return None
        try:
            value = int(value)
        except (TypeError, ValueError, OverflowError):
            return None
    return value if -_I64 <= value < _I64 else None


def _int_str(value) -> str | None:
    value = _int(value)
    return None if value is None else str(value)


class _Bad(Exception):
    """An event the slow reader drops; ``args[0]`` says why (one warning per reason)."""


def _time(value, field: str) -> float | int:
    if value.__class__ is not float and value.__class__ is not int:
        if value.__class__ is not str:
            raise _Bad(f"`{field}` not a number")
        try:
            value = float(value)  # "ts" as a string: some converters write it so
        except ValueError:
            raise _Bad(f"`{field}` not a number") from None
    if not -_MAX_TS <= value <= _MAX_TS:
        raise _Bad(f"`{field}` out of range (NaN, infinite or beyond 1e18 µs)")
    return value


def _duration(value) -> float | int:
    if value is None:
        return 0.0
    value = _time(value, "dur")
    if not 0 <= value <= _MAX_DUR:
        raise _Bad("`dur` negative" if value < 0 else "`dur` over 1e12 µs (11.6 days)")
    return value


def _tid(value) -> int | str | None:
    if value is None:  # no thread: one "thread" of its own
        return None
    if value.__class__ is int or value.__class__ is str:
        return value if value.__class__ is str or -_I64 <= value < _I64 else str(value)
    if value.__class__ is float and value.is_integer():
        return int(value)
    raise _Bad("`tid` not an integer or string")


def _innermost_user_frame(call_stack: str) -> str | None:
    # PyTorch <= 1.9 "Call stack": frames joined by ';', innermost first.
    for frame in call_stack.split(";"):
        if frame and parse_user_frame(frame.strip()) is not None:
            return frame.strip()
    return None


class _Slow(Exception):
    """An event the fast path leaves to the tolerant reader."""


def build_model(chunks: Iterable[list[dict]], meta_source=None) -> TraceModel:
    """Stream event chunks into a TraceModel; ``meta_source()`` returns the top-level keys once chunks are read.

    A loader stream that can be split (``map_parts``, see load.py) reads parts of a big trace in worker processes:
    each part gives the same plain-tuple records a serial read would, and they are joined in file order.
    """
    map_parts = getattr(chunks, "map_parts", None)
    parts = map_parts(_collect) if map_parts is not None else [_collect(chunks)]
    lists = parts[0]
    for part in parts[1:]:
        for kept, more in zip(lists[:-1], part[:-1], strict=True):
            kept += more
    model = TraceModel()
    # the problems of each part, their first event numbered across the parts
    offset = 0
    for part in parts:
        seen, problems = part[-1]
        for key, (count, first) in problems.items():
            if key in model.problems:
                model.problems[key] = (model.problems[key][0] + count, model.problems[key][1])
            else:
                model.problems[key] = (count, first + offset)
        offset += seen
    steps, ops, runtime, gpu_raw, syncs, frames, memory, comms, annotations, ranges, shaped = lists[:-1]
    meta = meta_source() if meta_source else {}
    meta = meta if isinstance(meta, dict) else {}
    _read_meta(model, meta)
    model.skipped_events = sum(count for (_, dropped), (count, _) in model.problems.items() if dropped)
    ordinals = _hip_ordinals(model, meta, runtime, gpu_raw, memory)
    if ordinals:
        gpu_raw = [(kind, name, ordinals[device], *rest) for kind, name, device, *rest in gpu_raw]
        syncs = [(name, ordinals.get(device, device), *rest) for name, device, *rest in syncs]
        model.device_agents = {ordinal: agent for agent, ordinal in ordinals.items()}
    _finish(model, steps, ops, runtime, gpu_raw, syncs, frames, memory)
    model.collectives = {c[0]: CollectiveArgs(*c[1:]) for c in comms if c[0] is not None}
    model.annotations = frozenset(annotations)
    shaped.sort(key=_by_start)
    model.shaped_ops = _records(ShapedOp, shaped)
    model.profiler_ranges = len(ranges)
    model.range_counters = tuple(sorted({name for counters in set(ranges) for name in counters}))
    model.meta_problems.extend(_missing_memory_size(model))
    return model


# ROCm's roctracer (what Kineto used before rocprofiler-sdk) writes the `device` (and pid) of GPU events as an HSA
# agent index, and HSA numbers the CPU agents first: on a two-socket host the GPUs are agents 2-9, while HIP, and so
# deviceProperties, `[memory]` samples and torch.cuda, call them 0-7 (pytorch/kineto#926, ROCm/roctracer#98; the
# public MI250 and MI300X traces run on agent 2 beside deviceProperties ids 0-3 and 0-7). Kineto's rocprofiler-sdk
# path writes GPU indices instead (``logical_node_type_id``) and says so with a ``rocprofiler-sdk_version`` key.
_HIP_PROBE_CALLS = 1000  # a ROCm trace's runtime calls are all hip*: its first ones tell
_MAX_CPU_AGENTS = 8  # CPU sockets of one host (Kineto's own bound: "8 CPU sockets + 8 GPUs")


def _hip_ordinals(model: TraceModel, meta: dict, runtime: list, gpu_raw: list, memory: list) -> dict[int, int]:
    """{agent index: HIP ordinal} for the GPU events of a roctracer trace; {} when its ids are ordinals already.

    The trace does not say how many CPU agents come first, so the ordinal of the lowest agent in use is inferred:
    the lowest device of the allocator's ``[memory]`` samples (they carry the ordinal), else, for a rank of a job on
    a host whose GPUs deviceProperties lists, ``rank % GPUs`` (one GPU per rank, as torchrun's local rank), else 0
    (a single process uses its first GPU). Agents keep their order. A mapping that would leave no CPU agent (or
    more than 8) before the GPUs, or name an ordinal deviceProperties does not list, is not applied.
    """
    if not gpu_raw or "rocprofiler-sdk_version" in meta:
        return {}
    if "roctracer_version" not in meta and not any(
            call[0].startswith("hip") for call in islice(runtime, _HIP_PROBE_CALLS)):
        return {}  # a CUDA trace: its device ids are CUDA ordinals
    agents = sorted({g[2] for g in gpu_raw})
    allocator = sorted({s[1] for s in memory})
    listed = model.devices
    if allocator:
        first = allocator[0]
    elif model.rank is not None and (model.world_size or 0) > 1 and len(listed) > 1:
        first = model.rank % len(listed)
    else:
        first = 0
    offset = agents[0] - first
    if not 1 <= offset <= _MAX_CPU_AGENTS or (listed and any(agent - offset not in listed for agent in agents)):
        return {}
    return {agent: agent - offset for agent in agents}


def _missing_memory_size(model: TraceModel) -> list[str]:
    """Why peak_memory_pct is missing for a device whose allocator peak the trace has: its memory size is unknown."""
    sampled = {s.device for s in model.memory if s.total_allocated is not None}
    unsized = [d for d in sorted(sampled) if not (d in model.devices and model.devices[d].total_memory_bytes)]
    if not unsized:
        return []
    active = set(model.devices_with_activity())
    notes = []
    for device in unsized:
        if device not in active:
            continue  # no report of its own
        props = model.devices.get(device)
        if not model.devices:
            why = "the trace has no `deviceProperties`"
        elif props is None:
            why = f"`deviceProperties` has no entry for it (it lists {_id_list(model.devices)})"
        else:
            why = "its `deviceProperties` entry has no `totalGlobalMem`"
        notes.append(f"no peak_memory_pct for GPU {device}: its memory size is unknown ({why})")
    return notes


def _id_list(ids) -> str:
    ids = sorted(ids)
    if len(ids) > 2 and ids == list(range(ids[0], ids[-1] + 1)):
        return f"GPUs {ids[0]}-{ids[-1]}"
    return f"GPU{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}"


def problem_warnings(model: TraceModel) -> list[str]:
    """One warning per reason: ``1,204 events skipped: `ts` not a number (first at event #5,120)``."""
    out = list(model.meta_problems)
    for (reason, dropped), (count, first) in sorted(model.problems.items(), key=lambda item: item[1][1]):
        what = f"{count:,} event{'s' if count != 1 else ''}"
        if dropped:
            out.append(f"{what} skipped: {reason} (first at event #{first:,})")
        else:
            out.append(f"{what}: {reason}, ignored (first at event #{first:,})")
    return out


def _collect(chunks: Iterable[list[dict]]) -> tuple[list, ...]:
    """The records of a stream of event chunks, as plain tuples in the field order of the record types (cheap to
    build and to pickle between processes; ``_finish`` makes them records): steps, ops, runtime calls, raw GPU
    events, syncs, frames, memory samples, the collective args of communication kernels (``_collective_args``), the
    names of annotation ops, the counter names of each CUPTI range-profiler event, the GEMM ops with their input
    shapes (ShapedOp), and (events seen, {reason:
    [count, index of the first event]}) of the events dropped or partly ignored."""
    names: dict = {}  # str -> str (and a range's counter names -> themselves)
    intern = names.setdefault
    ops, runtime, gpu_raw, syncs, frames, memory, steps, comms, ranges, shaped = ([] for _ in range(10))
    gemm_ops = GEMM_OPS
    annotations: set[str] = set()
    stacks: dict[str, str | None] = {}  # "Call stack" arg -> its innermost user frame
    problems: dict[tuple[str, bool], list[int]] = {}
    seen = 0  # events of the chunks before the current one
    chunk: list = []

    def note(reason: str, e: dict, dropped: bool = False) -> None:
        key = (reason, dropped)
        found = problems.get(key)
        if found is not None:
            found[0] += 1
            return
        at = next((i for i, x in enumerate(chunk) if x is e), 0)  # once per reason: no index kept in the hot loop
        problems[key] = [1, seen + at]

    def stack_of(call_stack: str) -> str | None:
        stack = stacks.get(call_stack, False)
        if stack is False:
            stack = stacks[call_stack] = _innermost_user_frame(call_stack)
        return stack

    def read(e, kind: int) -> None:
        """The tolerant reader: any event, missing or odd fields included; drops it (noting why) when a field it
        needs cannot be used."""
        try:
            if e.__class__ is not dict:
                raise _Bad("not an object")
            if kind == -1:
                raise _Bad("`cat` not a string")
            name = e.get("name")
            if name is None:
                name = ""
            elif name.__class__ is not str:
                raise _Bad("`name` not a string")
            if kind == _RANGE:
                args = e.get("args")
                counters = tuple(k for k in args if k not in _RANGE_NOT_COUNTERS) if args.__class__ is dict else ()
                ranges.append(intern(counters, counters))
                return
            if kind == _INSTANT and name != "[memory]":
                return  # instants other than memory samples are not read
            ts = e.get("ts")
            if ts is None:
                if kind == _INSTANT:
                    return
                raise _Bad("`ts` missing")
            ts = _time(ts, "ts")
            args = e.get("args")
            if args is None:
                args = _EMPTY
            elif args.__class__ is not dict:
                note("`args` not an object", e)
                args = _EMPTY
            if kind == _INSTANT:
                # Device Type 0 is the CPU allocator; CUDA (and ROCm, which PyTorch reports as CUDA) is 1.
                if args.get("Device Type", 0) != 0:
                    total = args.get("Total Allocated")
                    memory.append((ts, _int(args.get("Device Id")) or 0, _int(args.get("Bytes")) or 0,
                                   None if total is None else _int(total)))
                return
            end = ts + _duration(e.get("dur"))
            if kind == _GPU:
                device = args.get("device")
                device = _int(e.get("pid") if device is None else device) or 0
                stream = args.get("stream", e.get("tid"))
                if stream is not None and stream.__class__ is not int and stream.__class__ is not str:
                    note("`args.stream` not an integer or string", e)
                    stream = None
                corr = _correlation(args, e)
                nbytes = args.get("bytes")
                gpu_raw.append((_GPU_KIND[e["cat"]], intern(name, name), device, stream, ts, end, corr,
                                None if nbytes is None else _int(nbytes)))
                if "Collective name" in args:
                    comms.append(_collective_args(args, corr))
                return
            if kind == _SYNC:
                device = args.get("device")
                syncs.append((intern(name, name), _int(e.get("pid") if device is None else device) or 0, ts, end,
                              _correlation(args, e)))
                return
            tid = _tid(e.get("tid"))
            if kind == _OP or kind == _ANNOTATION:
                m = _STEP_RE.match(name) if name.startswith("ProfilerStep#") else None
                if m:
                    number = int(m.group(1)) if len(m.group(1)) < 19 else -1
                    if number < 0:
                        raise _Bad("step number beyond 64 bits")
                    steps.append((number, tid, ts, end))
                    return
                stack = args.get("Call stack")
                if stack is not None and stack.__class__ is not str:
                    note("`args.Call stack` not a string", e)
                    stack = None
                ops.append((intern(name, name), tid, ts, end, None if stack is None else stack_of(stack)))
                if name in GEMM_OPS and (found := _shapes(args)) is not None:
                    shaped.append((intern(name, name), tid, ts, end, *found))
                if kind == _ANNOTATION:
                    annotations.add(name)
            elif kind == _RUNTIME:
                runtime.append((intern(name, name), tid, ts, end, _correlation(args, e)))
            elif kind == _PYFRAME:
                user = parse_user_frame(name) if "): " in name else None
                if user is not None:
                    frames.append((tid, ts, end, *user))
        except _Bad as bad:
            note(bad.args[0], e, dropped=True)

    def _correlation(args: dict, e: dict) -> int | None:
        corr = args.get("correlation")
        if corr is None or corr.__class__ is int:
            return corr
        value = _int(corr) if corr.__class__ is float and corr.is_integer() else None
        if value is None:
            note("`args.correlation` not an integer", e)
        return value

    # The fast path reads the categories that make up most of a trace by plain subscripts and exact type checks;
    # anything it does not expect (a missing field, a string timestamp, a value out of range, a step) raises and
    # goes to read(). A chained comparison both range-checks a number and raises TypeError for a non-number (NaN
    # and infinities fail it). Where read() turns times into floats (frames, ops with a call stack), the fast path
    # adds 0.0, which gives the same float for any number.
    category = _CATEGORY.get
    add_op, add_call, add_gpu, add_memory = ops.append, runtime.append, gpu_raw.append, memory.append
    add_frame = frames.append
    str_, int_, dict_ = str, int, dict
    lo, hi, max_dur, i64 = -_MAX_TS, _MAX_TS, _MAX_DUR, _I64
    for chunk in chunks:
        for e in chunk:
            try:
                kind = category(e.get("cat"))
            except (TypeError, AttributeError):  # an unhashable cat (a list), or an item that is not an object
                kind = -1
            if kind is None:
                continue
            try:
                if kind == _PYFRAME:
                    # Most frames are library code, dropped on their name: only user frames have their fields read.
                    name = e["name"]
                    if "): " not in name or (user := parse_user_frame(name)) is None:
                        continue
                    ts = e["ts"] + 0.0
                    dur = e["dur"]
                    tid = e["tid"]
                    if not (lo <= ts <= hi and 0 <= dur <= max_dur and name.__class__ is str_
                            and (tid.__class__ is int_ or tid.__class__ is str_)):
                        raise _Slow
                    add_frame((tid, ts, ts + dur, *user))
                    continue
                if kind == _OP or kind == _ANNOTATION:
                    name = e["name"]
                    if name.startswith("ProfilerStep#"):  # also raises for a name that is not a string
                        raise _Slow
                    args = e["args"]
                    ts = e["ts"]
                    dur = e["dur"]
                    tid = e["tid"]
                    if not (lo <= ts <= hi and 0 <= dur <= max_dur and args.__class__ is dict_
                            and (tid.__class__ is int_ or tid.__class__ is str_)):
                        raise _Slow
                    if "Call stack" in args:
                        stack = args["Call stack"]
                        if stack.__class__ is not str_:
                            raise _Slow
                        ts += 0.0
                        add_op((intern(name, name), tid, ts, ts + dur, stack_of(stack)))
                    else:
                        add_op((intern(name, name), tid, ts, ts + dur, None))
                    if name in gemm_ops and (found := _shapes(args)) is not None:
                        shaped.append((intern(name, name), tid, ts + 0.0, ts + dur, *found))
                    if kind == _ANNOTATION:
                        annotations.add(name)
                    continue
                if kind == _RUNTIME:
                    ts = e["ts"]
                    dur = e["dur"]
                    name = e["name"]
                    tid = e["tid"]
                    corr = e["args"]["correlation"]
                    if not (lo <= ts <= hi and 0 <= dur <= max_dur and name.__class__ is str_
                            and (tid.__class__ is int_ or tid.__class__ is str_) and corr.__class__ is int_):
                        raise _Slow
                    add_call((intern(name, name), tid, ts, ts + dur, corr))
                    continue
                if kind == _GPU:
                    ts = e["ts"]
                    dur = e["dur"]
                    name = e["name"]
                    args = e["args"]
                    device = args["device"]
                    stream = args["stream"]
                    corr = args["correlation"]
                    nbytes = args.get("bytes")
                    if not (lo <= ts <= hi and 0 <= dur <= max_dur and name.__class__ is str_
                            and device.__class__ is int_ and -i64 <= device < i64
                            and (stream.__class__ is int_ or stream.__class__ is str_) and corr.__class__ is int_
                            and (nbytes is None or (nbytes.__class__ is int_ and 0 <= nbytes < i64))):
                        raise _Slow
                    add_gpu((_GPU_KIND[e["cat"]], intern(name, name), device, stream, ts, ts + dur, corr, nbytes))
                    if "Collective name" in args:
                        comms.append(_collective_args(args, corr))
                    continue
                if kind == _INSTANT and e["cat"] is not None:
                    if e["name"] == "[memory]":
                        args = e["args"]
                        if args["Device Type"] != 0:
                            ts = e["ts"] + 0
                            device = args["Device Id"]
                            nbytes = args["Bytes"]
                            total = args.get("Total Allocated")
                            if not (lo <= ts <= hi and device.__class__ is int_ and -i64 <= device < i64
                                    and nbytes.__class__ is int_ and -i64 <= nbytes < i64
                                    and (total is None or (total.__class__ is int_ and -i64 <= total < i64))):
                                raise _Slow
                            add_memory((ts, device, nbytes, total))
                    continue
            except (_Slow, TypeError, KeyError, AttributeError):
                pass
            read(e, kind)
        seen += len(chunk)
    # Sorted here, by the same keys as in _finish, so that in a parallel read the workers do the sorting and
    # _finish's stable sorts only merge the parts' sorted runs (same order as sorting the whole at once).
    ops.sort(key=_by_start)
    runtime.sort(key=_by_start)
    gpu_raw.sort(key=itemgetter(4))
    frames.sort(key=itemgetter(1))
    memory.sort(key=itemgetter(0))
    shaped.sort(key=_by_start)
    return (steps, ops, runtime, gpu_raw, syncs, frames, memory, comms, sorted(annotations), ranges, shaped,
            (seen, {key: tuple(v) for key, v in problems.items()}))


def _read_meta(model: TraceModel, meta: dict) -> None:
    """The top-level facts; a field of the wrong shape is ignored with a note in ``model.meta_problems``."""
    problems = model.meta_problems
    props_list = meta.get("deviceProperties")
    if props_list is not None and not isinstance(props_list, list):
        problems.append(f"ignored `deviceProperties`: a {_json_type(props_list)}, not an array")
        props_list = None
    odd = 0
    for i, props in enumerate(props_list or ()):
        if not isinstance(props, dict):
            odd += 1
            continue
        dev = _int(props.get("id", i))
        dev = i if dev is None else dev
        name = props.get("name")
        model.devices[dev] = DeviceProps(
            id=dev,
            name=(name.strip() or None) if isinstance(name, str) else None,  # "" is no name
            total_memory_bytes=_int(props.get("totalGlobalMem")),
            compute_major=_int(props.get("computeMajor")),
            sm_count=_int(props.get("numSms")),
        )
    if odd:
        problems.append(f"ignored {odd} `deviceProperties` entries that are not objects")
    dist = meta.get("distributedInfo")
    if isinstance(dist, dict):
        model.rank = _count(dist.get("rank"), problems, "distributedInfo.rank")
        model.world_size = _count(dist.get("world_size"), problems, "distributedInfo.world_size")
    elif dist is not None:
        problems.append(f"ignored `distributedInfo`: a {_json_type(dist)}, not an object")
    model.base_time_ns = _int(meta.get("baseTimeNanoseconds"))
    model.meta_settings = {key: meta[key] for key in ("with_stack", "record_shapes", "profile_memory", "with_flops",
                                                      "with_modules") if key in meta}
    record = meta.get("tracelint")
    if isinstance(record, dict):
        record = dict(record)
        unprofiled = record.get("unprofiled")
        if isinstance(unprofiled, dict) and "steps" in unprofiled and _int(unprofiled["steps"]) is None:
            record["unprofiled"] = {k: v for k, v in unprofiled.items() if k != "steps"}
        if "source" in record and not isinstance(record["source"], str):
            del record["source"]
        model.tracelint_record = record
    elif record is not None:
        problems.append(f"ignored `tracelint`: a {_json_type(record)}, not an object")


def _count(value, problems: list[str], field: str) -> int | None:
    """A rank or a world size: an integer from 0 to 2^31, else None (noted unless absent)."""
    number = _int(value)
    if number is not None and 0 <= number < 1 << 31:
        return number
    if value is not None:
        problems.append(f"ignored `{field}`: not an integer from 0 to 2^31")
    return None


def _json_type(value) -> str:
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object",
            type(None): "null"}.get(type(value), type(value).__name__)


_by_start = itemgetter(2)  # the start of an Op, RuntimeCall or SyncEvent
_correlation_of = itemgetter(4)  # a RuntimeCall's


def _records(cls, items: list) -> list:
    """Plain tuples as records of ``cls`` (C-level all the way: no Python ``__new__`` per item)."""
    return list(map(tuple.__new__, repeat(cls), items))


def _finish(model, steps, ops, runtime, gpu_raw, syncs, frames, memory) -> None:
    # Steps: keep one span per step number (a trace may repeat a step on another thread) ordered by start.
    seen: dict[int, Step] = {}
    for step in sorted(_records(Step, steps), key=lambda s: s.start):
        seen.setdefault(step.number, step)
    model.steps = sorted(seen.values(), key=lambda s: s.start)
    model._step_starts = [s.start for s in model.steps]

    ops.sort(key=_by_start)
    runtime.sort(key=_by_start)
    ops, runtime = _records(Op, ops), _records(RuntimeCall, runtime)
    model.ops, model.runtime = ops, runtime
    model.syncs = sorted(_records(SyncEvent, syncs), key=_by_start)
    memory.sort(key=itemgetter(0))
    model.memory = _records(MemorySample, memory)

    by_tid: dict[object, tuple[list[float], list[Op]]] = {}
    for op in ops:
        starts, items = by_tid.setdefault(op.tid, ([], []))
        starts.append(op.start)
        items.append(op)
    model._ops_by_tid = by_tid

    frames.sort(key=itemgetter(1))
    frames = _records(Frame, frames)
    fbt: dict[object, tuple[list[float], list[Frame]]] = {}
    for frame in frames:
        starts, items = fbt.setdefault(frame.tid, ([], []))
        starts.append(frame.start)
        items.append(frame)
    model.frames, model._frames_by_tid = frames, fbt

    with_corr = [call for call in runtime if call.correlation is not None]
    launches = dict(zip(map(_correlation_of, with_corr), with_corr, strict=True))
    repeated = len(with_corr) - len(launches)
    if repeated:  # the last call of an id is its launch
        model.meta_problems.append(
            f"{repeated:,} runtime call{' repeats' if repeated == 1 else 's repeat'} the correlation id of another (a "
            "merged or duplicated trace?): GPU work is joined to the last of them")
    new = tuple.__new__
    has_steps = model.has_steps
    step_starts, step_list = model._step_starts, model.steps
    gpu = []
    for kind, name, device, stream, start, end, corr, nbytes in gpu_raw:
        launch = launches.get(corr) if corr is not None else None
        if launch is not None:
            # model.step_at(launch.start), inlined: it runs once per GPU event
            if has_steps:
                at = launch[2]
                i = bisect_right(step_starts, at) - 1
                step = i if i >= 0 and at <= step_list[i].end else None
            else:
                step = 0
        else:
            # Work whose launch the trace lacks has no step of its own; without steps everything is the window.
            step = None if has_steps else 0
        gpu.append(new(GpuEvent, (kind, name, device, stream, start, end, corr, nbytes, launch, step)))
    gpu.sort(key=itemgetter(4))
    model.gpu = gpu
