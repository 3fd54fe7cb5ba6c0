"""SARIF 2.1.0 (``--format sarif``), shaped for GitHub code scanning (``github/codeql-action/upload-sarif``).

What GitHub requires, and where it comes from here (tests/render/test_sarif.py checks each, and the log against
the OASIS schema vendored in tests/data/sarif):
- ``$schema``, ``version`` "2.1.0", one run with ``tool.driver.name``, ``version`` and ``rules``;
- each rule: ``id``, ``name``, ``shortDescription``, ``fullDescription``, ``help`` (markdown: the catalog
  file; text: its summary), ``defaultConfiguration.level`` and ``properties`` (tags, at most 20, and
  ``problem.severity``). No ``helpUri`` (the help is inline), no ``precision`` or ``security-severity`` (a
  performance finding has no security severity, and the rules state no measured precision);
- each result: ``ruleId``, ``ruleIndex`` (into ``rules``), ``level``, ``message.text``, exactly one location:
  ``physicalLocation.artifactLocation`` with ``uri`` relative to the source root (forward slashes,
  percent-encoded: a file name's bytes that are not UTF-8 as themselves, ``bad%FF.py``) and ``uriBaseId``
  ``%SRCROOT%``, which ``run.originalUriBaseIds`` maps to that folder (a path outside it is a ``file:`` URI
  without a base), and ``region.startLine`` (≥ 1), with 1-based columns where the span is known. The source root
  is the repository tracelint runs in (the nearest folder at or above the working directory that holds ``.git``),
  else the working directory: GitHub resolves the URIs against the checkout's root, so a run from a subfolder
  (``cd ml && tracelint check --format sarif .``) still names ``ml/train.py``;
- ``partialFingerprints``: ``primaryLocationLineHash`` (what GitHub matches alerts by across runs) and
  ``tracelintFingerprint/v2``, both the hash of the rule, the file, the flagged line's normalized text and the
  occurrence of that line in the file (``line_fingerprints``): an alert survives code moving above it, and a
  trace finding's alert survives its new numbers and its trace file's new name on the next run;
- limits: at most 25,000 results a run and 10 MB a file. Over either, the log keeps the results of the highest
  severity (in report order) and says in a warning notification how many it left out (``render``).

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

import hashlib
from collections import Counter
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote

from tracelint.engine.catalog import RuleDoc, catalog
from tracelint.engine.display import repo_path, source_root
from tracelint.engine.escape import terminal, utf8_bytes, valid_unicode
from tracelint.engine.finding import Finding, Severity, TraceLocation
from tracelint.engine.location import event_identity
from tracelint.engine.records import baseline_dict, evidence_dict, trace_fields
from tracelint.engine.result import InputError, RunResult
from tracelint.engine.sourcelines import SourceLines
from tracelint.engine.version import __version__
from tracelint.render._common import (
    Anchor,
    anchor,
    anchored_message,
    dumps,
    is_line,
    trace_summary_dict,
)

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SRCROOT = "%SRCROOT%"  # the uriBaseId of every relative artifact URI: the source root (source_root)
LEVEL = {Severity.INFO: "note", Severity.WARNING: "warning", Severity.ERROR: "error"}
LEVELS = ("none", "note", "warning", "error")  # SARIF's levels, lowest first
# GitHub's own severity vocabulary for non-security results (shown in the code scanning UI).
PROBLEM_SEVERITY = {Severity.INFO: "recommendation", Severity.WARNING: "warning", Severity.ERROR: "error"}
FINGERPRINT_KEY = "tracelintFingerprint/v2"
LINE_HASH_KEY = "primaryLocationLineHash"  # the key GitHub matches alerts by (it computes one where it is absent)
# GitHub code scanning rejects a run of more than 25,000 results and an upload over 10 MB (gzip-compressed; the
# document is held to 10 MB before compression, which also keeps it under the compressed limit).
MAX_RESULTS = 25_000
MAX_BYTES = 10 * 1024 * 1024


def render(result: RunResult) -> str:
    """The SARIF log, within GitHub's limits: over MAX_RESULTS results, or over MAX_BYTES (written compact first),
    the highest-severity results are kept, in report order, and a warning notification says how many were left
    out."""
    doc = document(result)
    results = doc["runs"][0]["results"]
    text = dumps(doc) + "\n"
    if len(results) <= MAX_RESULTS and len(text.encode("utf-8")) <= MAX_BYTES:
        return text
    text = dumps(doc, indent=False) + "\n"
    if len(results) <= MAX_RESULTS and len(text.encode("utf-8")) <= MAX_BYTES:
        return text
    order = sorted(range(len(results)), key=lambda i: (-LEVELS.index(results[i]["level"]), i))

    def cut(keep: int) -> str:
        kept = sorted(order[:keep])
        run = {**doc["runs"][0], "results": [results[i] for i in kept]}
        left = len(results) - keep
        note = {"level": "warning", "message": {"text": (
            f"{left} of {len(results)} results left out: GitHub code scanning takes at most {MAX_RESULTS:,} results "
            f"a run and {MAX_BYTES // 2**20} MB a file; the {keep} of the highest severity are here "
            "(--format json lists them all)")}}
        invocation = dict(run["invocations"][0])
        invocation["toolExecutionNotifications"] = [*invocation["toolExecutionNotifications"], note]
        run["invocations"] = [invocation]
        return dumps({**doc, "runs": [run]}, indent=False) + "\n"

    lo, hi = 0, min(len(results), MAX_RESULTS)  # the most results that fit: cut(lo) fits (or nothing does)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(cut(mid).encode("utf-8")) <= MAX_BYTES:
            lo = mid
        else:
            hi = mid - 1
    return cut(lo)


def document(result: RunResult) -> dict:
    docs = catalog()
    # Every catalog rule, plus any code a finding carries that the catalog lacks, so every ruleIndex resolves.
    codes = sorted(set(docs) | {f.code for f in result.findings})
    index = {code: i for i, code in enumerate(codes)}
    fingerprints = line_fingerprints(result.findings)
    run = {
        "tool": {"driver": {
            "name": "tracelint",
            "version": __version__,
            "semanticVersion": __version__,
            "rules": [_rule(code, docs.get(code)) for code in codes],
        }},
        "invocations": [_invocation(result.errors)],
        "results": [_result(f, index[f.code], fp) for f, fp in zip(result.findings, fingerprints, strict=True)],
        "originalUriBaseIds": {SRCROOT: {"uri": _directory_uri(str(source_root())), "description": {
            "text": "The repository tracelint ran in (the nearest folder with .git at or above the working "
                    "directory), else the working directory."}}},
        "columnKind": "unicodeCodePoints",
        "properties": {"traces": [trace_summary_dict(s) for s in result.traces]},
    }
    if result.verifications:
        run["properties"]["verify"] = result.verifications
    if result.run is not None:
        run["properties"]["run"] = result.run
    if result.diffs is not None:  # `tracelint diff`: the results are NEW's new findings, the pairs ride along
        run["properties"]["diffs"] = result.diffs
    if result.baseline is not None:
        run["properties"]["baseline"] = baseline_dict(result.baseline)
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
        "partialFingerprints": {FINGERPRINT_KEY: fingerprint, LINE_HASH_KEY: fingerprint},
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
    return {"artifactLocation": artifact_location(at.path), "region": region}


def artifact_location(path: str) -> dict:
    """``{"uri": "src/train.py", "uriBaseId": "%SRCROOT%"}`` for a path relative to the source root (repo_path:
    GitHub resolves it against the checkout); ``{"uri": "file:///elsewhere/x.py"}`` for one outside it."""
    uri = artifact_uri(path)
    return {"uri": uri} if uri.startswith("file:") else {"uri": uri, "uriBaseId": SRCROOT}


def _directory_uri(path: str) -> str:
    """A folder's absolute file: URI, with the trailing slash SARIF requires of a base URI."""
    uri = artifact_uri(path)
    return uri if uri.endswith("/") else uri + "/"


