"""The project index (issue #35): the project files that a run's per-step calls lead to, found when a call leads there.

A run names files (pre-commit: the staged ones only); the code they run every step often lives in files it did not
name: ``from pkg.model import Net`` ... ``model(x)`` runs ``Net.forward`` in ``pkg/model.py``. ``reached`` maps each
per-step call of an imported function or class (``runcalls.HotCall.target``: ``pkg.model.Net.forward``,
``.router.Router.forward``) that no file of the run defines to the project file that does, so that the run analyses
that file with the called function as an entry point (``runcalls.resolve``) and reports what the call brings there.

The project is the folder of the nearest ``pyproject.toml`` or ``.git`` above the calling file, and the calling file's
own folder (a script's folder is on ``sys.path``): modules are looked for there only, never in ``site-packages``
or ``dist-packages``. Nothing is parsed here: a file found is read and screened by the run like any other, when a
call leads there.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from tracelint.source.runcalls import RunCalls, _candidates, _Module, _parts

_MARKERS = ("pyproject.toml", ".git")
_INSTALLED = frozenset({"site-packages", "dist-packages"})


@lru_cache(maxsize=1024)
def project_root(folder: Path) -> Path | None:
    """The nearest folder at or above ``folder`` holding a pyproject.toml or .git; None when there is none."""
    for candidate in (folder, *folder.parents):
        if any((candidate / marker).exists() for marker in _MARKERS):
            return candidate
    return None


def _module_file(base: Path, parts: tuple[str, ...]) -> Path | None:
    if not parts:
        return None
    stem = base.joinpath(*parts)
    for path in (stem.with_suffix(".py"), stem / "__init__.py"):
        if path.is_file():
            return path
    return None


def locate(target: str, caller: Path) -> Path | None:
    """The project file that defines ``target`` (a qualified name as the calling file imports it: ``pkg.model.Net.
    forward``, ``.router.Router.forward``), or None: not a module of the project."""
    caller = caller.resolve()
    dots = len(target) - len(target.lstrip("."))
    names = tuple(target.lstrip(".").split("."))
    if dots:
        bases = [caller.parents[dots - 1]] if dots - 1 < len(caller.parents) else []
    else:
        root = project_root(caller.parent)
        bases = [caller.parent] + ([root, root / "src"] if root is not None and root != caller.parent else [])
    for base in bases:
        within = project_root(base) if dots else base
        for split in range(len(names) - 1, 0, -1):  # the longest module path first: pkg.model, then pkg
            path = _module_file(base, names[:split])
            if path is None:
                continue
            if _INSTALLED.isdisjoint(path.parts) and (within is None or path.is_relative_to(within)):
                return path
            return None
    return None


def reached(calls: dict[Path, RunCalls]) -> set[Path]:
    """The project files, not yet in ``calls``, that define what the per-step calls of the files in ``calls`` lead
    to where no file in ``calls`` does (``runcalls.resolve`` finds none)."""
    modules = [_Module(path, _parts(path), told) for path, told in calls.items()]
    known = {path.resolve() for path in calls}
    found: set[Path] = set()
    for caller in modules:
        for call in caller.calls.hot_calls:
            if next(_candidates(call.target, caller, modules), None) is not None:
                continue
            path = locate(call.target, caller.path)
            if path is not None and path.resolve() not in known:
                found.add(path)
    return found
