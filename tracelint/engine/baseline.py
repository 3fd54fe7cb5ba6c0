"""Baselines (``--write-baseline`` / ``--baseline``): today's findings written down, so that a run reports only the
findings that are not in it, as detekt's and psalm's baselines do.

A finding's baseline entry is what survives edits elsewhere in the file: its rule, its file (posix, relative to the
baseline file's folder), the normalized text of the line it flags (whitespace collapsed, comments and suppressions
stripped) and its occurrence: the how-manieth finding of that (rule, file, text) it is, in file order. No line
number: code that moves keeps its entries, and a second identical line (a new ``loss.item()`` below an old one)
is occurrence 1, which the baseline does not hold. (A new identical line *above* an old one takes occurrence 0, and
the old one is reported in its place: the count is right, the line is the later of the two.)

A trace finding's entry has, in place of a file, the source file its Python stack gives and that line's text, or,
without a stack, its event or kernel name with digit runs written ``N`` (``ProfilerStep#N``), or for a job finding
its rank (``rank 1``: location.event_identity); a stack's file that cannot be read where tracelint runs gives
``line N`` for its text. The trace file's own name is not part of it: a rank's trace is named after its host and a
timestamp, new on every run.

The file (version 1)::

    {"version": 1, "tool": "tracelint",
     "entries": [{"rule": "TL101", "origin": "source" | "trace", "path": str | null, "text": str,
                  "occurrence": int, "message": str}]}      # message: for reviewers, not matched

Entries are sorted, one per finding; the file is written atomically. Anything else is a BaselineError naming the
file (a usage error, exit 2).
"""
from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from tracelint.engine.finding import Finding
from tracelint.engine.location import SourceLocation, TraceLocation, event_identity
from tracelint.engine.result import BaselineUse, RunResult
from tracelint.engine.sourcelines import SourceLines
from tracelint.engine.suppress import without_suppressions

VERSION = 1
ORIGINS = ("source", "trace")


class BaselineError(Exception):
    """A baseline file that cannot be read or written; the message names it."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One finding as a baseline holds it; ``key`` is what matches."""

    origin: str
    path: str | None
    rule: str
    text: str
    occurrence: int
    message: str = field(default="", compare=False)

    @property
    def key(self) -> tuple[str, str, str | None, str, int]:
        return (self.origin, self.rule, self.path, self.text, self.occurrence)

    def sort_key(self) -> tuple[str, str, str, str, int]:
        return (self.origin, self.path or "", self.rule, self.text, self.occurrence)

    def as_dict(self) -> dict:
        return {"rule": self.rule, "origin": self.origin, "path": self.path, "text": self.text,
                "occurrence": self.occurrence, "message": self.message}


@dataclass(frozen=True, slots=True)
class Baseline:
    path: Path
    entries: tuple[Entry, ...]
    keys: frozenset = field(init=False, repr=False, compare=False)  # the entries' keys: what a finding matches

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", frozenset(e.key for e in self.entries))


@dataclass(frozen=True, slots=True)
class Filtered:
    """The findings a baseline leaves (``kept``), how many it hid, and its entries in scope that matched none."""

    kept: list[Finding]
    hidden: int
    stale: tuple[Entry, ...]


# -- fingerprints ------------------------------------------------------------------------------------------------
def normalized(line: str) -> str:
    """A source line as a baseline compares it: its comment and any ``# noqa`` / ``# tracelint: ignore`` dropped,
    whitespace runs collapsed to one space."""
    return " ".join(_code_part(without_suppressions(line)).split())


def _code_part(line: str) -> str:
    """``line`` up to its comment: the first ``#`` outside a string literal (read from the line's start: a line
    that begins inside a multi-line string is read the same way every time, which is all a fingerprint needs)."""
    quote = ""
    i = 0
    while i < len(line):
        char = line[i]
        if quote:
            if char == "\\":
                i += 2
                continue
            if line.startswith(quote, i):
                i += len(quote)
                quote = ""
                continue
        elif char == "#":
            return line[:i]
        elif char in "'\"":
            quote = char * 3 if line.startswith(char * 3, i) else char
            i += len(quote)
            continue
        i += 1
    return line


@lru_cache(maxsize=4096)
def relative_path(path: str, base: Path) -> str:
    """``path`` (as a finding names it: relative to the working directory, or absolute) relative to ``base``, with
    forward slashes."""
    try:
        return Path(os.path.relpath(Path(path).resolve(), base.resolve())).as_posix()
    except (ValueError, OSError, RuntimeError):  # another drive (Windows), a symlink loop
        return Path(path).as_posix()


