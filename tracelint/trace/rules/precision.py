"""Precision and Tensor Cores: fp32 matmul/conv time on the CUDA cores of a GPU that has Tensor Cores (TL401),
attention computed by separate matmul and softmax kernels instead of a fused Tensor Core kernel (TL402), fp16/bf16
GEMMs whose shapes miss the Tensor Core tiles (TL404), and fp16/bf16 convolutions of a model in NCHW memory format,
converted to and from the NHWC layout of the Tensor Core kernels (TL405)."""
from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import replace

from tracelint.engine import Config, Finding
from tracelint.engine import metrics as M
from tracelint.trace.device_analysis import TraceAnalysis
from tracelint.trace.flops import innermost_gemms
from tracelint.trace.kernels import CHANNELS_FIRST, CONV, LAYOUT_CONVERSION, memory_layout, name_arch
from tracelint.trace.model import KERNEL, ShapedOp
from tracelint.trace.rule import TraceRule
from tracelint.trace.rules._common import finding, kernel_location, launched_under, ms, pct, refine_source
from tracelint.trace.verdict import Verdict


def _arch(analysis: TraceAnalysis, kernel_names: Iterable[str]) -> int | None:
    props = analysis.model.devices.get(analysis.device) if analysis.device is not None else None
    if props is not None and props.compute_major is not None:
        return props.compute_major
    return max((a for a in map(name_arch, kernel_names) if a is not None), default=None)


class Fp32MatmulOffTensorCores(TraceRule):
    code = "TL401"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        # Measured against the step window, not the busy time: on an input- or host-bound run the GPU idles anyway
        # and faster matmuls would not shorten the step.
        window = M.GPU_WINDOW_US.of(analysis.metrics)
        if not window:
            return
        per_name: dict[str, list] = {}
        for g in analysis.gpu_events:
            if g.kind == KERNEL and g.step is not None and analysis.kernel_class(g.name).fp32_off_tensor_cores:
                per_name.setdefault(g.name, []).append(g)
        if not per_name:
            return
        arch = _arch(analysis, per_name)
        if arch is None or arch < 7:
            return  # no Tensor Cores to move to (or the device is unknown)
        total = sum(g.end - g.start for items in per_name.values() for g in items)
        share = 100.0 * total / window
        if share < config.threshold("fp32-matmul-min-pct"):
            return
        n_steps = len(analysis.model.steps) or 1
        top_name, top = max(per_name.items(), key=lambda kv: sum(g.end - g.start for g in kv[1]))
        top_us = sum(g.end - g.start for g in top)
        short = top_name if len(top_name) <= 80 else top_name[:77] + "..."
        if arch >= 8:
            fix = "enable TF32 (torch.set_float32_matmul_precision('high')) or bf16 autocast"
        else:
            fix = "use fp16 autocast with a GradScaler (this GPU has no TF32/bf16 Tensor Core path)"
        message = (f"fp32 matmul/conv kernels run on the CUDA cores, off the Tensor Cores, for {pct(share)} of the "
                   f"step window ({ms(total / n_steps)} per step; largest: `{short}`, {ms(top_us / n_steps)} per "
                   f"step): {fix}")
        loc = kernel_location(analysis, top, top_name)
        yield finding(self, message, loc, fp32_off_tc_pct_of_window=round(share, 2),
                      fp32_off_tc_us_per_step=round(total / n_steps, 1), kernels=len(per_name))


_LOG_SOFTMAX = re.compile(r"log_?soft_?max", re.I)
# softmax_warp_forward<input_t, output_t, acc_t, log2_elements, is_log_softmax, ...>: the fifth argument
_WARP_LOG = re.compile(r"softmax_warp_(?:forward|backward)<[^<>,]+,[^<>,]+,[^<>,]+,\s*\d+,\s*true")


def _is_log_softmax(analysis: TraceAnalysis, kernel) -> bool:
    """A log_softmax (a loss's cross-entropy): by the op that launched it (aten::_log_softmax*), else by its name."""
    if _LOG_SOFTMAX.search(kernel.name) or _WARP_LOG.search(kernel.name):
        return True
    launch = kernel.launch
    if launch is None:
        return False
    starts, ops = analysis.model.ops_on(launch.tid)
    i = bisect_right(starts, launch.start) - 1
    for op in ops[max(0, i - 200): i + 1]:
        if op.end >= launch.start and "softmax" in op.name and _LOG_SOFTMAX.search(op.name):
            return True
    return False


