"""The metric registry: every metric a trace report carries, declared once, with its unit, direction and definition.

The trace half computes these (``tracelint.trace.device_metrics`` per device, ``tracelint.trace.analyze`` over the ranks
of a job); everything that lists, formats, gates, diffs or documents metrics reads them from here: the text report (its
order and units), the TL010 gate (``Metric.gate``), ``tracelint metrics`` and the README's metric table (a test keeps
it equal to ``markdown_table()``). Code refers to a metric by its object (``GPU_BUSY_PCT.name``,
``GPU_BUSY_PCT.of(m)``), so a misspelt name fails at import, never as a silent ``None``.

Times are µs of the trace clock. "Launched in a step" means the runtime/driver call that launched the work starts
inside that step's CPU ``ProfilerStep#N`` span; without steps the whole trace is one window (step 0), and every GPU
event counts as launched in it. The order of declaration is the order of the text report.

Units: ``pct`` (percent, 0-100), ``us``, ``ms``, ``bytes``, ``count`` (a number of things, maybe per step), ``ratio``,
``label`` (text or an id), ``flag`` (yes/no), ``tflops`` (achieved TFLOP/s). Direction: ``higher`` or ``lower`` is
better for the run, or None (descriptive: the device's size, the number of steps).

Finding details (``Finding.details``) that are not declared metrics name their unit by a word of their name
(``_us``, ``_ms``, ``_s``, ``_pct``, ``_bytes``): ``unit()`` applies that convention to them, and only to them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

UNITS = ("pct", "us", "ms", "bytes", "count", "ratio", "label", "flag", "tflops")
DIRECTIONS = ("higher", "lower", None)
SCOPES = ("device", "rank", "job")

# The parts of the idle time and of the step, in the order their metrics appear.
IDLE_CAUSES = ("data_wait", "host_sync", "allocator", "autotune", "launch_overhead", "other", "short_gap")
STEP_PARTS = ("data", "forward", "backward", "optimizer", "other")


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    unit: str
    direction: str | None
    definition: str
    gate: str | None = None  # the TL010 threshold key that checks it ("min-…": a lower limit, "max-…": an upper one)
    # "device": one per device and rank, on every report; "rank": one per rank of a distributed run, only where it
    # applies (a device with communication, a rank whose job was read); "job": the summary over the ranks of a job
    scope: str = "device"

    def of(self, metrics: dict) -> object:
        """This metric's value in a metrics dict (None when absent or not applicable)."""
        return metrics.get(self.name)