def entries_of(findings: Iterable[Finding], base: Path, lines: SourceLines | None = None) -> list[Entry]:
    """The baseline entry of each finding, in the order given (occurrences count in file order: the findings are
    sorted by Finding.sort_key first)."""
    lines = lines or SourceLines()
    findings = list(findings)
    order = sorted(range(len(findings)), key=lambda i: findings[i].sort_key())
    seen: Counter = Counter()
    out: list[Entry | None] = [None] * len(findings)
    for i in order:
        origin, path, text = _place(findings[i], base, lines)
        rule = findings[i].code
        occurrence = seen[(origin, rule, path, text)]
        seen[(origin, rule, path, text)] += 1
        out[i] = Entry(origin, path, rule, text, occurrence, findings[i].message)
    return out  # type: ignore[return-value]


def _place(finding: Finding, base: Path, lines: SourceLines) -> tuple[str, str | None, str]:
    """(origin, path, text) of a finding's entry."""
    loc = finding.location
    if isinstance(loc, SourceLocation):
        return "source", relative_path(loc.path, base), _line_text(loc, lines)
    assert isinstance(loc, TraceLocation)
    if loc.source is not None:
        return "trace", _trace_source_path(loc.source.path, base), _line_text(loc.source, lines)
    return "trace", None, event_identity(loc)


def _line_text(loc: SourceLocation, lines: SourceLines) -> str:
    """The flagged line, normalized; ``line N`` when the file cannot be read here (a trace's stack may name a file
    of another machine)."""
    text = lines.line(loc.path, loc.line, loc.cell)
    return normalized(text) if text is not None else f"line {loc.line}"


def _trace_source_path(path: str, base: Path) -> str:
    """A trace stack's file: relative to the baseline's folder when it is a file here, else as the stack names it."""
    return relative_path(path, base) if Path(path).is_file() else Path(path).as_posix()


# -- matching ----------------------------------------------------------------------------------------------------
def apply(findings: list[Finding], baseline: Baseline, in_scope: Callable[[Entry], bool],
          lines: SourceLines | None = None) -> Filtered:
    """The findings not in ``baseline``; its entries for which ``in_scope`` holds (their file was checked, their
    rule enabled) and that no finding matched are stale."""
    base = baseline.path.parent
    known = baseline.keys
    entries = entries_of(findings, base, lines)
    kept = [f for f, e in zip(findings, entries, strict=True) if e.key not in known]
    matched = {e.key for e in entries}
    stale = tuple(e for e in baseline.entries if e.key not in matched and in_scope(e))
    return Filtered(kept, len(findings) - len(kept), stale)


def held(findings: list[Finding], baseline: Baseline, lines: SourceLines | None = None) -> list[bool]:
    """Whether ``baseline`` holds each of ``findings`` (what ``--fix`` leaves alone, as it leaves a noqa line)."""
    return [e.key in baseline.keys for e in entries_of(findings, baseline.path.parent, lines)]


def merged(old: Baseline | None, new: Iterable[Entry], in_scope: Callable[[Entry], bool]) -> list[Entry]:
    """What ``--write-baseline`` writes: today's entries, plus the old file's entries this run did not look at
    (a file not checked this time keeps its entries; those of the files checked are replaced, stale ones gone)."""
    kept = [e for e in old.entries if not in_scope(e)] if old is not None else []
    return sorted({e.key: e for e in [*kept, *new]}.values(), key=Entry.sort_key)


# -- a run's result ----------------------------------------------------------------------------------------------
def filter_result(result: RunResult, baseline: Baseline, enabled: Callable[[str], bool]) -> RunResult:
    """``result`` with only the findings ``baseline`` does not hold, and ``result.baseline`` saying how many it hid
    and how many of its entries are stale. ``enabled(code)``: the rule ran (the run's config)."""
    lines = SourceLines()
    done = apply(result.findings, baseline, scope(result, baseline.path.parent, enabled), lines)
    result.findings = done.kept
    result.baseline = BaselineUse(str(baseline.path), done.hidden, len(done.stale))
    return result


