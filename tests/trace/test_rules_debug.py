"""TL701 in a trace: autograd's anomaly detection (its NaN check and readback in every backward node), and the
findings it explains away (TL101 on its readbacks, TL501)."""
from __future__ import annotations

import gzip
import json

import pytest

from tracelint.engine import Config
from tracelint.testing import TraceBuilder, analyze
from tracelint.trace import analyze_trace

NODE = "autograd::engine::evaluate_function: AddmmBackward0"
GEMM = "nvjet_sm90_tst_128x128_64x6_1x2_h_bz_NTN"


def _backward(trace, nodes=20, anomaly=True):
    for _ in range(nodes):
        with trace.span(NODE):
            trace.kernel(GEMM, gpu_us=30, op="aten::mm")
            if anomaly:
                with trace.span("aten::isnan"):
                    trace.kernel("void at::native::vectorized_elementwise_kernel<4, ...>", gpu_us=2, op="aten::ne")
                with trace.span("aten::_is_any_true"):
                    trace.kernel("void at::native::reduce_kernel<512, 1, ...>", gpu_us=3, op="aten::any")
                trace.item()


def _codes(trace, **thresholds):
    return [f.code for f in analyze(trace, thresholds=thresholds or None).findings]


def test_reports_the_checks_and_explains_their_readbacks():
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):
        _backward(trace)
    report = analyze(trace)
    (found,) = [f for f in report.findings if f.code == "TL701"]
    assert dict(found.details)["nan_checks_per_step"] == 20
    assert "TL101" not in {f.code for f in report.findings}  # the checks' readbacks are not a user's .item()
    assert found.location.event == NODE


def test_with_tl701_ignored_its_readbacks_read_as_item_again():
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):
        _backward(trace)
    codes = [f.code for f in analyze(trace, config=Config(ignore=("TL701",))).findings]
    assert "TL101" in codes and "TL701" not in codes


def test_a_users_item_beside_the_checks_stays_reported():
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):
        _backward(trace)
        trace.item()  # loss.item(): without stacks it joins the checks' site, which then has more readbacks
    assert {"TL701", "TL101"} <= set(_codes(trace))


def test_silent_without_checks_and_when_only_some_steps_check():
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):
        _backward(trace, anomaly=False)
    assert "TL701" not in _codes(trace)
    trace = TraceBuilder().device_properties()
    for i in trace.steps(4):
        _backward(trace, anomaly=i == 0)  # detect_anomaly() around one step: debugging on purpose
    assert "TL701" not in _codes(trace)
    assert "TL701" in _codes(trace, **{"anomaly-min-steps-pct": 25})


def _fixture(fixture_traces, name):
    path = fixture_traces / f"{name}.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{name} not recorded")
    return path


def test_the_anomaly_fixture(fixture_traces):
    """anomaly_mode: TL701 with the checks counted from the raw events (aten::_is_any_true ops inside the profiled
    steps' time), pointing at the set_detect_anomaly line; the TL101 and TL501 it explains are gone. The fixed twin
    has no TL701 and stays launch-bound (TL501)."""
    path = _fixture(fixture_traces, "anomaly_mode")
    report = analyze_trace(path)
    codes = {f.code for f in report.findings}
    assert "TL701" in codes and not codes & {"TL101", "TL501"}
    (found,) = [f for f in report.findings if f.code == "TL701"]
    with gzip.open(path) as fh:
        events = json.load(fh)["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("ProfilerStep#")]
    checks = [e for e in events if e.get("cat") == "cpu_op" and e.get("name") == "aten::_is_any_true"
              and any(a <= e["ts"] <= b for a, b in steps)]
    details = dict(found.details)
    assert details["nan_checks_per_step"] == len(checks) / len(steps) == 45
    assert 0 < details["check_stall_us_per_step"] < details["check_host_us_per_step"]
    script = (fixture_traces.parent / "scenarios" / "anomaly_mode.py").read_text().splitlines()
    assert "set_detect_anomaly(True)" in script[found.location.source.line - 1]

    fixed = {f.code for f in analyze_trace(_fixture(fixture_traces, "anomaly_mode_fixed")).findings}
    assert "TL701" not in fixed and "TL501" in fixed


# TL702: launches that return only after their kernel (CUDA_LAUNCH_BLOCKING=1)
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, ...>"


def _blocking_step(trace, launches=50, blocking=50):
    """``launches`` launches, the first ``blocking`` of them returning after their 6 µs kernel; the host runs 20 µs of
    ops before each."""
    for i in range(launches):
        start = trace.cpu("aten::empty_strided", 20.0)
        if i < blocking:
            corr = trace.runtime("cudaLaunchKernel", start, 18.0)
            trace.gpu(ELEMENTWISE, start + 8.0, 6.0, corr=corr)
            trace.idle(18.0)
        else:
            trace.kernel(ELEMENTWISE, gpu_us=6.0, host_us=18.0)


def test_blocking_launches_are_named_and_explain_launch_bound():
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):
        _blocking_step(trace)
    report = analyze(trace)
    (found,) = [f for f in report.findings if f.code == "TL702"]
    details = dict(found.details)
    assert details["blocking_launches_per_step"] == details["launches_per_step"] == 50
    assert details["launch_wait_us_per_step"] == pytest.approx(50 * 10.0)  # from the kernel's start to the return
    assert 0 < details["estimated_saving_us_per_step"] <= details["launch_wait_us_per_step"]
    assert "estimate" in found.message and found.location.event == "cudaLaunchKernel"
    assert "TL501" not in {f.code for f in report.findings}
    assert "TL501" in [f.code for f in analyze(trace, config=Config(ignore=("TL702",))).findings]


