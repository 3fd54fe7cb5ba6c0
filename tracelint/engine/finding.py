"""The one result type both halves produce: a frozen Finding at a source or trace location."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Literal

from tracelint.engine.severity import Severity


@dataclass(frozen=True, slots=True)
class SourceLocation:
    """A span in a source file; lines are 1-based, columns 0-based (as libcst reports them)."""

    path: str
    line: int
    column: int = 0
    end_line: int | None = None
    end_column: int | None = None
    cell: int | None = None  # notebook cell number (1-based) when path is an .ipynb


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
    """Replace the text between two source positions (1-based lines, 0-based columns)."""

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

    def with_severity(self, severity: Severity) -> Finding:
        return replace(self, severity=severity)

    def sort_key(self) -> tuple:
        loc = self.location
        if isinstance(loc, SourceLocation):
            return (loc.path, loc.cell or 0, loc.line, loc.column, self.code)
        return (loc.path, loc.rank or 0, loc.step or 0, loc.start_us or 0.0, self.code)