def write_result(result: RunResult, path: Path, enabled: Callable[[str], bool]) -> int:
    """``--write-baseline``: write ``result``'s findings to ``path``, keeping the entries of a baseline already
    there that this run did not look at; the number of entries written. BaselineError when it cannot write."""
    try:
        old = read_baseline(path) if path.exists() else None
    except BaselineError:  # a broken file is what --write-baseline replaces
        old = None
    entries = merged(old, entries_of(result.findings, path.parent), scope(result, path.parent, enabled))
    write_baseline(path, entries)
    return len(entries)


def scope(result: RunResult, base: Path, enabled: Callable[[str], bool]) -> Callable[[Entry], bool]:
    """Whether this run looked at what an entry describes: its rule ran, and its source file was read without an
    error (a file linted only partly, or not named this time, keeps its entries), or, for a trace entry, traces
    were analyzed."""
    failed = {relative_path(e.path, base) for e in result.errors}
    checked = {relative_path(p, base) for p in result.paths_checked} - failed
    traces = bool(result.traces) and not result.errors  # conservative: an unreadable input may hold their findings

    def in_scope(entry: Entry) -> bool:
        if not enabled(entry.rule):
            return False
        return entry.path in checked if entry.origin == "source" else traces

    return in_scope


# -- the file ----------------------------------------------------------------------------------------------------
def read_baseline(path: Path) -> Baseline:
    """The baseline in ``path``; BaselineError naming it for anything but a version-1 baseline."""
    def bad(why: str) -> BaselineError:
        return BaselineError(f"{path}: not a tracelint baseline ({why})")

    try:
        data = json.loads(path.read_bytes())
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read the baseline: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:
        raise bad(f"invalid JSON: {' '.join(str(exc).split())[:200]}") from None
    if not isinstance(data, dict):
        raise bad("the JSON is not an object")
    if "version" not in data:
        raise bad("no `version`")
    if data["version"] != VERSION:
        raise bad(f"version {data['version']!r}; this tracelint reads version {VERSION}")
    items = data.get("entries")
    if not isinstance(items, list):
        raise bad("no `entries` list")
    entries = []
    for number, item in enumerate(items, start=1):
        try:
            entries.append(_entry(item))
        except (KeyError, TypeError, ValueError) as exc:
            raise bad(f"entry {number}: {exc.args[0] if exc.args else exc}") from None
    return Baseline(path, tuple(entries))


def read_baseline_once(path: Path) -> Baseline:
    """read_baseline, read again only when the file changed (each file's ``--fix`` in a worker asks for it)."""
    try:
        stat = path.stat()
    except OSError:
        return read_baseline(path)  # its error names the file
    return _read_cached(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=4)
def _read_cached(path: Path, _mtime_ns: int, _size: int) -> Baseline:
    return read_baseline(path)


def _entry(item: object) -> Entry:
    if not isinstance(item, dict):
        raise TypeError("not an object")
    missing = [k for k in ("rule", "origin", "path", "text", "occurrence") if k not in item]
    if missing:
        raise KeyError(f"missing {', '.join(missing)}")
    rule, origin, path, text, occurrence = (item[k] for k in ("rule", "origin", "path", "text", "occurrence"))
    if not isinstance(rule, str) or not rule:
        raise TypeError("`rule` must be a code")
    if origin not in ORIGINS:
        raise ValueError(f"`origin` must be one of {', '.join(ORIGINS)}")
    if not (isinstance(path, str) or (path is None and origin == "trace")):
        raise TypeError("`path` must be a string")
    if not isinstance(text, str):
        raise TypeError("`text` must be a string")
    if isinstance(occurrence, bool) or not isinstance(occurrence, int) or occurrence < 0:
        raise TypeError("`occurrence` must be a whole number")
    message = item.get("message", "")
    return Entry(origin, path, rule.upper(), text, occurrence, message if isinstance(message, str) else "")


def write_baseline(path: Path, entries: Iterable[Entry]) -> None:
    """Write ``entries`` (sorted) to ``path`` atomically: a temporary file beside it, then a rename."""
    ordered = sorted(entries, key=Entry.sort_key)
    doc = {"version": VERSION, "tool": "tracelint", "entries": [e.as_dict() for e in ordered]}
    data = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace")
    folder = path.parent
    try:
        mode = _mode(path)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        raise BaselineError(f"{path}: cannot write the baseline: {exc.strerror or exc}") from None


def _mode(path: Path) -> int:
    """The permissions the written baseline gets: the old file's, or rw-r--r-- (mkstemp's own 0600 would hide a
    file meant for the repository from the rest of the team)."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        return 0o644
