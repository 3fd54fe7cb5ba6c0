"""Helpers the trace rules share: finding construction, number formatting, source lines.

Thresholds are ``config.threshold(KEY)``: declared in the rule's rules/ file (tracelint.engine.thresholds)."""
from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Collection
from dataclasses import replace
from functools import lru_cache
from operator import attrgetter
from pathlib import Path

from tracelint.engine import Finding, Location, SourceLocation


def finding(rule, message: str, location: Location, **details) -> Finding:
    try:
        severity = rule.doc().severity
    except KeyError:
        from tracelint.engine import Severity

        severity = Severity.WARNING
    return Finding(rule.code, severity, message, location, details=tuple(details.items()))


def kernel_location(analysis, events: list, name: str) -> Location:
    """Where a finding about kernel ``name`` points: the first of its ``events``, with the source line its launch
    ran (the launching thread's user frame) when the trace has it."""
    first = min(events, key=attrgetter("start"))
    loc = analysis.location(step=first.step, start=first.start, end=first.end, event=name)
    if first.launch is not None:
        loc = replace(loc, source=analysis.source_at(first.launch.tid, first.launch.start))
    return loc


def launched_under(analysis, tid: object, start: float, end: float) -> list:
    """The GPU events of the analysed device whose launch call starts on host thread ``tid`` within [start, end]:
    the work a CPU op or annotation launched (an index by thread is built once per analysis)."""
    starts, events = analysis.memo("launches-by-thread", _launch_index).get(tid, ([], []))
    return events[bisect_left(starts, start):bisect_right(starts, end)]


def _launch_index(analysis) -> dict[object, tuple[list[float], list]]:
    index: dict[object, tuple[list[float], list]] = {}
    for g in sorted([g for g in analysis.gpu_events if g.launch is not None], key=_launch_start):
        launch = g.launch
        entry = index.get(launch.tid)
        if entry is None:
            entry = index[launch.tid] = ([], [])
        entry[0].append(launch.start)
        entry[1].append(g)
    return index


_launch_start = attrgetter("launch.start")


def in_few_steps(analysis, steps: Collection, min_pct: float) -> bool:
    """A pattern seen in ``steps`` (step indices) runs in fewer than ``min_pct`` percent of the profiled steps: a
    rare path (periodic logging, one debugging step), not the steady state. Never for a trace without steps."""
    return analysis.has_steps and 100.0 * len(steps) / (len(analysis.model.steps) or 1) < min_pct


def ms(us: float | None) -> str:
    """A duration in µs as a short human string (µs below 1 ms)."""
    if us is None:
        return "?"
    return f"{us / 1000:.1f} ms" if us >= 1000 else f"{us:.0f} µs"


def pct(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f} %"


def mib(nbytes: float | None) -> str:
    if nbytes is None:
        return "?"
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


# Python frames in a trace name the called function's file and its first line (or, for a frame already running when
# profiling started, the line it was on then), never the statement that made the call. When the user's file is at
# hand, the statement is found by looking for the op's spelling in that function.
def refine_source(source: SourceLocation | None, trace_path: str, pattern: re.Pattern[str] | None, *,
                  only_one: bool = False) -> SourceLocation | None:
    """``source`` moved to the first line of its function that matches ``pattern`` when the trace's own place names
    the file (``_read_lines``); else the stack's line as it is. ``only_one``: only where no other line of the
    function matches (a pattern as loose as an ``if`` test: a wrong line is worse than the function's)."""
    if source is None or pattern is None:
        return source
    lines = _read_lines(source.path, Path(trace_path).resolve())  # resolved here: the cache's key is the file
    if not lines or not 0 < source.line <= len(lines):
        return source
    start = source.line - 1
    if pattern.search(lines[start]):
        return source
    # the enclosing def: the nearest line above (or at) the frame line that starts with def at a lower indent
    def_at = next((i for i in range(start, -1, -1) if lines[i].lstrip().startswith(("def ", "async def "))), None)
    if def_at is None:
        return source
    indent = len(lines[def_at]) - len(lines[def_at].lstrip())
    found = []
    for i in range(def_at + 1, len(lines)):
        text = lines[i]
        if text.strip() and len(text) - len(text.lstrip()) <= indent:
            break  # end of the function
        if pattern.search(text.split("#", 1)[0]):
            found.append(i)
            if not only_one or len(found) > 1:
                break
    return replace(source, line=found[0] + 1) if len(found) == 1 else source


@lru_cache(maxsize=64)
def _read_lines(path: str, trace: Path) -> tuple[str, ...] | None:
    """The lines of the stack's file: an absolute path as it is, a relative one (the script was started by a
    relative path) below the trace's folder or a folder above it, the checkout that holds the traces. Never below
    the working directory or the config's root: the same trace gave line 54 from the repository root and line 56
    elsewhere, and a finding's line enters its fingerprint, its baseline entry and its diff key."""
    if Path(path).is_absolute():
        candidates = [Path(path)]
    else:
        candidates = [base / path for base in trace.parents]
    for candidate in candidates:
        try:
            if candidate.is_file():
                return tuple(candidate.read_text(encoding="utf-8", errors="replace").splitlines())
        except OSError:
            continue
    return None
