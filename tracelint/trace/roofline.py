"""How close to the hardware the work the ops' shapes give runs: achieved TFLOP/s and arithmetic intensity of the
GEMMs, convolutions and fused attention of the profiled steps, per family, per dtype and per op shape.

Each op that ``flops.counted_ops`` counts in the steps (one per piece of work: the innermost GEMM op, the
convolution and attention ops) is timed by the kernels it launched: a kernel launched in a step whose launch call
starts on the op's host thread inside the op's span (the backward's ops run on the autograd thread and launch from
it). Then, over the ops of a group:

- **achieved TFLOP/s** = their FLOPs (``flops.op_flops``) / their kernels' summed time;
- **% of peak** = 100 × Σ FLOPs_d / peak_d over the group's time, the peak being the device's dense figure for
  dtype d (``flops.PEAKS``; fp32 work whose kernels run on the Tensor Cores counts at the TF32 peak): the share of
  the time the work would take at peak. No % for a device or dtype the table does not hold (said in ``note``);
- **arithmetic intensity** = FLOPs / the bytes the ops move at the least (``flops.op_bytes``: each operand and
  result once): left of the ridge (peak / bandwidth) a kernel is bound by memory, right of it by compute.

The recomputed forward of activation checkpointing is included (it is work the GPU does); MFU leaves it out. Ops
whose kernels the trace does not show in the steps (a CPU op, a kernel on another device) are left out of both
sums and counted in ``untimed_ops``. Memory-bound kernels (elementwise, normalization, softmax, copies): the trace
keeps no shapes for their ops, so no GB/s is given (``memory_bound``).
"""
from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING

from tracelint.trace.flops import (
    ATTENTION,
    CONVOLUTION,
    GEMM,
    counted_ops,
    device_peak,
    dtype_of,
    is_recomputed,
    op_bytes,
    op_flops,
    recomputed_spans,
)
from tracelint.trace.model import KERNEL

if TYPE_CHECKING:
    from tracelint.trace.device_analysis import TraceAnalysis

FAMILIES = (GEMM, CONVOLUTION, ATTENTION)
METRIC_PREFIX = {GEMM: "gemm", CONVOLUTION: "conv", ATTENTION: "attention"}
TOP_OPS = 10
MEMORY_BOUND_WHY = ("the trace keeps the shapes of GEMM, convolution and attention ops only: the elementwise, "
                    "normalization, softmax and copy ops' bytes are not known")


class _Tally:
    """Sums over a group of timed ops: FLOPs, the FLOPs of those whose bytes are known and those bytes, kernel
    time, calls, and the time the FLOPs would take at peak (None once an op's dtype has no peak)."""

    __slots__ = ("flops", "flops_with_bytes", "bytes", "us", "calls", "peak_s")

    def __init__(self) -> None:
        self.flops = self.flops_with_bytes = self.bytes = self.us = 0.0
        self.calls = 0
        self.peak_s: float | None = 0.0

    def add(self, flops: float, nbytes: float | None, us: float, peak_tflops: float | None, calls: int) -> None:
        self.flops += flops
        self.us += us
        self.calls += calls
        if nbytes:
            self.flops_with_bytes += flops
            self.bytes += nbytes
        self.peak_s = None if self.peak_s is None or not peak_tflops else self.peak_s + flops / (peak_tflops * 1e12)

    def row(self, steps: int) -> dict:
        seconds = self.us / 1e6
        return {
            "calls_per_step": round(self.calls / steps, 1),
            "flop_per_step": round(self.flops / steps),
            "bytes_per_step": round(self.bytes / steps),
            "kernel_ms_per_step": round(self.us / 1000.0 / steps, 3),
            "tflops": round(self.flops / seconds / 1e12, 2) if seconds else None,
            "peak_pct": round(100.0 * self.peak_s / seconds, 2) if seconds and self.peak_s is not None else None,
            "flop_per_byte": round(self.flops_with_bytes / self.bytes, 1) if self.bytes else None,
        }


def roofline_of(analysis: TraceAnalysis) -> dict | None:
    """The roofline record of a device's analysis (module docstring), computed once; None without op shapes or
    without counted work that launched kernels in the steps."""
    return analysis.memo("roofline", _roofline)


def roofline_metrics(analysis: TraceAnalysis) -> None:
    """Set ``<family>_tflops`` and ``<family>_peak_pct`` (gemm, conv, attention: tracelint.engine.metrics) from
    the roofline record."""
    record = roofline_of(analysis)
    totals = {row["family"]: row for row in record["families"] if row["dtype"] is None} if record else {}
    for family, prefix in METRIC_PREFIX.items():
        row = totals.get(family, {})
        analysis.metrics[f"{prefix}_tflops"] = row.get("tflops")
        analysis.metrics[f"{prefix}_peak_pct"] = row.get("peak_pct")


