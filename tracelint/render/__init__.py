"""Output formats: one module per format, each exposing ``render(result) -> str``.

A format is a module of this package whose name does not start with an underscore; ``render(result, "sarif")``
imports ``tracelint.render.sarif``. Adding a format means adding a module, nothing else.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from functools import lru_cache

from tracelint.engine.result import RunResult


@lru_cache(maxsize=1)
def formats() -> tuple[str, ...]:
    """The names of the output formats, sorted."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")))


def render(result: RunResult, fmt: str, **view) -> str:
    """The report of one run in the named format (text, json, sarif, github, gitlab, ...). ``view``: options of
    what the report shows (``verbose``, ``quiet``, ``statistics``, ``show_source``); a format takes those its
    ``render`` names as keywords and has no use for the others."""
    if fmt not in formats():
        raise ValueError(f"unknown output format {fmt!r} (expected one of {', '.join(formats())})")
    function = importlib.import_module(f"{__name__}.{fmt}").render
    taken = inspect.signature(function).parameters
    return function(result, **{k: v for k, v in view.items() if k in taken})
