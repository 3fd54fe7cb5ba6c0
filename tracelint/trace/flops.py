"""The floating-point work of a step, from the ops' argument shapes (``record_shapes=True``), and the device's peak.

What is counted (one count per op that does the work, so that nothing is counted twice):

- **GEMM**: the innermost op of ``GEMM_OPS`` on its thread (``aten::linear`` around ``aten::addmm``: the addmm):
  ``mm`` [M, K] x [K, N] and ``addmm`` are 2·M·K·N; ``bmm``/``baddbmm`` 2·B·M·K·N; ``matmul`` 2·M·K·N times the
  broadcast batch; ``linear`` 2·(rows of the input)·in·out. The autograd engine runs the backward's GEMMs as these
  same ops, so forward and backward are both counted (the "6·N per token" of a dense model).
- **Convolution**: ``aten::convolution`` (forward) is 2·N·C_out·(output pixels)·(C_in / groups)·(kernel size), the
  output size from the input size, stride, padding and dilation; ``aten::convolution_backward`` counts the same
  again for each gradient its output mask asks for (input, weight), as ``torch.utils.flop_counter`` does.
- **Attention**: the fused scaled-dot-product ops (flash, memory-efficient, cuDNN): forward 4·B·H·S_q·S_k·D (the
  two matmuls, Q·Kᵀ and P·V), backward twice that (four matmuls; a flash kernel's recomputation of P is hardware
  work, not model work, and is not counted). **Causal attention is counted as half** (the masked half of the
  scores is never computed by these kernels); ``torch.utils.flop_counter`` counts it in full. The math path runs
  ``bmm`` ops, which the GEMM count takes.

Model FLOPs per step are the sum over the ops launched in the profiled steps, divided by their number. What the
arguments cannot give is counted and said: Inductor's Triton template kernels (GEMMs, convolutions, flex attention
written in Triton) and CUDA-graph replays carry no op shapes, so their GPU time is "unattributed"
(compiled.compiled_metrics); its pointwise and reduction kernels do next to no FLOPs. With activation
checkpointing the forward runs again inside the backward: those ops (``recomputed_spans``: forward ops inside an
autograd node) are hardware work, counted in HFU and left out of the model FLOPs and MFU.

Peaks (``PEAKS``): dense Tensor Core TFLOP/s per dtype, from the vendors' datasheets (their sparse figures halved
where a datasheet gives only those). A device not in the table has no peak: MFU is then not given, never guessed.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import lru_cache
from math import prod
from typing import NamedTuple

from tracelint.trace.intervals import merge
from tracelint.trace.model import ATTENTION_OPS, CONV_OPS, GEMM_OPS, ShapedOp
from tracelint.trace.recording import gpu_busy_ms_per_step

GEMM, CONVOLUTION, ATTENTION = "gemm", "convolution", "attention"


def innermost_gemms(ops: list[ShapedOp]) -> list[ShapedOp]:
    """The GEMM ops that contain no other GEMM op on their thread (``aten::linear`` around ``aten::addmm``: the
    addmm); ``ops`` sorted by start, as ``TraceModel.shaped_ops`` is."""
    by_tid: dict[object, list[ShapedOp]] = {}
    for op in ops:
        if op.name in GEMM_OPS:
            by_tid.setdefault(op.tid, []).append(op)
    kept = []
    for items in by_tid.values():
        for i, op in enumerate(items):
            if i + 1 < len(items) and items[i + 1].start < op.end:
                continue  # the next GEMM op on this thread starts inside it
            kept.append(op)
    return kept


_DTYPES = {"c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64",
           "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
           "c10::Float8_e5m2fnuz": "fp8"}


def dtype_of(op: ShapedOp) -> str | None:
    """The dtype of the op's first tensor input as the peak table names it (bf16, fp16, fp32, fp64, fp8)."""
    for dims, kind in zip(op.dims, op.types, strict=False):
        if dims:
            return _DTYPES.get(kind)
    return None


@lru_cache(maxsize=1024)
def _ints(text: str) -> tuple[int, ...] | None:
    """``"[2, 2]"`` -> (2, 2); None for what is no list."""
    return tuple(int(x) for x in re.findall(r"-?\d+", text)) if text.startswith("[") else None


