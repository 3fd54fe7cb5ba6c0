"""The text report: the verdict first, one block per trace and rank, ruff-style finding lines and closing line."""
from __future__ import annotations

import math

import pytest

from tracelint.engine import RunResult, Severity
from tracelint.engine.display import format_metric
from tracelint.render import render
from tracelint.render.text import ordered_metrics
from tracelint.render.text import render as render_text

from .conftest import EVIDENCE, source_finding, summary, trace_finding


def test_first_line_is_the_verdict_with_its_evidence(full_result):
    first = render_text(full_result, color=False).splitlines()[0]
    assert first == f"input-bound: {EVIDENCE}"


def test_verdict_without_evidence_stands_alone():
    assert render_text(RunResult(traces=[summary(evidence="")]), color=False).splitlines()[0] == "input-bound"


def test_trace_block_shows_metrics_important_first(full_result):
    text = render_text(full_result, color=False, verbose=True)
    block = text.split("\n\n")[1].splitlines()
    assert block[0] == "trace.json.gz (rank 0): input-bound"
    assert block[1].split()[:2] == ["gpu_busy_pct", "18.6%"]
    assert "3 GiB" in text and "12.5 µs" in text and "14.2 ms" in text and "12,345" in text
    assert "idle_by_cause.kernel_wait_pct" in text  # nested metrics flattened
    assert "note: trace ends early" in text


def test_trace_findings_sit_under_their_block_with_the_source_line(full_result):
    lines = render_text(full_result, color=False).splitlines()
    i = lines.index("trace.json.gz (rank 0, step 12): TL202 warning pageable HtoD copies: 1.2 GiB per step")
    assert lines[i + 1] == "  --> train.py:30"
    assert lines[i + 2].startswith("  = pageable_bytes: 1.21 GiB, copies: 300, ratio: inf")
    assert "trace.json.gz (rank 0): TL202 warning pageable HtoD copies: 1.2 GiB per step" in lines
    assert lines.index("trace.json.gz (rank 0, step 12): TL202 warning pageable HtoD copies: 1.2 GiB per step") < \
        lines.index("train.py:42:9: TL101 warning [*] `.item()` syncs the GPU every step")


def test_source_finding_lines_and_closing_line(full_result):
    lines = render_text(full_result, color=False).splitlines()
    assert "train.py:42:9: TL101 warning [*] `.item()` syncs the GPU every step" in lines
    assert "nb.ipynb:cell 3:4:3: TL104 warning print of a device tensor syncs" in lines
    assert lines[-1] == "Found 4 findings (1 fixable with --fix)."


def test_no_verdict_line_without_traces():
    text = render_text(RunResult(findings=[source_finding(fix_safe=None)]), color=False)
    assert text == "train.py:42:9: TL101 warning `.item()` syncs the GPU every step\n\nFound 1 finding.\n"


def test_all_checks_passed():
    assert render_text(RunResult(files_checked=3), color=False) == "All checks passed.\n"


def test_errors_without_findings_do_not_claim_success():
    from tracelint.engine import InputError

    text = render_text(RunResult(errors=[InputError("x.py", "cannot decode")]), color=False)
    assert "All checks passed" not in text and "1 input could not be read" in text


def test_fixed_and_unsafe_fix_counts():
    result = RunResult(findings=[source_finding(fix_safe=False)], fixed=2, resolved=2)
    assert render_text(result, color=False).splitlines()[-1] == (
        "Found 3 findings (2 fixed, 1 remaining). (1 hidden fix can be enabled with --unsafe-fixes.)")


def test_multi_rank_blocks_and_summary():
    traces = [summary(0, busy=80.0, evidence="rank0 evidence"), summary(1, busy=40.0, evidence="rank1 evidence"),
              summary(2, verdict="gpu-bound", busy=99.0, evidence="busy")]
    findings = [trace_finding(rank=1), trace_finding(rank=2, step=3)]
    lines = render_text(RunResult(findings=findings, traces=traces), color=False).splitlines()
    assert lines[0] == "mixed verdicts across 3 ranks: input-bound on rank 0, rank 1; gpu-bound on rank 2"
    headers = [line for line in lines if line.startswith("trace.json.gz (rank ") and line.endswith("-bound")]
    assert headers == ["trace.json.gz (rank 0): input-bound", "trace.json.gz (rank 1): input-bound",
                       "trace.json.gz (rank 2): gpu-bound"]
    # each rank's finding sits in its own block
    assert lines.index("trace.json.gz (rank 1): input-bound") < \
        lines.index("trace.json.gz (rank 1, step 12): TL202 warning pageable HtoD copies: 1.2 GiB per step") < \
        lines.index("trace.json.gz (rank 2): gpu-bound")
    assert "3 traces: input-bound ×2, gpu-bound ×1; gpu_busy_pct 40.0% (rank 1) to 99.0% (rank 2)" in lines


def test_shared_verdict_names_the_least_busy_rank():
    traces = [summary(0, busy=80.0, evidence="e0"), summary(1, busy=40.0, evidence="e1")]
    first = render_text(RunResult(traces=traces), color=False).splitlines()[0]
    assert first == "input-bound on both ranks: e1 (rank 1)"  # was 'on all 2 ranks'
    traces.append(summary(2, busy=60.0, evidence="e2"))
    first = render_text(RunResult(traces=traces), color=False).splitlines()[0]
    assert first == "input-bound on all 3 ranks: e1 (rank 1)"


