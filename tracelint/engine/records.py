"""Findings as plain records: the shape the JSON report writes and a diff record embeds (tracelint.render.json
documents it)."""
from __future__ import annotations

import math

from tracelint.engine.catalog import rule_name
from tracelint.engine.finding import Evidence, Finding
from tracelint.engine.location import SourceLocation, TraceLocation
from tracelint.engine.result import BaselineUse


def finding_dict(finding: Finding) -> dict:
    """A finding as the JSON report writes it (tracelint.render.json documents the shape)."""
    loc = finding.location
    span = loc if isinstance(loc, SourceLocation) else None
    trace_src = loc.source if isinstance(loc, TraceLocation) else None
    return {
        "code": finding.code,
        "name": rule_name(finding.code),
        "severity": str(finding.severity),
        "message": finding.message,
        "origin": finding.origin,
        "path": finding.path,
        "line": span.line if span else None,
        "column": span.column if span else None,
        "end_line": span.end_line if span else None,
        "end_column": span.end_column if span else None,
        "cell": span.cell if span else None,
        "fingerprint": finding.fingerprint(),
        "fix": {"title": finding.fix.title, "safe": finding.fix.safe} if finding.fix else None,
        "source": {"path": trace_src.path, "line": trace_src.line} if trace_src else None,
        "trace": trace_fields(loc) if isinstance(loc, TraceLocation) else None,
        "details": dict(finding.details),
        "estimate": finding.estimate.as_dict() if finding.estimate is not None else None,
        "evidence": evidence_dict(finding.evidence) if finding.evidence is not None else None,
    }


def baseline_dict(use: BaselineUse | None) -> dict | None:
    """What --baseline did, as the JSON report's ``baseline`` (null without a baseline)."""
    return None if use is None else {"path": use.path, "hidden": use.hidden, "stale": use.stale}


def evidence_dict(evidence: Evidence) -> dict:
    """A `tracelint run` finding's evidence (tracelint.render.json documents the shape)."""
    return {"source": finding_dict(evidence.source) if evidence.source is not None else None,
            "trace": finding_dict(evidence.trace) if evidence.trace is not None else None,
            "cost_pct_of_step": evidence.cost_pct, "match": evidence.match,
            "in_profiled_steps": evidence.trace is not None}


def trace_fields(loc: TraceLocation) -> dict:
    return {"rank": loc.rank, "step": loc.step, "start_us": _finite(loc.start_us), "end_us": _finite(loc.end_us),
            "event": loc.event}


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None
