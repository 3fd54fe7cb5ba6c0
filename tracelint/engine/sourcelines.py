"""The lines of source files and notebook cells as reports quote them (--show-source, the HTML report, baselines),
each file read once however many findings point into it."""
from __future__ import annotations

import io
import re
import tokenize

_NEWLINE = re.compile(r"\r\n|\r|\n")  # Python's line breaks; str.splitlines also splits at \f, \x1c, \u2028...


class SourceLines:
    """``line(path, n, cell)``: line ``n`` (1-based) of a file, or of a notebook's code cell ``cell`` (counting all
    cells from 1, as findings do), without its line break; None when the file cannot be read or has no such line.
    A reader caches what it read: make one per report, not one per process (files change under --watch)."""

    def __init__(self, files: dict[str, bytes] | None = None) -> None:
        self._data: dict[str, bytes | None] = dict(files or {})  # ``files``: contents to use in place of the disk's
        self._cells: dict[str, list | None] = {}
        self._lines: dict[tuple[str, int | None], list[str] | None] = {}

    def line(self, path: str, line: int, cell: int | None = None) -> str | None:
        lines = self.lines(path, cell)
        return lines[line - 1] if lines is not None and 0 < line <= len(lines) else None

    def lines(self, path: str, cell: int | None = None) -> list[str] | None:
        key = (path, cell)
        if key not in self._lines:
            self._lines[key] = self._read(path, cell)
        return self._lines[key]

    def _read(self, path: str, cell: int | None) -> list[str] | None:
        if path not in self._data:
            try:
                with open(path, "rb") as file:
                    self._data[path] = file.read()
            except OSError:
                self._data[path] = None
        data = self._data[path]
        if data is None:
            return None
        try:
            if cell is not None:
                if cell < 1:
                    return None
                source = self._notebook_cells(path, data)[cell - 1]["source"]
                text = "".join(source) if isinstance(source, list) else str(source)
            else:
                try:
                    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
                except SyntaxError:
                    encoding = "utf-8"
                text = data.decode(encoding, errors="replace")
        except (ValueError, LookupError, TypeError):
            return None
        lines = _NEWLINE.split(text)
        if lines and not lines[-1]:
            lines.pop()
        return lines

    def _notebook_cells(self, path: str, data: bytes) -> list:
        """The notebook's cells, its JSON parsed once; ValueError when it is not a notebook."""
        if path not in self._cells:
            import orjson

            try:
                cells = orjson.loads(data)["cells"]
            except (ValueError, LookupError, TypeError):
                cells = None
            self._cells[path] = cells if isinstance(cells, list) else None
        cells = self._cells[path]
        if cells is None:
            raise ValueError("not a notebook")
        return cells


def source_line(path: str, line: int, cell: int | None) -> str | None:
    """Line ``line`` of a file (of a notebook's cell ``cell``, counting all cells from 1), or None."""
    return SourceLines().line(path, line, cell)
