"""Which files of a folder are traces: the one rule both ``tracelint DIR`` and ``tracelint trace DIR`` follow.

A folder is searched recursively, in sorted order, skipping the excluded directories of the config (``.git``,
``.venv``, ... as for source files). Then:

- ``tracelint trace DIR`` (every file is meant to be a trace): every ``*.json`` / ``*.json.gz`` is read; one that
  turns out to be JSON of another kind (an object without ``traceEvents``: a manifest, a config) is skipped, and
  the report names it (``note: skipped …``). A broken trace is an error, as always.
- ``tracelint DIR`` (a folder of code that may hold traces): only files named as traces, ``*.trace.json`` /
  ``*.trace.json.gz`` (which covers ``<worker>.<ns>.pt.trace.json.gz``); other JSON is data or config, not read.

Either way only regular files are read: FIFOs, sockets, device files, symbolic link loops and sub-folders that
cannot be listed are passed over with a note, like the JSON that is not a trace.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import NamedTuple

TRACE_SUFFIXES = (".json", ".json.gz")
TRACE_NAMES = (".trace.json", ".trace.json.gz")


class Skipped(NamedTuple):
    """A file a folder search passed over, and why (shown as a note; not an error)."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


_NOT_REGULAR = ((stat.S_ISDIR, "is a directory, not a trace file"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def not_a_regular_file(mode: int) -> str | None:
    """What a file of this st_mode is when it is not a regular file (never read: it may block or never end)."""
    if stat.S_ISREG(mode):
        return None
    for test, what in _NOT_REGULAR:
        if test(mode):
            return what if what.startswith("is ") else f"not a regular file: {what}"
    return "not a regular file"


def is_trace_name(path: Path) -> bool:
    return path.name.endswith(TRACE_SUFFIXES)


def traces_in(directory: Path, *, named_only: bool, excluded=None, skipped: list[Skipped] | None = None
              ) -> list[Path]:
    """The candidate traces of ``directory`` by the rule in the module docstring; ``excluded(path) -> bool`` names
    directories not to enter. What cannot be read safely is passed over with a note in ``skipped``: a sub-folder
    that cannot be listed, a symbolic link that loops or leads nowhere, and a FIFO, socket or device file (reading
    one could block forever or never end). Symbolic links to folders are not followed (so a link loop cannot
    recur)."""
    found: list[Path] = []
    notes: list[Skipped] = skipped if skipped is not None else []

    def unlistable(err: OSError) -> None:
        where = err.filename if err.filename is not None else directory
        notes.append(Skipped(str(where), f"folder not read: {err.strerror or err}"))

    suffixes = TRACE_NAMES if named_only else TRACE_SUFFIXES
    for root, dirs, files in os.walk(directory, onerror=unlistable):
        dirs[:] = sorted(d for d in dirs if not (excluded and excluded(Path(root, d))))
        for name in sorted(files):
            if not name.endswith(suffixes):
                continue
            path = Path(root, name)
            problem = _unsafe(path)
            if problem:
                notes.append(Skipped(str(path), problem))
            else:
                found.append(path)
    return found


def _unsafe(path: Path) -> str | None:
    """Why a file found in a folder is not to be read, or None (an unreadable one is read, and its error shown)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symbolic link loop, not read"
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            return "a symbolic link to nothing, not read"
        return None
    problem = not_a_regular_file(mode)
    return f"{problem}, not read" if problem else None
