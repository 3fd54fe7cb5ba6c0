"""SARIF 2.1.0 as GitHub code scanning requires it (a structural check written from GitHub's "SARIF support for
code scanning"), and against the OASIS JSON schema when TRACELINT_SARIF_SCHEMA names a local copy of it."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tracelint.engine import Finding, RunResult, Severity, SourceLocation
from tracelint.render import render

from .conftest import notebook_finding, source_finding, trace_finding


def _sarif(result) -> dict:
    text = render(result, "sarif")
    assert "NaN" not in text and "Infinity" not in text
    return json.loads(text)


def assert_github_code_scanning_shape(log: dict) -> None:
    """Every property GitHub lists as required for an upload, with the value ranges it states."""
    assert log["$schema"].endswith("sarif-schema-2.1.0.json")
    assert log["version"] == "2.1.0"
    assert isinstance(log["runs"], list) and log["runs"]
    for run in log["runs"]:
        driver = run["tool"]["driver"]
        assert isinstance(driver["name"], str) and driver["name"]
        rules = driver["rules"]
        ids = [r["id"] for r in rules]
        assert len(ids) == len(set(ids))
        for rule in rules:
            assert isinstance(rule["id"], str) and rule["id"]
            for key in ("shortDescription", "fullDescription"):
                assert isinstance(rule[key]["text"], str) and rule[key]["text"]
            assert rule.get("help", {}).get("text") or rule.get("helpUri")
            assert isinstance(rule.get("properties", {}), dict)
            assert rule.get("defaultConfiguration", {}).get("level", "warning") in ("none", "note", "warning", "error")
        for res in run["results"]:
            assert res["ruleId"] in ids
            assert rules[res["ruleIndex"]]["id"] == res["ruleId"]
            assert res["level"] in ("none", "note", "warning", "error")
            assert isinstance(res["message"]["text"], str) and res["message"]["text"]
            fingerprints = res["partialFingerprints"]
            assert fingerprints and all(isinstance(v, str) and v for v in fingerprints.values())
            # GitHub rejects a result without a location.
            assert 1 <= len(res["locations"]) <= 10
            for loc in res["locations"]:
                phys = loc["physicalLocation"]
                uri = phys["artifactLocation"]["uri"]
                assert uri and "\\" not in uri
                assert not uri.startswith(("/", "./")) and (":" not in uri or uri.startswith("file:///"))
                region = phys["region"]
                assert isinstance(region["startLine"], int) and region["startLine"] >= 1
                if "startColumn" in region:
                    assert region["startColumn"] >= 1
                if "endLine" in region:
                    assert region["endLine"] >= region["startLine"]
                if "endColumn" in region and region.get("endLine") == region["startLine"]:
                    assert region["endColumn"] >= region["startColumn"]


def test_github_required_properties(full_result):
    assert_github_code_scanning_shape(_sarif(full_result))


def test_empty_run_is_valid():
    log = _sarif(RunResult())
    assert_github_code_scanning_shape(log)
    assert log["runs"][0]["results"] == []


def test_source_result_region_is_one_based():
    (res,) = _sarif(RunResult(findings=[source_finding()]))["runs"][0]["results"]
    region = res["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 42, "startColumn": 9, "endLine": 42, "endColumn": 20}
    assert res["level"] == "warning" and res["ruleId"] == "TL101"


def test_trace_finding_is_located_at_its_source_line():
    (res,) = _sarif(RunResult(findings=[trace_finding(source=True)]))["runs"][0]["results"]
    phys = res["locations"][0]["physicalLocation"]
    assert phys["artifactLocation"]["uri"] == "train.py" and phys["region"] == {"startLine": 30}
    assert res["properties"]["trace"]["path"] == "trace.json.gz"
    assert res["properties"]["trace"]["step"] == 12
    assert "rank 0" in res["message"]["text"]


def test_trace_finding_without_source_is_located_at_the_trace_file():
    (res,) = _sarif(RunResult(findings=[trace_finding(source=False)]))["runs"][0]["results"]
    phys = res["locations"][0]["physicalLocation"]
    assert phys["artifactLocation"]["uri"] == "trace.json.gz" and phys["region"]["startLine"] == 1


def test_notebook_finding_at_line_one_with_the_cell_in_the_message():
    (res,) = _sarif(RunResult(findings=[notebook_finding()]))["runs"][0]["results"]
    assert res["locations"][0]["physicalLocation"]["region"] == {"startLine": 1}
    assert "cell 3, line 4" in res["message"]["text"]


def test_paths_are_relative_posix_and_encoded(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inside = Finding("TL101", Severity.WARNING, "m", SourceLocation(str(tmp_path / "src dir" / "train.py"), 1, 1))
    outside = Finding("TL101", Severity.WARNING, "m", SourceLocation("/elsewhere/x.py", 1, 1))
    dotted = Finding("TL101", Severity.WARNING, "m", SourceLocation("./pkg/./y.py", 1, 1))
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for r in _sarif(RunResult(findings=[inside, outside, dotted]))["runs"][0]["results"]]
    assert uris == ["src%20dir/train.py", "file:///elsewhere/x.py", "pkg/y.py"]


def test_levels_and_unknown_codes_get_a_rule():
    findings = [source_finding(severity=Severity.INFO, code="TL999")]
    log = _sarif(RunResult(findings=findings))
    assert_github_code_scanning_shape(log)
    (res,) = log["runs"][0]["results"]
    assert res["level"] == "note"


def test_identical_findings_get_distinct_fingerprints():
    findings = [source_finding(line=10), source_finding(line=20)]
    results = _sarif(RunResult(findings=findings))["runs"][0]["results"]
    assert results[0]["partialFingerprints"] != results[1]["partialFingerprints"]


def test_errors_become_tool_notifications_and_traces_ride_along(full_result):
    run = _sarif(full_result)["runs"][0]
    (inv,) = run["invocations"]
    assert inv["executionSuccessful"] is False
    (note,) = inv["toolExecutionNotifications"]
    assert note["level"] == "error" and "unexpected end" in note["message"]["text"]
    (trace,) = run["properties"]["traces"]
    assert trace["verdict"] == "input-bound" and trace["metrics"]["matmul_tensor_core_pct"] is None


def test_valid_against_the_oasis_schema(full_result):
    schema_path = os.environ.get("TRACELINT_SARIF_SCHEMA")
    if not schema_path or not Path(schema_path).is_file():
        pytest.skip("set TRACELINT_SARIF_SCHEMA to a local sarif-schema-2.1.0.json (never fetched at test time)")
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(Path(schema_path).read_text(encoding="utf-8"))
    jsonschema.validate(_sarif(full_result), schema)
    jsonschema.validate(_sarif(RunResult()), schema)
