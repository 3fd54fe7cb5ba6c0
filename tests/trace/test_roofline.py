"""Issue #37 items 2 and 5: achieved TFLOP/s per family and per op shape (tracelint.trace.roofline), and HFU, against
counts made here straight from the trace's JSON events (gzip + json: no tracelint model), on traces recorded on
real GPUs: the project's H200 fixtures and the public MI300X ResNet with activation checkpointing."""
from __future__ import annotations

import gzip
import json
from bisect import bisect_right
from math import prod

import pytest

from tracelint.trace import analyze_trace

H200_BF16 = 989.4  # NVIDIA H200 datasheet, dense
MI300X = "tracelens-mi300-resnet_act_checkpoint.json.gz"


def _events(path) -> list[dict]:
    return [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X"]


class _Raw:
    """The trace as its events say it: the CPU ProfilerStep spans, the kernels by the correlation of their launch,
    and per host thread the launch calls (start, correlation) sorted by start."""

    def __init__(self, path) -> None:
        events = _events(path)
        self.events = events
        self.steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                            if e["name"].startswith("ProfilerStep#") and e.get("cat") in ("cpu_op", "user_annotation"))
        self.kernel_us = {e["args"]["correlation"]: e["dur"] for e in events if e.get("cat") == "kernel"}
        launches: dict = {}
        for e in events:
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and e["args"].get("correlation") in self.kernel_us:
                launches.setdefault(e["tid"], []).append((e["ts"], e["args"]["correlation"]))
        self.launches = {tid: sorted(items) for tid, items in launches.items()}

    def in_step(self, ts: float) -> bool:
        i = bisect_right(self.steps, (ts, float("inf"))) - 1
        return i >= 0 and ts < self.steps[i][1]

    def kernel_us_under(self, op: dict) -> float:
        """The kernels launched on the op's thread inside its span, in the steps."""
        items = self.launches.get(op["tid"], [])
        lo = bisect_right(items, (op["ts"], -1))
        return sum(self.kernel_us[c] for ts, c in items[lo:] if ts <= op["ts"] + op["dur"] and self.in_step(ts))

    def ops(self, *names: str) -> list[dict]:
        return [e for e in self.events if e.get("cat") == "cpu_op" and e["name"] in names and self.in_step(e["ts"])]


def _mm_flops(op: dict) -> float:
    a, b = op["args"]["Input Dims"][:2] if op["name"] == "aten::mm" else op["args"]["Input Dims"][1:3]
    return 2.0 * a[0] * a[1] * b[1]


@pytest.fixture(scope="module")
def gpt(fixture_traces):
    path = fixture_traces / "gpt_eager_bf16.pt.trace.json.gz"
    (summary,) = analyze_trace(path).summaries
    return _Raw(path), summary


def test_gemm_throughput_is_the_mm_flops_over_their_kernels(gpt):
    """gpt_eager_bf16 (H200): its GEMMs are aten::mm and aten::addmm (aten::linear around the addmm, aten::matmul
    around an mm); their FLOPs over the time of the kernels each launched, counted from the events, is gemm_tflops,
    and that over the bf16 dense peak gemm_peak_pct."""
    raw, summary = gpt
    ops = raw.ops("aten::mm", "aten::addmm")
    flops = sum(_mm_flops(op) for op in ops)
    us = sum(raw.kernel_us_under(op) for op in ops)
    expected = flops / (us / 1e6) / 1e12
    m = summary.metrics
    assert m["gemm_tflops"] == pytest.approx(expected, rel=0.005)
    assert m["gemm_peak_pct"] == pytest.approx(100.0 * expected / H200_BF16, rel=0.005)
    (total,) = [row for row in summary.roofline["families"] if row["family"] == "gemm" and row["dtype"] is None]
    assert total["flop_per_step"] == pytest.approx(flops / len(raw.steps), rel=1e-9)
    assert total["kernel_ms_per_step"] == pytest.approx(us / 1000.0 / len(raw.steps), abs=0.001)


def test_the_lm_head_gemm_in_the_top_ops(gpt):
    """A hand-picked op: the LM head's forward, [12288, 768] x [768, 50304] (batch 12 x 1024 tokens, the padded
    vocabulary), one per step: its FLOPs, kernel time and bytes (A, B and the output once, bf16) from the events."""
    raw, summary = gpt
    ops = [op for op in raw.ops("aten::mm") if op["args"]["Input Dims"][:2] == [[12288, 768], [768, 50304]]]
    assert len(ops) == len(raw.steps)
    us = sum(raw.kernel_us_under(op) for op in ops) / len(ops)
    (row,) = [r for r in summary.roofline["top_ops"] if r["shape"] == "[12288, 768] x [768, 50304]"]
    assert (row["name"], row["dtype"], row["family"], row["calls_per_step"]) == ("aten::mm", "bf16", "gemm", 1.0)
    assert row["kernel_ms_per_step"] == pytest.approx(us / 1000.0, abs=0.001)
    assert row["tflops"] == pytest.approx(2.0 * 12288 * 768 * 50304 / (us / 1e6) / 1e12, rel=0.005)
    nbytes = 2 * (12288 * 768 + 768 * 50304 + 12288 * 50304)
    assert row["flop_per_byte"] == pytest.approx(2.0 * 12288 * 768 * 50304 / nbytes, abs=0.1)
    # the top ops are the largest kernel time first, at most ten
    times = [r["kernel_ms_per_step"] for r in summary.roofline["top_ops"]]
    assert times == sorted(times, reverse=True) and len(times) == 10


