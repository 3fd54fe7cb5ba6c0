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