def test_silent_on_queued_launches_few_blocking_ones_and_few_launches():
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):  # GPU-bound: the launches queue behind a full stream and return long before their kernel
        for _ in range(50):
            trace.kernel(GEMM, gpu_us=400.0, host_us=20.0)
    assert "TL702" not in _codes(trace)
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):  # a few launches block (a pageable copy, a launch at a sync): not the setting
        _blocking_step(trace, blocking=10)
    assert "TL702" not in _codes(trace)
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):  # a handful of launches per step (Triton's example: one): nothing to judge
        _blocking_step(trace, launches=5, blocking=5)
    assert "TL702" not in _codes(trace)
    assert "TL702" in _codes(trace, **{"launch-blocking-min-launches-per-step": 5})


def test_the_launch_blocking_fixture(fixture_traces):
    """launch_blocking (CUDA_LAUNCH_BLOCKING=1 set in the script): TL702 with its launches counted from the raw
    events (a kernel or memset whose launch starts in a step and ends at or after the work), and no TL501. The fixed
    twin has no TL702 and stays launch-bound (TL501)."""
    path = _fixture(fixture_traces, "launch_blocking")
    report = analyze_trace(path)
    codes = {f.code for f in report.findings}
    assert "TL702" in codes and "TL501" not in codes
    (found,) = [f for f in report.findings if f.code == "TL702"]
    with gzip.open(path) as fh:
        events = json.load(fh)["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("ProfilerStep#")]
    calls = {e["args"]["correlation"]: e for e in events
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    launched = [(calls[e["args"]["correlation"]], e) for e in events if e.get("cat") in ("kernel", "gpu_memset")
                and e["args"].get("correlation") in calls]
    launched = [(c, e) for c, e in launched if any(a <= c["ts"] <= b for a, b in steps)]
    blocking = [c for c, e in launched if c["ts"] + c["dur"] >= e["ts"] + e["dur"]]
    details = dict(found.details)
    assert details["launches_per_step"] == len(launched) / len(steps) == 148
    assert details["blocking_launches_per_step"] == len(blocking) / len(steps)
    assert details["gpu_idle_us_per_step"] > 10 * details["gpu_busy_us_per_step"]

    fixed = {f.code for f in analyze_trace(_fixture(fixture_traces, "launch_blocking_fixed")).findings}
    assert "TL702" not in fixed and "TL501" in fixed


def test_launch_blocking_is_silent_on_every_other_trace(fixture_traces, public_traces, multi_gpu_traces):
    """No other trace the project holds has launches that wait for their kernels: GPU-bound ones (gpu_bound,
    matmul_*, gpt_fp32) queue behind a full stream; the syncing readbacks (item_per_step, anomaly_mode) block at a
    copy and a synchronize, not at every launch. The most any step of them has is 2.7 % (HTA's sampled rank 1)."""
    itself = {"launch_blocking.pt.trace.json.gz", "launch_blocking_tlprofile.pt.trace.json.gz"}  # (its twin too)
    paths = [p for p in sorted(fixture_traces.glob("*.json.gz")) if p.name not in itself]
    paths += sorted(public_traces.glob("**/*.json.gz")) + sorted(multi_gpu_traces.glob("**/*.json.gz"))
    assert len(paths) > 40
    fired = [p.name for p in paths if "TL702" in {f.code for f in analyze_trace(p).findings}]
    assert fired == []
