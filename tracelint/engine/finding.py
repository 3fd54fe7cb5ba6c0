"""The one result type both halves produce: a frozen Finding at a source or trace location."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Literal

from tracelint.engine.severity import Severity


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


@dataclass(frozen=True, slots=True)
class Edit:
    """Replace the text between two source positions (1-based lines and columns, like SourceLocation; the end is
    exclusive)."""

    line: int
    column: int
    end_line: int
    end_column: int
    text: str


@dataclass(frozen=True, slots=True)
class Fix:
    title: str
    edits: tuple[Edit, ...]
    safe: bool = True


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    severity: Severity
    message: str
    location: Location
    fix: Fix | None = None
    # Extra facts a renderer may show (measured values of a trace finding, verification results).
    details: tuple[tuple[str, object], ...] = field(default=(), compare=False)

    @property
    def origin(self) -> Literal["source", "trace"]:
        return "trace" if isinstance(self.location, TraceLocation) else "source"

    @property
    def path(self) -> str:
        return self.location.path

    @property
    def source(self) -> SourceLocation | None:
        """The source position, for a source finding or a trace finding whose stack gives one."""
        loc = self.location
        return loc if isinstance(loc, SourceLocation) else loc.source

    def fingerprint(self) -> str:
        """Stable across runs and line moves: code, path and message (not the line number) for a source finding;
        for a trace finding, whose message carries measured numbers that change from run to run, code, trace
        path, the source line it points at and the event name."""
        loc = self.location
        if isinstance(loc, TraceLocation):
            where = f"{loc.source.path}:{loc.source.line}" if loc.source else ""
            text = f"{self.code}\0{self.path}\0{where}\0{loc.event or ''}"
        else:
            text = f"{self.code}\0{self.path}\0{self.message}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def __str__(self) -> str:
        """The finding as the text report prints it, without color: ``train.py:42:9: TL101 warning [*] message``,
        then, for a trace finding, its source line and measured details on lines of their own."""
        from tracelint.render.text import plain_finding  # the one place that formats a finding line

        return plain_finding(self)

    def with_severity(self, severity: Severity) -> Finding:
        return replace(self, severity=severity)

    def sort_key(self) -> tuple:
        loc = self.location
        if isinstance(loc, SourceLocation):
            return (loc.path, loc.cell or 0, loc.line, loc.column or 0, self.code)
        return (loc.path, loc.rank or 0, loc.step or 0, loc.start_us or 0.0, self.code)
