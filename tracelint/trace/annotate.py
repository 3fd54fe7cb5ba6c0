"""``tracelint trace --annotate OUT.json.gz``: a copy of a trace with tracelint's reading added, for Perfetto UI and
chrome://tracing.

The copy is the input's bytes with events appended to its ``traceEvents`` array; nothing before them changes, so
the original events read back exactly as they were. The added events sit on a process of their own named
``tracelint`` (a pid no event of the trace uses, sorted first), in the Trace Event Format:

- one ``idle gaps`` thread per device: each idle gap (tracelint.trace.device_analysis.Gap) as a complete slice (``X``)
  named by its main cause, ``idle: host sync``, with its length, its step and its cause in ``args``;
- a ``findings`` thread: each finding as an instant event (``i``) at its place in the trace, named by its code and
  rule, its message, severity and source line in ``args``;
- a ``host syncs`` thread: each device synchronization that waited for the GPU as a slice, and a flow arrow (``s``
  at the sync call on its host thread, ``f`` at the GPU work it waited for, the last that ended before it
  returned) in category ``tracelint``, so that selecting either end shows the other. Flow events are bound to the
  trace's own slices by their position; they add events, they change none.

The trace must be strict JSON up to the end of ``traceEvents`` (as PyTorch writes it); bare ``nan`` or invalid
escapes there make it an AnnotateError rather than a silently rewritten copy.
"""
from __future__ import annotations

import gzip
import json
import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from pathlib import Path

from tracelint.engine import Config
from tracelint.engine.catalog import rule_name
from tracelint.engine.display import cut
from tracelint.engine.escape import json_safe
from tracelint.engine.finding import TraceLocation
from tracelint.trace.analyze import Report, analyze_trace
from tracelint.trace.model import SYNC_CALLS

CATEGORY = "tracelint"
MAX_FLOWS = 10_000  # sync arrows written at most (a sync per kernel would bury the GPU tracks)
_SYNC_TOLERANCE_US = 20.0  # a sync returns a few µs after the GPU work it waited for ends
_GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
_CAUSE_WORDS = {"data_wait": "DataLoader wait", "host_sync": "host sync", "allocator": "allocator frees",
                "autotune": "algorithm search", "launch_overhead": "launch overhead",
                "other": "host outside profiled ops", "short_gap": "short gap"}


class AnnotateError(ValueError):
    """The trace cannot be annotated (not a trace, or not strict JSON where events are added)."""


@dataclass(frozen=True, slots=True)
class Annotated:
    """What was added: counts of each kind of event."""

    path: str
    gaps: int
    findings: int
    flows: int


def annotate_trace(src, dst, *, config: Config | None = None, report: Report | None = None) -> Annotated:
    """Write ``dst`` (gzip when its name ends in .gz): the trace ``src`` with tracelint's reading appended (module
    docstring). ``report``: the trace's Report when the caller already has it (else it is analysed here)."""
    raw = Path(src).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    text = raw.decode("utf-8", "surrogateescape")  # encoded back the same way: the bytes stay the bytes
    events, close = _trace_events(text)
    if report is None:
        report = analyze_trace(src, config=config)
    added, counts = _events(report, events)
    if added:
        body = ",".join(json.dumps(json_safe(e), ensure_ascii=True, allow_nan=False, separators=(",", ":"))
                        for e in added)
        text = text[:close] + ("," if events else "") + body + text[close:]
    data = text.encode("utf-8", "surrogateescape")
    Path(dst).write_bytes(gzip.compress(data, compresslevel=6) if str(dst).endswith(".gz") else data)
    return Annotated(str(dst), *counts)


def _trace_events(text: str) -> tuple[list, int]:
    """The ``traceEvents`` array of a trace's text and the offset of its closing bracket."""
    decoder = json.JSONDecoder(strict=False)
    i = _blank(text, 0)
    if text[i:i + 1] == "[":  # the bare-array form of the format: the whole document is the events
        events, end = _decode(decoder, text, i)
        return events, text.rindex("]", i, end)
    if text[i:i + 1] != "{":
        raise AnnotateError("not a trace: expected a JSON object")
    i += 1
    while True:
        i = _blank(text, i)
        if text[i:i + 1] == "}":
            raise AnnotateError("not a trace: no traceEvents")
        key, i = _decode(decoder, text, i)
        i = _blank(text, i)
        if text[i:i + 1] != ":":
            raise AnnotateError(f"not strict JSON at offset {i}")
        i = _blank(text, i + 1)
        value, end = _decode(decoder, text, i)
        if key == "traceEvents" and isinstance(value, list):
            return value, text.rindex("]", i, end)
        i = _blank(text, end)
        if text[i:i + 1] == ",":
            i += 1


