"""``tracelint run --verify``: which merged findings are measured (those of the script that cost at least
--verify-min-pct of the step), and the measurement landing on the same finding (verify's harness on the CPU: the
wiring, not a timing claim)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tracelint.engine import Evidence, Finding, RunResult, Severity, SourceLocation, TraceLocation
from tracelint.render import render
from tracelint.run.launch import Execution, RunOptions, Target
from tracelint.run.measured import candidates, verify_measured

SCRIPT = """\
import sys

import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(16, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 16, device=device)
total = 0.0
for step in range(int(sys.argv[1])):
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    total += loss.item()
"""


def merged(path: str, line: int, cost: float | None, code: str = "TL101") -> Finding:
    lint = Finding(code, Severity.WARNING, "`loss.item()` syncs", SourceLocation(path, line, 5, line, 16))
    trace = Finding(code, Severity.WARNING, "syncs", TraceLocation("t.json.gz", step=3, source=SourceLocation(path,
                                                                                                          line)))
    return replace(lint, evidence=Evidence(lint, trace, cost, "same line"))


def test_the_merged_findings_of_the_script_over_the_threshold_are_chosen(tmp_path):
    script = tmp_path / "train.py"
    chosen = merged("train.py", 16, 2.5)
    findings = [chosen, merged("train.py", 20, 0.4), merged("helpers.py", 3, 9.0), merged("train.py", 22, None)]
    lint_only = Finding("TL202", Severity.WARNING, "pageable", SourceLocation("train.py", 8, 1))
    findings.append(replace(lint_only, evidence=Evidence(lint_only, None)))
    assert candidates(findings, script, 1.0, tmp_path) == [chosen]
    assert len(candidates(findings, script, 0.0, tmp_path)) == 2  # measured ones only: never an unmeasured cost


def test_nothing_to_verify_is_said_in_the_report(tmp_path):
    result = RunResult(findings=[merged("train.py", 16, 0.3)], run={"summary": ["tracelint run: train.py"]})
    (tmp_path / "train.py").write_text(SCRIPT)
    execution = Execution(Target("script", str(tmp_path / "train.py")), RunOptions(), tmp_path, 0)
    from tracelint.verify import RunSettings

    verify_measured(result, execution, RunSettings(device="cpu"), 1.0, cwd=tmp_path)
    assert result.run["verify"]["selected"] == [] and "nothing to measure" in result.run["verify"]["note"]
    assert result.run["summary"][-1].startswith("  verify: nothing to measure")


def test_a_module_or_torchrun_run_is_not_verified(tmp_path):
    result = RunResult(findings=[merged("train.py", 16, 5.0)], run={"summary": []})
    execution = Execution(Target("module", "pkg.train"), RunOptions(), tmp_path, 0)
    from tracelint.verify import RunSettings

    verify_measured(result, execution, RunSettings(device="cpu"), 1.0, cwd=tmp_path)
    assert "not -m or torchrun" in result.run["verify"]["note"]


@pytest.mark.slow
def test_the_measured_fix_lands_on_the_merged_finding(tmp_path):
    pytest.importorskip("torch")
    from tracelint.source import lint_paths
    from tracelint.verify import RunSettings

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    (lint,) = [f for f in lint_paths([script]) if isinstance(f, Finding)]
    assert lint.code == "TL101" and lint.location.line == 16
    trace = Finding("TL101", Severity.WARNING, "syncs", TraceLocation("t.json.gz", step=3,
                                                                      source=SourceLocation(str(script), 16)))
    finding = replace(lint, evidence=Evidence(lint, trace, 4.0, "same line"))
    result = RunResult(findings=[finding], run={"summary": ["tracelint run: train.py"]})
    execution = Execution(Target("script", str(script), ("100000",)), RunOptions(), tmp_path, 0)
    settings = RunSettings(warmup=2, steps=3, blocks=3, device="cpu", timeout_s=120, budget_s=1)
    verify_measured(result, execution, settings, 1.0, cwd=tmp_path)
    (measured,) = result.findings
    verification = dict(measured.details)["verification"]
    assert verification["speedup"] is not None and verification["device_type"] == "cpu", verification
    assert measured.evidence.cost_pct == 4.0  # source line, measured cost, measured fix: one finding
    record = result.run["verify"]
    assert record["selected"] == ["TL101:16"] and record["measured"] == 1 and record["baseline_ms"] > 0
    text = render(result, "text")
    assert "  verify: " in text and "trace (4.0 % of the step)" in text
    assert Path(script).read_text() == SCRIPT  # the user's file is never written
