"""``verify --trace``: a few steps profiled after the timed blocks, analyzed, and shown before → after."""
from __future__ import annotations

import gzip
import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from tests.verify.conftest import CPU, SCRIPTS, report, synthetic
from tracelint.cli.verify import verify_cmd
from tracelint.verify.harness import TRACE_ACTIVE, TRACE_WARMUP, Clock, StopRun
from tracelint.verify.harness_control import TRACE_FILE, RunSettings, _outcome, run_once
from tracelint.verify.tracing import TraceResult, analyze

PROFILED = TRACE_WARMUP + TRACE_ACTIVE


class FakeTracer:
    def __init__(self, fail_at: int | None = None) -> None:
        self.path, self.fail_at = "/tmp/x.pt.trace.json.gz", fail_at
        self.started, self.steps = False, 0

    def start(self) -> None:
        self.started = True

    def step(self) -> bool:
        self.steps += 1
        if self.steps == self.fail_at:
            raise RuntimeError("profiler broke\nsecond line")
        return self.steps >= PROFILED


def traced_clock(tracer):
    events, written = [], []
    clock = Clock(warmup=1, steps=2, blocks=2, sync=lambda: events.append("sync"), write=written.append,
                  tracer=tracer)
    return clock, events, written


def test_clock_times_the_blocks_first_then_profiles_outside_them():
    tracer = FakeTracer()
    clock, events, written = traced_clock(tracer)
    opt = object()
    for _ in range(1 + 2 * 2):
        clock.optimizer_step(opt)
    # The timing is written (ok) before the profiler starts: the timed blocks never run under it.
    assert tracer.started and tracer.steps == 0
    assert written[-1]["status"] == "ok" and written[-1]["trace"]["status"] == "running"
    assert len(written[-1]["block_ms"]) == 2
    syncs = len(events)
    for _ in range(PROFILED - 1):
        clock.optimizer_step(opt)
    with pytest.raises(StopRun):
        clock.optimizer_step(opt)
    assert len(events) == syncs  # no synchronize while profiling
    assert written[-1]["status"] == "ok" and written[-1]["trace"] == {"status": "ok", "file": tracer.path,
                                                                       "reason": None}
    assert written[-1]["ticks"] == 1 + 2 * 2 + PROFILED


def test_a_profiler_failure_keeps_the_timing():
    clock, _, written = traced_clock(FakeTracer(fail_at=2))
    opt = object()
    with pytest.raises(StopRun):
        for _ in range(20):
            clock.optimizer_step(opt)
    result = written[-1]
    assert result["status"] == "ok" and len(result["block_ms"]) == 2
    assert result["trace"]["status"] == "failed" and "RuntimeError: profiler broke" in result["trace"]["reason"]


def test_a_timeout_while_profiling_keeps_the_timing():
    data = {"status": "ok", "block_ms": [1.0, 1.1], "losses": [], "ticks": 6,
            "trace": {"status": "running", "file": None, "reason": None}}
    outcome = _outcome(data, None, True, "", 3.0, CPU)
    assert outcome.ok and outcome.block_ms == (1.0, 1.1)
    assert not outcome.trace.ok and "timed out" in outcome.trace.error
    assert outcome.trace.summary().startswith("failed (timed out")
    # Without --trace a timeout still fails the run, as before.
    assert not _outcome({k: v for k, v in data.items() if k != "trace"}, None, True, "", 3.0, CPU).ok


def test_an_unreadable_trace_is_a_failed_trace_not_an_exception(tmp_path):
    bad = tmp_path / TRACE_FILE
    bad.write_bytes(gzip.compress(b"{not json"))
    result = analyze(TraceResult(file=str(bad)))
    assert not result.ok and result.error.startswith("analyzing the trace:")
    assert result.to_dict()["status"] == "failed"
    missing = analyze(TraceResult(file=str(tmp_path / "absent.json.gz")))
    assert not missing.ok


def with_traces(before: TraceResult, after: TraceResult):
    v = synthetic()
    runs = (replace(v.baseline_runs[0], trace=before), *v.baseline_runs[1:])
    rows = tuple(replace(r, outcome=replace(r.outcome, trace=after)) for r in v.rows)
    return replace(v, settings=replace(v.settings, trace=True), baseline_runs=runs, rows=rows)