def _blank(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _decode(decoder: json.JSONDecoder, text: str, i: int):
    try:
        return decoder.raw_decode(text, i)
    except json.JSONDecodeError as exc:
        raise AnnotateError(f"cannot add events to this trace: it is not strict JSON ({exc.msg} at offset "
                            f"{exc.pos}); `tracelint trace` reads it, but an annotated copy would rewrite it") from None


def _events(report: Report, events: list) -> tuple[list[dict], tuple[int, int, int]]:
    pids = [e.get("pid") for e in events if isinstance(e, dict)]
    used = {p for p in pids if isinstance(p, int) and not isinstance(p, bool)}
    pid = max(used, default=0) + 1
    out: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "tracelint"}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": -1}},
    ]

    def thread(tid: int, name: str) -> None:
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})

    thread(1, "findings")
    thread(2, "host syncs")
    n_gaps = 0
    for i, analysis in enumerate(report.analyses):
        if not analysis.gaps:
            continue
        tid = 10 + i
        thread(tid, f"idle gaps (GPU {analysis.device})")
        for gap in analysis.gaps:
            out.append({"ph": "X", "cat": CATEGORY, "name": f"idle: {_CAUSE_WORDS.get(gap.cause, gap.cause)}",
                        "pid": pid, "tid": tid, "ts": gap.start, "dur": gap.end - gap.start,
                        "args": {"cause": gap.cause, "idle_us": round(gap.end - gap.start, 3),
                                 "step": analysis.step_number(gap.step)}})
            n_gaps += 1
    n_findings = 0
    first = min((a.window[0] for a in report.analyses if a.window), default=None)
    for finding in report.findings:
        loc = finding.location
        ts = loc.start_us if isinstance(loc, TraceLocation) else None
        ts = ts if isinstance(ts, (int, float)) and math.isfinite(ts) else first
        if ts is None:
            continue
        src = finding.source
        out.append({"ph": "i", "s": "t", "cat": CATEGORY, "name": f"{finding.code} {rule_name(finding.code) or ''}"
                    .strip(), "pid": pid, "tid": 1, "ts": ts,
                    "args": {"message": finding.message, "severity": str(finding.severity),
                             "source": f"{src.path}:{src.line}" if src else None,
                             "step": loc.step if isinstance(loc, TraceLocation) else None,
                             "event": loc.event if isinstance(loc, TraceLocation) else None}})
        n_findings += 1
    flows = _sync_flows(report, events, pid)
    out.extend(flows)
    return out, (n_gaps, n_findings, sum(1 for e in flows if e["ph"] == "s"))


def _sync_flows(report: Report, events: list, pid: int) -> list[dict]:
    """A slice per host sync that waited for GPU work, and a flow from the sync call to that work."""
    by_corr: dict[tuple[bool, object], dict] = {}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        args = e.get("args")
        corr = args.get("correlation") if isinstance(args, dict) else None
        if corr is None:
            continue
        gpu = e.get("cat") in _GPU_CATEGORIES
        if gpu or e.get("name") in SYNC_CALLS:
            by_corr.setdefault((gpu, corr), e)
    out: list[dict] = []
    flow = 0
    for analysis in report.analyses:
        work = sorted((g for g in analysis.gpu_events if g.correlation is not None), key=lambda g: g.end)
        ends = [g.end for g in work]
        for call in analysis.model.runtime:
            if call.name not in SYNC_CALLS or call.correlation is None or flow >= MAX_FLOWS:
                continue
            lo, hi = bisect_left(ends, call.start), bisect_right(ends, call.end + _SYNC_TOLERANCE_US)
            if lo >= hi:
                continue  # the GPU had nothing running: the call did not wait
            waited = work[hi - 1]
            host, gpu = by_corr.get((False, call.correlation)), by_corr.get((True, waited.correlation))
            if host is None or gpu is None:
                continue
            flow += 1
            out.append({"ph": "X", "cat": CATEGORY, "name": f"sync waits for {cut(waited.name, 60)}", "pid": pid,
                        "tid": 2, "ts": call.start, "dur": max(call.end - call.start, 0.001),
                        "args": {"call": call.name, "waited_for": waited.name,
                                 "gpu_work_end_us": waited.end, "step": analysis.step_number(waited.step)}})
            out.append({"ph": "s", "cat": CATEGORY, "name": "waited for", "id": flow, "pid": host.get("pid"),
                        "tid": host.get("tid"), "ts": host.get("ts")})
            out.append({"ph": "f", "bp": "e", "cat": CATEGORY, "name": "waited for", "id": flow,
                        "pid": gpu.get("pid"), "tid": gpu.get("tid"), "ts": gpu.get("ts")})
    return out