class UnfusedAttention(TraceRule):
    """Attention on the math path: softmax kernels between batched matmuls every step, and no fused attention
    kernel anywhere in the steps."""

    code = "TL402"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        from tracelint.trace.kernels import MATMUL, SOFTMAX

        m = analysis.metrics
        total = M.KERNEL_TIME_US.of(m)
        if not analysis.has_steps or not total or (M.ATTENTION_PCT.of(m) or 0.0) > 0:
            return
        softmax: list = []
        matmul_us = 0.0
        for g in analysis.gpu_events:
            if g.kind != KERNEL or g.step is None:
                continue
            kc = analysis.kernel_class(g.name)
            if kc.op == SOFTMAX and not _is_log_softmax(analysis, g):  # a loss's log_softmax is not attention
                softmax.append(g)
            elif kc.op == MATMUL:
                matmul_us += g.end - g.start
        steps = len(analysis.model.steps)
        per_step = len(softmax) / steps
        if per_step < config.threshold("unfused-attention-min-softmax-per-step") or not matmul_us:
            return
        softmax_us = sum(g.end - g.start for g in softmax)
        share = 100.0 * softmax_us / total
        if share < config.threshold("unfused-attention-min-softmax-pct"):
            return
        message = (f"attention runs on the unfused math path: {per_step:.0f} softmax kernels per step between batched "
                   f"matmuls ({pct(share)} of kernel time in softmax alone, {ms(softmax_us / steps)} per step) and no "
                   "fused attention kernel; use torch.nn.functional.scaled_dot_product_attention (FlashAttention, "
                   "memory-efficient or cuDNN kernels: the score matrix never goes to memory)")
        first = softmax[0]
        launch = first.launch
        loc = analysis.location(step=first.step, start=launch.start if launch else first.start,
                                end=launch.end if launch else first.end, event=first.name,
                                tid=launch.tid if launch else None)
        yield finding(self, message, loc, softmax_per_step=round(per_step, 1),
                      softmax_pct_of_kernel_time=round(share, 2), softmax_us_per_step=round(softmax_us / steps, 1))


TILE = 8  # fp16/bf16 Tensor Core GEMMs want M, N and K multiples of 8 (16 bytes)
_HALF_TYPES = frozenset({"c10::Half", "c10::BFloat16", "Half", "BFloat16"})


def gemm_shape(op: ShapedOp) -> tuple[int, int, int] | None:
    """(M, N, K) of a GEMM op from its ``Input Dims``; None when its inputs are not fp16/bf16 matrices."""
    dims, types = op.dims, op.types
    name = op.name
    first = 1 if name in ("aten::addmm", "aten::baddbmm") else 0  # the bias (or input) comes first
    if len(dims) < first + 2 or len(types) < first + 2 or \
            not (types[first] in _HALF_TYPES and types[first + 1] in _HALF_TYPES):
        return None
    a, b = dims[first], dims[first + 1]
    if len(a) < 2 or not b:
        return None
    if name == "aten::linear":  # input [..., K] times weight [N, K] transposed
        if len(b) != 2:
            return None
        m = 1
        for size in a[:-1]:
            m *= size
        return m, b[0], a[-1]
    if len(b) < 2:
        return None
    return a[-2], b[-1], a[-1]


class GemmShapeOffTensorCoreTiles(TraceRule):
    """fp16/bf16 GEMM ops (record_shapes) with M, N or K not a multiple of 8, on a share of the GEMM time."""

    code = "TL404"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        model = analysis.model
        if not model.shaped_ops:
            return  # recorded without record_shapes=True
        total, off = 0.0, {}
        for op in innermost_gemms(model.shaped_ops):
            shape = gemm_shape(op)
            if shape is None:
                continue
            kernels = [g for g in launched_under(analysis, op.tid, op.start, op.end)
                       if g.kind == KERNEL and g.step is not None]
            us = sum(g.end - g.start for g in kernels)
            total += us
            if us and any(size % TILE for size in shape):
                entry = off.setdefault((op.name, op.dims[:3], shape), [0.0, op, kernels[0]])
                entry[0] += us
        if not off or not total:
            return
        arch = _arch(analysis, (g.name for g in analysis.gpu_events[:2000] if g.kind == KERNEL))
        if arch is not None and arch < 7:
            return  # no Tensor Cores
        off_us = sum(entry[0] for entry in off.values())
        share = 100.0 * off_us / total
        if share < config.threshold("gemm-off-tile-min-pct"):
            return
        n_steps = len(model.steps) or 1
        ranked = sorted(off.items(), key=lambda kv: -kv[1][0])
        (name, dims, (m, n, k)), (top_us, op, kernel) = ranked[0]
        odd = ", ".join(f"{label}={size}" for label, size in (("M", m), ("N", n), ("K", k)) if size % TILE)
        shapes = " x ".join(str(list(d)) for d in dims if d)
        message = (f"fp16/bf16 GEMMs with a dimension that is not a multiple of {TILE} take {pct(share)} of the GEMM "
                   f"time ({ms(off_us / n_steps)} per step): they miss the Tensor Core tiles; largest: `{name}` "
                   f"{shapes} ({odd}), {ms(top_us / n_steps)} per step. Pad the dimension to a multiple of {TILE} (64 "
                   "is better: a vocabulary of 50257 becomes 50304)")
        loc = analysis.location(step=kernel.step, start=op.start, end=op.end, event=name, tid=op.tid)
        yield finding(self, message, loc, off_tile_pct_of_gemm_time=round(share, 2),
                      off_tile_us_per_step=round(off_us / n_steps, 1), off_tile_shapes=len(ranked),
                      largest=f"{name} {shapes}", largest_us_per_step=round(top_us / n_steps, 1))


