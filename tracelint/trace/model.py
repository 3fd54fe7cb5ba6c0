"""The trace model: the compact, time-sorted records kept from one profiler trace (read by read_events.py, put
together by build.py) and the model that holds them.

GPU work is assigned to a step by its launch (the GPU lags the CPU: on a GPU-bound run a step's host span is a
fraction of the GPU time it launches), never by time overlap: a GPU event belongs to the step whose CPU
``ProfilerStep#N`` span contains the start of the runtime/driver call that launched it. A trace without steps is
one window (step 0) and says so in ``has_steps``.

Records are NamedTuples rather than frozen dataclasses: they are built a million times in the one hot loop, and a
tuple is both the cheapest to build and the smallest to keep.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

KERNEL, MEMCPY, MEMSET = "kernel", "memcpy", "memset"

# Host calls that block until the device is done. The asynchronous copy an `.item()` issues is followed by a
# stream synchronize, which is what is matched; a plain cudaMemcpy / hipMemcpy(WithStream) blocks by itself.
SYNC_CALLS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent_sync",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize",
    "cudaMemcpy", "hipMemcpy", "hipMemcpyWithStream", "cudaMemcpy2D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol",
})

_BACKWARD = re.compile(r"Backward\d*$")


def is_optimizer(name: str) -> bool:
    """An optimizer's record_function range: ``Optimizer.step#AdamW.step``, ``Optimizer.zero_grad#…``."""
    return name.startswith(("Optimizer.step#", "Optimizer.zero_grad#"))


@lru_cache(maxsize=65536)
def is_backward(name: str) -> bool:
    """An autograd op: the engine's evaluate_function, a grad node (``MmBackward0``), or AccumulateGrad."""
    return (name.startswith("autograd::engine::evaluate_function") or name.endswith("AccumulateGrad")
            or (not name.startswith("aten::") and _BACKWARD.search(name) is not None))


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
# The other ops whose FLOPs their arguments give (tracelint.trace.flops): convolutions at the dispatcher (forward and
# backward) and the fused attention kernels' ops, forward and backward (the math path runs bmm ops: GEMM_OPS).
CONV_OPS = frozenset({"aten::convolution", "aten::convolution_backward"})
ATTENTION_OPS = frozenset({
    "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_flash_attention_backward",
    "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_efficient_attention_backward",
    "aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_cudnn_attention_backward",
    "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    "aten::_scaled_dot_product_fused_attention_overrideable",
    "aten::_scaled_dot_product_fused_attention_overrideable_backward",
})
SHAPED_OPS = GEMM_OPS | CONV_OPS | ATTENTION_OPS


class ShapedOp(NamedTuple):
    """An op of ``SHAPED_OPS`` with the shapes and dtypes of its inputs; an input that is not a tensor has ``()``
    dims (a scalar, a list, a value the trace wrote oddly) and its type as written (``Scalar``, ``""``); ``concrete``
    is the op's ``Concrete Inputs`` as written (``"[2, 2]"``, ``"True"``; empty strings for tensors; ``()`` where the
    trace has none)."""

    name: str
    tid: object
    start: float
    end: float
    dims: tuple[tuple[int, ...], ...]
    types: tuple[str, ...]
    concrete: tuple[str, ...] = ()


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
    group_desc: str | None = None  # ``Process Group Description``: default_pg, mesh_tp, mesh_dp, ...
    group_ranks: tuple[int, ...] | None = None  # ``Process Group Ranks``: the group's global ranks


class CommOp(NamedTuple):
    """A ``record_param_comms`` CPU op: what c10d records of a collective or point-to-point call when it issues it.
    A send/recv kernel's own args carry none of this (torch 2.11): it is reached through the op that launched it
    (tracelint.trace.job.communication)."""

    tid: object
    start: float
    collective: str | None  # send, recv, all_reduce, ... (collective_name of ``Collective name``), wait
    group: str | None
    peer: int | None  # ``Dst Rank`` of a send, ``Src Rank`` of a recv: a rank of the group, as c10d numbers it
    in_nelems: int | None
    group_desc: str | None
    group_ranks: tuple[int, ...] | None


class ProcessGroup(NamedTuple):
    """One entry of ``distributedInfo.pg_config``."""

    name: str
    desc: str | None  # default_pg, mesh_tp, ...
    ranks: tuple[int, ...]


class Frame(NamedTuple):
    """A ``python_function`` frame of user code (with_stack=True), e.g. ``train.py(42): step``."""

    tid: object
    start: float
    end: float
    file: str
    line: int
    func: str


class MemorySample(NamedTuple):
    """A ``[memory]`` instant event of a device allocator: ``bytes`` > 0 allocates, < 0 frees; the totals are the
    allocator's after it; ``addr`` is the block's address (a free names the address its allocation had); ``tid`` the
    host thread that allocated or freed. PyTorch <= 1.9 writes neither totals nor addresses."""

    ts: float
    device: int
    bytes: int
    total_allocated: int | None
    total_reserved: int | None = None
    addr: int | None = None
    tid: object = None


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
    empty_cache_calls: list[tuple] = field(default_factory=list)  # (tid, start) of torch.cuda.empty_cache frames
    devices: dict[int, DeviceProps] = field(default_factory=dict)  # by HIP/CUDA ordinal, as deviceProperties lists
    device_agents: dict[int, int] = field(default_factory=dict)  # ordinal -> the ROCm agent index the trace wrote
    collectives: dict[int, CollectiveArgs] = field(default_factory=dict)  # by the kernel's correlation id
    comm_ops: list[CommOp] = field(default_factory=list)  # record_param_comms ops, by start
    process_groups: dict[str, ProcessGroup] = field(default_factory=dict)  # distributedInfo.pg_config, by name
    pipelining_frames: int = 0  # python_function frames of torch.distributed.pipelining (with_stack traces)
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
    # derived indexes, built by build.py
    step_starts: list[float] = field(default_factory=list, repr=False)
    frames_by_tid: dict[object, tuple[list[float], list[Frame]]] = field(default_factory=dict, repr=False)
    ops_by_tid: dict[object, tuple[list[float], list[Op]]] = field(default_factory=dict, repr=False)
    _op_names: frozenset | None = field(default=None, repr=False, compare=False)

    def op_names(self) -> frozenset:
        """The distinct names of the ops (a filter by name judges each name once, then tests membership)."""
        if self._op_names is None:
            self._op_names = frozenset(op.name for op in self.ops)
        return self._op_names

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
        i = bisect_right(self.step_starts, ts) - 1
        return i if i >= 0 and ts <= self.steps[i].end else None

    def ops_on(self, tid: object) -> tuple[list[float], list[Op]]:
        """(sorted starts, ops) of one thread."""
        return self.ops_by_tid.get(tid, ([], []))

    def user_frame(self, tid: object, ts: float) -> Frame | None:
        """The innermost user-code python_function frame on ``tid`` that contains host time ``ts``."""
        starts, frames = self.frames_by_tid.get(tid, ([], []))
        i = bisect_right(starts, ts) - 1
        # Frames nest, so the first one found backwards that still contains ts is the innermost; the bound keeps a
        # pathological trace (a long-lived outer frame behind many short ones) from turning this into a scan.
        for j in range(i, max(-1, i - 5000), -1):
            if frames[j].end >= ts:
                return frames[j]
        return None

    def devices_with_activity(self) -> list[int]:
        return sorted({e.device for e in self.gpu})

