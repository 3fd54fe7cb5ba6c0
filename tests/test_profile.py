"""tracelint.profile: torch.profiler.profile that times the steps it does not record (CPU torch)."""
from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import time

import pytest

import tracelint
from tracelint.trace.profiler import _copy_with_key, on_trace_ready


def test_import_tracelint_does_not_import_torch():
    code = ("import sys, tracelint; f = tracelint.profile; import tracelint.profile as m; "
            "print('torch' in sys.modules, callable(f), callable(m), f is tracelint.profile)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True", "True", "True"]


@pytest.mark.parametrize(("text", "expected"), [
    ('{"a": 1}', {"tracelint": {"v": 1}, "a": 1}),
    ('  \n{\n  "a": [1, 2]\n}\n', {"tracelint": {"v": 1}, "a": [1, 2]}),
    ("{}", {"tracelint": {"v": 1}}),
    ("{ \n }", {"tracelint": {"v": 1}}),
])
def test_copy_with_key(text, expected):
    dst = io.BytesIO()
    _copy_with_key(io.BytesIO(text.encode()), dst, "tracelint", {"v": 1})
    doc = json.loads(dst.getvalue())
    assert doc == expected and list(doc)[0] == "tracelint"


torch = pytest.importorskip("torch")
CPU = [torch.profiler.ProfilerActivity.CPU]


def _work(a):
    for _ in range(6):
        a = torch.tanh(a @ a)
    return a


def _traces(folder):
    docs = []
    for path in sorted(folder.glob("*.pt.trace.json.gz")):
        with gzip.open(path, "rt") as f:
            docs.append(json.load(f))
    return sorted(docs, key=lambda d: d["tracelint"].get("recording_from_step", 0))


def test_unprofiled_steps_timed_and_stored(tmp_path):
    a = torch.randn(384, 384) / 20
    sched = torch.profiler.schedule(wait=2, warmup=1, active=2, repeat=2)
    handler = on_trace_ready(tmp_path, worker_name="w0", print_verdict=False)
    with tracelint.profile(activities=CPU, schedule=sched, on_trace_ready=handler, record_shapes=True,
                           with_stack=True) as prof:
        for _ in range(13):
            _work(a)
            prof.step()
    first, second = _traces(tmp_path)
    # steps: 0-1 wait (step 0 is never timed), 2 warmup, 3-4 active | 5-6 wait, 7 warmup, 8-9 active | 10-12 none
    assert first["tracelint"]["recording_from_step"] == 3 and second["tracelint"]["recording_from_step"] == 8
    un1, un2 = first["tracelint"]["unprofiled"], second["tracelint"]["unprofiled"]
    assert un1["steps"] == 1 and [(b["first_step"], b["steps"]) for b in un1["blocks"]] == [(1, 1)]
    assert un2["steps"] == 3 and [(b["first_step"], b["steps"]) for b in un2["blocks"]] == [(1, 1), (5, 2)]
    assert un2["blocks"][0] == un1["blocks"][0]  # a block is timed once; each trace carries those before it
    assert un1["step_ms"] == pytest.approx(un1["blocks"][0]["ms"], rel=1e-3)
    assert un2["step_ms"] == pytest.approx(sum(b["ms"] for b in un2["blocks"]) / 3, rel=1e-3)
    assert un1["sync"] == un2["sync"] == "none"  # CPU only: nothing to synchronize
    assert all(b["ms"] > 0 for b in un2["blocks"])  # the step's work was timed, whatever this machine's speed
    settings = second["tracelint"]["settings"]
    assert settings["record_shapes"] and settings["with_stack"] and not settings["profile_memory"]
    assert settings["activities"] == ["CPU"]
    assert settings["schedule"] == {"skip_first": 0, "skip_first_wait": 0, "wait": 2, "warmup": 1, "active": 2,
                                    "repeat": 2}
    assert second["tracelint"]["source"] == "tracelint.profile"


SLEEP_S = 0.05  # a deliberately slow step: time.sleep never returns early, on any machine


def test_a_slow_unprofiled_step_is_measured_slower_than_a_fast_one(tmp_path):
    """Relations that hold on any machine, never a duration: the block whose steps sleep 50 ms each measures at
    least that, and more than the block whose step does no work."""
    sched = torch.profiler.schedule(wait=2, warmup=1, active=1, repeat=2)
    handler = on_trace_ready(tmp_path, worker_name="w0", print_verdict=False)
    with tracelint.profile(activities=CPU, schedule=sched, on_trace_ready=handler) as prof:
        for _ in range(9):
            # steps: 0-1 wait (block 1: step 1, no work), 2 warmup, 3 active | 4-5 wait (block 2: sleeps), 6, 7 | 8
            if prof.step_num in (4, 5):
                time.sleep(SLEEP_S)
            prof.step()
    _, second = _traces(tmp_path)
    fast, slow = second["tracelint"]["unprofiled"]["blocks"]
    assert (fast["first_step"], fast["steps"], slow["first_step"], slow["steps"]) == (1, 1, 4, 2)
    fast_ms, slow_ms = fast["ms"] / fast["steps"], slow["ms"] / slow["steps"]
    assert slow_ms >= SLEEP_S * 1e3 - 0.01  # both sleeps fall inside the block (0.01: the stored rounding)
    assert fast_ms < slow_ms, (fast, slow)