_SIXTEEN_BIT = frozenset({"bf16", "fp16"})
# The share of the NCHW kernels' time that their channels_last versions saved on the project's ResNet-50 fixture
# (conv_nchw_bf16 and its twin; bf16 autocast, batch 128, H200, torch 2.11): batch norm, max pooling and cuDNN's
# wgrad helper 31.6 ms per step in NCHW, 13.8 ms in channels_last. With the conversions' 6.3 ms this estimates 23.9 ms
# of the 25.2 ms the step lost (54.5 -> 29.3 ms per step without the profiler).
NCHW_KERNEL_SAVING = 0.56
_MODEL_TO_DEVICE = re.compile(r"\.to\(|\.cuda\(")


class HalfPrecisionConvWithoutChannelsLast(TraceRule):
    """fp16/bf16 convolutions (at least half of the convolution kernels' time) and layout conversions between NCHW
    and NHWC in the steps: the model runs in the default NCHW memory format while the Tensor Core convolutions work in
    NHWC. The cost is the conversions plus the kernels that run their NCHW version (tracelint.trace.kernels.
    memory_layout), against the step window, as TL401 measures."""

    code = "TL405"

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        window = M.GPU_WINDOW_US.of(analysis.metrics)
        if not window:
            return
        conv_us = half_us = 0.0
        conversions: dict[str, list] = {}
        nchw_us = 0.0
        for g in analysis.gpu_events:
            if g.kind != KERNEL or g.step is None:
                continue
            us = g.end - g.start
            kc = analysis.kernel_class(g.name)
            if kc.op == CONV:
                conv_us += us
                half_us += us if kc.precision in _SIXTEEN_BIT else 0.0
            layout = memory_layout(g.name)
            if layout == LAYOUT_CONVERSION:
                conversions.setdefault(g.name, []).append(g)
            elif layout == CHANNELS_FIRST:
                nchw_us += us
        if not conversions or not conv_us or half_us < conv_us / 2:
            return  # fp32/TF32 convolutions are out of the rule's scope (its doc says why)
        convert_us = sum(g.end - g.start for items in conversions.values() for g in items)
        share = 100.0 * (convert_us + nchw_us) / window
        if share < config.threshold("nchw-conv-min-pct"):
            return
        n_steps = len(analysis.model.steps) or 1
        saving = convert_us + NCHW_KERNEL_SAVING * nchw_us
        top_name, top = max(conversions.items(), key=lambda kv: sum(g.end - g.start for g in kv[1]))
        short = top_name if len(top_name) <= 80 else top_name[:77] + "..."
        count = sum(len(items) for items in conversions.values())
        message = (f"fp16/bf16 convolutions run on NCHW (channels-first) data: {count / n_steps:.0f} layout "
                   "conversions per step to and from NHWC, the layout of the 16-bit convolution kernels, take "
                   f"{ms(convert_us / n_steps)} per step ({pct(100.0 * convert_us / window)} of the step window; "
                   f"largest: `{short}`), and kernels that have a channels-last version (batch norm, pooling) run "
                   f"their NCHW one for {ms(nchw_us / n_steps)} per step ({pct(100.0 * nchw_us / window)}). Put the "
                   "model and its input in channels_last (`model.to(memory_format=torch.channels_last)`, "
                   f"`x.to(memory_format=torch.channels_last)`): an estimated {ms(saving / n_steps)} per step "
                   f"({pct(100.0 * saving / window)} of the step window) saved, the conversions and "
                   f"{100 * NCHW_KERNEL_SAVING:.0f} % of the NCHW kernels' time (what channels_last saved on them on "
                   "the project's bf16 ResNet-50 fixture, H200: 54.5 -> 29.3 ms per step, 1.86x)")
        first = min(top, key=lambda g: g.start)
        loc = analysis.location(step=first.step, start=first.start, end=first.end, event=top_name)
        if first.launch is not None:
            source = analysis.source_at(first.launch.tid, first.launch.start)
            loc = replace(loc, source=refine_source(source, analysis.path, _MODEL_TO_DEVICE))
        yield finding(self, message, loc, layout_conversions_per_step=round(count / n_steps, 1),
                      conversion_us_per_step=round(convert_us / n_steps, 1),
                      nchw_kernel_us_per_step=round(nchw_us / n_steps, 1),
                      nchw_pct_of_window=round(share, 2), estimated_saving_us_per_step=round(saving / n_steps, 1))
