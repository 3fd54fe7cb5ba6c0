"""Which files of a folder are traces: the one rule both ``tracelint DIR`` and ``tracelint trace DIR`` follow.

A folder is searched recursively, in sorted order, skipping the excluded directories of the config (``.git``,
``.venv``, ... as for source files). Then:

- ``tracelint trace DIR`` (every file is meant to be a trace): every ``*.json`` / ``*.json.gz`` is read; one that
  turns out to be JSON of another kind (an object without ``traceEvents``: a manifest, a config) is skipped, and
  the report names it (``note: skipped …``). A broken trace is an error, as always.
- ``tracelint DIR`` (a folder of code that may hold traces): only files named as traces, ``*.trace.json`` /
  ``*.trace.json.gz`` (which covers ``<worker>.<ns>.pt.trace.json.gz``); other JSON is data or config, not read.
"""
from __future__ import annotations

import os
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


def is_trace_name(path: Path) -> bool:
    return path.name.endswith(TRACE_SUFFIXES)


def traces_in(directory: Path, *, named_only: bool, excluded=None) -> list[Path]:
    """The candidate traces of ``directory`` by the rule in the module docstring; ``excluded(path) -> bool`` names
    directories not to enter."""
    found: list[Path] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not (excluded and excluded(Path(root, d))))
        suffixes = TRACE_NAMES if named_only else TRACE_SUFFIXES
        found.extend(Path(root, name) for name in sorted(files) if name.endswith(suffixes))
    return found
