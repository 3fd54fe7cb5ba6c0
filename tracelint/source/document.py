"""Source documents: a Python file (any coding cookie, BOM, line endings) or a Jupyter notebook's code cells,
as the one text the rules parse, and back to bytes after fixes.

A notebook's code cells are joined into one text (so that a loader built in one cell and iterated in another is
seen); IPython magics and shell lines are masked line for line, so positions map back to (cell, line in cell).
"""
from __future__ import annotations

import io
import json
import os
import re
import stat
import tokenize
from dataclasses import dataclass, field, replace
from pathlib import Path

from tracelint.engine import Edit
from tracelint.source.fix import apply_edits

# Larger files are generated code or data, not training scripts; the largest .py file of torch 2.13 has 1.3 MB and
# libcst parses real code at 0.1 to 1 MB/s (so 8 MB already takes longer than the per-file time limit of lint.py).
MAX_BYTES = 8 * 1024 * 1024
# A notebook is mostly outputs (images, tables): it may be larger, but its code cells together obey MAX_BYTES.
MAX_NOTEBOOK_BYTES = 64 * 1024 * 1024
_NEWLINE = re.compile(r"\r\n|\r|\n")  # Python's (and libcst's) line breaks; str.splitlines also splits at \f, \x1c..


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

    def raw_lines(self, cell: int | None = None) -> list[str]:
        """All lines (without line breaks), split once: look many lines up with this, not ``raw_line``."""
        return split_lines(self.text)


def read_python(path: Path, data: bytes) -> PythonDocument:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DocumentError("UTF-16 text: Python source must be UTF-8 or declare an ASCII-compatible encoding")
    declared = _COOKIE.search(b"\n".join(data.removeprefix(b"\xef\xbb\xbf").splitlines()[:2])) is not None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:  # an unknown coding cookie, one that contradicts a BOM, or no cookie and not UTF-8
        if declared:
            raise DocumentError(f"cannot tell the encoding: {' '.join(str(exc).split())}") from None
        encoding = "utf-8"  # without a cookie Python reads UTF-8: say where it breaks, not that a cookie is missing
    try:
        # bytes.decode keeps \r\n, so fixed files keep their line endings; "utf-8-sig" drops and restores a BOM.
        text = data.decode(encoding)
    except (UnicodeError, LookupError) as exc:  # UnicodeError: the "undefined" codec raises the base class
        if b"\0" in data[:8192]:  # what git and grep call binary (a NUL alone, in a literal, libcst can still read)
            raise DocumentError("a binary file, not Python source (it holds NUL bytes)") from None
        if not isinstance(exc, UnicodeDecodeError):
            raise DocumentError(f"cannot decode as {encoding}: {' '.join(str(exc).split())}") from None
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        hint = "" if declared or data.startswith(b"\xef\xbb\xbf") else \
            " and no coding declaration names another encoding"
        raise DocumentError(f"cannot decode as {encoding} (byte 0x{data[exc.start]:02x} in column {column})"
                            f"{hint}", line) from None
    return PythonDocument(path, text, encoding)