def test_color_only_when_asked(full_result, monkeypatch):
    assert "\x1b[" in render_text(full_result, color=True)
    assert "\x1b[" not in render_text(full_result, color=False)
    # The dispatcher decides from the terminal and NO_COLOR: pytest's captured stdout is not a TTY.
    assert "\x1b[" not in render(full_result, "text")

    class FakeTTY:
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stdout", FakeTTY())
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert "\x1b[" in render(full_result, "text")
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in render(full_result, "text")


@pytest.mark.parametrize(("key", "value", "shown"), [
    ("gpu_busy_pct", 81.234, "81.2%"),
    ("h2d_pct_of_gpu_busy", 3, "3.0%"),
    ("peak_memory_bytes", 512, "512 B"),
    ("peak_memory_bytes", 1.5 * 2**20, "1.50 MiB"),
    ("peak_memory_bytes", 80 * 2**30, "80 GiB"),
    ("peak_memory_bytes", 80.5 * 2**30, "80.5 GiB"),
    ("mean_kernel_us", 812.0, "812 µs"),
    ("step_time_us", 48_000.0, "48 ms"),
    ("step_time_us", 48_300.0, "48.3 ms"),
    ("idle_us", 0.0, "0 µs"),
    ("dtoh_per_step", 4.0, "4"),
    ("wall_time_us", 2.5e6, "2.50 s"),
    ("wait_ms", 12.5, "12.5 ms"),
    ("kernels", 1234567, "1,234,567"),
    ("ratio", 0.123456, "0.12"),
    ("gpu_busy_pct", math.nan, "n/a"),
    ("gpu_busy_pct", math.inf, "inf"),
    ("anything", None, "n/a"),
    ("has_steps", True, "yes"),
    ("device_name", "NVIDIA H200", "NVIDIA H200"),
])
def test_metric_formatting(key, value, shown):
    assert format_metric(key, value) == shown


def test_metric_units_come_from_the_registry():
    assert format_metric("h2d_pct_of_gpu_busy", 12.34) == "12.3%"
    assert format_metric("steps", 3) == "3"  # declared a count, whatever its name
    assert format_metric("stall_us_each", 11_700.0) == "11.7 ms"  # a finding detail: its unit by its name
    assert format_metric("busy", 5) == "5"  # "us" inside a word is not a unit


def test_metrics_in_registry_order_then_the_analyzer_order():
    keys = [k for k, _ in ordered_metrics({"zeta": 1, "alpha": 2, "peak_memory_bytes": 3, "gpu_busy_pct": 4})]
    assert keys == ["gpu_busy_pct", "peak_memory_bytes", "zeta", "alpha"]


def test_time_and_share_share_a_row_and_none_is_left_out():
    rows = dict(ordered_metrics({"idle_host_sync_us": 607_000.0, "idle_host_sync_pct": 93.2, "device_name": None}))
    assert rows == {"idle_host_sync_pct": "93.2% (607 ms)"}


def test_per_rank_verdicts_are_tallied():
    verdicts = {r: ("input-bound" if r % 4 else "gpu-bound") for r in range(8)}
    assert dict(ordered_metrics({"verdicts": verdicts}))["verdicts"] == "input-bound ×6, gpu-bound ×2"


def test_severity_colors_differ():
    out = {s: render_text(RunResult(findings=[source_finding(severity=s)]), color=True) for s in Severity}
    assert len(set(out.values())) == 3


def test_rank_summary_of_a_job_directory_gives_the_headline():
    from tracelint.engine import TraceSummary

    ranks = [summary(r, path=f"job/rank{r}.json.gz", evidence=f"input-bound: rank {r} waits") for r in range(2)]
    overall = TraceSummary("job", "input-bound", "input-bound: slowest of 2 ranks is rank 1 (40 ms per step)",
                           {"ranks": 2, "slowest_rank": 1, "verdicts": {0: "input-bound", 1: "input-bound"}})
    lines = render_text(RunResult(traces=[*ranks, overall]), color=False, verbose=True).splitlines()
    assert lines[0] == "input-bound: slowest of 2 ranks is rank 1 (40 ms per step)"  # the verdict word once
    assert "job/rank0.json.gz (rank 0): input-bound" in lines and "job/rank1.json.gz (rank 1): input-bound" in lines
    assert "  rank 1 waits" in lines
    assert lines.index("job: input-bound") > lines.index("job/rank1.json.gz (rank 1): input-bound")
    assert any(line.split()[:2] == ["verdicts", "0:"] for line in lines)


def test_a_run_whose_script_failed_does_not_say_all_checks_passed():
    # Seen trying the tool as a new user (#34): `tracelint run fails.py`, a script that died on an import error
    # after starting, printed 'All checks passed.' above 'error: the script failed: ...'.
    failed = {"summary": ["tracelint run: fails.py: 0 steps"], "failure": "ModuleNotFoundError: No module named 'x'"}
    text = render_text(RunResult(files_checked=1, run=failed))
    assert "All checks passed" not in text
    assert text.rstrip().splitlines()[-1] == "No findings in the code; the script failed, so nothing was measured."
    ran = {"summary": ["tracelint run: ok.py: 30 steps"], "failure": None}
    assert render_text(RunResult(files_checked=1, run=ran)).rstrip().endswith("All checks passed.")