def test_one_sync_per_block_boundary(tmp_path):
    calls = []
    sched = torch.profiler.schedule(wait=3, warmup=1, active=1, repeat=2)
    with tracelint.profile(activities=CPU, schedule=sched, on_trace_ready=lambda p: None) as prof:
        prof._tl_sync = lambda: calls.append(prof.step_num)
        for _ in range(14):
            prof.step()
    # blocks entered at steps 1, 5 and 10 (the last one is never closed) and left before steps 3 and 8
    assert calls == [1, 2, 5, 7, 10]


def test_memory_at_block_boundaries_and_the_peak_stored(tmp_path, monkeypatch):
    """Issue #40: on CUDA the record carries memory_allocated() at each block boundary and the allocator's peak when
    the last block closed; faked here (CPU torch) by a device whose footprint grows 2 MiB per step."""
    from types import SimpleNamespace

    sched = torch.profiler.schedule(wait=3, warmup=1, active=1, repeat=1)
    with tracelint.profile(activities=CPU, schedule=sched, on_trace_ready=lambda p: None) as prof:
        monkeypatch.setattr(type(prof), "_tl_sync_name", property(lambda self: "cuda"))
        prof._tl_sync = lambda: None
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: (100 + 2 * prof.step_num) * 2**20)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 321 * 2**20)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda i: SimpleNamespace(total_memory=80 * 2**30))
        for _ in range(6):
            prof.step()
        record = prof.tracelint_metadata()["unprofiled"]
    # the block of steps 1-2 is entered after step 0 (step_num 1) and left before step 3 (step_num 2 at its close)
    (block,) = record["blocks"]
    assert (block["first_step"], block["steps"], block["allocated_mib"]) == (1, 2, [102.0, 104.0])
    assert record["max_allocated_mib"] == 321.0 and record["device_total_mib"] == 80 * 1024.0


def test_cpu_only_records_no_memory(tmp_path):
    sched = torch.profiler.schedule(wait=2, warmup=1, active=1, repeat=1)
    with tracelint.profile(activities=CPU, schedule=sched, on_trace_ready=lambda p: None) as prof:
        for _ in range(5):
            prof.step()
        record = prof.tracelint_metadata()["unprofiled"]
    assert record["blocks"] and "allocated_mib" not in record["blocks"][0] and "max_allocated_mib" not in record


def test_without_schedule_only_settings(tmp_path):
    path = tmp_path / "t.json"
    with tracelint.profile(activities=CPU, profile_memory=True, on_trace_ready=None) as prof:
        _work(torch.randn(64, 64))
    prof.export_chrome_trace(str(path))
    meta = json.loads(path.read_text())["tracelint"]
    assert "unprofiled" not in meta and meta["settings"]["schedule"] is None and meta["settings"]["profile_memory"]


def test_default_handler_is_tracelints(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sched = torch.profiler.schedule(wait=2, warmup=1, active=1, repeat=1)
    with tracelint.profile(activities=CPU, schedule=sched) as prof:
        for _ in range(5):
            _work(torch.randn(64, 64))
            prof.step()
    (doc,) = _traces(tmp_path / "tracelint_traces")
    assert doc["tracelint"]["unprofiled"]["steps"] == 1
    assert tracelint.profile(activities=CPU, on_trace_ready=None).on_trace_ready is None


def test_plain_profiler_handler_records_settings_only(tmp_path):
    sched = torch.profiler.schedule(wait=2, warmup=1, active=1, repeat=1, skip_first=1)
    handler = on_trace_ready(tmp_path, worker_name="w0", print_verdict=False)
    with torch.profiler.profile(activities=CPU, schedule=sched, on_trace_ready=handler, with_stack=True) as prof:
        for _ in range(6):
            _work(torch.randn(64, 64))
            prof.step()
    (doc,) = _traces(tmp_path)
    meta = doc["tracelint"]
    assert meta["source"] == "tracelint.trace.profiler.on_trace_ready" and "unprofiled" not in meta
    assert meta["settings"]["with_stack"] and meta["settings"]["schedule"]["skip_first"] == 1
    assert "traceEvents" in doc


def test_an_unprofiled_step_slower_than_the_profiled_one_gives_no_inflation_figure():
    """Issue #34: unprofiled steps that held start-up (676 ms against a 6-9 ms step) read as 'profiler_inflation
    0.24×', and TL003 disappeared. A profiled step faster than the unprofiled one measures no inflation: the metric
    is None and TL003 says why the profiler's cost is not measurable here."""
    from tracelint.engine import metrics as M
    from tracelint.testing import TraceBuilder, analyze

    trace = TraceBuilder().device_properties().recorded(unprofiled_step_ms=400.0)
    for _ in trace.steps(3):
        for _ in range(100):
            trace.kernel("void gemm_kernel<float>(float*)", gpu_us=40, op="aten::mm", host_us=90)
    report = analyze(trace)
    assert M.UNPROFILED_STEP_MS.of(report.metrics) == 400.0
    assert M.PROFILER_INFLATION.of(report.metrics) is None
    (tl003,) = [f for f in report.findings if f.code == "TL003"]
    assert "not measurable here" in tl003.message and "400.0 ms" in tl003.message
    assert "profiler_inflation" not in dict(tl003.details)
