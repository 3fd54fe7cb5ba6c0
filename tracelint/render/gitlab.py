"""GitLab Code Quality report (``--format gitlab``), for ``artifacts: reports: codequality:``.

A JSON array of issues with the fields GitLab requires: ``description``, ``check_name``, ``fingerprint`` (unique
per issue: GitLab shows only the first of equal fingerprints), ``severity`` (info | minor | major | critical |
blocker) and ``location.path`` with ``location.lines.begin``. Paths are relative to the repository root (the
nearest folder with ``.git`` at or above the working directory, else the working directory:
engine.display.repo_path). A trace finding sits at its source line when the trace's stack gives one, else at
line 1 of the trace file. Unreadable inputs have no place in this format; the CLI reports them on stderr. A finding
``tracelint verify`` measured carries the measurement in its description (``...; verify: confirmed, 1.43× ...``).
The description, which GitLab shows to people, has its control characters, ANSI escapes and bidi controls shown as
escapes (``\\x1b``, ``\\u202e``), as in the text format; the report stays valid JSON whatever a trace or a file
name holds (see the JSON format and tracelint.engine.escape).
"""
from __future__ import annotations

from tracelint.engine.escape import terminal
from tracelint.engine.finding import Severity
from tracelint.engine.result import RunResult
from tracelint.render._common import anchor, dumps, measured_message, unique_fingerprints

SEVERITY = {Severity.INFO: "info", Severity.WARNING: "major", Severity.ERROR: "critical"}


def render(result: RunResult) -> str:
    issues = []
    for finding, fingerprint in zip(result.findings, unique_fingerprints(result.findings), strict=True):
        at = anchor(finding)
        issues.append({
            "type": "issue",
            "description": terminal(f"{finding.code} {measured_message(finding, at.where)}"),
            "check_name": finding.code,
            "categories": ["Performance"],
            "fingerprint": fingerprint,
            "severity": SEVERITY[finding.severity],
            "location": {"path": at.path, "lines": {"begin": at.line, "end": at.end_line or at.line}},
        })
    return dumps(issues) + "\n"
