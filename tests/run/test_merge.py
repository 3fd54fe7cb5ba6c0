"""tracelint run's merged report: a lint finding and a trace finding of the same family at the same line become one
finding with both evidences, ordered by measured cost, in every output format (no torch needed)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracelint.engine import Finding, RunResult, Severity, SourceLocation, TraceLocation, TraceSummary
from tracelint.render import formats, render
from tracelint.run.merge import cost_pct, merge

TRAIN = """\
import torch
from torch.utils.data import DataLoader

def main(ds, model, opt):
    loader = DataLoader(ds, batch_size=64)
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        loss = model(x, y)
        loss.backward()
        opt.step()
        print(loss.item())
"""


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


def lint(code: str, line: int, message: str = "lint says so", column: int = 5) -> Finding:
    return Finding(code, Severity.WARNING, message, SourceLocation("train.py", line, column, line, column + 4))


def measured(code: str, line: int | None, severity=Severity.WARNING, rank=None, **details) -> Finding:
    src = SourceLocation(str(Path("train.py").resolve()), line) if line else None  # stacks name absolute paths
    loc = TraceLocation("run/train.1.pt.trace.json.gz", rank=rank, step=7, event="aten::item", source=src)
    return Finding(code, severity, f"the trace measured {code}", loc, details=tuple(details.items()))


def trace(rank=None) -> TraceSummary:
    return TraceSummary("run/train.1.pt.trace.json.gz", "gpu-bound", "GPU busy", {"step_cpu_us_mean": 10_000.0},
                        rank=rank)


def test_same_family_same_line_is_one_finding_with_both_evidences(project):
    out = merge([lint("TL101", 11), lint("TL104", 11), measured("TL101", 11, cost_pct_of_step=2.2)], [trace()])
    assert [f.code for f in out] == ["TL101", "TL104"]  # the print's sync is the same TL1 sync at that line
    for f in out:
        assert f.origin == "source" and f.evidence.trace.code == "TL101" and f.evidence.cost_pct == 2.2
        assert f.evidence.match == "same line" and f.evidence.source.code == f.code
        assert f.evidence.trace.source.path == "train.py"  # shown relative to the working directory


def test_a_loader_finding_pairs_with_the_copies_in_the_loop_over_it(project):
    out = merge([lint("TL202", 5), measured("TL202", 7, pageable_pct_of_window=12.5)], [trace()])
    (f,) = out
    assert f.location.line == 5 and f.evidence.trace.source.line == 7
    assert f.evidence.match == "the loop over `loader`" and f.evidence.cost_pct == 12.5


def _shortened(finding: Finding, path: str) -> Finding:
    """The trace finding with its stack naming the file by a shorter relative path (as on the 4 x H100 run)."""
    from dataclasses import replace

    loc = finding.location
    return replace(finding, location=replace(loc, source=replace(loc.source, path=path)))


def test_a_sync_measured_a_line_off_in_the_same_loop_pairs(project):
    # Python 3.12's profiler gave `total += loss.item()` (line 58) line 57 on the GPU run, and named the script by
    # its base name: the loop's only TL1 lint finding and the TL1 sync measured inside that loop are one problem
    (project / "sub").mkdir()
    (project / "sub" / "step.py").write_text(TRAIN)
    lint_finding = Finding("TL101", Severity.WARNING, "m", SourceLocation("sub/step.py", 11, 15, 11, 26))
    trace_finding = _shortened(measured("TL101", 10, cost_pct_of_step=39.5), "step.py")
    (f,) = merge([lint_finding, trace_finding], [trace()])
    assert f.origin == "source" and f.location.line == 11
    assert f.evidence.match == "the same loop" and f.evidence.cost_pct == 39.5


def test_a_sync_outside_the_loop_is_not_paired_by_it(project):
    out = merge([lint("TL101", 11), measured("TL101", 4, cost_pct_of_step=5.0)], [trace()])
    assert sorted(f.origin for f in out) == ["source", "trace"]  # line 4 is before the loop: two findings


def test_a_loader_finding_pairs_through_a_shorter_path_of_its_file(project):
    (project / "sub").mkdir()
    (project / "sub" / "step.py").write_text(TRAIN)
    lint_finding = Finding("TL202", Severity.WARNING, "m", SourceLocation("sub/step.py", 5, 5, 5, 9))
    (f,) = merge([lint_finding, _shortened(measured("TL202", 7, pageable_pct_of_window=12.5), "step.py")],
                 [trace()])
    assert f.evidence.match == "the loop over `loader`"


def test_the_only_one_of_its_rule_pairs_when_no_loop_links_them(project):
    out = merge([lint("TL202", 2), measured("TL202", 9, pageable_pct_of_window=3.0)], [trace()])
    assert [f.evidence.match for f in out] == ["the only TL202 of the run on each side"]


def test_a_setting_of_the_run_pairs_with_the_step_its_trace_finding_points_at(project):
    # os.environ["CUDA_LAUNCH_BLOCKING"] = "1" at line 2; the trace's blocking launches at a line of the step
    out = merge([lint("TL702", 2), measured("TL702", 9, blocking_launches_per_step=148)], [trace()])
    assert [(f.code, f.evidence.match) for f in out] == [("TL702", "the only TL702 of the run on each side")]
    two = merge([lint("TL701", 2), lint("TL701", 4), measured("TL701", 9)], [trace()])
    assert [f.origin for f in two if f.evidence.trace is not None] == ["trace"]  # two settings: which one is unsaid


def test_ordered_by_measured_cost_then_trace_notes_then_what_the_trace_did_not_see(project):
    findings = [lint("TL301", 3), lint("TL101", 11), lint("TL202", 5),
                measured("TL101", 11, cost_pct_of_step=2.2), measured("TL202", 7, pageable_pct_of_window=12.5),
                measured("TL201", None, gpu_idle_pct=50.0, data_wait_pct_of_idle=10.0),
                measured("TL003", None, profiler_inflation=1.5)]
    out = merge(findings, [trace()])
    assert [(f.code, f.evidence.cost_pct) for f in out] == [
        ("TL202", 12.5), ("TL201", 5.0), ("TL101", 2.2), ("TL003", None), ("TL301", None)]
    assert out[-1].evidence.trace is None and out[-1].evidence.source is not None  # not seen, marked so
    assert out[1].evidence.source is None and out[1].origin == "trace"  # a trace finding nothing paired


def test_nothing_is_called_unseen_where_nothing_could_be_seen(project):
    """Issue #34: with no trace (nothing recorded) or only traces without GPU work (a CPU run), every lint finding
    said 'not seen in the profiled steps'. They keep no evidence there; a trace that says nothing of its GPU (no
    gpu_events metric) still could have seen them."""
    cpu = TraceSummary("run/train.1.pt.trace.json.gz", "unknown", "no GPU activity", {"gpu_events": 0})
    for traces in ([], [cpu], [cpu, cpu]):
        (f,) = merge([lint("TL101", 11)], traces)
        assert f.evidence is None and f.origin == "source"
    (f,) = merge([lint("TL101", 11)], [cpu, trace()])
    assert f.evidence is not None and f.evidence.trace is None  # one trace with GPU work: not seen there


def test_the_measurement_decides_the_severity(project):
    harmless = measured("TL101", 11, severity=Severity.INFO, cost_pct_of_step=0.2)
    (f,) = merge([lint("TL101", 11), harmless], [trace()])
    assert f.severity == Severity.INFO and f.message == "lint says so"


def test_the_costliest_rank_is_the_evidence(project):
    ranks = [measured("TL101", 11, rank=0, cost_pct_of_step=1.0), measured("TL101", 11, rank=1, cost_pct_of_step=4.0)]
    (f,) = merge([lint("TL101", 11), *ranks], [trace(0), trace(1)])
    assert f.evidence.trace.location.rank == 1 and f.evidence.cost_pct == 4.0


def test_a_truth_value_test_pairs_with_its_lint_finding_on_the_recorded_trace(fixture_traces, monkeypatch):
    """The H200 fixture scalar_test_per_step: `if loss > LOSS_LIMIT:` linted as TL103 and measured as TL103 at the
    same line is one finding with the trace's cost. The trace called it TL101 at the function's `.item()` line (the
    loss printed after the loop) and the lint finding was 'not seen in the profiled steps'."""
    from tracelint.dispatch import run_paths

    repo = fixture_traces.parent.parent
    monkeypatch.chdir(repo)
    result = run_paths(["fixtures/scenarios/scalar_test_per_step.py",
                        "fixtures/traces/scalar_test_per_step.pt.trace.json.gz"], jobs=1)
    (f,) = merge(result.findings, result.traces, repo)
    assert f.code == "TL103" and f.origin == "source" and f.location.line == 56
    assert f.evidence.match == "same line" and f.evidence.trace.code == "TL103"
    assert f.evidence.cost_pct == dict(f.evidence.trace.details)["cost_pct_of_step"] > 5


def test_cost_of_a_time_per_step_is_over_the_trace_step():
    fill = measured("TL301", None, fill_gpu_us_per_step=500.0)
    assert cost_pct(fill, 10_000.0) == 5.0 and cost_pct(fill, None) is None
    assert cost_pct(measured("TL002", None), 10_000.0) is None


def _result(project) -> RunResult:
    findings = merge([lint("TL101", 11, "`loss.item()` in the loop over `loader` syncs"), lint("TL301", 3),
                      measured("TL101", 11, cost_pct_of_step=2.2, syncs_per_step=1.0)], [trace()])
    verified = {"status": "confirmed", "speedup": 1.25, "baseline_ms": 30.9, "fixed_ms": 24.7, "ci95": [1.2, 1.3]}
    findings[0] = Finding(**{**{k: getattr(findings[0], k) for k in ("code", "severity", "message", "location",
                                                                      "fix", "evidence")},
                             "details": (("verification", verified),)})
    return RunResult(findings=findings, traces=[trace()], files_checked=1,
                     run={"summary": ["tracelint run: train.py: 15 steps (a step is an optimizer step)"]})


def test_text_shows_the_trace_evidence_and_the_measured_fix(project):
    text = render(_result(project), "text")
    lines = text.splitlines()
    assert lines[0] == "tracelint run: train.py: 15 steps (a step is an optimizer step)"
    i = next(i for i, line in enumerate(lines) if line.startswith("train.py:11:5: TL101"))
    assert lines[i + 1] == ("  trace (2.2 % of the step): the trace measured TL101 "
                            "(run/train.1.pt.trace.json.gz, step 7)")
    assert lines[i + 2] == "    = cost_pct_of_step: 2.2%, syncs_per_step: 1"
    assert lines[i + 3] == "  verify: confirmed, 1.25× (CI 1.20–1.30; 30.90 → 24.70 ms/step)"
    j = next(i for i, line in enumerate(lines) if line.startswith("train.py:3:5: TL301"))
    assert lines[j + 1] == "  not seen in the profiled steps"


def test_json_has_one_finding_with_a_source_and_a_trace_evidence(project):
    doc = json.loads(render(_result(project), "json"))
    first, second = doc["findings"]
    assert first["origin"] == "source" and first["line"] == 11
    evidence = first["evidence"]
    assert evidence["source"]["code"] == "TL101" and evidence["source"]["line"] == 11
    assert evidence["trace"]["origin"] == "trace" and evidence["trace"]["source"] == {"path": "train.py", "line": 11}
    assert evidence["cost_pct_of_step"] == 2.2 and evidence["in_profiled_steps"] is True
    assert first["details"]["verification"]["speedup"] == 1.25
    assert second["evidence"]["trace"] is None and second["evidence"]["in_profiled_steps"] is False
    assert doc["run"]["summary"]


@pytest.mark.parametrize("fmt", ["html", "sarif", "github", "gitlab", "markdown"])
def test_every_format_carries_the_merged_evidence(project, fmt):
    assert fmt in formats()
    text = render(_result(project), fmt).replace("%25", "%")  # github escapes % in a workflow command
    assert "2.2 % of the step" in text and "not seen in the profiled steps" in text
    if fmt == "sarif":
        result = json.loads(text)["runs"][0]["results"][0]
        assert result["properties"]["evidence"]["trace"]["code"] == "TL101"
        assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == 11


def test_a_merged_finding_carries_its_fix_estimate_and_the_largest_gain_comes_first(project):
    """Issue #38: the trace finding's estimate goes to the finding it is merged into, and the run's list puts the
    fix that buys the largest share of its step first, even where another finding's measured cost is higher."""
    from dataclasses import replace

    from tracelint.engine import Estimate

    sync = replace(measured("TL101", 11, cost_pct_of_step=30.0), estimate=Estimate(1.0, 10.0, "sync basis"))
    loader = replace(measured("TL201", 7, gpu_idle_pct=50.0, data_wait_pct_of_idle=40.0),
                     estimate=Estimate(4.0, 10.0, "loader basis"))
    out = merge([lint("TL101", 11), lint("TL201", 7)], [trace()])
    assert all(f.estimate is None for f in out)
    out = merge([lint("TL101", 11), lint("TL201", 7), sync, loader], [trace()])
    assert [f.code for f in out][:2] == ["TL201", "TL101"]  # 40 % of the step before 10 %, its cost 20 % < 30 %
    assert out[0].estimate.basis == "loader basis" and out[1].estimate.basis == "sync basis"
