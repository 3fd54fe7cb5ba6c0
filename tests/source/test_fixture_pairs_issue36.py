"""Issue #36's GPU fixture pairs of the source rules TL304 (evaluation with autograd on) and TL406 (conv net without
cudnn.benchmark): each rule fires once on its bad scenario, at the line a user would change, and not on the fixed
twin, which adds no finding of its own; the recorded manifest names the rule the pair is about."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracelint.engine import Finding
from tracelint.source import lint_paths

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _findings(name: str) -> list[Finding]:
    return [f for f in lint_paths([FIXTURES / "scenarios" / f"{name}.py"]) if isinstance(f, Finding)]


@pytest.mark.parametrize("code, bad, text", [
    ("TL304", "eval_autograd", "logits = model(images)"),
    # reported at the conv net's first construction in the file: the first BasicBlock(...) of ResNet18.__init__
    ("TL406", "conv_no_benchmark", "BasicBlock(c_in, c_out, stride)"),
])
def test_source_rule_fires_on_bad_scenario_only(code, bad, text):
    findings = _findings(bad)
    hits = [f for f in findings if f.code == code]
    assert len(hits) == 1, [(f.code, f.location.line) for f in findings]
    script = (FIXTURES / "scenarios" / f"{bad}.py").read_text().splitlines()
    assert text in script[hits[0].location.line - 1]
    fixed = _findings(f"{bad}_fixed")
    assert code not in {f.code for f in fixed}
    assert {f.code for f in fixed} <= {f.code for f in findings} - {code}


@pytest.mark.parametrize("code, bad", [("TL304", "eval_autograd"), ("TL406", "conv_no_benchmark")])
def test_manifest_records_the_pair(code, bad):
    traces = json.loads((FIXTURES / "traces" / "manifest.json").read_text())["traces"]
    if bad not in traces:
        pytest.skip(f"{bad} not recorded")
    entry, fixed = traces[bad], traces[f"{bad}_fixed"]
    assert entry["source_rules"] == [code] and entry["twin"].endswith(f"{bad}_fixed.py")
    assert fixed["role"] == "fixed" and fixed["twin"].endswith(f"{bad}.py")
    for e in (entry, fixed):
        assert e["ground_truth"]["median_ms"] > 0 and e["gz_bytes"] < 1_000_000
        assert (FIXTURES / "traces" / e["file"]).exists()
