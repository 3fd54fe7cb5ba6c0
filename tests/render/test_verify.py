"""A `tracelint verify` result (RunResult with measured findings and `verifications` records) in every format."""
from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from tests.verify.conftest import FINDING, synthetic
from tracelint.engine import RunResult
from tracelint.render import formats, render
from tracelint.render._common import measured_message
from tracelint.verify import run_result
from tracelint.verify.harness_control import RunOutcome
from tracelint.verify.measure import Row
from tracelint.verify.stats import FAILED, LEGEND, Verdict
from tracelint.verify.variants import Variant

MEASURED = "DataLoader without pin_memory=True; verify: confirmed, 1.43× (CI 1.40–1.46; 10.10 → 7.05 ms/step)"


def baseline_failed():
    """The baseline crashed: the TL202 fix was not run."""
    broken = RunOutcome(False, reason="exit code 1", stderr_tail="Traceback\nValueError: nope")
    row = Row(Variant("TL202:12", "Set pin_memory=True", True, "x", finding=FINDING),
              Verdict(FAILED, "not run: the baseline failed (exit code 1)"), None)
    return replace(synthetic(), baseline_runs=(broken,), rows=(row,))


@pytest.mark.parametrize("fmt", formats())
def test_every_format_renders_a_verify_result(fmt):
    text = render(run_result([synthetic(), baseline_failed()]), fmt)
    assert text.endswith("\n") and "TL202" in text


def test_text_is_one_block_per_target_without_the_lint_count_line():
    text = render(run_result([synthetic(), baseline_failed()]), "text")
    first, second = text.rstrip("\n").split("\n\ntracelint verify ")
    assert first.startswith("tracelint verify train.py\nGPU X · torch 2.x · 2 warm-up steps, then the baseline and "
                            "each variant alternate blocks of 3 steps\n")
    assert "baseline: 10.10 (10.00–10.20) ms/step over 6 blocks; block-to-block noise ±0.9%" in first
    assert first.endswith(LEGEND)
    assert second.startswith("train.py\n")
    assert "baseline failed: exit code 1\n  | Traceback\n  | ValueError: nope" in second
    row = next(line for line in second.splitlines() if line.startswith("train.py:12"))
    assert row.split()[-1] == "failed" and "—" in row
    assert "Found" not in text and "All checks passed" not in text


def test_json_keeps_the_verify_contract_and_lint_reports_do_not_grow_it():
    doc = json.loads(render(run_result([synthetic()]), "json"))
    assert list(doc) == ["version", "files_checked", "fixed", "findings", "traces", "errors", "baseline",
                         "verify"]
    (finding,) = doc["findings"]
    assert finding["details"]["verification"] == doc["verify"][0]["variants"][0]["verification"]
    assert "verify" not in json.loads(render(RunResult(findings=[FINDING]), "json"))


def test_sarif_carries_the_targets_and_each_result_its_verification():
    run = json.loads(render(run_result([synthetic()]), "sarif"))["runs"][0]
    assert list(run["properties"]) == ["traces", "verify"]
    (result,) = run["results"]
    assert result["properties"]["verification"]["speedup"] == pytest.approx(1.4326, abs=1e-4)
    assert result["message"]["text"] == FINDING.message  # the measurement is data here, not words
    lint = json.loads(render(RunResult(findings=[FINDING]), "sarif"))["runs"][0]
    assert "verify" not in lint["properties"]


def test_github_annotates_each_measured_finding_with_its_speedup():
    lines = render(run_result([synthetic(), baseline_failed()]), "github").splitlines()
    assert lines == [
        "::warning file=train.py,line=12,col=5,endLine=12,title=TL202 dataloader-without-pinned-memory::"
        + MEASURED,
        "::warning file=train.py,line=12,col=5,endLine=12,title=TL202 dataloader-without-pinned-memory::"
        "DataLoader without pin_memory=True; verify: failed (not run: the baseline failed (exit code 1))",
    ]
    assert all(re.match(r"^::(warning|error|notice) [^:]*::", line) for line in lines)


def test_gitlab_describes_each_measured_finding_with_its_speedup():
    issues = json.loads(render(run_result([synthetic(), baseline_failed()]), "gitlab"))
    assert [i["description"] for i in issues] == [
        f"TL202 {MEASURED}",
        "TL202 DataLoader without pin_memory=True; verify: failed (not run: the baseline failed (exit code 1))",
    ]
    assert len({i["fingerprint"] for i in issues}) == 2


def test_a_finding_without_a_measurement_keeps_its_message():
    assert measured_message(FINDING, "") == FINDING.message
    assert measured_message(FINDING, "cell 2, line 3") == f"{FINDING.message} (cell 2, line 3)"


def test_the_finding_words_give_the_pairs_of_processes_range():
    """Issue #38 item 4: beside verify's interval, how far apart its pairs of processes measured (the loader run's
    pinned-memory fix: 1.43, 1.50 and 1.56x, fixtures/run/verified/loader_item_verify.json)."""
    from tracelint.engine.display import verification_words

    measured = {"status": "confirmed", "speedup": 1.4956, "ci95": [1.3326, 1.6785], "baseline_ms": 46.2933,
                "fixed_ms": 34.4884, "pair_speedups": [1.4252, 1.5011, 1.5636]}
    assert verification_words(measured) == ("confirmed, 1.50× (CI 1.33–1.68; 46.29 → 34.49 ms/step; its 3 pairs of "
                                            "processes 1.43–1.56×)")
    assert "pairs" not in verification_words(dict(measured, pair_speedups=[1.5]))
