"""GitHub Actions workflow commands: command per severity, properties, and the toolkit's escaping."""
from __future__ import annotations

import re

from tracelint.engine import Finding, InputError, RunResult, Severity, SourceLocation
from tracelint.render import render
from tracelint.render.github import escape_data, escape_property

from .conftest import notebook_finding, source_finding, summary, trace_finding

COMMAND = re.compile(r"^::(error|warning|notice)(?: ([^:]*))?::(.*)$")


def _parse(line: str) -> tuple[str, dict[str, str], str]:
    m = COMMAND.match(line)
    assert m, line
    props = dict(p.split("=", 1) for p in m.group(2).split(",")) if m.group(2) else {}
    return m.group(1), props, m.group(3)


def _unescape(text: str) -> str:
    for code, char in (("%2C", ","), ("%3A", ":"), ("%0A", "\n"), ("%0D", "\r"), ("%25", "%")):
        text = text.replace(code, char)
    return text


def test_escaping_follows_the_actions_toolkit():
    assert escape_data("100% done\r\nnext: a,b") == "100%25 done%0D%0Anext: a,b"
    assert escape_property("a:b,c%d\r\ne") == "a%3Ab%2Cc%25d%0D%0Ae"
    # % first, so an escape sequence already in the text survives the round trip.
    assert escape_data("%0A") == "%250A"


def test_source_finding_annotation():
    kind, props, message = _parse(render(RunResult(findings=[source_finding()]), "github").strip())
    assert kind == "warning"
    assert props == {"file": "train.py", "line": "42", "col": "9", "endLine": "42", "endColumn": "20",
                     "title": props["title"]}
    assert props["title"].startswith("TL101")
    assert message == "`.item()` syncs the GPU every step"


def test_severity_maps_to_command():
    findings = [source_finding(severity=Severity.ERROR), source_finding(severity=Severity.INFO, line=50)]
    kinds = [_parse(line)[0] for line in render(RunResult(findings=findings), "github").splitlines()]
    assert kinds == ["error", "notice"]


def test_hostile_message_and_path_cannot_break_the_command():
    evil = Finding("TL101", Severity.WARNING, "50% of steps\r\n::error::injected, really: yes",
                   SourceLocation("dir,with:odd/tr%ain.py", 3, 1, 3, 5))
    out = render(RunResult(findings=[evil]), "github")
    assert out.count("\n") == 1  # one command, one line
    kind, props, message = _parse(out.rstrip("\n"))
    assert kind == "warning"
    assert "\r" not in message and "\n" not in message
    assert _unescape(message) == evil.message
    assert props["file"] == "dir%2Cwith%3Aodd/tr%25ain.py"
    assert _unescape(props["file"]) == "dir,with:odd/tr%ain.py"


def test_trace_finding_goes_to_source_when_known_else_trace_file():
    with_src, without = render(RunResult(findings=[trace_finding(True), trace_finding(False)]), "github").splitlines()
    _, props, message = _parse(with_src)
    assert props["file"] == "train.py" and props["line"] == "30" and "col" not in props
    assert "trace.json.gz" in _unescape(message) and "rank 0" in message and "step 12" in message
    _, props, _ = _parse(without)
    assert props["file"] == "trace.json.gz" and props["line"] == "1"


def test_notebook_annotation_names_the_cell():
    _, props, message = _parse(render(RunResult(findings=[notebook_finding()]), "github").strip())
    assert props["file"] == "nb.ipynb" and props["line"] == "1"
    assert "cell 3, line 4" in message


def test_verdicts_and_errors_are_annotated():
    result = RunResult(traces=[summary()], errors=[InputError("bad.json", "not JSON", 2)])
    verdict, error = render(result, "github").splitlines()
    kind, props, message = _parse(verdict)
    assert kind == "notice" and props["file"] == "trace.json.gz"
    assert _unescape(message).startswith("input-bound: GPU idle 81% of the step")
    kind, props, message = _parse(error)
    assert kind == "error" and props["file"] == "bad.json" and props["line"] == "2" and message == "not JSON"


def test_clean_run_prints_nothing():
    assert render(RunResult(), "github") == ""