def line_fingerprints(findings: list[Finding]) -> list[str]:
    """Each result's ``partialFingerprints`` value, stable when lines move and across runs: the hash of the rule,
    the file (relative to the working directory), the flagged line's text with its whitespace collapsed, and the
    occurrence of that triple in file order (a second identical ``loss.item()`` line is occurrence 1). A trace
    finding stands for the source line its stack gives (its text where the file is here, else ``line N``), or
    without a stack for its event name with digit runs as ``N`` (a job finding: its rank; location.event_identity);
    the trace file's own name, which changes from run to run, is not part of it. Never the message: a trace
    finding's carries measured numbers."""
    order = sorted(range(len(findings)), key=lambda i: findings[i].sort_key())
    seen: Counter = Counter()
    out = [""] * len(findings)
    lines = SourceLines()  # each file (and notebook) read once, however many findings point into it
    for i in order:
        f = findings[i]
        key = (f.code, *_place(f, lines))
        n = seen[key]
        seen[key] += 1
        out[i] = hashlib.sha256("\0".join((*key, str(n))).encode("utf-8", "backslashreplace")).hexdigest()[:32]
    return out


def _place(finding: Finding, lines: SourceLines) -> tuple[str, str]:
    """(file, normalized line text) of a finding's fingerprint."""
    src = finding.source
    if src is None:
        return "", event_identity(finding.location) if isinstance(finding.location, TraceLocation) else ""
    text = lines.line(src.path, src.line, src.cell) if src.cell is not None or is_line(src.line) else None
    return repo_path(src.path), " ".join(text.split()) if text is not None else f"line {src.line}"


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
        location: dict = {"artifactLocation": artifact_location(repo_path(error.path))}
        if error.line and is_line(error.line) and error.line >= 1:
            location["region"] = {"startLine": error.line}
        notes.append({"level": "error", "message": {"text": terminal(error.message)},
                      "locations": [{"physicalLocation": location}]})
    return {"executionSuccessful": not errors, "toolExecutionNotifications": notes}
