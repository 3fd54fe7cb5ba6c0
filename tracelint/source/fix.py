"""Applying fixes: edits to text (also used by the verify mode to write patched copies) and atomic file writes."""
from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from tracelint.engine import Edit, Finding, Fix

_NEWLINE = re.compile(r"\r\n|\r|\n")  # Python's line breaks; str.splitlines also splits at \f, \x1c, \u2028...


def _offsets(text: str) -> list[int]:
    """Offset of the start of each line (1-based line n starts at offsets[n-1])."""
    return [0, *(m.end() for m in _NEWLINE.finditer(text)), len(text)]


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """``text`` with the edits applied (positions refer to the original text; edits must not overlap)."""
    starts = _offsets(text)

    def offset(line: int, column: int) -> int:
        if line > len(starts) - 1:  # a position at the very end of a file without a final newline
            return len(text)
        return starts[line - 1] + column

    spans = sorted(((offset(e.line, e.column), offset(e.end_line, e.end_column), e.text) for e in edits), reverse=True)
    previous_start = len(text) + 1
    for start, end, new in spans:
        if end > previous_start:
            raise ValueError(f"overlapping edits at offset {start}")
        text = text[:start] + new + text[end:]
        previous_start = start
    return text


def _key(edit: Edit) -> tuple[int, int, int, int]:
    return (edit.line, edit.column, edit.end_line, edit.end_column)


def choose_fixes(findings: Sequence[Finding], *, unsafe: bool) -> list[Fix]:
    """The fixes to apply in one pass: safe ones (and unsafe ones when asked), skipping any that overlap an earlier
    chosen fix (the next pass, on the fixed text, picks them up)."""
    chosen: list[Fix] = []
    taken: list[tuple[int, int, int, int]] = []
    seen: set[tuple] = set()
    for finding in findings:
        fix = finding.fix
        if fix is None or not fix.edits or (not fix.safe and not unsafe):
            continue
        keys = tuple(_key(e) for e in fix.edits)
        if (keys, tuple(e.text for e in fix.edits)) in seen:
            continue
        if any(_overlaps(k, t) for k in keys for t in taken):
            continue
        seen.add((keys, tuple(e.text for e in fix.edits)))
        taken.extend(keys)
        chosen.append(fix)
    return chosen


def _overlaps(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    a_start, a_end, b_start, b_end = a[:2], a[2:], b[:2], b[2:]
    if a_start == a_end or b_start == b_end:  # insertions conflict only at the same point or strictly inside
        return a_start == b_start or (b_start < a_start < b_end) or (a_start < b_start < a_end)
    return a_start < b_end and b_start < a_end


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` in one step (temp file in the same folder + os.replace), keeping its mode."""
    mode = path.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tracelint")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
