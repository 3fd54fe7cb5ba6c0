"""SARIF 2.1.0 (``--format sarif``), shaped for GitHub code scanning (``github/codeql-action/upload-sarif``).

What GitHub requires, and where it comes from here:
- ``$schema``, ``version`` "2.1.0", one run with ``tool.driver.name``, ``version`` and ``rules``;
- each rule: ``id``, ``name``, ``shortDescription``, ``fullDescription``, ``help`` (markdown: the catalog
  file; text: its summary), ``defaultConfiguration.level`` and ``properties`` (tags, ``problem.severity``);
- each result: ``ruleId``, ``ruleIndex`` (into ``rules``), ``level``, ``message.text``, ``partialFingerprints`` and
  exactly one location: ``physicalLocation.artifactLocation.uri`` (relative to the working directory, forward
  slashes, percent-encoded: a file name's bytes that are not UTF-8 as themselves, ``bad%FF.py``) and
  ``region.startLine`` (≥ 1), with 1-based columns where the span is known.

GitHub rejects a result without a location, and a trace finding is not a place in a source file. So a trace
finding is pinned to the source line its Python stack gives when the trace has one (``with_stack=True``), and
otherwise to line 1 of the trace file itself; either way the message names the trace, rank and step, and
``properties.trace`` carries them as data. A notebook finding is pinned to line 1 of the notebook with its cell and
line in the message, because a line within a cell is not a line of the .ipynb file.

Unreadable inputs become ``invocations[0].toolExecutionNotifications`` (and ``executionSuccessful: false``); the
trace verdicts and metrics ride along in ``runs[0].properties.traces`` (the JSON format's ``traces`` entries), and a
``tracelint verify`` report's targets in ``runs[0].properties.verify`` (its ``verify`` entries; each measured
result also carries ``properties.verification``). A ``tracelint run`` report's record is ``runs[0].properties.run``,
and each of its results carries ``properties.evidence`` (the JSON format's ``evidence``: the lint and the trace
finding, the measured cost) and says in its message what the trace measured of it.

Text from traces and files is data. Messages, which code scanning shows to people, have their control characters,
ANSI escapes and bidi controls shown as escapes (``\\x1b``, ``\\u202e``, ``\\xff`` for a file name's undecodable
byte), as in the text format; the log stays valid JSON and SARIF whatever the rest holds (integers beyond
±(2**53 − 1) in properties as decimal strings, undecodable bytes as U+FFFD; see the JSON format and
tracelint.engine.escape).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from urllib.parse import quote

from tracelint.engine.catalog import RuleDoc, catalog
from tracelint.engine.display import report_path
from tracelint.engine.escape import terminal, utf8_bytes, valid_unicode
from tracelint.engine.finding import Finding, Severity, TraceLocation
from tracelint.engine.records import evidence_dict, trace_fields
from tracelint.engine.result import InputError, RunResult
from tracelint.engine.version import __version__
from tracelint.render._common import (
    Anchor,
    anchor,
    anchored_message,
    dumps,
    is_line,
    trace_summary_dict,
    unique_fingerprints,
)

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
LEVEL = {Severity.INFO: "note", Severity.WARNING: "warning", Severity.ERROR: "error"}
# GitHub's own severity vocabulary for non-security results (shown in the code scanning UI).
PROBLEM_SEVERITY = {Severity.INFO: "recommendation", Severity.WARNING: "warning", Severity.ERROR: "error"}
FINGERPRINT_KEY = "tracelintFingerprint/v1"


def render(result: RunResult) -> str:
    return dumps(document(result)) + "\n"


def document(result: RunResult) -> dict:
    docs = catalog()
    # Every catalog rule, plus any code a finding carries that the catalog lacks, so every ruleIndex resolves.
    codes = sorted(set(docs) | {f.code for f in result.findings})
    index = {code: i for i, code in enumerate(codes)}
    fingerprints = unique_fingerprints(result.findings)
    run = {
        "tool": {"driver": {
            "name": "tracelint",
            "version": __version__,
            "semanticVersion": __version__,
            "rules": [_rule(code, docs.get(code)) for code in codes],
        }},
        "invocations": [_invocation(result.errors)],
        "results": [_result(f, index[f.code], fp) for f, fp in zip(result.findings, fingerprints, strict=True)],
        "columnKind": "unicodeCodePoints",
        "properties": {"traces": [trace_summary_dict(s) for s in result.traces]},
    }
    if result.verifications:
        run["properties"]["verify"] = result.verifications
    if result.run is not None:
        run["properties"]["run"] = result.run
    if result.diffs is not None:  # `tracelint diff`: the results are NEW's new findings, the pairs ride along
        run["properties"]["diffs"] = result.diffs
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}


def _rule(code: str, doc: RuleDoc | None) -> dict:
    if doc is None:
        return {"id": code, "name": code, "shortDescription": {"text": code}, "fullDescription": {"text": code},
                "help": {"text": code}, "properties": {"tags": ["performance"]}}
    summary = doc.summary or doc.name
    body = doc.text.split("\n---\n", 1)[-1].strip()
    return {
        "id": doc.code,
        "name": doc.name,
        "shortDescription": {"text": _first_sentence(summary)},
        "fullDescription": {"text": summary},
        "help": {"text": f"{summary} (`tracelint rule {doc.code}` prints the full documentation.)", "markdown": body},
        "defaultConfiguration": {"level": LEVEL[doc.severity]},
        "properties": {
            "tags": list(dict.fromkeys(["performance", "pytorch", doc.family, *sorted(doc.implemented_by)])),
            "problem.severity": PROBLEM_SEVERITY[doc.severity],
        },
    }


def _first_sentence(text: str) -> str:
    head, dot, _ = text.partition(". ")
    return head + "." if dot else text


def _result(finding: Finding, rule_index: int, fingerprint: str) -> dict:
    at = anchor(finding)
    out = {
        "ruleId": finding.code,
        "ruleIndex": rule_index,
        "level": LEVEL[finding.severity],
        "message": {"text": terminal(_message(finding, at.where))},
        "locations": [{"physicalLocation": _physical(at)}],
        "partialFingerprints": {FINGERPRINT_KEY: fingerprint},
    }
    properties: dict = {}
    if isinstance(finding.location, TraceLocation):
        properties = {"origin": "trace", "trace": {"path": finding.path, **trace_fields(finding.location)}}
    properties.update(finding.details)  # measured facts (trace numbers, a `verification` result) as properties
    if finding.evidence is not None:  # `tracelint run`: both halves' evidence, as the JSON report's
        properties["evidence"] = evidence_dict(finding.evidence)
    if properties:
        out["properties"] = properties
    return out


def _message(finding: Finding, where: str) -> str:
    """The anchored message; a `tracelint run` finding's also says what the trace measured of it."""
    message = anchored_message(finding, where)
    evidence = finding.evidence
    return f"{message}; {evidence.words()}" if evidence is not None and evidence.source is not None else message


