"""Where a finding is: a span in a source file, or a place in a profiler trace (rank, step, time, event), and how
each reads in a report's words."""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SourceLocation:
    """A span in a source file. Lines and columns are 1-based, as editors, the text report and the JSON report
    count them (a column counts characters, not bytes); the end column is exclusive. ``column`` is None when only
    the line is known (the Python stack of a trace event gives no column)."""

    path: str
    line: int
    column: int | None = None
    end_line: int | None = None
    end_column: int | None = None
    cell: int | None = None  # notebook cell number (1-based) when path is an .ipynb; line counts within the cell

    def __str__(self) -> str:
        """``train.py:42:9``, ``nb.ipynb:cell 3:4:5``: the position as the text report shows it."""
        pos = f"{self.line}:{self.column}" if self.column else str(self.line)
        return f"{self.path}:cell {self.cell}:{pos}" if self.cell is not None else f"{self.path}:{pos}"


@dataclass(frozen=True, slots=True)
class TraceLocation:
    """A place in a profiler trace, with the source position its Python stack gives when it has one."""

    path: str
    rank: int | None = None
    step: int | None = None
    start_us: float | None = None
    end_us: float | None = None
    event: str | None = None
    source: SourceLocation | None = None


Location = SourceLocation | TraceLocation


def trace_context(loc: TraceLocation) -> str:
    """'rank 0, step 12' (the parts that are known; may be empty)."""
    parts = []
    if loc.rank is not None:
        parts.append(f"rank {loc.rank}")
    if loc.step is not None:
        parts.append(f"step {loc.step}")
    return ", ".join(parts)


def trace_words(loc: TraceLocation) -> str:
    """'trace.json.gz, rank 0, step 12'."""
    return ", ".join(filter(None, (loc.path, trace_context(loc))))


_DIGITS = re.compile(r"\d+")
_TRACE_FILE = re.compile(r"\.json(\.gz)?$")


def digits_as_n(text: str) -> str:
    """``text`` with each run of digits written ``N``: what stays of it from run to run (a step number, the line of
    a caller that moved)."""
    return _DIGITS.sub("N", text)


def event_identity(loc: TraceLocation) -> str:
    """What a trace finding without a Python stack is across runs (baselines, SARIF fingerprints): its event or
    kernel name with digit runs as ``N`` (``ProfilerStep#N``); a job finding, whose event names its rank's trace
    file (a host name and a time in the file name, the folder wherever the job was copied), is ``rank R``."""
    event = loc.event or ""
    if _TRACE_FILE.search(event):
        return f"rank {loc.rank}" if loc.rank is not None else "job"
    return digits_as_n(event)