def _gemm(op: ShapedOp) -> float | None:
    dims = [d for d in op.dims if d]
    name = op.name
    if name == "aten::mm" and len(dims) >= 2 and len(dims[0]) == 2 and len(dims[1]) == 2:
        (m, k), (_, n) = dims[0], dims[1]
        return 2.0 * m * k * n
    if name == "aten::addmm" and len(op.dims) >= 3 and len(op.dims[1]) == 2 and len(op.dims[2]) == 2:
        (m, k), (_, n) = op.dims[1], op.dims[2]
        return 2.0 * m * k * n
    if name in ("aten::bmm", "aten::baddbmm"):
        a, b = (op.dims[0], op.dims[1]) if name == "aten::bmm" else (op.dims[1], op.dims[2]) if len(op.dims) >= 3 \
            else ((), ())
        if len(a) == 3 and len(b) == 3:
            return 2.0 * a[0] * a[1] * a[2] * b[2]
        return None
    if name == "aten::matmul" and len(dims) >= 2:
        a, b = dims[0], dims[1]
        if len(b) == 1:  # matrix-vector
            return 2.0 * prod(a)
        if len(a) == 1:
            return 2.0 * prod(b)
        batch = max(prod(a[:-2]), prod(b[:-2]))
        return 2.0 * batch * a[-2] * a[-1] * b[-1]
    if name == "aten::linear" and len(dims) >= 2 and len(dims[1]) == 2:
        x, (out, inner) = dims[0], dims[1]
        return 2.0 * prod(x[:-1]) * inner * out
    return None


def _conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def _convolution(op: ShapedOp) -> float | None:
    """Forward: ``convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)``;
    backward: ``convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask)``."""
    concrete = op.concrete
    if op.name == "aten::convolution":
        if len(op.dims) < 2 or len(concrete) < 9:
            return None
        x, w = op.dims[0], op.dims[1]
        stride, pad, dilation = _ints(concrete[3]), _ints(concrete[4]), _ints(concrete[5])
        if len(x) < 3 or len(w) != len(x) or concrete[6] == "True" or not stride or not pad or not dilation:
            return None  # a transposed convolution: not counted
        spatial = len(x) - 2
        stride, pad, dilation = (v * spatial if len(v) == 1 else v for v in (stride, pad, dilation))
        if not len(stride) == len(pad) == len(dilation) == spatial:
            return None
        out = [_conv_out(x[2 + i], w[2 + i], stride[i], pad[i], dilation[i]) for i in range(spatial)]
        return 2.0 * x[0] * w[0] * prod(out) * w[1] * prod(w[2:])
    if op.name == "aten::convolution_backward":
        if len(op.dims) < 3 or len(concrete) < 11:
            return None
        grad, x, w = op.dims[0], op.dims[1], op.dims[2]
        mask = re.findall(r"True|False", concrete[10])
        if len(grad) < 3 or len(w) != len(grad) or concrete[7] == "True" or len(mask) < 2:
            return None
        one = 2.0 * grad[0] * w[0] * prod(grad[2:]) * w[1] * prod(w[2:])  # the forward's FLOPs
        return one * ((mask[0] == "True") + (mask[1] == "True"))
    return None


def _attention(op: ShapedOp) -> tuple[float, bool] | None:
    """(FLOPs, causal) of a fused attention op: query, key and value are its first three inputs, [B, H, S, D] (a
    backward op's after grad_out); ``is_causal`` as ``_causal`` reads it."""
    backward = op.name.endswith("_backward")
    tensors = op.dims[1:4] if backward else op.dims[:3]
    if len(tensors) < 3 or any(len(t) != 4 for t in tensors):
        return None
    (b, h, s_q, d), (_, _, s_k, _), (_, _, _, d_v) = tensors
    flops = 2.0 * b * h * s_q * s_k * d + 2.0 * b * h * s_q * s_k * d_v  # Q·Kᵀ and P·V
    causal = _causal(op)
    if causal:
        flops /= 2
    return (2.0 * flops if backward else flops), causal