def test_text_and_json_show_the_verdict_before_and_after():
    before = TraceResult("b.json.gz", "input-bound", "input-bound: the GPU idles 55% ...",
                         {"gpu_busy_pct": 45.2, "h2d_pct_of_gpu_busy": 30.0})
    after = TraceResult("a.json.gz", "gpu-bound", "gpu-bound: GPU busy 99% ...",
                        {"gpu_busy_pct": 99.1, "h2d_pct_of_gpu_busy": 2.5})
    v = with_traces(before, after)
    text = report([v])
    assert ("TL202:12: trace: input-bound (GPU busy 45%; HtoD copies 30% of busy) → "
            "gpu-bound (GPU busy 99%; HtoD copies 2.5% of busy)") in text
    # The table itself carries the verdict before → after, in the row of the fix it belongs to.
    row = next(line for line in text.splitlines() if line.startswith("train.py:12"))
    assert "trace before → after" in text and row.rstrip().endswith("confirmed  input-bound → gpu-bound")
    doc = json.loads(report([v], "json"))["verify"][0]
    assert doc["baseline"]["trace"]["verdict"] == "input-bound"
    # Each measured fix carries both reports: the baseline's (before) and its own (after).
    assert doc["variants"][0]["verification"]["trace_before"] == doc["baseline"]["trace"]
    assert doc["baseline"]["trace"]["metrics"]["gpu_busy_pct"] == 45.2
    (tl202, bf16) = doc["variants"]
    assert tl202["verification"]["trace"] == {
        "status": "ok", "verdict": "gpu-bound", "evidence": "gpu-bound: GPU busy 99% ...", "file": "a.json.gz",
        "metrics": {**dict.fromkeys(tl202["verification"]["trace"]["metrics"]), "gpu_busy_pct": 99.1,
                    "h2d_pct_of_gpu_busy": 2.5}}
    # The bf16 run failed: it has no timing, hence no profile either.
    failed = json.loads(report([with_traces(before, TraceResult(error="boom"))], "json"))["verify"][0]
    assert failed["variants"][0]["verification"]["trace"] == {"status": "failed", "reason": "boom", "file": None}


def test_without_trace_the_report_is_unchanged():
    v = synthetic()
    assert "trace:" not in report([v]) and "trace analysis" not in report([v])
    doc = json.loads(report([v], "json"))["verify"][0]
    assert "trace" not in doc["baseline"] and "trace" not in doc["variants"][0]["verification"]


def test_a_real_cpu_run_writes_and_analyzes_a_trace(tmp_path):
    pytest.importorskip("torch")
    script = SCRIPTS / "one_fix.py"
    outcome = run_once(script, script, [], CPU, tmp_path, trace=True)
    assert outcome.ok, outcome.reason + outcome.stderr_tail
    assert len(outcome.block_ms) == CPU.blocks
    trace_file = tmp_path / TRACE_FILE
    assert outcome.trace == TraceResult(file=str(trace_file)) and trace_file.stat().st_size > 0
    with gzip.open(trace_file, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    assert sum(1 for e in events if str(e.get("name", "")).startswith("ProfilerStep#")) == TRACE_ACTIVE
    result = analyze(outcome.trace)
    assert result.ok and result.verdict == "unknown" and "no GPU activity" in result.evidence
    assert result.metrics.get("has_steps") is True
    ticks = CPU.warmup + CPU.resume_warmup + CPU.steps * CPU.blocks  # warm-up, one turn of blocks
    assert json.loads((tmp_path / "result.json").read_text())["ticks"] == ticks + PROFILED


def test_a_script_that_ends_while_profiled_keeps_its_timing(tmp_path):
    pytest.importorskip("torch")
    script = SCRIPTS / "short.py"  # 7 steps: 1 + 2 x 2 timed, then 2 of the profiled steps
    settings = RunSettings(warmup=1, steps=2, blocks=2, device="cpu", timeout_s=120, resume_warmup=0)
    outcome = run_once(script, script, [], settings, tmp_path, trace=True)
    assert outcome.ok, outcome.reason + outcome.stderr_tail
    assert not outcome.trace.ok and "ended 2 step(s) into profiling" in outcome.trace.error


def test_cli_trace_end_to_end_on_the_cpu(tmp_path):
    pytest.importorskip("torch")
    args = [str(SCRIPTS / "one_fix.py"), "--device", "cpu", "--warmup", "2", "--steps", "3", "--blocks", "2",
            "--precision", "none", "--budget", "2", "--trace", "--keep", str(tmp_path)]
    text = CliRunner().invoke(verify_cmd, args)
    assert text.exit_code == 0, text.output
    assert "TL301:12: trace: unknown: no GPU activity in the trace (CPU-only profile) → unknown: no GPU" in text.output
    # profiled once, after its last block: in the last of the 3 pairs of processes
    assert (tmp_path / "runs" / "baseline-2" / TRACE_FILE).is_file()
    assert (tmp_path / "runs" / "01-TL301_12-2" / TRACE_FILE).is_file()
    assert not (tmp_path / "runs" / "baseline" / TRACE_FILE).exists()
    assert "trace before → after" in text.output and "unknown → unknown" in text.output  # the table's column
    out = tmp_path / "report.json"
    done = CliRunner().invoke(verify_cmd, [*args, "--format", "json", "-o", str(out)])
    assert done.exit_code == 0, done.output
    doc = json.loads(out.read_text())["verify"][0]
    assert doc["baseline"]["trace"]["verdict"] == "unknown"
    (variant,) = doc["variants"]
    assert variant["verification"]["trace"]["status"] == "ok"
    assert variant["verification"]["trace"]["evidence"].startswith("unknown: no GPU activity")
