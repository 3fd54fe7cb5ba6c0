"""``--add-noqa``: a ``# noqa: TL101`` comment on each line a finding flags, so that adopting tracelint on an
existing codebase starts from zero findings (as ruff's ``--add-noqa``).

Where the comment goes: on a line the suppression check reads (tracelint.engine.suppress, applied in lint.py: the
finding's first line or its last) and that can end in a comment, per Python's tokenizer: not a line that ends inside
a string literal (a multi-line string or f-string) nor one continued by a backslash. The first of the two that can
take it is used; a finding neither can take is skipped and reported. An existing ``# noqa: CODES`` on the line gets
the new codes merged in (sorted, no duplicates); a bare ``# noqa`` already suppresses everything and is left as it
is. The file keeps its encoding, BOM and line breaks (the edit touches no line break); a notebook's cell sources
are edited and its JSON keeps its indent, key order and final newline (tracelint.source.document). The result must
parse and must suppress each finding it was made for, or the file is not written; it is written atomically
(tracelint.source.fix.write_atomic).
"""
from __future__ import annotations

import io
import re
import tokenize
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tracelint.engine import Edit, Finding, InputError, SourceLocation
from tracelint.engine.suppress import NOQA, is_suppressed, noqa_codes
from tracelint.source.document import (
    DocumentError,
    NotebookDocument,
    PythonDocument,
    read_document,
    split_lines,
)
from tracelint.source.fix import write_atomic
from tracelint.source.screen import parse_quietly

NO_PLACE = "no line of it can take a comment (it ends inside a string literal or a backslash continuation)"


@dataclass
class NoqaOutcome:
    """What ``add_noqa`` did: comments added (or extended) and files written; findings it could not suppress and
    why; files it could not read or write."""

    comments: int = 0
    files: int = 0
    skipped: list[tuple[Finding, str]] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)


def add_noqa(findings: Iterable[Finding]) -> NoqaOutcome:
    """Add ``# noqa`` comments for the source findings among ``findings`` (trace findings are left alone)."""
    outcome = NoqaOutcome()
    by_file: dict[str, list[Finding]] = defaultdict(list)
    for finding in findings:
        if isinstance(finding.location, SourceLocation):
            by_file[finding.path].append(finding)
    for path, group in by_file.items():
        try:
            doc = read_document(Path(path))
            edits, comments, skipped = _plan(doc, group)
            outcome.skipped.extend(skipped)
            if not edits:
                continue
            new = doc.with_edits(edits)
            _check(new, group, skipped)
            write_atomic(doc.path, new.to_bytes(), doc)
        except DocumentError as exc:
            outcome.errors.append(InputError(path, f"--add-noqa: {exc.message}", exc.line))
        except _NotAdded as exc:
            outcome.errors.append(InputError(path, f"noqa comments not added: {exc}"))
        except (OSError, ValueError, UnicodeError) as exc:  # NotWritten is an OSError and says why
            outcome.errors.append(InputError(path, f"noqa comments not added: {exc}"))
        else:
            outcome.comments += comments
            outcome.files += 1
    return outcome


class _NotAdded(Exception):
    pass


def _plan(doc: PythonDocument | NotebookDocument, findings: list[Finding],
          ) -> tuple[list[Edit], int, list[tuple[Finding, str]]]:
    """The edits that suppress ``findings`` in ``doc``, the number of comments they add or extend, and the findings
    no comment can suppress (with the reason)."""
    text = doc.text
    lines = split_lines(text)
    open_ends, comments = _line_ends(text)
    at = _line_numbers(doc)
    wanted: dict[int, set[str]] = defaultdict(set)
    skipped: list[tuple[Finding, str]] = []
    for finding in findings:
        loc = finding.location
        candidates = [at(loc.line, loc.cell), at(loc.end_line or loc.line, loc.cell)]
        line = next((n for n in candidates if n is not None and n in open_ends), None)
        if line is None:
            skipped.append((finding, NO_PLACE))
        else:
            wanted[line].add(finding.code)
    edits: list[Edit] = []
    for number, codes in sorted(wanted.items()):
        edit = _edit(number, lines[number - 1], comments.get(number), codes)
        if edit is not None:
            edits.append(edit)
    return edits, len(edits), skipped


def _edit(number: int, line: str, comment: tokenize.TokenInfo | None, codes: set[str]) -> Edit | None:
    """The edit that makes line ``number`` suppress ``codes``; None when it already does (a bare ``# noqa``)."""
    match = NOQA.search(comment.string) if comment is not None else None
    if match is not None:
        if match.group("codes") is None:
            return None  # a bare noqa suppresses every code
        merged = sorted({c.upper() for c in noqa_codes(match.group("codes"))} | codes)
        start = comment.start[1] + match.start("codes")
        end = comment.start[1] + match.end("codes")
        return Edit(number, start + 1, number, end + 1, ", ".join(merged))
    content = len(line.rstrip())
    return Edit(number, content + 1, number, len(line) + 1, f"  # noqa: {', '.join(sorted(codes))}")


def _line_ends(text: str) -> tuple[set[int], dict[int, tokenize.TokenInfo]]:
    """The lines that end outside any string and without a backslash (a NEWLINE or NL token ends them: a comment
    may go there), and the comment token of each line that has one."""
    open_ends: set[int] = set()
    comments: dict[int, tokenize.TokenInfo] = {}
    # One line break everywhere: tokenize reads lines at "\n" only; columns and line numbers stay the same.
    readline = io.StringIO(re.sub(r"\r\n?", "\n", text)).readline
    try:
        for token in tokenize.generate_tokens(readline):
            if token.type in (tokenize.NEWLINE, tokenize.NL):
                open_ends.add(token.start[0])
            elif token.type == tokenize.COMMENT:
                comments[token.start[0]] = token
    except (tokenize.TokenError, SyntaxError) as exc:
        raise _NotAdded(f"the tokenizer failed ({' '.join(str(exc).split())})") from None
    return open_ends, comments


def _line_numbers(doc: PythonDocument | NotebookDocument):
    """``at(line, cell)``: the line of ``doc.text`` a finding's line is (a notebook's are counted within the cell)."""
    if doc.cell_lines is None:
        return lambda line, cell: line
    index = {place: number for number, place in enumerate(doc.cell_lines, start=1)}
    return lambda line, cell: index.get((cell, line))


def _check(new: PythonDocument | NotebookDocument, findings: list[Finding], skipped) -> None:
    """The edited document parses, and each finding that was not skipped is suppressed on one of its lines."""
    try:
        parse_quietly(new.text)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise _NotAdded(f"the result would not parse ({getattr(exc, 'msg', exc)})") from None
    left = {id(f) for f, _ in skipped}
    for finding in findings:
        loc = finding.location
        if id(finding) in left:
            continue
        lines = {loc.line, loc.end_line or loc.line}
        if not any(is_suppressed(new.raw_line(n, loc.cell), finding.code) for n in lines):
            raise _NotAdded(f"line {loc.line}: the comment would not suppress {finding.code}")
