"""Which of NEW's findings BASE does not have, and which of BASE's NEW fixed: matched by rule and place, never by
message text (a trace finding's message carries measured numbers that differ from run to run)."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from tracelint.engine import Finding, TraceLocation
from tracelint.engine.catalog import catalog
from tracelint.engine.display import report_path
from tracelint.engine.location import event_identity


def finding_key(finding: Finding) -> tuple:
    """A finding's identity in a diff: rule code, the file name (not its folder: two checkouts differ there) and
    line of its source position (for a trace finding, the one its Python stack gives), and the trace event as
    baselines know it (location.event_identity: ``ProfilerStep#N``, a job finding's rank)."""
    loc = finding.location
    src = finding.source
    where = (Path(src.path).name, src.line) if src is not None else None
    return (finding.code, where, event_identity(loc) if isinstance(loc, TraceLocation) else None)


def _family(key: tuple) -> tuple:
    """The key without the line: a finding of this rule, file and event, wherever it sits in the file."""
    code, where, event = key
    return (code, where[0] if where is not None else None, event)


def finding_changes(base, new) -> tuple[tuple[Finding, ...], tuple[Finding, ...]]:
    """(NEW's findings that BASE lacks, BASE's findings that NEW lacks). Findings of one rule, file and event are
    paired line for line first, then in order: code that moved (a line added above the loop) keeps its findings
    matched, and a new sync two lines below an old one is one new finding. Each side's duplicates (the same key in
    several steps or runs) count once."""
    sides = []
    for findings in (base, new):
        families: dict[tuple, dict[tuple, Finding]] = defaultdict(dict)
        for f in findings:
            key = finding_key(f)
            families[_family(key)].setdefault(key, f)
        sides.append(families)
    added: list[Finding] = []
    gone: list[Finding] = []
    for family in dict.fromkeys([*sides[0], *sides[1]]):
        b, n = dict(sides[0].get(family, {})), dict(sides[1].get(family, {}))
        for key in [k for k in n if k in b]:
            del b[key], n[key]
        rest_b, rest_n = sorted(b, key=_line), sorted(n, key=_line)
        paired = min(len(rest_b), len(rest_n))
        added.extend(n[k] for k in rest_n[paired:])
        gone.extend(b[k] for k in rest_b[paired:])
    order = {id(f): i for i, f in enumerate(new)}
    border = {id(f): i for i, f in enumerate(base)}
    return (tuple(sorted(added, key=lambda f: order[id(f)])), tuple(sorted(gone, key=lambda f: border[id(f)])))


def _line(key: tuple) -> int:
    return key[1][1] if key[1] is not None and key[1][1] is not None else 0


def finding_words(finding: Finding) -> str:
    """``TL101 item-in-loop at fixtures/scenarios/item_per_step.py:54`` (a trace finding without a source line: its
    event and trace, ``TL202 pageable-copy (Memcpy HtoD (Pageable -> Device)) in trace.json.gz``); paths relative
    to the working directory where they lie inside it."""
    doc = catalog().get(finding.code)
    head = f"{finding.code} {doc.name}" if doc is not None else finding.code
    src = finding.source
    if src is not None:
        return f"{head} at {report_path(src.path)}:{src.line}"
    loc = finding.location
    event = f" ({loc.event})" if isinstance(loc, TraceLocation) and loc.event else ""
    return f"{head}{event} in {report_path(finding.path)}"


__all__ = ["finding_changes", "finding_key", "finding_words"]