def test_attention_throughput_is_the_sdpa_flops_over_their_kernels(gpt):
    """The cuDNN attention ops (forward 4·B·H·S²·D, backward twice that, causal halved) over their kernels' time."""
    raw, summary = gpt
    ops = raw.ops("aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_cudnn_attention_backward")
    flops = us = 0.0
    for op in ops:
        backward = op["name"].endswith("_backward")
        b, h, s, d = op["args"]["Input Dims"][1 if backward else 0]
        flops += 4.0 * b * h * s * s * d / 2 * (2 if backward else 1)
        us += raw.kernel_us_under(op)
    assert summary.metrics["attention_tflops"] == pytest.approx(flops / (us / 1e6) / 1e12, rel=0.005)


def test_convolution_throughput_on_resnet50(fixture_traces):
    """conv_nchw_bf16 (ResNet-50, H200): conv_tflops is the model's convolution FLOPs (tests/trace/test_flops.py
    checks them against the architecture) over the kernels the convolution ops launched, counted from the events."""
    path = fixture_traces / "conv_nchw_bf16.pt.trace.json.gz"
    report = analyze_trace(path)
    raw = _Raw(path)
    us = sum(raw.kernel_us_under(op) for op in raw.ops("aten::convolution", "aten::convolution_backward"))
    (conv,) = [row for row in report.summaries[0].roofline["families"]
               if row["family"] == "convolution" and row["dtype"] is None]
    flops = conv["flop_per_step"] * len(raw.steps)
    assert report.metrics["conv_tflops"] == pytest.approx(flops / (us / 1e6) / 1e12, rel=0.005)
    assert report.metrics["conv_peak_pct"] == pytest.approx(100.0 * report.metrics["conv_tflops"] / H200_BF16, rel=0.01)


def test_fp32_gemms_on_the_tensor_cores_count_at_the_tf32_peak(fixture_traces):
    """matmul_tf32 (allow_tf32 on): fp32 tensors, TF32 kernels: the roofline's dtype is tf32 and the % is of 494.7;
    matmul_fp32 (off): fp32 at the CUDA cores' 66.9."""
    tf32 = analyze_trace(fixture_traces / "matmul_tf32.pt.trace.json.gz").summaries[0]
    fp32 = analyze_trace(fixture_traces / "matmul_fp32.pt.trace.json.gz").summaries[0]
    for summary, dtype, top in ((tf32, "tf32", 494.7), (fp32, "fp32", 66.9)):
        (row,) = [r for r in summary.roofline["families"] if r["dtype"] is not None]
        assert row["dtype"] == dtype
        assert row["peak_pct"] == pytest.approx(100.0 * row["tflops"] / top, rel=0.01)


def _conv_flops(op: dict) -> float:
    """torch.utils.flop_counter's forward convolution: 2 · N · C_out · output pixels · C_in/groups · kernel size."""
    x, w = op["args"]["Input Dims"][:2]
    stride, pad, dilation = (json.loads(v) for v in op["args"]["Concrete Inputs"][3:6])
    out = [(x[2 + i] + 2 * pad[i] - dilation[i] * (w[2 + i] - 1) - 1) // stride[i] + 1 for i in range(2)]
    return 2.0 * x[0] * w[0] * prod(out) * w[1] * prod(w[2:])


@pytest.mark.shared("public")
def test_hfu_counts_the_checkpointed_forward_again(public_traces):
    """The public MI300X ResNet with non-reentrant activation checkpointing (TraceLens' tests): the forward
    convolutions that run again inside an autograd node (``autograd::engine::evaluate_function: …`` on their
    thread), found here from the events, are the FLOPs hfu_pct adds to mfu_pct; the basis says so."""
    events = _events(public_traces / MI300X)
    nodes = [e for e in events if e["name"].startswith("autograd::engine::evaluate_function")]
    raw_steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                       if e["name"].startswith("ProfilerStep#") and e.get("cat") == "user_annotation")
    again = [op for op in events if op["name"] == "aten::convolution" and any(
        n["tid"] == op["tid"] and n["ts"] <= op["ts"] <= n["ts"] + n["dur"] for n in nodes)
        and any(s <= op["ts"] < t for s, t in raw_steps)]
    assert len(again) == 19 * len(raw_steps)  # all but one of each step's 20 convolutions
    recomputed = sum(_conv_flops(op) for op in again) / len(raw_steps)
    m = analyze_trace(public_traces / MI300X).metrics
    assert m["hfu_pct"] / m["mfu_pct"] == pytest.approx((m["model_flop_per_step"] + recomputed)
                                                        / m["model_flop_per_step"], rel=0.02)
    assert "recomputed forward (activation checkpointing) seen" in m["mfu_basis"]


def test_no_recomputation_no_difference(gpt):
    m = gpt[1].metrics
    assert m["hfu_pct"] == m["mfu_pct"] and "recomputed" not in m["mfu_basis"]