def _causal(op: ShapedOp) -> bool:
    """``is_causal``: flash and cuDNN write (..., dropout_p, is_causal, ...); the memory-efficient op takes
    (..., attn_bias, compute_log_sumexp, dropout_p, is_causal)."""
    values = list(op.concrete)
    for i, value in enumerate(values):
        before = values[i - 1] if i else ""
        if value in ("True", "False") and (re.fullmatch(r"-?\d*\.\d*(e-?\d+)?", before or "x") or
                                            re.fullmatch(r"\[(True|False)(, (True|False))*\]", before)):
            return value == "True"  # the boolean after dropout_p (after grad_input_mask in efficient's backward)
    return False


@dataclass
class StepFlops:
    """The model FLOPs of the profiled steps, per step (``per_step``: total / steps), by kind (gemm, convolution,
    attention) and by dtype; the ops counted; whether causal attention was halved."""

    per_step: float = 0.0
    by_kind: dict[str, float] = field(default_factory=dict)
    by_dtype: dict[str, float] = field(default_factory=dict)
    ops: int = 0
    causal_halved: bool = False
    uncounted_ops: int = 0  # ops of SHAPED_OPS whose arguments give no count (odd shapes, a transposed conv)
    recomputed_per_step: float = 0.0  # the forward run again by activation checkpointing: hardware, not model, work


def op_flops(op: ShapedOp) -> tuple[str, float, bool] | None:
    """(kind, FLOPs, causal attention halved) of one op of SHAPED_OPS; None when its arguments give no count."""
    return _op_flops(op.name, op.dims, op.types, op.concrete)


@lru_cache(maxsize=4096)
def _op_flops(name: str, dims, types, concrete) -> tuple[str, float, bool] | None:
    """op_flops by the op's arguments (a step repeats the same ops: each is counted once per shape)."""
    op = ShapedOp(name, None, 0.0, 0.0, dims, types, concrete)
    if op.name in GEMM_OPS:
        flops = _gemm(op)
        return None if flops is None else (GEMM, flops, False)
    if op.name in CONV_OPS:
        flops = _convolution(op)
        return None if flops is None else (CONVOLUTION, flops, False)
    if op.name in ATTENTION_OPS:
        found = _attention(op)
        return None if found is None else (ATTENTION, found[0], found[1])
    return None


ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8, "fp8": 1}


def op_bytes(op: ShapedOp) -> float | None:
    """The bytes an op of SHAPED_OPS moves at the least: each tensor it reads and writes once, at the size of its
    first input's dtype (None for an op op_flops cannot count, or a dtype without a size). GEMM: A, B and the
    output (M·K + K·N + M·N, times the batch; a bias left out); convolution forward: input, weight, output;
    its backward: grad_output, input and weight read, and the gradients its mask asks for written; attention
    forward: Q, K, V, O; its backward: Q, K, V, O and dO read, dQ, dK, dV written."""
    found = op_flops(op)
    size = ELEMENT_BYTES.get(dtype_of(op) or "")
    if found is None or size is None:
        return None
    kind, flops, _ = found
    dims = op.dims
    if kind == GEMM:
        a, b = [d for d in dims[1:3]] if op.name in ("aten::addmm", "aten::baddbmm") else [d for d in dims if d][:2]
        elements = prod(a) + prod(b) + flops / (2.0 * a[-1])  # the output: FLOPs over 2·K
    elif kind == CONVOLUTION:
        if op.name == "aten::convolution":
            x, w = dims[0], dims[1]
            elements = prod(x) + prod(w) + flops / (2.0 * prod(w[1:]))
        else:
            grad, x, w = dims[0], dims[1], dims[2]
            mask = re.findall(r"True|False", op.concrete[10])
            elements = prod(grad) + prod(x) * (1 + (mask[0] == "True")) + prod(w) * (1 + (mask[1] == "True"))
    else:
        backward = op.name.endswith("_backward")
        q, k, v = dims[1:4] if backward else dims[:3]
        out = q[0] * q[1] * q[2] * v[3]
        elements = (prod(q) + prod(k) + prod(v) + out) * (2 if backward else 1)
    return elements * size