def _roofline(analysis: TraceAnalysis) -> dict | None:
    model = analysis.model
    if not model.shaped_ops:
        return None
    ops = counted_ops(model.shaped_ops, [(s.start, s.end) for s in model.steps])
    us, tensor_core = _kernel_time(analysis, ops)
    if not any(us):
        return None
    recomputed = analysis.memo("recomputed-forward", lambda a: recomputed_spans(a.model))
    # a step repeats its ops: each distinct op (arguments, Tensor Cores, recomputed) is judged once
    same: dict[tuple, list] = {}
    untimed = 0
    for op, t, tc in zip(ops, us, tensor_core, strict=True):
        if not t:
            untimed += 1
            continue
        key = (op.name, op.dims, op.types, op.concrete, tc, is_recomputed(op, recomputed))
        entry = same.get(key)
        if entry is None:
            same[key] = [op, t, 1]
        else:
            entry[1] += t
            entry[2] += 1
    device = analysis.metrics.get("device_name")
    row = device_peak(device if isinstance(device, str) else None)
    families: dict[tuple[str, str | None], _Tally] = {}
    shapes: dict[tuple, _Tally] = {}
    for (_, _, _, _, tc, again), (op, t, n) in same.items():
        found = op_flops(op)
        if found is None:
            untimed += n
            continue
        kind, flops, _ = found
        dtype = dtype_of(op) or "unknown"
        if dtype == "fp32" and tc:
            dtype = "tf32"  # fp32 tensors on the Tensor Cores (allow_tf32, set_float32_matmul_precision)
        top = row.tflops.get(dtype) if row else None
        nbytes = op_bytes(op)
        for tally in (_tally(families, (kind, None)), _tally(families, (kind, dtype)),
                      _tally(shapes, (op.name, tuple(d for d in op.dims if d), dtype, kind, again))):
            tally.add(flops * n, nbytes and nbytes * n, t, top, n)
    steps = len(model.steps) or 1
    order = {family: i for i, family in enumerate(FAMILIES)}
    ranked = sorted(shapes.items(), key=lambda kv: -kv[1].us)[:TOP_OPS]
    return {
        "device": device,
        "peak_tflops": dict(row.tflops) if row else None,
        "bandwidth_gbs": row.bandwidth_gbs if row else None,
        "source": row.source if row else None,
        "note": None if row else f"no dense peak for {device or 'this device'} in the table: no % of peak",
        "families": [{"family": kind, "dtype": dtype, **tally.row(steps)} for (kind, dtype), tally in
                     sorted(families.items(), key=lambda kv: (order[kv[0][0]], kv[0][1] is not None, -kv[1].us))],
        "top_ops": [{"name": name, "shape": " x ".join(str(list(d)) for d in dims), "dtype": dtype, "family": kind,
                     "recomputed": again, **tally.row(steps)}
                    for (name, dims, dtype, kind, again), tally in ranked],
        "untimed_ops": untimed,
        "memory_bound": {"gbps": None, "why": MEMORY_BOUND_WHY},
    }


def _tally(tallies: dict, key: tuple) -> _Tally:
    found = tallies.get(key)
    if found is None:
        found = tallies[key] = _Tally()
    return found


def _kernel_time(analysis: TraceAnalysis, ops: list) -> tuple[list[float], list[bool]]:
    """Per op: the summed time of the kernels launched in the steps from inside it (its thread, its span), and
    whether one of them runs on the Tensor Cores. The counted ops do not nest, so a launch belongs to the op of its
    thread that started last before it, if that op still runs."""
    by_tid: dict[object, tuple[list[float], list[int]]] = {}
    for i in sorted(range(len(ops)), key=lambda i: ops[i].start):
        starts, index = by_tid.setdefault(ops[i].tid, ([], []))
        starts.append(ops[i].start)
        index.append(i)
    us = [0.0] * len(ops)
    tensor_core = [False] * len(ops)
    on_tc: dict[str, bool] = {}  # by kernel name, without a method call per kernel
    ends = [op.end for op in ops]
    # unpacked as tuples: attribute access on a million NamedTuples is the cost here
    for kind, name, _, _, start, end, _, _, launch, step in analysis.gpu_events:
        if launch is None or step is None or kind != KERNEL:
            continue
        _, tid, at, _, _ = launch
        entry = by_tid.get(tid)
        if entry is None:
            continue
        k = bisect_right(entry[0], at) - 1
        if k < 0:
            continue
        i = entry[1][k]
        if at <= ends[i]:
            us[i] += end - start
            tc = on_tc.get(name)
            if tc is None:
                tc = on_tc[name] = analysis.kernel_class(name).tensor_core
            tensor_core[i] = tensor_core[i] or tc
    return us, tensor_core
