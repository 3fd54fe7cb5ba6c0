"""The JSON contract (version 1): keys always present, nulls where a value does not apply, no NaN."""
from __future__ import annotations

from tracelint.engine import RunResult
from tracelint.render import render

from .conftest import notebook_finding, source_finding, strict_json, trace_finding

FINDING_KEYS = {"code", "name", "severity", "message", "origin", "path", "line", "column", "end_line", "end_column",
                "cell", "fingerprint", "fix", "source", "trace", "details", "estimate", "evidence"}


def _doc(result):
    return strict_json(render(result, "json"))


def test_top_level_keys(full_result):
    doc = _doc(full_result)
    assert {"version", "findings", "traces", "errors"} <= set(doc)
    assert doc["version"] == 1
    assert doc["files_checked"] == 2


def test_every_finding_has_every_key(full_result):
    doc = _doc(full_result)
    assert len(doc["findings"]) == 4
    for f in doc["findings"]:
        assert set(f) == FINDING_KEYS


def test_source_finding_fields():
    (f,) = _doc(RunResult(findings=[source_finding()]))["findings"]
    assert (f["origin"], f["path"], f["line"], f["column"], f["end_line"], f["end_column"]) == (
        "source", "train.py", 42, 9, 42, 20)  # columns 1-based, end exclusive
    assert f["fix"] == {"title": "Move it out of the loop", "safe": True}
    assert f["source"] is None and f["trace"] is None and f["cell"] is None
    assert f["severity"] == "warning" and f["code"] == "TL101"
    assert f["fingerprint"] == source_finding().fingerprint()


def test_notebook_finding_keeps_its_cell():
    (f,) = _doc(RunResult(findings=[notebook_finding()]))["findings"]
    assert (f["path"], f["cell"], f["line"], f["column"]) == ("nb.ipynb", 3, 4, 3)


def test_trace_finding_with_source():
    (f,) = _doc(RunResult(findings=[trace_finding(source=True)]))["findings"]
    assert f["origin"] == "trace"
    assert f["path"] == "trace.json.gz"
    assert f["line"] is None and f["column"] is None and f["end_line"] is None and f["end_column"] is None
    assert f["source"] == {"path": "train.py", "line": 30}
    assert f["trace"] == {"rank": 0, "step": 12, "start_us": 1500.0, "end_us": None,
                          "event": "Memcpy HtoD (Pageable -> Device)"}
    assert f["details"] == {"pageable_bytes": 1.3e9, "copies": 300, "ratio": None}
    assert f["fix"] is None


def test_trace_finding_without_source():
    (f,) = _doc(RunResult(findings=[trace_finding(source=False, rank=None, step=None)]))["findings"]
    assert f["source"] is None
    assert f["trace"]["rank"] is None and f["trace"]["step"] is None


def test_traces_and_errors(full_result):
    doc = _doc(full_result)
    (t,) = doc["traces"]
    assert set(t) == {"path", "rank", "verdict", "evidence", "metrics", "warnings", "profiler", "roofline"}
    assert t["verdict"] == "input-bound" and t["rank"] == 0
    assert t["metrics"]["gpu_busy_pct"] == 18.6
    assert t["metrics"]["matmul_tensor_core_pct"] is None  # inf
    assert t["metrics"]["idle_by_cause"] == {"host_wait_pct": 74.0, "kernel_wait_pct": None}  # NaN
    assert t["warnings"] == ["trace ends early"]
    assert doc["errors"] == [{"path": "broken.json", "message": "not a trace: unexpected end of data", "line": 3}]


def test_odd_values_in_metrics_do_not_break_the_document():
    from tracelint.engine import TraceSummary

    odd = TraceSummary("t.json", "gpu-bound", "busy", {"streams": {7: 1.0}, "tags": {"a"}, "obj": object()})
    (t,) = _doc(RunResult(traces=[odd]))["traces"]
    assert t["metrics"]["streams"] == {"7": 1.0}
    assert t["metrics"]["tags"] == ["a"]
    assert isinstance(t["metrics"]["obj"], str)
