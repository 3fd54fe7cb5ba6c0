"""Source documents: a Python file (any coding cookie, BOM, line endings) or a Jupyter notebook's code cells,
as the one text the rules parse, and back to bytes after fixes.

A notebook's code cells are joined into one text (so that a loader built in one cell and iterated in another is
seen); IPython magics and shell lines are masked line for line, so positions map back to (cell, line in cell).
"""
from __future__ import annotations

import io
import json
import re
import tokenize
from dataclasses import dataclass, replace
from pathlib import Path

from tracelint.engine import Edit
from tracelint.source.fix import apply_edits

MAX_BYTES = 8 * 1024 * 1024  # larger files are generated code or data, not training scripts


class DocumentError(Exception):
    """A file that cannot be read as source; ``line`` where known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


@dataclass(frozen=True, slots=True)
class PythonDocument:
    path: Path
    text: str
    encoding: str

    cell_lines = None  # a plain file has no cells

    def with_edits(self, edits: list[Edit]) -> PythonDocument:
        return replace(self, text=apply_edits(self.text, edits))

    def to_bytes(self) -> bytes:
        return self.text.encode(self.encoding)

    def raw_line(self, line: int, cell: int | None = None) -> str:
        return _line(self.text, line)


def read_python(path: Path, data: bytes) -> PythonDocument:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:  # an unknown coding cookie
        raise DocumentError(str(exc)) from None
    try:
        # bytes.decode keeps \r\n, so fixed files keep their line endings; "utf-8-sig" drops and restores a BOM.
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        raise DocumentError(f"cannot decode as {encoding}: {exc.reason if hasattr(exc, 'reason') else exc}") from None
    return PythonDocument(path, text, encoding)


def _line(text: str, number: int) -> str:
    """Line ``number`` (1-based) of ``text`` without splitting the whole text (called per finding)."""
    start = 0
    for _ in range(number - 1):
        start = text.find("\n", start) + 1
        if start == 0:
            return ""
    end = text.find("\n", start)
    return text[start:] if end < 0 else text[start:end]


# -- notebooks -------------------------------------------------------------------------------------------------
_CELL_MAGIC_PY = ("%%time", "%%timeit", "%%capture", "%%prun")  # cell magics whose body is still Python
_ASSIGN_MAGIC = re.compile(r"^\s*[\w.,\s\[\]]+=\s*[%!]")
_HELP = re.compile(r"^\s*[\w.]+\?{1,2}\s*$")  # obj? / obj??


def _mask(lines: list[str]) -> list[str]:
    """Cell lines with IPython syntax replaced by neutral Python of the same line count."""
    if lines and lines[0].lstrip().startswith("%%"):
        if not lines[0].lstrip().startswith(_CELL_MAGIC_PY):
            return [""] * len(lines)
        lines = [""] + lines[1:]
    out: list[str] = []
    continued = False
    for line in lines:
        stripped = line.lstrip()
        magic = continued or stripped.startswith(("%", "!", "?")) or _ASSIGN_MAGIC.match(line) is not None \
            or _HELP.match(line) is not None
        if magic:
            indent = line[: len(line) - len(stripped)]
            out.append(f"{indent}pass" if not continued else "")
            continued = line.rstrip().endswith("\\")
        else:
            out.append(line)
    return out


def _cell_source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


@dataclass(frozen=True, slots=True)
class NotebookDocument:
    path: Path
    nb: dict
    indent: int | None
    trailing_newline: bool
    text: str
    cell_lines: tuple[tuple[int, int], ...]  # line i+1 of text -> (cell number, line in cell)

    def with_edits(self, edits: list[Edit]) -> NotebookDocument:
        per_cell: dict[int, list[Edit]] = {}
        for e in edits:
            cell, line = self.cell_lines[e.line - 1]
            end_cell, end_line = self.cell_lines[min(e.end_line, len(self.cell_lines)) - 1]
            if end_cell != cell:
                raise ValueError("an edit spans notebook cells")
            per_cell.setdefault(cell, []).append(Edit(line, e.column, end_line, e.end_column, e.text))
        nb = json.loads(json.dumps(self.nb))
        for number, cell in _code_cells(nb):
            if number in per_cell:
                new = apply_edits(_cell_source(cell), per_cell[number])
                cell["source"] = new.splitlines(keepends=True) if isinstance(cell.get("source"), list) else new
        return _notebook(self.path, nb, self.indent, self.trailing_newline)

    def to_bytes(self) -> bytes:
        text = json.dumps(self.nb, indent=self.indent, ensure_ascii=False)
        return (text + ("\n" if self.trailing_newline else "")).encode("utf-8")

    def raw_line(self, line: int, cell: int | None = None) -> str:
        for number, c in _code_cells(self.nb):
            if number == cell:
                return _line(_cell_source(c), line)
        return ""


def _code_cells(nb: dict):
    """(cell number, cell) of the code cells; numbers count all cells from 1, as Jupyter shows them."""
    for number, cell in enumerate(nb.get("cells", []), start=1):
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            yield number, cell


def _notebook(path: Path, nb: dict, indent: int | None, trailing_newline: bool) -> NotebookDocument:
    chunks: list[str] = []
    mapping: list[tuple[int, int]] = []
    for number, cell in _code_cells(nb):
        lines = _mask(_cell_source(cell).splitlines())
        chunks.extend(lines)
        mapping.extend((number, i) for i in range(1, len(lines) + 1))
    text = "\n".join(chunks) + ("\n" if chunks else "")
    return NotebookDocument(path, nb, indent, trailing_newline, text, tuple(mapping))


def read_notebook(path: Path, data: bytes) -> NotebookDocument:
    try:
        text = data.decode("utf-8-sig")
        nb = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DocumentError(f"not a readable notebook (invalid JSON: {exc})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells", []), list):
        raise DocumentError("not a notebook (no cell list)")
    language = (nb.get("metadata", {}).get("kernelspec", {}) or {}).get("language", "python")
    if isinstance(language, str) and language.lower() not in ("python", "python3", ""):
        return _notebook(path, {"cells": []}, 1, True)  # an R or Julia notebook: nothing to lint
    match = re.match(r"\{\s*\n( *)\"", text)
    indent = len(match.group(1)) if match else None
    return _notebook(path, nb, indent, text.endswith("\n"))


def read_document(path: Path) -> PythonDocument | NotebookDocument:
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise DocumentError(f"file too large to lint ({size / 2**20:.1f} MB > {MAX_BYTES // 2**20} MB)")
        data = path.read_bytes()
    except OSError as exc:
        raise DocumentError(exc.strerror or str(exc)) from None
    if path.suffix == ".ipynb":
        return read_notebook(path, data)
    return read_python(path, data)
