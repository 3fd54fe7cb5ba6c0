"""GitLab Code Quality: the required fields, GitLab's severity words, unique fingerprints."""
from __future__ import annotations

import json

from tracelint.engine import RunResult, Severity
from tracelint.render import render

from .conftest import notebook_finding, source_finding, trace_finding

SEVERITIES = {"info", "minor", "major", "critical", "blocker"}


def _issues(result):
    return json.loads(render(result, "gitlab"))


def test_required_fields(full_result):
    issues = _issues(full_result)
    assert len(issues) == len(full_result.findings)
    for issue in issues:
        assert isinstance(issue["description"], str) and issue["description"]
        assert isinstance(issue["check_name"], str) and issue["check_name"].startswith("TL")
        assert isinstance(issue["fingerprint"], str) and issue["fingerprint"]
        assert issue["severity"] in SEVERITIES
        assert isinstance(issue["location"]["path"], str)
        assert isinstance(issue["location"]["lines"]["begin"], int) and issue["location"]["lines"]["begin"] >= 1


def test_locations():
    issues = _issues(RunResult(findings=[source_finding(), notebook_finding(), trace_finding(True),
                                         trace_finding(False)]))
    places = [(i["location"]["path"], i["location"]["lines"]["begin"]) for i in issues]
    assert places == [("train.py", 42), ("nb.ipynb", 1), ("train.py", 30), ("trace.json.gz", 1)]
    assert "cell 3, line 4" in issues[1]["description"]


def test_severity_mapping():
    findings = [source_finding(severity=s, line=10 + int(s)) for s in Severity]
    assert [i["severity"] for i in _issues(RunResult(findings=findings))] == ["info", "major", "critical"]


def test_fingerprints_are_unique_even_for_identical_messages():
    # Two identical calls in one file: same code, path and message.
    findings = [source_finding(line=10), source_finding(line=20), source_finding(line=30)]
    prints = [i["fingerprint"] for i in _issues(RunResult(findings=findings))]
    assert len(set(prints)) == 3
    # Stable when lines move: the same findings elsewhere in the file keep their fingerprints.
    moved = [source_finding(line=11), source_finding(line=21), source_finding(line=31)]
    assert [i["fingerprint"] for i in _issues(RunResult(findings=moved))] == prints


def test_empty_run_is_an_empty_array():
    assert _issues(RunResult()) == []


def test_trace_fingerprints_survive_the_trace_files_new_name(fixture_traces, tmp_path):
    # A profiler names each trace after its host and a time: a pipeline's next run is the same finding to GitLab
    # (its MR widget compares fingerprints between the base and head pipelines), and to the JSON report.
    import shutil
    import subprocess
    import sys

    prints = {}
    for run, name in (("run-1", "node-a_1187.1732600000.pt.trace.json.gz"),
                      ("run-2", "node-b_2231.1732690000.pt.trace.json.gz")):
        (tmp_path / run).mkdir()
        shutil.copy(fixture_traces / "item_per_step.pt.trace.json.gz", tmp_path / run / name)
        out = {}
        for fmt in ("gitlab", "json"):
            proc = subprocess.run([sys.executable, "-m", "tracelint", "trace", "--format", fmt, run], cwd=tmp_path,
                                  capture_output=True, text=True, timeout=300)
            assert proc.returncode == 1, proc.stderr
            doc = json.loads(proc.stdout)
            out[fmt] = sorted(f["fingerprint"] for f in (doc if fmt == "gitlab" else doc["findings"]))
        prints[run] = out
    assert prints["run-1"] == prints["run-2"] and len(prints["run-1"]["gitlab"]) >= 1


def test_source_fingerprints_do_not_depend_on_how_the_file_was_named(repo, tmp_path):
    # The same file given as src/train.py from the repository root, as ./src/train.py, by its absolute path, or as
    # train.py from src/: one fingerprint per finding (GitLab compares them between pipelines).
    import shutil
    import subprocess
    import sys

    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "src").mkdir()
    shutil.copy(repo / "fixtures" / "examples" / "train.py", project / "src" / "train.py")
    seen = []
    for cwd, name in ((project, "src/train.py"), (project, "./src/train.py"),
                      (project, str(project / "src" / "train.py")), (project / "src", "train.py")):
        proc = subprocess.run([sys.executable, "-m", "tracelint", "check", "--format", "gitlab", name], cwd=cwd,
                              capture_output=True, text=True, timeout=120)
        issues = json.loads(proc.stdout)
        assert {i["location"]["path"] for i in issues} == {"src/train.py"}, (cwd, name)
        seen.append(sorted(i["fingerprint"] for i in issues))
    assert len(seen[0]) >= 2 and all(s == seen[0] for s in seen)


def test_a_finding_keeps_its_fingerprint_when_its_callers_line_moves(tmp_path):
    # The message names the caller's line ("`log()` (called at line 8)"); a line added above moves it.
    import subprocess
    import sys

    code = "import torch\n\ndef log(loss):\n    print(loss.item())\n\nfor b in loader:\n    log(model(b.cuda()))\n"
    prints = []
    for text in (code, "# a line above\n" + code):
        (tmp_path / "t.py").write_text(text)
        proc = subprocess.run([sys.executable, "-m", "tracelint", "check", "--format", "gitlab", "t.py"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        (issue,) = json.loads(proc.stdout)
        assert "called at line" in issue["description"]
        prints.append(issue["fingerprint"])
    assert prints[0] == prints[1]