def counted_ops(ops: list[ShapedOp], steps: list[tuple[float, float]]) -> list[ShapedOp]:
    """The ops whose FLOPs are counted, one per piece of work, that start inside one of ``steps`` (the profiled
    steps' (start, end) CPU spans; empty: the whole trace is one step). GEMMs count at their innermost op; the fused
    attention ops nest (the public ``_scaled_dot_product_cudnn_attention`` around ``_cudnn_attention_forward``):
    only ATTENTION_OPS are taken, and those contain no other."""
    counted = [*innermost_gemms(ops), *(op for op in ops if op.name in CONV_OPS or op.name in ATTENTION_OPS)]
    if not steps:
        return counted
    windows = sorted(steps)
    starts = [start for start, _ in windows]
    kept = []
    for op in counted:
        i = bisect_right(starts, op.start) - 1
        if i >= 0 and op.start < windows[i][1]:
            kept.append(op)
    return kept


# Forward ops the autograd engine never runs as part of a gradient formula (the backward's GEMMs are mm/bmm, its
# convolutions convolution_backward, its attention the *_backward ops): seen inside a backward node, they are the
# forward run again, by activation checkpointing (torch.utils.checkpoint, reentrant or not, and the wrappers built
# on it). Double backward (create_graph=True) through a convolution would also run one: not told apart.
FORWARD_OPS = frozenset({"aten::linear", "aten::matmul", "aten::convolution"} |
                        {name for name in ATTENTION_OPS if not name.endswith("_backward")})
BACKWARD_NODE = "autograd::engine::evaluate_function"


def recomputed_spans(model) -> dict[object, tuple[list[float], list[float]]]:
    """Per host thread, the merged spans of the forward ops (FORWARD_OPS) run inside a backward node (an
    ``autograd::engine::evaluate_function: …`` span of their thread): the recomputed forward. Measured on the public
    MI300X trace of a ResNet with non-reentrant checkpointing: 19 of each step's 20 ``aten::convolution`` run again
    inside ``evaluate_function: ReluBackward0`` on the autograd thread, where the saved activation is unpacked."""
    names = {name for name in model.op_names() if name.startswith(BACKWARD_NODE)}
    forward = [op for op in model.shaped_ops if op.name in FORWARD_OPS]
    if not names or not forward:
        return {}
    nodes: dict[object, list[tuple[float, float]]] = {}
    for op in model.ops:
        if op.name in names:
            nodes.setdefault(op.tid, []).append((op.start, op.end))
    backward = {tid: merge(spans) for tid, spans in nodes.items()}
    found: dict[object, list[tuple[float, float]]] = {}
    for op in forward:
        union = backward.get(op.tid)
        if union is not None and _inside(union, op.start):
            found.setdefault(op.tid, []).append((op.start, op.end))
    return {tid: merge(spans) for tid, spans in found.items()}


def _inside(union: tuple[list[float], list[float]], ts: float) -> bool:
    starts, ends = union
    i = bisect_right(starts, ts) - 1
    return i >= 0 and ts <= ends[i]


def is_recomputed(op: ShapedOp, spans: dict[object, tuple[list[float], list[float]]]) -> bool:
    """``op`` runs inside the recomputed forward (``recomputed_spans``) of its thread."""
    union = spans.get(op.tid)
    return union is not None and _inside(union, op.start)


def step_flops(ops: list[ShapedOp], steps: list[tuple[float, float]],
               recomputed: dict[object, tuple[list[float], list[float]]] | None = None) -> StepFlops:
    """The FLOPs of ``counted_ops`` per step; those inside ``recomputed`` (``recomputed_spans``: activation
    checkpointing's second forward) are hardware work, summed apart in ``recomputed_per_step`` and left out of the
    model count."""
    result = StepFlops()
    for op in counted_ops(ops, steps):
        found = op_flops(op)
        if found is None:
            result.uncounted_ops += 1
            continue
        kind, flops, causal = found
        if recomputed and is_recomputed(op, recomputed):
            result.recomputed_per_step += flops
            continue
        result.ops += 1
        result.causal_halved |= causal
        result.by_kind[kind] = result.by_kind.get(kind, 0.0) + flops
        dtype = dtype_of(op) or "unknown"
        result.by_dtype[dtype] = result.by_dtype.get(dtype, 0.0) + flops
    n = max(1, len(steps))
    result.by_kind = {k: v / n for k, v in result.by_kind.items()}
    result.by_dtype = {k: v / n for k, v in result.by_dtype.items()}
    result.per_step = sum(result.by_kind.values())
    result.recomputed_per_step /= n
    return result