def _physical(at: Anchor) -> dict:
    region: dict = {"startLine": at.line}
    if at.column is not None:
        region["startColumn"] = at.column
        region["endLine"] = at.end_line or at.line
        if at.end_column is not None:
            region["endColumn"] = at.end_column
    return {"artifactLocation": {"uri": artifact_uri(at.path)}, "region": region}


@lru_cache(maxsize=4096)
def artifact_uri(path: str) -> str:
    """A relative URI reference for a path inside the working directory; a file: URI for one outside it. Both
    percent-encode the bytes of the name (undecodable ones as themselves)."""
    if Path(path).is_absolute():
        try:
            return Path(path).as_uri()
        except UnicodeEncodeError:  # a lone surrogate that is no file name's byte
            return Path(valid_unicode(path)).as_uri()
    return quote(utf8_bytes(path))


def _invocation(errors: list[InputError]) -> dict:
    notes = []
    for error in errors:
        location: dict = {"artifactLocation": {"uri": artifact_uri(report_path(error.path))}}
        if error.line and is_line(error.line) and error.line >= 1:
            location["region"] = {"startLine": error.line}
        notes.append({"level": "error", "message": {"text": terminal(error.message)},
                      "locations": [{"physicalLocation": location}]})
    return {"executionSuccessful": not errors, "toolExecutionNotifications": notes}
