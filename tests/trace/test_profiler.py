"""The on_trace_ready handler with a real (CPU) torch.profiler run."""
from __future__ import annotations

import io

import pytest

from tracelint.trace import analyze_trace
from tracelint.trace.profiler import on_trace_ready

torch = pytest.importorskip("torch")


def test_handler_writes_trace_and_prints_verdict(tmp_path):
    out = io.StringIO()
    handler = on_trace_ready(tmp_path / "traces", worker_name="w0", stream=out)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule,
                                on_trace_ready=handler) as prof:
        for _ in range(5):
            loss = model(torch.randn(32, 64)).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            prof.step()
    files = list((tmp_path / "traces").glob("w0.*.pt.trace.json.gz"))
    assert len(files) == 1
    assert "unknown: no GPU activity" in out.getvalue()
    assert files[0].name in out.getvalue()
    report = analyze_trace(files[0])
    assert report.metrics["has_steps"] and report.metrics["steps"] == 2
    assert report.metrics["breakdown_backward_us"] > 0 and report.metrics["breakdown_optimizer_us"] > 0


def _recording(trace):
    from tracelint.trace.build import build_model
    from tracelint.trace.recording import recording_of

    return recording_of(build_model([trace.to_dict()["traceEvents"]], lambda: trace.meta))


def _traced(**recorded):
    from tracelint.testing import TraceBuilder

    trace = TraceBuilder().device_properties().recorded(**recorded)
    for _ in trace.steps(2):
        trace.kernel("void at::native::vectorized_elementwise_kernel<4, ...>", gpu_us=40, op="aten::add", host_us=20)
    return trace


def test_recording_distributed():
    """Recording.distributed: tracelint.profile's per-rank record, its fixed keys checked; the report's profiler
    object carries it without the per-block values."""
    from tracelint.testing import analyze

    record = {"rank": 1, "world_size": 2, "step_ms": 60, "wait_ms": 0.4, "method": "flight_recorder_timing",
              "comm_ms": 1.1, "groups": {"0": {"ranks": [0, 1], "wait_ms": 0.4}}, "blocks": [{"steps": 7}]}
    found = _recording(_traced(unprofiled_step_ms=60.0, distributed=record)).distributed
    assert found["rank"] == 1 and found["world_size"] == 2 and found["method"] == "flight_recorder_timing"
    assert found["step_ms"] == 60.0 and isinstance(found["step_ms"], float) and found["wait_ms"] == 0.4
    assert found["groups"]["0"]["ranks"] == [0, 1] and found["blocks"] == [{"steps": 7}]
    shown = analyze(_traced(distributed=record)).summaries[0].profiler["distributed"]
    assert shown["wait_ms"] == 0.4 and "blocks" not in shown and "version" not in shown
    assert _recording(_traced(unprofiled_step_ms=60.0)).distributed is None
    assert analyze(_traced()).summaries[0].profiler["distributed"] is None
    for bad in ({"wait_ms": None}, {"wait_ms": -1.0}, {"step_ms": float("nan")}, {"rank": 2}, {"rank": True},
                {"method": None}, {"world_size": "2"}):
        assert _recording(_traced(distributed={**record, **bad})).distributed is None, bad