class Peak(NamedTuple):
    """One device of the peak table: the words its deviceProperties name holds (all of them, any case), its dense
    peak TFLOP/s per dtype ("fp32": the CUDA cores' FP32, without TF32), its memory bandwidth in GB/s (None where
    the name does not tell the part), and where the figures come from."""

    words: tuple[str, ...]
    tflops: dict[str, float]
    bandwidth_gbs: float | None
    source: str


_H100 = {"fp8": 1978.9, "bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9, "fp64": 66.9}
_A100 = {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5, "fp64": 19.5}
# Matched against the trace's deviceProperties name, most specific first. Sparse figures (what vendors print first)
# are halved. Bandwidths: the datasheets' peak memory bandwidth (1 GB/s = 1e9 bytes/s).
PEAKS: tuple[Peak, ...] = (
    Peak(("H200",), _H100, 4800.0, "NVIDIA H200 datasheet (SXM; its sparse Tensor Core figures halved; 4.8 TB/s)"),
    Peak(("H100", "PCIe"), {"fp8": 1513.0, "bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.2, "fp64": 51.2},
         2000.0, "NVIDIA H100 datasheet, PCIe (sparse figures halved); H100 PCIe product brief PB-11133-001: 2 TB/s"),
    Peak(("H100",), _H100, 3350.0, "NVIDIA H100 datasheet, SXM (sparse figures halved; 3.35 TB/s)"),
    Peak(("A100", "80GB", "SXM"), _A100, 2039.0,
         "NVIDIA A100 datasheet (sparse figures halved); 80GB SXM: 2,039 GB/s"),
    Peak(("A100", "40GB"), _A100, 1555.0, "NVIDIA A100 datasheet (sparse figures halved); 40GB: 1,555 GB/s"),
    Peak(("A100",), _A100, None,
         "NVIDIA A100 datasheet (SXM and PCIe alike; sparse figures halved); the name does not say which memory"),
    Peak(("A10G",), {"bf16": 70.0, "fp16": 70.0, "tf32": 35.0}, 600.0,
         "AWS A10G (EC2 G5) as published by AWS and compared by Baseten (NVIDIA publishes no A10G datasheet; "
         "A10 figures differ); 24 GB GDDR6, 600 GB/s"),
    Peak(("L4",), {"fp8": 242.5, "bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}, 300.0,
         "NVIDIA L4 datasheet (sparse figures halved; 300 GB/s)"),
    Peak(("B200",), {"fp8": 4500.0, "bf16": 2250.0, "fp16": 2250.0, "tf32": 1100.0, "fp32": 75.0, "fp64": 37.0},
         8000.0, "NVIDIA HGX B200 datasheet, per GPU (sparse figures halved; 8 TB/s)"),
    Peak(("MI300X",), {"fp8": 2614.9, "bf16": 1307.4, "fp16": 1307.4, "tf32": 653.7, "fp32": 163.4, "fp64": 81.7},
         5300.0, "AMD Instinct MI300X datasheet (dense matrix figures; 5.3 TB/s)"),
)


def device_peak(device: str | None) -> Peak | None:
    """The row of PEAKS for a deviceProperties name such as "NVIDIA A100-SXM4-80GB"; None for a device the table
    does not hold."""
    if not device:
        return None
    low = device.lower()
    for row in PEAKS:
        if all(word.lower() in low for word in row.words):
            return row
    return None


def peak(device: str | None, dtype: str) -> tuple[float, str] | None:
    """(dense peak TFLOP/s, source) of ``device`` for ``dtype``; None for a device or dtype the table does not
    hold."""
    row = device_peak(device)
    if row is None or dtype not in row.tflops:
        return None
    return row.tflops[dtype], row.source


UNATTRIBUTED_MAX_PCT = 5.0  # at this share of the kernel time in work no op's shapes give, no MFU is given


def flop_metrics(analysis) -> None:
    """Set ``model_flop_per_step``, ``mfu_pct``, ``hfu_pct`` and ``mfu_basis`` (tracelint.engine.metrics defines
    them) on ``analysis.metrics``, where ``flop_unattributed_pct`` is set (compiled.compiled_metrics: a trace with
    shapes). Runs after the step and recording metrics (it reads the step time)."""
    m, model = analysis.metrics, analysis.model
    m["model_flop_per_step"] = m["mfu_pct"] = m["hfu_pct"] = m["mfu_basis"] = None
    m["mfu_step_ms"] = m["mfu_peak_tflops"] = None
    unattributed = m.get("flop_unattributed_pct")
    found = None
    if unattributed is not None:
        recomputed = analysis.memo("recomputed-forward", lambda a: recomputed_spans(a.model))
        found = step_flops(model.shaped_ops, [(s.start, s.end) for s in model.steps], recomputed)
    if found is None or not found.ops:
        graph = m.get("graph_kernel_pct")
        if graph:  # torch.compile(mode="reduce-overhead"), CUDA graphs by hand: the replays launch no ops
            m["mfu_basis"] = (f"no MFU: {graph:.0f}% of the kernel time runs in CUDA graph replays, which carry no op "
                              "shapes (the work inside a graph is not in the trace)")
        elif analysis.gpu_events and not model.shaped_ops:
            m["mfu_basis"] = "no MFU: no op shapes (recorded without record_shapes=True)"
        return
    m["model_flop_per_step"] = round(found.per_step)
    dtype = max(found.by_dtype, key=found.by_dtype.__getitem__)
    if dtype == "fp32" and (m.get("fp32_matmul_off_tc_pct") or 0) < 50:
        dtype = "tf32"  # fp32 GEMMs that run on the Tensor Cores (allow_tf32, set_float32_matmul_precision)
    device = m.get("device_name")
    top = peak(device if isinstance(device, str) else None, dtype)
    unprofiled = m.get("unprofiled_step_ms")
    busy = gpu_busy_ms_per_step(m)
    if unprofiled:
        step, said = float(unprofiled), f"unprofiled step {unprofiled:.2f} ms"
    elif busy:  # the profiler slows the host, not the kernels: the GPU's busy time per step is the profiled
        step = busy  # measure it leaves alone (an upper bound where the GPU idles)
        said = (f"GPU busy {step:.2f} ms per profiled step (no unprofiled record: an upper bound where the GPU "
                "waits; tracelint.profile or tracelint run time the steps without the profiler)")
    else:
        step, said = 0.0, ""
    if top is None or not step or unattributed >= UNATTRIBUTED_MAX_PCT:
        why = (f"no dense {dtype} peak for {device or 'this device'} in the table" if top is None else
               "no step time" if not step else f"{unattributed:.1f}% of the kernel time has no op shapes")
        m["mfu_basis"] = f"no MFU: {why}"
        return
    tflops, _source = top
    m["mfu_step_ms"], m["mfu_peak_tflops"] = round(step, 3), tflops
    m["mfu_pct"] = round(100.0 * found.per_step / (step / 1000.0) / (tflops * 1e12), 2)
    hardware = found.per_step + found.recomputed_per_step
    m["hfu_pct"] = round(100.0 * hardware / (step / 1000.0) / (tflops * 1e12), 2)
    again = (f"; recomputed forward (activation checkpointing) seen: {100.0 * found.recomputed_per_step / hardware:.1f}"
             "% of the FLOPs, in hfu_pct only" if found.recomputed_per_step else "")
    m["mfu_basis"] = (f"{said}; {dtype} dense peak {tflops:g} TFLOP/s"
                      f"{'; causal attention counted as half' if found.causal_halved else ''}{again}")
