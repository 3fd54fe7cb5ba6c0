"""What the output formats share: JSON encoding, report paths, and where a file-based report pins a finding.

Not a format itself (the leading underscore keeps it out of ``tracelint.render.formats()``). How text from traces and
source files is escaped for each format is ``tracelint.engine.escape``.
"""
from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import orjson

from tracelint.engine.display import repo_path, verification_words
from tracelint.engine.escape import MAX_SAFE_INT, json_safe, json_text
from tracelint.engine.finding import Finding, SourceLocation, TraceLocation
from tracelint.engine.location import trace_words
from tracelint.engine.result import TraceSummary


def rule_counts(findings: Iterable[Finding]) -> list[tuple[str, int, bool]]:
    """--statistics: (code, count, whether a safe fix exists) per rule, most frequent first, then by code."""
    findings = list(findings)
    counts = Counter(f.code for f in findings)
    fixable = {f.code for f in findings if f.fix and f.fix.safe}
    return [(code, n, code in fixable) for code, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]


def dumps(obj: object, *, indent: bool = True) -> str:
    """JSON text that every parser reads back exactly, whatever a trace or a file name held. orjson writes NaN and
    ±inf as null; unknown objects (enums, paths, numpy scalars) as their str. Integers beyond ±(2**53 − 1) become
    decimal strings and lone surrogates (undecodable bytes of a file name) U+FFFD (``escape.json_safe``, only when
    the fast path meets one); DEL, C1 and bidi controls and ``##[`` are written as ``\\uXXXX`` escapes
    (``escape.json_text``)."""
    option = orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    try:  # strict integers: orjson refuses what needs json_safe (big integers, surrogates) instead of writing it
        data = orjson.dumps(obj, default=_fallback, option=option | orjson.OPT_STRICT_INTEGER)
    except orjson.JSONEncodeError:
        data = orjson.dumps(json_safe(obj, _fallback), default=_fallback, option=option)
    return json_text(data)


def _fallback(value: object) -> object:
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    if isinstance(value, float):  # a float subclass orjson refuses
        return float(value) if math.isfinite(value) else None
    return str(value)


@dataclass(frozen=True, slots=True)
class Anchor:
    """Where a file-based report (SARIF, GitHub, GitLab) pins a finding: a file, a 1-based line and, when known,
    1-based columns (end column exclusive, as SARIF counts it). ``where`` says in words what the span cannot:
    the notebook cell, or the trace rank and step."""

    path: str
    line: int
    column: int | None = None
    end_line: int | None = None
    end_column: int | None = None
    where: str = ""

    @property
    def exact(self) -> bool:
        return self.column is not None


def anchor(finding: Finding) -> Anchor:
    """A source finding at its span; a trace finding at the source line its stack gives, else at line 1 of the
    trace file (annotation formats reject a result without a file and line). The path as CI formats name it
    (repo_path: from the repository root)."""
    where = trace_words(finding.location) if isinstance(finding.location, TraceLocation) else ""
    src = finding.source
    if src is None:
        return Anchor(repo_path(finding.path), 1, where=where)
    if src.cell is not None:
        # A notebook line counts within its cell, not within the .ipynb file: pin the file, say the cell in words.
        cell = f"cell {src.cell}, line {src.line}"
        return Anchor(repo_path(src.path), 1, where=f"{cell}; {where}" if where else cell)
    if not is_line(src.line):  # a trace's stack can say anything: a line no file has is no place to pin
        return Anchor(repo_path(src.path), 1, where=where)
    line = max(src.line, 1)
    if isinstance(finding.location, SourceLocation):
        if not (is_line(src.column) and is_line(src.end_line or 1) and is_line(src.end_column or 1)):
            return Anchor(repo_path(src.path), line, where=where)
        column = src.column
        end_line = max(src.end_line or line, line)
        end_column = src.end_column
        if end_column is not None and end_line == line and end_column < column:
            end_column = column
        return Anchor(repo_path(src.path), line, column, end_line, end_column, where)
    # A trace stack gives a line only (its column is None).
    return Anchor(repo_path(src.path), line, where=where)


def is_line(n: object) -> bool:
    """A line or column number a report can carry as an integer (SARIF and GitLab require one)."""
    return isinstance(n, int) and -MAX_SAFE_INT <= n <= MAX_SAFE_INT


def anchored_message(finding: Finding, where: str) -> str:
    return f"{finding.message} ({where})" if where else finding.message


def measured_message(finding: Finding, where: str) -> str:
    """The anchored message, plus what ``tracelint run`` measured of it in the trace (``evidence``: '...; trace:
    1 sync per step ..., 2.2 % of the step' or '...; not seen in the profiled steps') and what ``tracelint verify``
    measured when it carries a ``verification`` detail: '...; verify: confirmed, 1.43× (CI 1.40–1.46; 10.10 → 7.05
    ms/step)', '...; verify: small, 1.01× (CI 1.00–1.02; ...)', '...; verify: no effect larger than ±2.0% (...)' or
    '...; verify: failed (why)'."""
    message = anchored_message(finding, where)
    evidence = finding.evidence
    if evidence is not None and evidence.source is not None:
        message += f"; {evidence.words()}"
    measured = dict(finding.details).get("verification")
    if not isinstance(measured, dict):
        return message
    return f"{message}; verify: {verification_words(measured)}"


def verdict_line(summary: TraceSummary) -> str:
    """'input-bound: GPU idle 81% of the step; ...' whether or not the analyzer's evidence already names the verdict."""
    evidence = summary.evidence.strip()
    if not evidence:
        return summary.verdict
    return evidence if evidence.startswith(f"{summary.verdict}:") else f"{summary.verdict}: {evidence}"


def is_rank_summary(summary: TraceSummary, traces: Iterable[TraceSummary]) -> bool:
    """A summary over the ranks of a directory: no rank of its own, and other summaries come from inside it."""
    if summary.rank is not None:
        return False
    folder = Path(summary.path)
    return any(t is not summary and folder in Path(t.path).parents for t in traces)


def trace_summary_dict(summary: TraceSummary) -> dict:
    return {"path": summary.path, "rank": summary.rank, "verdict": summary.verdict, "evidence": summary.evidence,
            "metrics": summary.metrics, "warnings": list(summary.warnings), "profiler": summary.profiler,
            "roofline": summary.roofline}


def unique_fingerprints(findings: Iterable[Finding]) -> list[str]:
    """One fingerprint per finding, distinct within a report: the engine's fingerprint (code, path, message; stable
    when lines move) plus its occurrence number, because GitLab and GitHub merge results whose fingerprints are
    equal, and two identical calls in one file give identical messages."""
    seen: Counter[str] = Counter()
    out = []
    for finding in findings:
        base = finding.fingerprint()
        n = seen[base]
        seen[base] += 1
        out.append(base if n == 0 else hashlib.sha256(f"{base}\0{n}".encode()).hexdigest()[:16])
    return out
