"""SARIF 2.1.0 as GitHub code scanning requires it (a structural check written from GitHub's "SARIF support for
code scanning" and its upload limits), and against the OASIS JSON schema vendored in tests/data/sarif (no network:
the schema tests run, never skip)."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import jsonschema

from tracelint.engine import Finding, RunResult, Severity, SourceLocation, TraceLocation, display
from tracelint.render import render
from tracelint.render import sarif as sarif_format

from .conftest import notebook_finding, source_finding, strict_json, trace_finding

SCHEMA = Path(__file__).resolve().parents[1] / "data" / "sarif" / "sarif-schema-2.1.0.json"


@lru_cache(maxsize=1)
def oasis_validator() -> jsonschema.Draft4Validator:
    """The OASIS SARIF 2.1.0 schema (oasis-tcs/sarif-spec, sarif-2.1/schema/sarif-schema-2.1.0.json; draft-04)."""
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def assert_valid_sarif(log: dict) -> None:
    """Valid against the OASIS schema and shaped as GitHub code scanning takes it."""
    errors = sorted(oasis_validator().iter_errors(log), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]
    assert_github_code_scanning_shape(log)


def _sarif(result) -> dict:
    return strict_json(render(result, "sarif"))


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
        assert len(rules) <= 25_000 and len(run["results"]) <= sarif_format.MAX_RESULTS
        for rule in rules:
            assert isinstance(rule["id"], str) and rule["id"]
            assert len(rule.get("properties", {}).get("tags", [])) <= 20
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
            assert set(fingerprints) == {"primaryLocationLineHash", "tracelintFingerprint/v2"}
            # GitHub rejects a result without a location.
            assert 1 <= len(res["locations"]) <= 10
            for loc in res["locations"]:
                phys = loc["physicalLocation"]
                uri = phys["artifactLocation"]["uri"]
                assert uri and "\\" not in uri
                assert not uri.startswith(("/", "./")) and (":" not in uri or uri.startswith("file:///"))
                # a relative URI names its base, which the run maps to an absolute folder URI ending in a slash
                base = phys["artifactLocation"].get("uriBaseId")
                assert (base is None) == uri.startswith("file:")
                if base is not None:
                    root = run["originalUriBaseIds"][base]["uri"]
                    assert root.startswith("file:///") and root.endswith("/")
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


def test_a_run_from_a_subfolder_names_files_from_the_repository_root(tmp_path, monkeypatch):
    # GitHub resolves the URIs against the checkout's root: `cd ml && tracelint check --format sarif .` in a
    # monorepo must still say ml/train.py, or code scanning pins the alerts to files that do not exist.
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "ml").mkdir()
    (repo / "ml" / "train.py").write_text("import torch\nfor b in loader:\n    print(b.cuda().sum().item())\n")
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "tracelint", "check", "--format", "sarif", "."], cwd=repo / "ml",
                          capture_output=True, text=True, timeout=120)
    run = json.loads(proc.stdout)["runs"][0]
    assert [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in run["results"]] == \
        [{"uri": "ml/train.py", "uriBaseId": "%SRCROOT%"}]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == repo.as_uri() + "/"
    # GitLab's location.path and GitHub's annotation file name the file from the repository root too
    for fmt, where in (("gitlab", lambda out: json.loads(out)[0]["location"]["path"]),
                       ("github", lambda out: out.split("file=")[1].split(",")[0])):
        proc = subprocess.run([sys.executable, "-m", "tracelint", "check", "--format", fmt, "."], cwd=repo / "ml",
                              capture_output=True, text=True, timeout=120)
        assert where(proc.stdout) == "ml/train.py", (fmt, proc.stdout)
    # in-process, with a worktree's .git (a file), a path above the repository, and no repository at all
    (repo / ".git").rmdir()
    (repo / ".git").write_text("gitdir: /elsewhere/.git/worktrees/repo\n")
    monkeypatch.chdir(repo / "ml")
    display._source_root.cache_clear()
    above = Finding("TL101", Severity.WARNING, "m", SourceLocation("../../other.py", 1, 1))
    here = Finding("TL101", Severity.WARNING, "m", SourceLocation("train.py", 3, 11))
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for r in _sarif(RunResult(findings=[here, above]))["runs"][0]["results"]]
    assert uris == ["ml/train.py", (tmp_path / "other.py").as_uri()]
    (repo / ".git").unlink()
    display._source_root.cache_clear()  # looked up once per working directory in a process
    display._repo_path.cache_clear()
    log = _sarif(RunResult(findings=[here]))
    assert log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "train.py"
    assert log["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"] == (repo / "ml").as_uri() + "/"


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
    assert_valid_sarif(_sarif(full_result))
    assert_valid_sarif(_sarif(RunResult()))


def test_the_schema_catches_what_it_should(full_result):
    """The vendored schema is the real one: it rejects a log GitHub would reject."""
    log = _sarif(full_result)
    del log["runs"][0]["results"][0]["message"]
    assert list(oasis_validator().iter_errors(log))
    log = _sarif(full_result)
    log["runs"][0]["results"][0]["level"] = "fatal"
    assert list(oasis_validator().iter_errors(log))


def test_the_vendored_schema_is_the_one_the_log_names():
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert schema["id"] == sarif_format.SCHEMA == _sarif(RunResult())["$schema"]
    assert (SCHEMA.parent / "LICENSE.md").is_file()


# --- fingerprints that survive moved code and new numbers ------------------------------------------------------

def _fingerprints(findings) -> list[str]:
    results = _sarif(RunResult(findings=findings))["runs"][0]["results"]
    return [r["partialFingerprints"]["primaryLocationLineHash"] for r in results]


def test_fingerprints_follow_the_line_text_not_its_number(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = "for batch in loader:\n    loss = step(batch)\n    print(loss.item())\n    print(loss.item())\n"
    (tmp_path / "train.py").write_text(code)
    before = _fingerprints([source_finding("train.py", 3), source_finding("train.py", 4)])
    (tmp_path / "train.py").write_text("import torch\n\n" + code.replace("    print", "        print"))
    after = _fingerprints([source_finding("train.py", 5, message="another message"), source_finding("train.py", 6)])
    assert before == after and before[0] != before[1]  # identical lines: occurrences 0 and 1
    # one more identical line below: the first two keep theirs, the new one gets a new one
    (tmp_path / "train.py").write_text(code + "    print(loss.item())\n")
    three = _fingerprints([source_finding("train.py", n) for n in (3, 4, 5)])
    assert three[:2] == before and three[2] not in before
    # another rule or another file is another fingerprint
    assert _fingerprints([source_finding("train.py", 3, code="TL104")])[0] != before[0]


def test_trace_fingerprints_ignore_numbers_and_the_trace_name():
    def finding(trace: str, message: str, step: int, source: SourceLocation | None) -> Finding:
        loc = TraceLocation(trace, rank=0, step=step, start_us=1.0, end_us=2.0, event="aten::item", source=source)
        return Finding("TL101", Severity.WARNING, message, loc)

    src = SourceLocation("/nowhere/train.py", 54)
    a = _fingerprints([finding("host1.123.pt.trace.json", "1.2 ms per step", 3, src)])
    b = _fingerprints([finding("host2.456.pt.trace.json", "1.7 ms per step", 7, src)])
    assert a == b
    assert _fingerprints([finding("x.json", "m", 3, SourceLocation("/nowhere/train.py", 55))]) != a
    no_stack = _fingerprints([finding("a.json", "1 ms", 3, None)])
    assert no_stack == _fingerprints([finding("b.json", "2 ms", 9, None)]) != a


# --- GitHub's upload limits --------------------------------------------------------------------------------------

def _many(n: int) -> list[Finding]:
    return [source_finding("train.py", line, severity=Severity.ERROR if line % 1000 == 0 else Severity.INFO)
            for line in range(1, n + 1)]


def test_over_the_result_limit_the_most_severe_stay(monkeypatch):
    monkeypatch.setattr(sarif_format, "MAX_RESULTS", 50)
    log = json.loads(render(RunResult(findings=_many(3000)), "sarif"))
    run = log["runs"][0]
    assert len(run["results"]) == 50
    assert sum(r["level"] == "error" for r in run["results"]) == 3  # every error is kept
    lines = [r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in run["results"]]
    assert lines == sorted(lines)  # report order
    (note,) = run["invocations"][0]["toolExecutionNotifications"]
    assert note["level"] == "warning" and note["message"]["text"].startswith("2950 of 3000 results left out")
    assert_valid_sarif(log)


def test_over_the_size_limit_it_fits(monkeypatch):
    monkeypatch.setattr(sarif_format, "MAX_BYTES", 400_000)
    text = render(RunResult(findings=_many(3000)), "sarif")
    assert len(text.encode()) <= 400_000
    log = json.loads(text)
    kept = len(log["runs"][0]["results"])
    assert 0 < kept < 3000
    (note,) = log["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert note["message"]["text"].startswith(f"{3000 - kept} of 3000 results left out")
    assert_valid_sarif(log)


def test_the_real_limits_hold_25000_results():
    text = render(RunResult(findings=_many(25_001)), "sarif")
    assert len(text.encode()) <= sarif_format.MAX_BYTES
    log = json.loads(text)
    assert len(log["runs"][0]["results"]) <= 25_000
    assert log["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert_github_code_scanning_shape(log)


# --- real outputs ------------------------------------------------------------------------------------------------

def test_real_lint_and_trace_outputs(repo, monkeypatch):
    from tracelint.dispatch import run_paths

    monkeypatch.chdir(repo)
    for paths, mode in ((["fixtures/traces"], "trace"), (["fixtures/examples", "fixtures/scenarios"], "source")):
        result = run_paths(paths, mode=mode)
        text = render(result, "sarif")
        assert len(text.encode()) <= sarif_format.MAX_BYTES
        log = json.loads(text)
        assert_valid_sarif(log)
        run = log["runs"][0]
        assert len(run["results"]) == len(result.findings) > 0
        assert all(r["locations"][0]["physicalLocation"]["artifactLocation"].get("uriBaseId") == "%SRCROOT%"
                   for r in run["results"])
        assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == repo.as_uri() + "/"
        fingerprints = [r["partialFingerprints"]["primaryLocationLineHash"] for r in run["results"]]
        assert len(set(fingerprints)) == len(fingerprints)