def is_number(value) -> bool:
    """Whether a metric's value (or a finding's detail) is a finite number: not None, a label, a flag or NaN."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_REGISTRY: dict[str, Metric] = {}


def _declare(name: str, unit: str, direction: str | None, definition: str, *, gate: str | None = None,
             scope: str = "device") -> Metric:
    if name in _REGISTRY:
        raise ValueError(f"metric {name!r} declared twice")
    if unit not in UNITS or direction not in DIRECTIONS or scope not in SCOPES:
        raise ValueError(f"metric {name!r}: bad unit {unit!r}, direction {direction!r} or scope {scope!r}")
    metric = _REGISTRY[name] = Metric(name, unit, direction, " ".join(definition.split()), gate, scope)
    return metric


# --- per device (tracelint.trace.device_metrics) ----------------------------------------------------------------------
GPU_BUSY_PCT = _declare(
    "gpu_busy_pct", "pct", "higher",
    "gpu_busy_us as a percent of gpu_window_us.", gate="min-gpu-busy-pct")
GPU_BUSY_US = _declare(
    "gpu_busy_us", "us", "higher",
    "Length of the union of every kernel, copy and memset interval of the device (any stream, whatever launched "
    "it), clipped to the GPU window.")
GPU_IDLE_US = _declare(
    "gpu_idle_us", "us", "lower", "gpu_window_us minus gpu_busy_us; its holes are the idle gaps.")
IDLE_GAP_COUNT = _declare(
    "idle_gap_count", "count", "lower",
    "Holes of at least min-idle-gap-us (5 µs) in the busy union. A shorter hole is device-side scheduling between "
    "back-to-back work (idle_short_gap). A longer one is charged to the host thread that launched the work ending "
    "it (the main thread when that launch is unknown), split by what that thread did during the gap.")
_CAUSE_TEXT = {
    "data_wait": "time the launching thread spent inside enumerate(DataLoader)#…__next__ during the gap",
    "host_sync": "the rest of the gap when it began while the thread was blocked in a device synchronization "
                 "(cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, a blocking cudaMemcpy, their "
                 "hip/cu twins: what .item()/.cpu() do; the sync drained the queue, so everything until the next "
                 "launch is its cost), else the time the gap overlaps such a call",
    "allocator": "of what remains, the same for the caching allocator giving memory back to the driver (cudaFree, "
                 "hipFree, cuMemFree: they synchronize the device; torch.cuda.empty_cache(), or an allocator under "
                 "memory pressure)",
    "autotune": "of what remains, the time the gap overlaps a convolution algorithm search (cudnnFind*, "
                "miopenFind*: torch.backends.cudnn.benchmark in the first steps)",
    "launch_overhead": "of what remains, the time the thread was inside its own work: a CPU op or a runtime call "
                       "(issuing work: CPU-bound), not a span that only encloses other code (a record_function range "
                       "such as Optimizer.step#…, a compiled graph's ## Call CompiledFxGraph ## or CompiledFunction: "
                       "time inside them but outside any op is the next cause)",
    "other": "the rest of the gap, when the thread ran no profiled op (Python between ops, un-profiled work, sleep)",
    "short_gap": "gaps shorter than min-idle-gap-us (the idle time not charged to a cause above)",
}
IDLE_US = {}
IDLE_PCT = {}
for _cause in IDLE_CAUSES:
    IDLE_PCT[_cause] = _declare(
        f"idle_{_cause}_pct", "pct", "lower",
        f"idle_{_cause}_us as a percent of gpu_idle_us (the idle parts sum to 100).")
    IDLE_US[_cause] = _declare(f"idle_{_cause}_us", "us", "lower", f"GPU idle time from {_CAUSE_TEXT[_cause]}.")
COMPUTE_BUSY_PCT = _declare(
    "compute_busy_pct", "pct", "higher",
    "Length of the union of the device's compute intervals (every kernel, copy and memset that is not "
    "communication) in the GPU window, as a percent of gpu_window_us; gpu_busy_us is compute plus exposed_comm_us. "
    "None when the device ran no communication (then it is gpu_busy_pct).")
COMM_PCT_OF_WINDOW = _declare(
    "comm_pct_of_window", "pct", None, "comm_time_us as a percent of gpu_window_us.")
COMM_TIME_US = _declare(
    "comm_time_us", "us", None,
    "Length of the union of the device's communication intervals in the GPU window: NCCL/RCCL kernels of every "
    "collective and send/recv, symmetric-memory and DeepEP communication kernels, peer-to-peer copies "
    "(tracelint.trace.job.communication). None when the device ran no communication.")
COMM_OVERLAP_PCT = _declare(
    "comm_overlap_pct", "pct", "higher",
    "Part of comm_time_us during which compute runs on the same device (any stream), in percent of comm_time_us.")
EXPOSED_COMM_PCT = _declare(
    "exposed_comm_pct", "pct", "lower", "exposed_comm_us as a percent of gpu_window_us.",
    gate="max-exposed-comm-pct")
EXPOSED_COMM_US = _declare(
    "exposed_comm_us", "us", "lower",
    "comm_time_us less the part with compute beside it: communication, waiting for other ranks included, that "
    "adds to the step.")
COMM_WAIT_US = _declare(
    "comm_wait_us", "us", "lower",
    "Per step: the time this rank's communication waits for its peers — the union of its wait intervals, each from "
    "its kernel's start to the latest start over the ranks of a matched collective (the later start of a paired "
    "send and recv), at most to the kernel's end (tracelint.trace.job.process_groups). A union: waits in collectives "
    "that overlap in time count once, and never add up to more than the step. None without the other ranks' "
    "traces.")
P2P_TIME_US = _declare(
    "p2p_time_us", "us", None,
    "Length of the union of the device's send/recv kernels in the GPU window: kernels issued by record_param_comms "
    "sends or recvs that name their peer (tracelint.trace.job.communication). Only on a device with such kernels.",
    scope="rank")
EXPOSED_P2P_US = _declare(
    "exposed_p2p_us", "us", None,
    "The part of p2p_time_us with no compute beside it: on a pipeline stage mostly waiting for a neighbouring "
    "stage, which overlapping cannot remove (TL601 leaves it out). Only on a device with p2p kernels.", scope="rank")
P2P_WAIT_US = _declare(
    "p2p_wait_us", "us", "lower",
    "Per step: the union of the wait intervals of this rank's paired sends and recvs (from its kernel's start to "
    "the later start of the pair, at most to its end; tracelint.trace.job.p2p_pairs). Only on a rank of a job with "
    "p2p.",
    scope="rank")
P2P_TRANSFER_US = _declare(
    "p2p_transfer_us", "us", None,
    "Per step: p2p_time_us per step less p2p_wait_us — the send/recv time in which both sides are there and data "
    "moves. Only on a rank of a job with p2p.", scope="rank")
COMM_GROUPS = _declare(
    "comm_groups", "label", None,
    "One record per process group this rank communicates in (tracelint.trace.job.process_groups): group (its name), "
    "kind (tp, dp, fsdp, pp, … from its description or what it carries), ranks, and per step comm_us (the union of the "
    "group's kernels), exposed_us (its part with no compute beside it), wait_us (the union of this rank's wait "
    "intervals in the group) and waits_for (the member it waits for most). Only on a rank of a job.", scope="rank")
PIPELINE_STAGE = _declare(
    "pipeline_stage", "label", None,
    "The rank's stage in a pipeline-parallel job: its place down the chain of sends and recvs, 0 for the stage "
    "that sends first (tracelint.trace.job.pipeline).", scope="rank")
STAGE_COMPUTE_US = _declare(
    "stage_compute_us", "us", None,
    "Per step, on a pipeline stage: the union of its compute intervals (kernels, copies, memsets that are not "
    "communication) within the GPU span of the step.", scope="rank")
STAGE_BUBBLE_PCT = _declare(
    "stage_bubble_pct", "pct", "lower",
    "On a pipeline stage: 100 × (1 − stage_compute_us / its step), the step being the longer of "
    "step_cpu_us_mean and step_gpu_span_us_mean: the part of the step in which it computes nothing (filling and "
    "draining the pipeline, waiting for a slower stage or for its host).", scope="rank")
H2D_COUNT = _declare(
    "h2d_count", "count", None, "Host-to-device copies (Memcpy HtoD, ROCm's Host -> Device) launched in the steps.")
H2D_BYTES = _declare("h2d_bytes", "bytes", None, "Bytes of the host-to-device copies launched in the steps.")
H2D_TIME_US = _declare(
    "h2d_time_us", "us", "lower", "Summed duration of the host-to-device copies launched in the steps.")
H2D_PAGEABLE_BYTES = _declare(
    "h2d_pageable_bytes", "bytes", "lower",
    "Bytes of the host-to-device copies from pageable host memory (Pageable -> Device).")
H2D_PAGEABLE_TIME_US = _declare(
    "h2d_pageable_time_us", "us", "lower", "Summed duration of the host-to-device copies from pageable memory.")
H2D_PINNED_BYTES = _declare(
    "h2d_pinned_bytes", "bytes", None,
    "Bytes of the host-to-device copies from pinned host memory (Pinned -> Device; ROCm's Host -> Device says "
    "neither).")
H2D_PINNED_TIME_US = _declare(
    "h2d_pinned_time_us", "us", None, "Summed duration of the host-to-device copies from pinned memory.")
H2D_PCT_OF_GPU_BUSY = _declare(
    "h2d_pct_of_gpu_busy", "pct", "lower",
    "Length of the union of the host-to-device copy intervals in the GPU window, as a percent of gpu_busy_us.",
    gate="max-h2d-pct-of-gpu-busy")
DTOH_COUNT = _declare(
    "dtoh_count", "count", "lower",
    "Device-to-host copies (Memcpy DtoH, ROCm's Device -> Host) launched in the steps.")
DTOH_PER_STEP = _declare("dtoh_per_step", "count", "lower", "dtoh_count divided by the number of steps.")
TENSOR_CORE_PCT = _declare(
    "tensor_core_pct", "pct", "higher",
    "Time of the kernels that tracelint.trace.kernels.classify_kernel puts on Tensor Cores, as a percent of all "
    "kernel time.")
MATMUL_TIME_US = _declare("matmul_time_us", "us", None, "Summed time of the matmul and convolution kernels.")
MATMUL_TENSOR_CORE_PCT = _declare(
    "matmul_tensor_core_pct", "pct", "higher",
    "Tensor Core part of matmul_time_us, in percent (None without matmul/conv kernels).",
    gate="min-matmul-tensor-core-pct")
FP32_MATMUL_OFF_TC_PCT = _declare(
    "fp32_matmul_off_tc_pct", "pct", "lower",
    "Plain-fp32 CUDA-core (FFMA/SIMT) part of matmul_time_us, in percent.")
ATTENTION_PCT = _declare(
    "attention_pct", "pct", None,
    "Time of the fused attention kernels (FlashAttention, memory-efficient, cuDNN SDPA, …: op attention of "
    "tracelint.trace.kernels.classify_kernel), as a percent of all kernel time.")
MEMORY_BOUND_KERNEL_PCT = _declare(
    "memory_bound_kernel_pct", "pct", "lower",
    "Time of the memory-bound kernels (elementwise, copies and casts, reductions, normalizations, softmax, Triton "
    "pointwise/reduction fusions: KernelClass.memory_bound), as a percent of all kernel time: work that fusion "
    "(torch.compile, fused kernels) shrinks.")
STEPS = _declare("steps", "count", None, "Number of ProfilerStep spans (1 for a trace without steps).")
STEP_CPU_US_MEAN = _declare("step_cpu_us_mean", "us", "lower", "Mean CPU span of a ProfilerStep.")
STEP_GPU_SPAN_US_MEAN = _declare(
    "step_gpu_span_us_mean", "us", "lower",
    "Mean, over steps, of the first start to the last end of the GPU work launched in the step.")
BREAKDOWN_PCT = {}
BREAKDOWN_US = {}
_PART_TEXT = {
    "data": "the union of the main thread's DataLoader __next__ spans",
    "forward": "from the end of the last data span before the backward (or the step start) to the backward's "
               "start (to the step end when the step has no backward), less optimizer time",
    "backward": "from the first to the last autograd op of the step (autograd::engine::evaluate_function: …, "
                "*Backward<N>, AccumulateGrad; any thread), less data and optimizer time",
    "optimizer": "the union of the Optimizer.step#… and Optimizer.zero_grad#… spans",
    "other": "the rest of the step",
}
for _part in STEP_PARTS:
    BREAKDOWN_PCT[_part] = _declare(
        f"breakdown_{_part}_pct", "pct", None, f"breakdown_{_part}_us as a percent of step_cpu_us_mean.")
    BREAKDOWN_US[_part] = _declare(
        f"breakdown_{_part}_us", "us", None,
        f"Mean over steps of the host time of the step's {_part} part: {_PART_TEXT[_part]}.")
KERNEL_COUNT = _declare("kernel_count", "count", None, "Kernels launched in the steps.")
KERNELS_PER_STEP = _declare(
    "kernels_per_step", "count", "lower", "kernel_count divided by the number of steps.",
    gate="max-kernels-per-step")
KERNEL_TIME_US = _declare("kernel_time_us", "us", None, "Summed duration of the kernels launched in the steps.")
LAUNCH_DELAY_US = _declare(
    "launch_delay_us", "us", None, "Median of a kernel's start minus the start of the call that launched it.")
PEAK_MEMORY_BYTES = _declare(
    "peak_memory_bytes", "bytes", None,
    "Largest Total Allocated of the device's [memory] events (None without profile_memory).")
PEAK_MEMORY_PCT = _declare("peak_memory_pct", "pct", None, "peak_memory_bytes as a percent of device_memory_bytes.")
DEVICE_MEMORY_BYTES = _declare("device_memory_bytes", "bytes", None, "totalGlobalMem of the device.")
HOST_SYNCS_PER_STEP = _declare(
    "host_syncs_per_step", "count", "lower",
    "Device synchronization calls (see idle_host_sync_us) made inside the steps, per step.",
    gate="max-syncs-per-step")
HAS_STEPS = _declare(
    "has_steps", "flag", None, "Whether the trace has ProfilerStep spans (a profile made with schedule=).")
ALLOCATIONS_PER_STEP = _declare(
    "allocations_per_step", "count", "lower",
    "Device allocations ([memory] events with positive bytes) inside the steps, per step.")
# The memory timeline (tracelint.trace.memory). "Allocated at a time": the Total Allocated of the device's last
# [memory] event at or before it (before the first event: that event's Total Allocated minus its Bytes).
MEMORY_GROWTH_BYTES_PER_STEP = _declare(
    "memory_growth_bytes_per_step", "bytes", "lower",
    "Allocated at the end of the last step minus allocated at the start of the first, divided by the number of "
    "steps: memory that stays allocated a little more every step (None under 2 steps or without [memory] events).")
MEMORY_GROWTH_STEPS = _declare(
    "memory_growth_steps", "count", None, "The steps memory_growth_bytes_per_step is measured over.")
MEMORY_UNFREED_BYTES_PER_STEP = _declare(
    "memory_unfreed_bytes_per_step", "bytes", "lower",
    "Bytes allocated in the steps but the last ([memory] events with positive Bytes) that no later event of the "
    "same Addr frees within the trace, divided by the number of those steps; the last step's allocations are "
    "freed by the step after it, which the trace does not hold (None under 2 steps or without Addr).")
MEMORY_STEADY_ALLOCATED_BYTES = _declare(
    "memory_steady_allocated_bytes", "bytes", None, "Median of the memory allocated at the start of each step.")
PEAK_RESERVED_BYTES = _declare(
    "peak_reserved_bytes", "bytes", None,
    "Largest Total Reserved of the device's [memory] events: what the caching allocator held from the driver.")
RESERVED_OVER_ALLOCATED_PCT = _declare(
    "reserved_over_allocated_pct", "pct", "lower",
    "peak_reserved_bytes minus peak_memory_bytes, as a percent of peak_memory_bytes: cache the allocator holds "
    "beyond the most memory ever allocated at once (fragmentation, or a footprint that changes shape).")
MEMORY_PEAK_PHASE = _declare(
    "memory_peak_phase", "label", None,
    "Where the first event at peak_memory_bytes happens: backward (inside an autograd op on its thread: the "
    "engine's evaluate_function, a grad node), optimizer (inside an Optimizer.step#… or Optimizer.zero_grad#… "
    "range), else forward inside a step, other outside the steps or in a trace without steps.")
MEMORY_PEAK_OP = _declare(
    "memory_peak_op", "label", None,
    "The innermost op enclosing that event on its thread, allocation-only ops (aten::empty, aten::empty_strided, "
    "…) skipped.")
DEVICE_MALLOCS_PER_STEP = _declare(
    "device_mallocs_per_step", "count", "lower",
    "Calls by which the caching allocator takes memory from the driver (cudaMalloc, cudaMallocAsync, cuMemAlloc, "
    "hipMalloc, …) made inside the steps, per step (None without [memory] events).")
DEVICE_FREES_PER_STEP = _declare(
    "device_frees_per_step", "count", "lower",
    "The same for the calls that give it back (cudaFree, cudaFreeAsync, cuMemFree, hipFree, …).")
EMPTY_CACHE_CALLS_PER_STEP = _declare(
    "empty_cache_calls_per_step", "count", "lower",
    "torch.cuda.empty_cache() calls (python_function frames torch/cuda/memory.py(…): empty_cache) made inside the "
    "steps, per step (None without Python stacks or without [memory] events).")
MEAN_KERNEL_US = _declare("mean_kernel_us", "us", None, "kernel_time_us divided by kernel_count.")
COMPILED_KERNEL_PCT = _declare(
    "compiled_kernel_pct", "pct", None,
    "Kernel time of the kernels torch.compile made (Triton kernels, and kernels launched inside a compiled region: "
    "## Call CompiledFxGraph, Torch-Compiled Region, CompiledFunction), as a percent of kernel_time_us "
    "(tracelint.trace.compiled). None when no kernel was compiled.")
COMPILED_LAUNCH_PCT = _declare(
    "compiled_launch_pct", "pct", None, "Compiled kernels as a percent of kernel_count.")
COMPILED_REGIONS_PER_STEP = _declare(
    "compiled_regions_per_step", "count", "lower",
    "Compiled regions run per step (nested region spans merged per thread); a graph break adds one.")
GRAPH_KERNEL_PCT = _declare(
    "graph_kernel_pct", "pct", None,
    "Kernel time of the kernels replayed by CUDA/HIP graph launches, as a percent of kernel_time_us; None without "
    "graph replays.")
GRAPH_LAUNCHES_PER_STEP = _declare(
    "graph_launches_per_step", "count", None, "cudaGraphLaunch / hipGraphLaunch calls per step.")
UNPROFILED_STEP_MS = _declare(
    "unprofiled_step_ms", "ms", "lower",
    "Mean step time without the profiler, measured by tracelint.profile between device synchronizations on the "
    "steps the profiler's schedule does not record (the trace's top-level tracelint key); None without it.")
UNPROFILED_PEAK_MEMORY_PCT = _declare(
    "unprofiled_peak_memory_pct", "pct", None,
    "The allocator's peak over the steps tracelint.profile timed without the profiler "
    "(torch.cuda.max_memory_allocated() when its last unprofiled block closed) as a percent of the device's memory, "
    "both from the trace's tracelint key; None without them (issue #40).")
PROFILER_INFLATION = _declare(
    "profiler_inflation", "ratio", "lower",
    "The profiled step (the longer of step_cpu_us_mean and step_gpu_span_us_mean) over unprofiled_step_ms: how "
    "much recording slowed the step.", gate="max-profiler-inflation")
MODEL_FLOP_PER_STEP = _declare(
    "model_flop_per_step", "count", None,
    "Floating-point operations per step that the ops' argument shapes give (record_shapes=True; "
    "tracelint.trace.flops): GEMMs at their innermost op (2·M·K·N; forward and the autograd backward), "
    "convolutions (forward, and backward per gradient asked), fused attention (forward 4·B·H·S_q·S_k·D, backward "
    "twice that, causal counted as half), summed over the ops launched in the profiled steps and divided by their "
    "number; None without shapes. Triton template kernels and CUDA-graph replays carry no shapes: their work is "
    "not in it (flop_unattributed_pct). The forward that activation checkpointing runs again is not in it either "
    "(hfu_pct).")
FLOP_UNATTRIBUTED_PCT = _declare(
    "flop_unattributed_pct", "pct", "lower",
    "Kernel time of Inductor's Triton template kernels (its GEMMs, convolutions and flex attention) and of CUDA-graph "
    "replays, whose work no op's shapes give, as a percent of kernel_time_us: the share of the GPU's work "
    "model_flop_per_step cannot see; None without shapes.")
MFU_PCT = _declare(
    "mfu_pct", "pct", "higher",
    "model_flop_per_step over the step time and the device's dense peak for the dtype that carries most of the "
    "FLOPs (tracelint.trace.flops.PEAKS: datasheet figures; fp32 GEMMs on Tensor Cores count at the TF32 peak), in "
    "percent. The step time is mfu_step_ms (said in mfu_basis). None for a device the table does not hold, without "
    "shapes, or when flop_unattributed_pct is 5 or more.")
MFU_STEP_MS = _declare(
    "mfu_step_ms", "ms", None,
    "The step time mfu_pct and hfu_pct divide by: unprofiled_step_ms when the trace has it (tracelint.profile, "
    "tracelint run), else gpu_busy_us per profiled step (the profiler slows the host, not the kernels: an upper "
    "bound of MFU where the GPU waits for the host).")
MFU_PEAK_TFLOPS = _declare(
    "mfu_peak_tflops", "tflops", None,
    "The dense peak mfu_pct and hfu_pct divide by: the device's Tensor Core peak for the dtype that carries most of "
    "the FLOPs (tracelint.trace.flops.PEAKS).")
HFU_PCT = _declare(
    "hfu_pct", "pct", "higher",
    "As mfu_pct, with the forward that activation checkpointing runs again counted too: the forward ops "
    "(aten::linear, aten::matmul, aten::convolution, the fused attention forwards) that run inside an autograd node "
    "(autograd::engine::evaluate_function) of their thread, and the GEMMs inside them (tracelint.trace.flops."
    "recomputed_spans); equal to mfu_pct without recomputation. mfu_basis says when recomputation was seen.")
MFU_BASIS = _declare(
    "mfu_basis", "label", None,
    "What mfu_pct divides by: the step time and where it comes from, the dtype and its dense peak (the table's "
    "sources are in tracelint.trace.flops.PEAKS), whether recomputed forward FLOPs were seen (and their share, "
    "left out of mfu_pct and counted in hfu_pct), or why there is no MFU.")
GEMM_TFLOPS = _declare(
    "gemm_tflops", "tflops", "higher",
    "Achieved TFLOP/s of the GEMMs of the steps (tracelint.trace.roofline): the FLOPs of the innermost GEMM ops "
    "launched in the steps (2·M·K·N, forward and backward) over the summed time of the kernels each launched (a "
    "kernel whose launch starts on the op's thread inside its span). None without shapes or GEMM kernels.")
GEMM_PEAK_PCT = _declare(
    "gemm_peak_pct", "pct", "higher",
    "gemm_tflops against the device's dense peak: 100 × Σ over the GEMM ops of FLOPs / the peak of their dtype "
    "(fp32 on Tensor Core kernels at the TF32 peak; tracelint.trace.flops.PEAKS) over their kernels' time. None "
    "for a device or dtype the table does not hold.")
CONV_TFLOPS = _declare(
    "conv_tflops", "tflops", "higher",
    "Achieved TFLOP/s of the convolutions of the steps: the FLOPs of aten::convolution (forward) and "
    "aten::convolution_backward (per gradient asked) over the time of the kernels each launched, as gemm_tflops.")
CONV_PEAK_PCT = _declare(
    "conv_peak_pct", "pct", "higher", "conv_tflops against the device's dense peak per dtype, as gemm_peak_pct.")
ATTENTION_TFLOPS = _declare(
    "attention_tflops", "tflops", "higher",
    "Achieved TFLOP/s of the fused attention ops of the steps (flash, memory-efficient, cuDNN; forward and "
    "backward, causal counted as half as in model_flop_per_step) over the time of the kernels each launched, as "
    "gemm_tflops. The unfused math path runs bmm ops: counted as GEMMs.")
ATTENTION_PEAK_PCT = _declare(
    "attention_peak_pct", "pct", "higher",
    "attention_tflops against the device's dense peak per dtype, as gemm_peak_pct.")
# The identity of the device and of the job, and the summary over the ranks of a job (``scope="job"``,
# tracelint.trace.analyze.rank_summary); the job's metrics sit around world_size, which both kinds of report carry.
DEVICE = _declare(
    "device", "label", None,
    "The device's HIP/CUDA ordinal, as deviceProperties numbers it (a ROCm roctracer trace's HSA agent index is "
    "mapped to it); None for a trace without GPU activity.")
DEVICE_NAME = _declare(
    "device_name", "label", None,
    "The device's name from deviceProperties; \"unnamed GPU\" when the trace names it nowhere; None for a trace "
    "without GPU activity.")
RANK = _declare("rank", "label", None, "The trace's rank (distributedInfo), None when it does not say.")
GPU_BUSY_PCT_MIN = _declare("gpu_busy_pct_min", "pct", "higher", "Lowest gpu_busy_pct of the ranks.", scope="job")
GPU_BUSY_PCT_MAX = _declare("gpu_busy_pct_max", "pct", "higher", "Highest gpu_busy_pct of the ranks.", scope="job")
STEP_CPU_US_MAX = _declare(
    "step_cpu_us_max", "us", "lower",
    "Mean step time of the slowest rank (step_cpu_us_mean, else step_gpu_span_us_mean).", scope="job")
STEP_CPU_US_MIN = _declare("step_cpu_us_min", "us", "lower", "Mean step time of the fastest rank.", scope="job")
STEP_SPREAD_PCT = _declare(
    "step_spread_pct", "pct", "lower", "How much slower the slowest rank's step is than the fastest's, in percent.",
    scope="job")
RANKS = _declare("ranks", "count", None, "Rank traces of the job that were read.", scope="job")
WORLD_SIZE = _declare("world_size", "count", None, "The job's number of ranks (distributedInfo).")
SLOWEST_RANK = _declare("slowest_rank", "label", None, "The rank with the largest mean step time.", scope="job")
FASTEST_RANK = _declare("fastest_rank", "label", None, "The rank with the smallest mean step time.", scope="job")
VERDICTS = _declare("verdicts", "label", None, "The verdict of each rank.", scope="job")
WAITED_FOR_RANK = _declare(
    "waited_for_rank", "label", None,
    "The rank the others wait for most in the trace: in the process group where that wait is largest, the member "
    "that reaches matched collectives last with the most waiting caused (groups of sends and recvs aside), "
    "whether its lead is the job's or maybe the profiler's (straggler_rank).", scope="job")
STRAGGLER_RANK = _declare(
    "straggler_rank", "label", None,
    "The rank that holds the others up: with tracelint.profile's unprofiled record on every rank, the rank the "
    "others wait for when their largest unprofiled wait is at least straggler-min-wait-pct (10 %) of the "
    "unprofiled step; without it, a waited-for rank whose waiting caused and whose lead the profiler cannot have "
    "made (its extra quiet host time and compute, tracelint.trace.job.straggler) both reach that share of the step. "
    "None: a balanced job, or a lead that may be the profiler's.", scope="job")
STRAGGLER_WAIT_US = _declare(
    "straggler_wait_us", "us", "lower",
    "Per step: the mean over the other ranks of a group of the time they wait for its waited-for rank (the union "
    "of their wait intervals charged to it) — the straggler's, else the waited_for_rank's; from the unprofiled "
    "record, the largest unprofiled wait.", scope="job")
COMM_WAIT_US_MAX = _declare(
    "comm_wait_us_max", "us", "lower", "Largest comm_wait_us of the ranks.", scope="job")
COLLECTIVES_MATCHED = _declare(
    "collectives_matched", "count", None,
    "Collectives matched across the ranks: by order within each process group and step, checked against the "
    "collective's name and message size.", scope="job")
COLLECTIVES_UNMATCHED = _declare(
    "collectives_unmatched", "count", "lower",
    "Collective kernels of the ranks that could not be matched (counts or names that disagree).", scope="job")
P2P_MATCHED = _declare(
    "p2p_matched", "count", None,
    "Sends paired with their recvs: the n-th send from one rank to another in a process group and step with the "
    "n-th recv there, sizes agreeing (tracelint.trace.job.p2p_pairs).", scope="job")
P2P_UNMATCHED = _declare(
    "p2p_unmatched", "count", "lower",
    "Sends and recvs over all ranks that could not be paired (the peer's trace missing, counts or sizes that "
    "disagree); the job summary's note says which.", scope="job")
PIPELINE_STAGES = _declare(
    "pipeline_stages", "count", None,
    "Stages of a pipeline-parallel job: ranks linked into one chain (or ring) by paired sends and recvs "
    "(tracelint.trace.job.pipeline).", scope="job")
PIPELINE_MICROBATCHES = _declare(
    "pipeline_microbatches", "count", None,
    "Microbatches per step: the activations stage 0 sends to stage 1 per step.", scope="job")
PIPELINE_BUBBLE_PCT = _declare(
    "pipeline_bubble_pct", "pct", "lower",
    "The part of the stages' time in which they compute nothing: 100 × (1 − the sum of stage_compute_us / the sum "
    "of the stages' steps); the fill and drain of the pipeline, and the stages' waits for a slower one.",
    scope="job")
PIPELINE_BUBBLE_ANALYTIC_PCT = _declare(
    "pipeline_bubble_analytic_pct", "pct", None,
    "The bubble of p equal stages and m microbatches under GPipe or 1F1B: 100 × (p − 1) / (m + p − 1); None for "
    "a ring (looped schedule) or an unknown m.", scope="job")
BOTTLENECK_STAGE = _declare(
    "bottleneck_stage", "label", None,
    "The pipeline stage the others wait for: the one that waits least in send/recv, in percent of its step (on a "
    "GPU-bound pipeline, the stage that computes the most).", scope="job")
BOTTLENECK_RANK = _declare("bottleneck_rank", "label", None, "The rank of the bottleneck stage.", scope="job")
STAGE_IMBALANCE_PCT = _declare(
    "stage_imbalance_pct", "pct", "lower",
    "How much more the bottleneck stage computes per step than the mean stage: 100 × (its stage_compute_us / the "
    "mean stage_compute_us − 1).", scope="job")
PIPELINE_BALANCED_STEP_US = _declare(
    "pipeline_balanced_step_us", "us", "lower",
    "The step the pipeline would take with stages of equal compute: the mean stage_compute_us × (m + p − 1) / m.",
    scope="job")
CLOCK_OFFSET_US_MAX = _declare(
    "clock_offset_us_max", "us", None,
    "Largest clock offset between a rank and the lowest rank, estimated as the median difference of the ends of "
    "their matched collectives (which complete at about the same moment on every rank); applied to the waits "
    "when over 50 µs (ranks on several hosts), else the clocks are taken as shared.", scope="job")
GPU_EVENTS = _declare("gpu_events", "count", None, "Kernels, copies and memsets of the device in the trace.")
GPU_WINDOW_US = _declare(
    "gpu_window_us", "us", None,
    "First start to last end of the device's kernels, copies and memsets launched in the steps.")

# --- derived for the TL010 gate (tracelint.trace.rules.notes); never stored in a report -------------------------
GPU_IDLE_PCT = _declare(
    "gpu_idle_pct", "pct", "lower", "100 minus gpu_busy_pct.", gate="max-idle-pct")
STEP_MS = _declare(
    "step_ms", "ms", "lower",
    "The longer of step_cpu_us_mean and step_gpu_span_us_mean, in ms: a GPU-bound run's host runs ahead of the "
    "GPU, an input-bound run's GPU finishes early.", gate="max-step-ms")

# --- what explains each verdict: the compact text report's metrics ----------------------------------------------
# Every verdict shows the step and how busy the GPU is; then the metrics its decision rule reads
# (tracelint.trace.verdict) and the ones that say what to change. The text report lists these by default and every
# metric under --verbose; the JSON report always carries all of them.
_HEADLINE = (DEVICE_NAME, STEPS, STEP_CPU_US_MEAN, STEP_GPU_SPAN_US_MEAN, GPU_BUSY_PCT)
_HOST_IDLE = tuple(IDLE_PCT[c] for c in IDLE_CAUSES)
EXPLAINS: dict[str, tuple[Metric, ...]] = {
    "input-bound": (*_HEADLINE, *_HOST_IDLE, _REGISTRY["breakdown_data_pct"], H2D_PAGEABLE_BYTES,
                    H2D_PCT_OF_GPU_BUSY),
    "cpu-bound": (*_HEADLINE, *_HOST_IDLE, HOST_SYNCS_PER_STEP, KERNELS_PER_STEP, MEAN_KERNEL_US, LAUNCH_DELAY_US,
                  PROFILER_INFLATION),
    "gpu-bound": (*_HEADLINE, MFU_PCT, MATMUL_TENSOR_CORE_PCT, FP32_MATMUL_OFF_TC_PCT, TENSOR_CORE_PCT,
                  ATTENTION_PCT, MEMORY_BOUND_KERNEL_PCT, H2D_PCT_OF_GPU_BUSY, EXPOSED_COMM_PCT, PEAK_MEMORY_PCT),
    "comm-bound": (*_HEADLINE, COMPUTE_BUSY_PCT, COMM_TIME_US, COMM_OVERLAP_PCT, EXPOSED_COMM_PCT, COMM_WAIT_US),
    "pipeline-bound": (*_HEADLINE, COMPUTE_BUSY_PCT, P2P_TIME_US, EXPOSED_P2P_US, P2P_WAIT_US, P2P_TRANSFER_US,
                       PIPELINE_STAGE, STAGE_BUBBLE_PCT),
    "unknown": (DEVICE_NAME, GPU_EVENTS, HAS_STEPS, STEPS, GPU_WINDOW_US),
}
# A job's summary: how far its ranks spread and who holds the others up.
EXPLAINS_JOB = (RANKS, WORLD_SIZE, STEP_SPREAD_PCT, SLOWEST_RANK, WAITED_FOR_RANK, STRAGGLER_RANK, STRAGGLER_WAIT_US,
                COMM_WAIT_US_MAX, COLLECTIVES_UNMATCHED)
# ... and where they apply (a value, not None): its sends and recvs, and a pipeline's shape, its bubble beside the
# analytic one and the stage the others wait for.
EXPLAINS_JOB_WHERE_SET = (P2P_UNMATCHED, PIPELINE_STAGES, PIPELINE_MICROBATCHES, PIPELINE_BUBBLE_PCT,
                          PIPELINE_BUBBLE_ANALYTIC_PCT, BOTTLENECK_STAGE, BOTTLENECK_RANK, STAGE_IMBALANCE_PCT,
                          PIPELINE_BALANCED_STEP_US)


def explaining(verdict: str, *, job: bool = False, metrics: dict | None = None) -> tuple[Metric, ...]:
    """The metrics that explain ``verdict``; a job summary's (``metrics``: its values): the spread over its ranks,
    and its sends and recvs and pipeline where it has them."""
    if job:
        return EXPLAINS_JOB + tuple(m for m in EXPLAINS_JOB_WHERE_SET if m.of(metrics or {}) is not None)
    return EXPLAINS.get(verdict, EXPLAINS["unknown"])


def registry() -> dict[str, Metric]:
    """Every declared metric by name, in report order."""
    return dict(_REGISTRY)


def get(name: str) -> Metric | None:
    return _REGISTRY.get(name)


def unit(name: str) -> str | None:
    """A declared metric's unit; for any other name (a finding's detail), the unit its suffix names, else None."""
    metric = _REGISTRY.get(name.rsplit(".", 1)[-1])
    if metric is not None:
        return metric.unit
    tokens = name.lower().replace(".", "_").split("_")
    for suffix in ("pct", "bytes", "us", "ms"):
        if suffix in tokens:
            return suffix
    if "percent" in tokens:
        return "pct"
    if tokens[-1] in ("s", "sec", "seconds"):
        return "s"
    return None


def gates() -> list[Metric]:
    """The metrics TL010 can check, in report order."""
    return [m for m in _REGISTRY.values() if m.gate]


def markdown_table() -> str:
    """The README's metric table."""
    rows = ["| metric | unit | better | definition |", "|---|---|---|---|"]
    for scope in SCOPES:
        for m in _REGISTRY.values():
            if m.scope == scope:
                where = {"job": " (job)", "rank": " (rank)"}.get(scope, "")
                gate = f" TL010 gate: `{m.gate}`." if m.gate else ""
                rows.append(f"| `{m.name}`{where} | {m.unit} | {m.direction or ''} | {m.definition}{gate} |")
    return "\n".join(rows)
