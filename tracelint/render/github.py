"""GitHub Actions workflow commands (``--format github``): one annotation per finding on the pull request.

``::warning file=train.py,line=12,col=5,endLine=12,endColumn=17,title=TL101 item-in-loop::message``; severity
error → ``::error``, warning → ``::warning``, info → ``::notice``. Values are escaped as the Actions toolkit
escapes them (``%`` → ``%25``, CR → ``%0D``, LF → ``%0A``; in properties also ``:`` → ``%3A`` and ``,`` → ``%2C``)
so a message cannot end the command early or inject another; other control characters (ANSI escapes, NUL, DEL,
C1), bidi controls and a file name's undecodable bytes are shown as escapes first (``\\x1b``, ``\\u202e``,
``\\xff``: tracelint.engine.escape.terminal), as in the text format. A trace finding is annotated at its source
line when the trace's Python stack gives one, else at the trace file. Files are named from the repository root
(engine.display.repo_path), as GitHub matches annotations to the checkout's files. Each trace's verdict becomes a
notice and each unreadable input an error, so that a CI log shows them where people look. A finding ``tracelint
verify`` measured says so in its message: ``...; verify: confirmed, 1.43× (10.10 → 7.05 ms/step)``.
"""
from __future__ import annotations

from tracelint.engine.catalog import rule_name
from tracelint.engine.display import repo_path
from tracelint.engine.escape import terminal
from tracelint.engine.finding import Finding, Severity
from tracelint.engine.result import RunResult
from tracelint.render._common import anchor, measured_message, verdict_line

_COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def escape_data(text: str) -> str:
    """A command's message: CR and LF as the toolkit escapes them (GitHub shows them as line breaks), every other
    control character as a visible escape."""
    return terminal(text, keep="\r\n").replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(name: str, message: str, **properties: object) -> str:
    """``::name key=value,...::message`` with every part escaped; properties that are None are left out."""
    props = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties.items() if value is not None)
    return f"::{name}{' ' + props if props else ''}::{escape_data(message)}"


def annotation(finding: Finding) -> str:
    at = anchor(finding)
    return command(
        _COMMAND[finding.severity],
        measured_message(finding, at.where),
        file=at.path,
        line=at.line,
        col=at.column,
        endLine=at.end_line if at.exact else None,
        endColumn=at.end_column,
        title=f"{finding.code} {rule_name(finding.code)}",
    )


def render(result: RunResult) -> str:
    lines = [annotation(f) for f in result.findings]
    for summary in result.traces:
        rank = f" (rank {summary.rank})" if summary.rank is not None else ""
        lines.append(command("notice", verdict_line(summary), file=repo_path(summary.path),
                             title=f"tracelint verdict{rank}"))
    for error in result.errors:
        lines.append(command("error", error.message, file=repo_path(error.path), line=error.line,
                             title="tracelint: unreadable input"))
    return "".join(line + "\n" for line in lines)
