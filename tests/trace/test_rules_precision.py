"""TL404 in a trace: fp16/bf16 GEMMs (record_shapes) with a dimension off the Tensor Core tiles; the model's
ShapedOps it reads."""
from __future__ import annotations

import pytest

from tracelint.testing import TraceBuilder, analyze
from tracelint.trace.build import build_model
from tracelint.trace.model import ShapedOp
from tracelint.trace.rules.precision import gemm_shape

BF16, FP32 = ["c10::BFloat16", "c10::BFloat16"], ["float", "float"]
GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"


def _trace(head_dims, head_us=3000.0, types=BF16, op="aten::mm"):
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):
        trace.kernel(GEMM, gpu_us=6000, op="aten::mm",
                     op_args={"Input Dims": [[8192, 768], [768, 768]], "Input type": types})
        trace.kernel(GEMM, gpu_us=head_us, op=op, op_args={"Input Dims": head_dims, "Input type": types})
    return trace


def _tl404(trace, **thresholds):
    return [f for f in analyze(trace, thresholds=thresholds or None).findings if f.code == "TL404"]


def test_reports_the_off_tile_share_and_the_largest_shape():
    (found,) = _tl404(_trace([[8192, 768], [768, 50257]]))
    details = dict(found.details)
    assert details["off_tile_pct_of_gemm_time"] == pytest.approx(33.33, abs=0.01)
    assert details["largest"] == "aten::mm [8192, 768] x [768, 50257]"
    assert "N=50257" in found.message and "50304" in found.message


def test_silent_below_the_threshold_on_tile_shapes_and_in_fp32():
    assert _tl404(_trace([[8192, 768], [768, 50257]], head_us=500)) == []  # 7.7 % of the GEMM time
    assert _tl404(_trace([[8192, 768], [768, 50257]]), **{"gemm-off-tile-min-pct": 40}) == []
    assert _tl404(_trace([[8192, 768], [768, 50304]])) == []
    assert _tl404(_trace([[8192, 768], [768, 50257]], types=FP32)) == []  # TL401's business


def test_without_record_shapes_nothing_is_judged():
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):
        trace.kernel(GEMM, gpu_us=6000, op="aten::mm")
    assert _tl404(trace) == []


def test_the_innermost_gemm_op_counts_once():
    trace = TraceBuilder().device_properties()
    linear = {"Input Dims": [[8, 1024, 768], [50257, 768], [50257]], "Input type": BF16 + ["c10::BFloat16"]}
    addmm = {"Input Dims": [[50257], [8192, 768], [768, 50257]], "Input type": ["c10::BFloat16"] + BF16}
    for _ in trace.steps(3):
        trace.kernel(GEMM, gpu_us=6000, op="aten::mm",
                     op_args={"Input Dims": [[8192, 768], [768, 768]], "Input type": BF16})
        with trace.span("aten::linear"):
            trace.kernel(GEMM, gpu_us=3000, op="aten::addmm", op_args=addmm)
    trace.events[-1]["args"].update(linear)  # the span's op, written last
    (found,) = _tl404(trace)
    assert dict(found.details)["largest"].startswith("aten::addmm")
    assert dict(found.details)["off_tile_pct_of_gemm_time"] == pytest.approx(33.33, abs=0.01)


@pytest.mark.parametrize("name, dims, expected", [
    ("aten::mm", ((8192, 768), (768, 50257)), (8192, 50257, 768)),
    ("aten::addmm", ((50257,), (8192, 768), (768, 50257)), (8192, 50257, 768)),
    ("aten::bmm", ((12, 1024, 64), (12, 64, 1024)), (1024, 1024, 64)),
    ("aten::linear", ((8, 1024, 768), (50257, 768)), (8192, 50257, 768)),
    ("aten::matmul", ((8, 12, 1024, 64), (8, 12, 64, 1000)), (1024, 1000, 64)),
    ("aten::matmul", ((768,), (768, 10)), None),  # a vector
])
def test_gemm_shape(name, dims, expected):
    op = ShapedOp(name, 1, 0.0, 1.0, dims, ("c10::BFloat16",) * len(dims))
    assert gemm_shape(op) == expected


def test_the_model_keeps_usable_shapes_only():
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5,
         "args": {"Input Dims": [[4, 8], [8, 3]], "Input type": ["c10::Half", "c10::Half"]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
         "args": {"Input Dims": [[4, "8"], []], "Input type": ["c10::Half", None]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 5,
         "args": {"Input Dims": "4x8"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 30, "dur": 5,
         "args": {"Input Dims": [[4], [4]], "Input type": ["float", "float"]}},
    ]
    model = build_model([events])
    assert [(o.start, o.dims, o.types) for o in model.shaped_ops] == [
        (0, ((4, 8), (8, 3)), ("c10::Half", "c10::Half")), (10, ((), ()), ("c10::Half", ""))]
    assert len(model.ops) == 4
