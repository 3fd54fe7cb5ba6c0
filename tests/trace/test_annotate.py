"""``--annotate``: a copy of the trace with tracelint's tracks added, the original events unchanged.

Validated against a JSON schema of the Trace Event Format written from its specification ("Trace Event Format",
Google, the document chrome://tracing and Perfetto's JSON importer follow): Perfetto's ``trace_processor`` (PyPI
``perfetto``) downloads its shell binary at run time, which an offline test cannot do.
"""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import Counter

import pytest

from tests.conftest import FIXTURE_TRACES
from tracelint.trace.analyze import analyze_trace
from tracelint.trace.annotate import AnnotateError, annotate_trace

jsonschema = pytest.importorskip("jsonschema")

TRACES = ["item_per_step.pt.trace.json.gz", "pageable_copies.pt.trace.json.gz", "gpt_compiled.pt.trace.json.gz",
          "dataloader_main_process.pt.trace.json.gz"]

_ID = {"type": ["integer", "string"]}
_NUMBER = {"type": "number"}
# The Trace Event Format: the JSON object form, and the fields each phase needs.
TEF_SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {"type": "array", "items": {"$ref": "#/$defs/event"}},
        "displayTimeUnit": {"enum": ["ms", "ns"]},
    },
    "$defs": {
        "event": {
            "type": "object",
            "required": ["ph"],
            "properties": {"ph": {"type": "string", "minLength": 1}, "name": {"type": "string"},
                           "cat": {"type": "string"}, "pid": _ID, "tid": _ID, "ts": _NUMBER,
                           "args": {"type": "object"}},
            "allOf": [
                {"if": {"properties": {"ph": {"const": "X"}}},
                 "then": {"required": ["name", "ts", "dur", "pid", "tid"],
                          "properties": {"dur": {"type": "number", "minimum": 0}}}},
                {"if": {"properties": {"ph": {"enum": ["i", "I"]}}},
                 "then": {"required": ["name", "ts", "pid", "tid"], "properties": {"s": {"enum": ["g", "p", "t"]}}}},
                {"if": {"properties": {"ph": {"enum": ["s", "t", "f"]}}},
                 "then": {"required": ["name", "cat", "id", "ts", "pid", "tid"],
                          "properties": {"id": _ID, "bp": {"const": "e"}}}},
                {"if": {"properties": {"ph": {"const": "M"}}},
                 "then": {"required": ["name", "pid", "args"],
                          "properties": {"name": {"enum": ["process_name", "process_labels", "process_sort_index",
                                                           "thread_name", "thread_sort_index"]}}}},
            ],
        },
    },
}


def _load(path):
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


@pytest.fixture(scope="module", params=TRACES)
def annotated(request, tmp_path_factory):
    src = FIXTURE_TRACES / request.param
    out = tmp_path_factory.mktemp("annotated") / "out.json.gz"
    report = analyze_trace(src)
    done = annotate_trace(src, out, report=report)
    return src, out, report, done


def test_original_events_are_unchanged(annotated):
    src, out, _, _ = annotated
    before, after = _load(src), _load(out)
    original, copy = json.loads(before), json.loads(after)
    n = len(original["traceEvents"])
    assert copy["traceEvents"][:n] == original["traceEvents"]
    assert {k: v for k, v in copy.items() if k != "traceEvents"} == {
        k: v for k, v in original.items() if k != "traceEvents"}
    # byte for byte: the copy is the original with events inserted in one place (before the array's bracket)
    head = 0
    while head < len(before) and before[head] == after[head]:
        head += 1
    tail = 0
    while tail < len(before) and before[-1 - tail] == after[-1 - tail]:
        tail += 1
    assert head + tail >= len(before)
    inserted = after[head:len(after) - tail]
    assert inserted.lstrip(b",").startswith(b"{") and json.loads(b"[" + inserted.strip(b",") + b"]")


def test_the_copy_is_valid_trace_event_format(annotated):
    _, out, _, _ = annotated
    jsonschema.validate(json.loads(_load(out)), TEF_SCHEMA)


def test_tracelint_tracks(annotated):
    src, out, report, done = annotated
    original = json.loads(_load(src))["traceEvents"]
    added = json.loads(_load(out))["traceEvents"][len(original):]
    names = {(e["name"], e["args"]["name"]) for e in added if e["ph"] == "M" and e["name"] == "process_name"}
    (pid,) = {e["pid"] for e in added if e["ph"] == "M"}
    assert names == {("process_name", "tracelint")}
    assert pid not in {e.get("pid") for e in original}
    gaps = [e for e in added if e["ph"] == "X" and e["name"].startswith("idle: ")]
    assert len(gaps) == done.gaps == sum(len(a.gaps) for a in report.analyses)
    assert all(e["pid"] == pid and e["dur"] > 0 for e in gaps)
    assert {e["args"]["cause"] for e in gaps} == {g.cause for a in report.analyses for g in a.gaps}
    instants = [e for e in added if e["ph"] == "i"]
    assert len(instants) == done.findings == len(report.findings)
    assert [e["args"]["message"] for e in instants] == [f.message for f in report.findings]
    # each flow: its start on a sync call's slice, its end on a GPU slice of the original trace
    starts = {e["id"]: e for e in added if e["ph"] == "s"}
    ends = {e["id"]: e for e in added if e["ph"] == "f"}
    assert starts.keys() == ends.keys() and len(starts) == done.flows
    slices = {(e.get("pid"), e.get("tid"), e.get("ts")): e for e in original if e.get("ph") == "X"}
    for flow_id, s in starts.items():
        host, gpu = slices[(s["pid"], s["tid"], s["ts"])], slices[tuple(ends[flow_id][k] for k in ("pid", "tid", "ts"))]
        assert "Synchronize" in host["name"] or "Memcpy" in host["name"] or "Free" in host["name"]
        assert gpu["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")
        assert gpu["ts"] <= host["ts"] + host["dur"] + 20


def test_a_trace_with_item_per_step_gets_its_sync_arrows(tmp_path):
    """item_per_step.py calls loss.item() once per step: three steps, three syncs that waited for the GPU."""
    done = annotate_trace(FIXTURE_TRACES / "item_per_step.pt.trace.json.gz", tmp_path / "a.json")
    assert done.flows == 3 and done.findings >= 1
    copy = json.loads((tmp_path / "a.json").read_bytes())  # no .gz: plain JSON
    assert Counter(e["ph"] for e in copy["traceEvents"] if e.get("cat") == "tracelint")["s"] == 3


def test_not_strict_json_is_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "C:\\Users", "ts": 1, "dur": 1}]}', encoding="utf-8")
    with pytest.raises(AnnotateError, match="not strict JSON"):
        annotate_trace(bad, tmp_path / "out.json", report=analyze_trace(FIXTURE_TRACES / TRACES[0]))


def test_cli(tmp_path):
    out = tmp_path / "annotated.json.gz"
    run = subprocess.run([sys.executable, "-m", "tracelint", "trace", str(FIXTURE_TRACES / TRACES[0]), "--annotate",
                          str(out), "-q"], capture_output=True, text=True)
    assert run.returncode == 1 and out.exists()  # TL101 fires on this trace
    assert "wrote" in run.stderr and "sync arrows" in run.stderr
    folder = subprocess.run([sys.executable, "-m", "tracelint", "trace", str(FIXTURE_TRACES), "--annotate",
                             str(out)], capture_output=True, text=True)
    assert folder.returncode == 2 and "one trace file" in folder.stderr
