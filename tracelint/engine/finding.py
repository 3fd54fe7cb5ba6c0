"""The one result type both halves produce: a frozen Finding at a source or trace location."""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from typing import Literal

from tracelint.engine.display import Paint, format_metric, repo_path, verification_words
from tracelint.engine.escape import map_strings, no_commands, terminal
from tracelint.engine.location import (
    Location,
    SourceLocation,
    TraceLocation,
    digits_as_n,
    event_identity,
    trace_context,
    trace_words,
)
from tracelint.engine.severity import Severity

PLAIN = Paint(False)


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
class Estimate:
    """What fixing a finding is estimated to buy (issue #38): the step time it saves, of a step of ``step_ms``, and
    how the estimate was made (``basis``: the measure it rests on and the rule's model, in words; each rule's doc
    says its model and the calibration bench, bench/gain_calibration.py, checks it against measured fixes)."""

    saved_ms_per_step: float
    step_ms: float
    basis: str

    @property
    def speedup(self) -> float:
        """The step time before over after: ``step / (step - saved)``."""
        left = self.step_ms - self.saved_ms_per_step
        return self.step_ms / left if left > 0 else math.inf

    def words(self) -> str:
        """``~1.2× (saves ~2.7 ms of 17.1 ms per step)``."""
        return (f"~{_times(self.speedup)} (saves ~{_ms(self.saved_ms_per_step)} of {_ms(self.step_ms)} per step)")

    def as_dict(self) -> dict:
        speedup = self.speedup
        return {"speedup": round(speedup, 3) if math.isfinite(speedup) else None,
                "saved_ms_per_step": round(self.saved_ms_per_step, 3), "step_ms": round(self.step_ms, 3),
                "basis": self.basis}


def _times(x: float) -> str:
    return "∞" if not math.isfinite(x) else f"{x:.2f}×" if x < 1.1 else f"{x:.1f}×" if x < 10 else f"{x:.0f}×"


