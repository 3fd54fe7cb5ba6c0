"""TL303 in a trace: the optimizer step's per-tensor kernels."""
from __future__ import annotations

from tracelint.testing import TraceBuilder, analyze

ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, ...>"
MULTI = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::TensorListMetadata<3>, ...>"


def _trace(kernels_per_step: int, name: str = ELEMENTWISE, span: str = "Optimizer.step#AdamW.step"):
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):
        trace.kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", gpu_us=2000)
        with trace.span(span):
            for _ in range(kernels_per_step):
                trace.kernel(name, gpu_us=3, op="aten::mul_")
    return trace


def _tl303(trace, **thresholds):
    return [f for f in analyze(trace, thresholds=thresholds or None).findings if f.code == "TL303"]


def test_reports_many_per_tensor_kernels_per_step():
    (found,) = _tl303(_trace(160))
    assert dict(found.details)["per_tensor_kernels_per_step"] == 160
    assert "160 per-tensor kernels per step" in found.message


def test_silent_below_the_threshold_for_multi_tensor_kernels_and_outside_the_step():
    assert _tl303(_trace(60)) == []
    assert _tl303(_trace(160), **{"optimizer-per-tensor-kernels-min-per-step": 200}) == []
    assert _tl303(_trace(160, name=MULTI)) == []
    assert _tl303(_trace(160, span="Optimizer.zero_grad#AdamW.zero_grad")) == []


def test_nested_step_ranges_count_a_kernel_once():
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):
        with trace.span("Optimizer.step#GradScaler.step"), trace.span("Optimizer.step#AdamW.step"):
            for _ in range(120):
                trace.kernel(ELEMENTWISE, gpu_us=3, op="aten::mul_")
    (found,) = _tl303(trace)
    assert dict(found.details)["per_tensor_kernels_per_step"] == 120
