"""A trace finding's source line is the trace's, wherever tracelint runs: the stack's line, or the statement of its
function that the script beside the trace names (issue 34 item 8), never a file found through the working
directory."""
from __future__ import annotations

import gzip
import json
import re
import shutil

from tests.conftest import FIXTURES, REPO
from tracelint.trace import analyze_trace

ITEM = "item_per_step"


def _stack_line(trace) -> int:
    """The line the trace's python_function frame of the scenario's ``train`` names, read from the raw events."""
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    (line,) = {int(m[1]) for e in events if e.get("cat") == "python_function"
               for m in [re.fullmatch(rf"fixtures/scenarios/{ITEM}\.py\((\d+)\): train", e.get("name", ""))] if m}
    return line


def _tl101_line(trace, cwd, monkeypatch) -> int:
    monkeypatch.chdir(cwd)
    (finding,) = [f for f in analyze_trace(trace).findings if f.code == "TL101"]
    return finding.location.source.line


def test_the_line_does_not_depend_on_the_working_directory(fixture_traces, tmp_path, monkeypatch):
    # the trace copied away from the repository: from the repository root the stack's relative path
    # (fixtures/scenarios/item_per_step.py) named the repository's script, elsewhere nothing (line 54 vs 56)
    trace = tmp_path / f"{ITEM}.pt.trace.json.gz"
    shutil.copy(fixture_traces / trace.name, trace)
    lines = {cwd.name: _tl101_line(trace, cwd, monkeypatch) for cwd in (REPO, tmp_path, FIXTURES / "scenarios")}
    assert set(lines.values()) == {_stack_line(trace)}, lines


def test_the_script_beside_the_trace_still_gives_the_statement(fixture_traces, tmp_path, monkeypatch):
    # a checkout that keeps its traces: the stack's relative path is read from the trace's folder and those above it
    trace = tmp_path / "prof" / f"{ITEM}.pt.trace.json.gz"
    script = tmp_path / "fixtures" / "scenarios" / f"{ITEM}.py"
    trace.parent.mkdir()
    script.parent.mkdir(parents=True)
    shutil.copy(fixture_traces / trace.name, trace)
    shutil.copy(FIXTURES / "scenarios" / script.name, script)
    lines = {_tl101_line(trace, cwd, monkeypatch) for cwd in (REPO, tmp_path, trace.parent)}
    (line,) = lines
    assert line != _stack_line(trace) and ".item()" in script.read_text().splitlines()[line - 1]