def _ms(x: float) -> str:
    return f"{x:.2f} ms" if x < 1 else f"{x:.1f} ms" if x < 100 else f"{x:.0f} ms"


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    severity: Severity
    message: str
    location: Location
    fix: Fix | None = None
    # Extra facts a renderer may show (measured values of a trace finding, verification results).
    details: tuple[tuple[str, object], ...] = field(default=(), compare=False)
    # `tracelint run`: what each half saw of this finding (None for every other command).
    evidence: Evidence | None = field(default=None, compare=False)
    # What fixing it is estimated to buy (None: the rule has no fix, or no basis for an estimate in this trace).
    estimate: Estimate | None = field(default=None, compare=False)

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
        """Stable across runs and line moves. A source finding: code, path (as CI formats name it, from the
        repository root: the same whether tracelint was given ``src/x.py``, ``./src/x.py`` or an absolute path, or
        ran in ``src/``) and message with its digits as N (it may name a caller's line), not the line number. A trace
        finding, whose message carries measured numbers that change from run to run: code, the source line it
        points at and the event as baselines know it (location.event_identity: step numbers as N, a job finding's
        rank), not the trace file, whose name (a host and a time, for rank traces) is new every run. A file name's
        undecodable bytes (lone surrogates) are hashed as their ``\\udcff`` escapes, which keeps names that differ
        only in such bytes apart."""
        loc = self.location
        if isinstance(loc, TraceLocation):
            where = f"{loc.source.path}:{loc.source.line}" if loc.source else ""
            text = f"{self.code}\0{where}\0{event_identity(loc)}"
        else:
            text = f"{self.code}\0{repo_path(self.path)}\0{digits_as_n(self.message)}"
        return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()[:16]

    def __str__(self) -> str:
        """The finding as the text report prints it, without color: ``train.py:42:9: TL101 warning [*] message``,
        then, for a trace finding, its source line and measured details on lines of their own; escaped like the
        report."""
        return no_commands("\n".join(self.escaped().lines()))

    def lines(self, paint: Paint = PLAIN, source: list[str] | tuple[str, ...] = ()) -> list[str]:
        """``path:line:col: TL101 warning [*] message`` or ``trace.json.gz (rank 0, step 12): TL202 info message``,
        then the source line of a trace finding (``  --> train.py:42``), the ``source`` lines a report shows under
        it (--show-source) and the measured details (``  = key: value``). The one place a finding line is laid
        out: the text and HTML reports and ``str(finding)`` use it."""
        loc = self.location
        fix = f" {paint('[*]', 'cyan')}" if self.fix and self.fix.safe else ""
        severity = paint(str(self.severity), paint.BY_SEVERITY[self.severity])
        if isinstance(loc, SourceLocation):
            where = paint(f"{loc}:", "bold")
        else:
            context = trace_context(loc)
            where = paint(f"{loc.path}{f' ({context})' if context else ''}:", "bold")
        lines = [f"{where} {paint.code(self.code, self.severity)} {severity}{fix} {self.message}"]
        if isinstance(loc, TraceLocation) and loc.source is not None:
            lines.append(f"  {paint('-->', 'cyan')} {replace(loc.source, column=None)}")
        lines.extend(source)
        facts = [(k, v) for k, v in self.details if k != VERIFICATION]
        if facts:
            lines.append(f"  {paint('=', 'dim')} {', '.join(f'{k}: {format_metric(k, v)}' for k, v in facts)}")
        if self.estimate is not None:
            lines.append(f"  {paint('fix', 'green')}: {self.estimate.words()}; {self.estimate.basis}")
        if self.evidence is not None and self.evidence.source is not None:
            lines.extend(self.evidence.lines(paint))
        measured = dict(self.details).get(VERIFICATION)
        if isinstance(measured, dict):
            lines.append(f"  {paint('verify', 'cyan')}: {verification_words(measured)}")
        return lines

    def escaped(self) -> Finding:
        """This finding with the text a terminal shows of it (location, message, detail names) escaped
        (tracelint.engine.escape.terminal); a detail's value is escaped where format_metric writes it."""
        loc = self.location
        shown = [self.message, loc.path, *(k for k, _ in self.details)]
        if isinstance(loc, TraceLocation) and loc.source is not None:
            shown.append(loc.source.path)
        evidence = self.evidence
        if evidence is not None:
            evidence = Evidence(*(f.escaped() if f is not None else None for f in (evidence.source, evidence.trace)),
                                evidence.cost_pct, evidence.match)
        # The usual finding has nothing to escape: one test instead of a walk keeps a large report fast.
        if all(isinstance(text, str) for text in shown) and "".join(shown).isprintable():
            return self if evidence == self.evidence else replace(self, evidence=evidence)
        return replace(self, location=map_strings(loc, terminal), message=terminal(self.message),
                       details=map_strings(self.details, terminal), evidence=evidence)

    def with_severity(self, severity: Severity) -> Finding:
        return replace(self, severity=severity)

    def sort_key(self) -> tuple:
        loc = self.location
        if isinstance(loc, SourceLocation):
            return (loc.path, loc.cell or 0, loc.line, loc.column or 0, self.code)
        return (loc.path, loc.rank or 0, loc.step or 0, loc.start_us or 0.0, self.code)


VERIFICATION = "verification"  # the detail that carries what `tracelint verify` measured of a finding
NOT_SEEN = "not seen in the profiled steps"


@dataclass(frozen=True, slots=True)
class Evidence:
    """What each half saw of one finding of ``tracelint run``: the lint finding at a line (``source``), the trace
    finding of the same family that points at it (``trace``; None: not seen in the profiled steps) and the share of
    the step the trace measured for it (``cost_pct``). A trace finding no lint finding matched has ``source`` None.
    ``match`` says how the two were paired ("same line", "the loop over `loader`", ...)."""

    source: Finding | None = None
    trace: Finding | None = None
    cost_pct: float | None = None
    match: str | None = None

    def words(self) -> str:
        """'trace (2.2 % of the step): <the trace finding's message> (trace.json.gz, rank 0, step 7)', or
        'not seen in the profiled steps'."""
        if self.trace is None:
            return NOT_SEEN
        cost = f" ({self.cost_pct:.1f} % of the step)" if self.cost_pct is not None else ""
        code = f"{self.trace.code} " if self.source is not None and self.trace.code != self.source.code else ""
        where = trace_words(self.trace.location) if isinstance(self.trace.location, TraceLocation) else ""
        return f"trace{cost}: {code}{self.trace.message}" + (f" ({where})" if where else "")

    def lines(self, paint: Paint = PLAIN) -> list[str]:
        """The lines a merged finding shows under its own: the trace's evidence and its measured details."""
        if self.trace is None:
            return [f"  {paint(NOT_SEEN, 'dim')}"]
        lines = [f"  {paint('trace', 'cyan')}{self.words().removeprefix('trace')}"]
        if self.trace.details:
            facts = ", ".join(f"{k}: {format_metric(k, v)}" for k, v in self.trace.details)
            lines.append(f"    {paint('=', 'dim')} {facts}")
        return lines
