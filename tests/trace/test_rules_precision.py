"""TL404 in a trace: fp16/bf16 GEMMs (record_shapes) with a dimension off the Tensor Core tiles; the model's
ShapedOps it reads. TL405: fp16/bf16 convolutions of a model in NCHW memory format."""
from __future__ import annotations

import json

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


# --- TL405: 16-bit convolutions of a model in NCHW ---------------------------------------------------------------
TO_NHWC = ("void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true, "
           "(cudnnKernelDataType_t)0>(...)")
BN_NCHW = "void at::native::batch_norm_collect_statistics_kernel<at::native::Var, c10::BFloat16, c10::BFloat16>(...)"
CONV_BF16 = "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_kernel__5x_cudnn"
CONV_TF32 = "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_kernel__5x_cudnn"


def _conv_net(conv=CONV_BF16, convert_us=40.0, bn_us=90.0):
    trace = TraceBuilder().device_properties(name="NVIDIA H200", compute_major=9)
    for _ in trace.steps(3):
        for _ in range(10):
            if convert_us:
                trace.kernel(TO_NHWC, gpu_us=convert_us, op="aten::cudnn_convolution")
            trace.kernel(conv, gpu_us=100, op="aten::cudnn_convolution")
            trace.kernel(BN_NCHW, gpu_us=bn_us, op="aten::native_batch_norm")
    return trace


def _tl405(trace, **thresholds):
    return [f for f in analyze(trace, thresholds=thresholds or None).findings if f.code == "TL405"]


def test_tl405_gives_the_conversions_the_nchw_kernels_and_the_estimate():
    (found,) = _tl405(_conv_net())
    details = dict(found.details)
    assert details["layout_conversions_per_step"] == 10
    assert details["conversion_us_per_step"] == pytest.approx(400.0)
    assert details["nchw_kernel_us_per_step"] == pytest.approx(900.0)
    assert details["estimated_saving_us_per_step"] == pytest.approx(400.0 + 0.56 * 900.0)
    assert "channels_last" in found.message and "nchwToNhwcKernel" in found.message


def test_tl405_silent_on_fp32_convs_without_conversions_and_below_the_threshold():
    assert _tl405(_conv_net(conv=CONV_TF32)) == []  # TF32 convolutions: out of scope
    assert _tl405(_conv_net(convert_us=0)) == []  # no conversion: the NCHW batch norm alone proves no NCHW conv net
    assert _tl405(_conv_net(convert_us=5, bn_us=1)) == []  # 6 µs of 106: 5.7 % of the step window
    assert _tl405(_conv_net(), **{"nchw-conv-min-pct": 80}) == []


def test_tl405_on_the_resnet50_fixtures(fixture_traces):
    """conv_nchw_bf16 is reported, with the estimate near what channels_last measured; its channels_last twin and the
    fp32 ResNet-50 fixtures (which convert layouts too) are not."""
    from tracelint.trace import analyze_trace

    def findings(name):
        path = fixture_traces / f"{name}.pt.trace.json.gz"
        if not path.exists():
            pytest.skip(f"{name} not recorded")
        return [f for f in analyze_trace(path).findings if f.code == "TL405"]

    (found,) = findings("conv_nchw_bf16")
    details = dict(found.details)
    manifest = json.loads((fixture_traces / "manifest.json").read_text())["traces"]
    measured_us = 1e3 * (manifest["conv_nchw_bf16"]["ground_truth"]["median_ms"]
                         - manifest["conv_nchw_bf16_fixed"]["ground_truth"]["median_ms"])
    assert details["layout_conversions_per_step"] > 200
    assert details["conversion_us_per_step"] < details["estimated_saving_us_per_step"] < 1.1 * measured_us
    assert details["estimated_saving_us_per_step"] > 0.8 * measured_us
    script = (fixture_traces.parent / "scenarios" / "conv_nchw_bf16.py").read_text().splitlines()
    assert "resnet50().to(" in script[found.location.source.line - 1]  # where the model is put on the device
    for name in ("conv_nchw_bf16_fixed", "pageable_copies_fixed", "dataloader_main_process_fixed"):
        assert findings(name) == [], name