_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]", re.MULTILINE)  # PEP 263, as tokenize looks for it


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` as Python counts them (``\\r\\n``, ``\\r`` or ``\\n``), without a last empty one."""
    lines = _NEWLINE.split(text)
    if lines and not lines[-1]:
        lines.pop()
    return lines


def _line(text: str, number: int) -> str:
    """Line ``number`` (1-based) of ``text``; "" past the end."""
    lines = split_lines(text)
    return lines[number - 1] if 0 < number <= len(lines) else ""


# -- notebooks -------------------------------------------------------------------------------------------------
_CELL_MAGIC_PY = ("%%time", "%%timeit", "%%capture", "%%prun")  # cell magics whose body is still Python
_ASSIGN_MAGIC = re.compile(r"[\w.,\s\[\]]+=\s*[%!]")  # one class, no \s* before it: linear on any line
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


def _kind(value: object) -> str:
    """What a JSON value is, in words (for messages)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return {str: "a string", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _cell_source(cell: dict) -> str:
    """The source of a cell that ``read_notebook`` has checked (a string or a list of strings)."""
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _checked_source(cell: dict, number: int) -> str:
    source = cell.get("source", "")
    if isinstance(source, list):
        wrong = next((item for item in source if not isinstance(item, str)), "")
        if not isinstance(wrong, str):
            raise DocumentError(f"cell {number}: `source` is a list holding {_kind(wrong)}, not only strings")
        source = "".join(source)
    elif not isinstance(source, str):
        raise DocumentError(f"cell {number}: `source` is {_kind(source)}, not a string or a list of strings")
    try:
        source.encode("utf-8")
    except UnicodeEncodeError as exc:  # "\ud800" in the JSON: no text can hold it
        raise DocumentError(f"cell {number}: `source` holds an unpaired surrogate "
                            f"({ascii(exc.object[exc.start:exc.end])})") from None
    return source


def _keepends(text: str) -> list[str]:
    """``text`` as lines that keep their line breaks (Python's breaks only, as ``split_lines``)."""
    ends = [m.end() for m in _NEWLINE.finditer(text)]
    starts = [0, *ends]
    if not ends or ends[-1] != len(text):
        ends.append(len(text))
    return [text[a:b] for a, b in zip(starts, ends, strict=False) if a < b]


@dataclass(frozen=True, slots=True)
class NotebookDocument:
    path: Path
    nb: dict
    indent: int | None
    trailing_newline: bool
    text: str
    cell_lines: tuple[tuple[int, int], ...]  # line i+1 of text -> (cell number, line in cell)
    sources: dict[int, str] = field(default_factory=dict, compare=False, repr=False)  # code cell number -> source

    def with_edits(self, edits: list[Edit]) -> NotebookDocument:
        per_cell: dict[int, list[Edit]] = {}
        for e in edits:
            if not 0 < e.line <= len(self.cell_lines):
                raise ValueError("an edit outside the code cells")
            cell, line = self.cell_lines[e.line - 1]
            end_cell, end_line = self.cell_lines[min(e.end_line, len(self.cell_lines)) - 1]
            if end_cell != cell:
                raise ValueError("an edit spans notebook cells")
            per_cell.setdefault(cell, []).append(Edit(line, e.column, end_line, e.end_column, e.text))
        # A copy of the cell list only: the edited cells are new dicts, everything else is shared (never changed).
        cells = list(self.nb["cells"])
        for number, edits_in_cell in per_cell.items():
            cell = dict(cells[number - 1])
            new = apply_edits(self.sources[number], edits_in_cell)
            cell["source"] = _keepends(new) if isinstance(cell.get("source"), list) else new
            cells[number - 1] = cell
        return _notebook(self.path, {**self.nb, "cells": cells}, self.indent, self.trailing_newline)

    def to_bytes(self) -> bytes:
        end = "\n" if self.trailing_newline else ""
        try:
            return (json.dumps(self.nb, indent=self.indent, ensure_ascii=False) + end).encode("utf-8")
        except UnicodeEncodeError:  # an unpaired surrogate outside the code (an output): keep it escaped, as read
            return (json.dumps(self.nb, indent=self.indent) + end).encode("utf-8")

    def raw_line(self, line: int, cell: int | None = None) -> str:
        lines = self.raw_lines(cell)
        return lines[line - 1] if 0 < line <= len(lines) else ""

    def raw_lines(self, cell: int | None = None) -> list[str]:
        """The lines of code cell ``cell`` as in the notebook (magics unmasked), split once."""
        return split_lines(self.sources.get(cell, "")) if cell is not None else []


def _code_cells(nb: dict):
    """(cell number, cell) of the code cells; numbers count all cells from 1, as Jupyter shows them."""
    for number, cell in enumerate(nb.get("cells", []), start=1):
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            yield number, cell


def _notebook(path: Path, nb: dict, indent: int | None, trailing_newline: bool) -> NotebookDocument:
    chunks: list[str] = []
    mapping: list[tuple[int, int]] = []
    sources: dict[int, str] = {}
    for number, cell in _code_cells(nb):
        sources[number] = source = _checked_source(cell, number)
        lines = _mask(split_lines(source))
        chunks.extend(lines)
        mapping.extend((number, i) for i in range(1, len(lines) + 1))
    text = "\n".join(chunks) + ("\n" if chunks else "")
    if len(text) > MAX_BYTES:
        raise DocumentError(f"code cells too large to lint ({len(text) / 2**20:.1f} MB > {MAX_BYTES // 2**20} MB)")
    return NotebookDocument(path, nb, indent, trailing_newline, text, tuple(mapping), sources)


def _language(nb: dict) -> str:
    """The notebook's kernel language as its metadata says (``python`` when it says nothing usable)."""
    meta = nb.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    for key, field_name in (("kernelspec", "language"), ("language_info", "name")):
        table = meta.get(key)
        value = table.get(field_name) if isinstance(table, dict) else None
        if isinstance(value, str) and value:
            return value.lower()
    return "python"


def read_notebook(path: Path, data: bytes) -> NotebookDocument:
    """A notebook of any JSON: whatever is not an nbformat-4 notebook with string sources is a DocumentError saying
    what (and in which cell)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"not a readable notebook (not UTF-8: byte {exc.start} cannot be decoded)") from None
    try:
        nb = json.loads(text)
    except RecursionError:
        raise DocumentError("not a readable notebook (JSON nested too deeply)") from None
    except ValueError as exc:  # JSONDecodeError, and numbers of more than 4,300 digits
        raise DocumentError(f"not a readable notebook (invalid JSON: {' '.join(str(exc).split())})") from None
    if not isinstance(nb, dict):
        raise DocumentError(f"not a notebook: the JSON is {_kind(nb)}, not an object")
    version = nb.get("nbformat")
    if isinstance(version, int) and not isinstance(version, bool) and version < 4 or "worksheets" in nb:
        which = f"an nbformat {version}" if isinstance(version, int) else "an old (nbformat 3, `worksheets`)"
        raise DocumentError(f"{which} notebook: only nbformat 4 is read (convert it with "
                            "`jupyter nbconvert --to notebook`)")
    if "nbformat" in nb and (not isinstance(version, int) or isinstance(version, bool)):
        raise DocumentError(f"not a notebook: `nbformat` is {_kind(version)}, not a number")
    cells = nb.get("cells")
    if not isinstance(cells, list):
        raise DocumentError("not a notebook: no `cells` list" if cells is None else
                            f"not a notebook: `cells` is {_kind(cells)}, not a list")
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict):
            raise DocumentError(f"cell {number} is {_kind(cell)}, not an object")
        if not isinstance(cell.get("cell_type"), str):
            kind = cell.get("cell_type")
            raise DocumentError(f"cell {number}: " + ("no `cell_type`" if kind is None else
                                                      f"`cell_type` is {_kind(kind)}, not a string"))
    if _language(nb) not in ("python", "python3"):
        return _notebook(path, {"cells": []}, 1, True)  # an R or Julia notebook: nothing to lint
    match = re.match(r"\{\s*\n( *)\"", text)
    indent = len(match.group(1)) if match else None
    return _notebook(path, nb, indent, text.endswith("\n"))


def _read_bytes(path: Path, limit: int) -> bytes:
    """The bytes of a regular file, refusing (DocumentError) anything else and files over ``limit`` bytes; never
    blocks on a FIFO nor reads a device or a file that keeps growing without end."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DocumentError("not a regular file")
        if st.st_size > limit:
            raise DocumentError(f"file too large to lint ({st.st_size / 2**20:.1f} MB > {limit // 2**20} MB)")
        chunks, size = [], 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise DocumentError(f"file too large to lint (it grew past {limit // 2**20} MB while read)")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_document(path: Path) -> PythonDocument | NotebookDocument:
    notebook = path.suffix == ".ipynb"
    try:
        data = _read_bytes(path, MAX_NOTEBOOK_BYTES if notebook else MAX_BYTES)
    except OSError as exc:
        raise DocumentError(exc.strerror or str(exc)) from None
    if notebook:
        return read_notebook(path, data)
    return read_python(path, data)
