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
