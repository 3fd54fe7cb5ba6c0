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

import re
from collections.abc import Callable, Collection
from functools import lru_cache, partial
from pathlib import Path

from tracelint.source.runcalls import RunCalls, _candidates, _Module, _parts, resolved

_MARKERS = ("pyproject.toml", ".git")
_INSTALLED = frozenset({"site-packages", "dist-packages"})
_PIN = re.compile(r"""^\s*["']?torch\s*(?:\[[^\]]*\])?\s*==\s*(\d+)\.(\d+)""", re.M)
_PROJECT_FILES = ("requirements.txt", "pyproject.toml", "setup.py", "setup.cfg", "environment.yml")


@lru_cache(maxsize=1024)
def project_root(folder: Path) -> Path | None:
    """The nearest folder at or above ``folder`` holding a pyproject.toml or .git; None when there is none."""
    for candidate in (folder, *folder.parents):
        if any((candidate / marker).exists() for marker in _MARKERS):
            return candidate
    return None


def pinned_torch(path: str | Path) -> tuple[int, int] | None:
    """The torch version a project pins (``torch==1.10.0`` in the requirements.txt, pyproject.toml, setup.py,
    setup.cfg or environment.yml nearest above ``path``), as (major, minor); None when none is pinned. TL303 and
    TL401 read it; the cache keys a file's results by it."""
    return _pinned_in(Path(path).resolve().parent)


@lru_cache(maxsize=256)
def _pinned_in(folder: Path) -> tuple[int, int] | None:
    for name in _PROJECT_FILES:
        try:
            text = (folder / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        match = _PIN.search(text)
        if match:
            return int(match.group(1)), int(match.group(2))
    if any((folder / root).exists() for root in (".git", "pyproject.toml", "setup.py")):
        return None  # the project's root: look no higher
    return _pinned_in(folder.parent) if folder.parent != folder else None


def _module_file(base: Path, parts: tuple[str, ...]) -> Path | None:
    if not parts:
        return None
    stem = base.joinpath(*parts)
    for path in (stem.with_suffix(".py"), stem / "__init__.py"):
        if path.is_file():
            return path
    return None


def locate(target: str, caller: Path) -> tuple[Path, str] | None:
    """The project file that defines ``target`` (a qualified name as the calling file imports it: ``pkg.model.Net.
    forward``, ``.router.Router.forward``) and the member's name there (``Net.forward``), or None: not a module of
    the project."""
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
                return path, ".".join(names[split:])
            return None
    return None


def reached(calls: dict[Path, RunCalls], index: ProjectIndex | None = None) -> set[Path]:
    """The project files, not yet in ``calls``, that define what the per-step calls of the files in ``calls`` lead
    to where no file in ``calls`` does (``runcalls.resolve`` finds none)."""
    modules = [_Module(path, _parts(path), told) for path, told in calls.items()]
    known = {resolved(path) for path in calls}
    found: set[Path] = set()
    for caller in modules:
        for call in caller.calls.hot_calls:
            if next(_candidates(call.target, caller, modules), None) is not None:
                continue
            place = (Path(call.target[1:].partition(":")[0]), "") if call.target.startswith("@") else \
                (index.locate if index is not None else locate)(call.target, caller.path)
            path = place[0] if place is not None else None
            if path is not None and resolved(path) not in known:
                found.add(path)
    return found


# -- what other files' functions return, and what modules the run passes them -------------------------------------
MAX_FACTORY_DEPTH = 4  # factories followed through factories (build_model -> build -> ...)


class ProjectIndex:
    """Each file's model (its call index, made by ``model``: lint.callers_of), made when a factory leads there and
    kept by the file's content: the run asks what a function returns without analysing the file. With a
    ``cache.Cache``, what a factory returns is kept on disk with the files and module lookups it read
    (``remembered``): a run whose project has not changed there neither parses those files nor imports libcst."""

    def __init__(self, model: Callable[[Path, bytes], object], cache=None) -> None:
        self._model = model  # the file at a path with these bytes -> its callers.Callers (None: not parsed)
        self._models: dict[tuple[Path, bytes], object] = {}
        self._cache = cache
        # while ``remembered`` computes: the files read {path: content digest, None: unreadable} and the lookups
        # made {(target, caller): locate's answer}
        self._read: dict[str, str | None] | None = None
        self._located: dict[tuple[str, str], tuple[str, str] | None] | None = None
        self._digests: dict[str, str | None] = {}  # the files' contents as this run found them (``_unchanged``)
        self._places: dict[tuple[str, Path], tuple[Path, str] | None] = {}

    def callers(self, path: Path):
        """The ``callers.Callers`` of the file at ``path`` (None: unreadable or not parsed)."""
        import hashlib

        try:
            data = path.read_bytes()
        except OSError:
            data = None
        if self._read is not None:
            self._read[str(path.resolve())] = _digest(data)
        if data is None:
            return None
        key = (path.resolve(), hashlib.blake2b(data, digest_size=16).digest())
        if key not in self._models:
            self._models[key] = self._model(path, data)
        return self._models[key]

    def locate(self, target: str, caller: Path) -> tuple[Path, str] | None:
        """``locate``, once per run (the rounds ask again), noted while ``remembered`` computes."""
        if (target, caller) not in self._places:
            self._places[(target, caller)] = locate(target, caller)
        place = self._places[(target, caller)]
        if self._located is not None:
            self._located[(target, str(caller))] = None if place is None else (str(place[0]), place[1])
        return place

    def digest(self, value) -> str:
        """A short stand-in for ``value`` in the parts of ``remembered`` (none needed without a cache)."""
        if self._cache is None:
            return ""
        from tracelint.source.cache import key

        return key(value)

    def remembered(self, parts: tuple, compute):
        """``compute()``, or what it gave in an earlier run under the same ``parts`` when every file it read has the
        same content and every module it looked for is found where it was (without a cache: ``compute()``)."""
        if self._cache is None or self._read is not None:
            return compute()
        from tracelint.source.cache import key

        digest = key("project", *parts)
        known = self._cache.get(digest)
        if isinstance(known, tuple) and len(known) == 3 and self._unchanged(known[1], known[2]):
            return known[0]
        self._read, self._located = {}, {}
        try:
            value = compute()
            read, located = self._read, self._located
        finally:
            self._read = self._located = None
        self._cache.put(digest, (value, read, located))
        return value


    def _unchanged(self, read: dict, located: dict) -> bool:
        """The files hold what they held and the lookups find what they found (``remembered``); each file is read
        once per run however many entries name it."""
        for path, digest in read.items():
            if path not in self._digests:
                try:
                    self._digests[path] = _digest(Path(path).read_bytes())
                except OSError:
                    self._digests[path] = None
            if self._digests[path] != digest:
                return False
        for (target, caller), place in located.items():
            now = self.locate(target, Path(caller))
            if (None if now is None else (str(now[0]), now[1])) != place:
                return False
        return True


def _digest(data: bytes | None) -> str | None:
    from tracelint.source.cache import content_digest

    return None if data is None else content_digest(data)


def _classes(callers, fn, element: int | None, path: Path, modules: list[_Module], index: ProjectIndex,
             depth: int) -> set[str]:
    """The classes ``fn`` of the file whose ``callers`` is given returns (its element ``element``), as "@path:C"."""
    from tracelint.source.semantic.callers import Modules

    modules_of = Modules(callers.index)
    found: list = []
    seen: set = set()
    for value in modules_of._returned(fn):
        modules_of._holds(value, found, seen, 0, element)
    classes: set[str] = set()
    here = _Module(path, _parts(path))
    for built in found:
        if isinstance(built, str):
            classes.add(built)
            continue
        name = callers.tree.qualified_name(built)
        local = callers.index.classes.get(getattr(built, "value", None)) if name is None else None
        if local:
            classes.add(f"@{path.resolve()}:{built.value}")
        elif name is not None:
            classes.update(_as_class(name, here, modules, index))
    for target, inner in modules_of.made:  # a factory returning another factory's result
        classes.update(factory_classes(target, inner, here, modules, index, depth + 1))
    return classes


def _as_class(name: str, caller: _Module, modules: list[_Module], index: ProjectIndex | None = None) -> set[str]:
    """``name`` (qualified as ``caller`` imports it) as "@path:C" when a file of the run defines class C with a
    ``forward``; else a file of the project (project.locate) that defines it."""
    for module, member in _candidates(f"{name}.forward", caller, modules):
        return {f"@{resolved(module.path)}:{member.rsplit('.', 1)[0]}"}
    place = (index.locate if index is not None else locate)(f"{name}.forward", caller.path)
    return {f"@{place[0].resolve()}:{place[1].rsplit('.', 1)[0]}"} if place is not None else set()


def _function(callers, member: str):
    from tracelint.source.semantic.callers import qualname

    for fn in callers.index.functions:
        if qualname(fn, callers.tree) == member:
            return fn
    return None


def factory_classes(target: str, element: int | None, caller: _Module, modules: list[_Module], index: ProjectIndex,
                    depth: int = 0) -> set[str]:
    """The classes (as "@path:C") the function ``target`` (as ``caller`` names it) returns, or its element
    ``element``; "*.m": the one method named m that a file of the run defines."""
    if depth > MAX_FACTORY_DEPTH:
        return set()
    if target.startswith("*."):
        method = target[2:]
        defining = [(m, d) for m in modules for d in m.calls.defines if d.rsplit(".", 1)[-1] == method]
        places = defining if len(defining) == 1 else []
    else:
        places = list(_candidates(target, caller, modules, loose=False))
        if not places:
            place = index.locate(target, caller.path)
            if place is not None:
                places = [(_Module(place[0], _parts(place[0])), place[1])]
    classes: set[str] = set()
    for module, member in places:
        callers = index.callers(module.path)
        if callers is None:
            continue
        fn = _function(callers, member) or _function(callers, member.rsplit(".", 1)[-1])
        if fn is not None:
            classes |= _classes(callers, fn, element, module.path, modules, index, depth)
        elif member in callers.tree.imports:  # a package's ``from .post import build``: the module it re-exports
            classes |= factory_classes(callers.tree.imports[member], element, _Module(module.path, _parts(module.path)),
                                       modules, index, depth + 1)
    return classes


def factories(calls: dict[Path, RunCalls], index: ProjectIndex, asking: Collection[Path] | None = None,
              ) -> dict[Path, dict[tuple[str, int | None], tuple]]:
    """{file: {(target, element): ("@path:C", ...)}}: what the factory calls each file reported (RunCalls.made)
    return; only those of the files ``asking`` when given."""
    modules = [_Module(path, _parts(path), told) for path, told in calls.items()]
    found: dict[Path, dict] = {}
    run = None  # what factory_classes reads of the run's files: their paths and what they define
    for caller in modules:
        if asking is not None and caller.path not in asking:
            continue
        for target, element in caller.calls.made:
            if run is None:
                run = index.digest({str(resolved(m.path)): m.calls.defines for m in modules})
            classes = index.remembered(
                ("factory", target, element, str(resolved(caller.path)), run),
                partial(factory_classes, target, element, caller, modules, index))
            if classes:
                found.setdefault(caller.path, {})[(target, element)] = tuple(sorted(classes))
    return found


def parameter_modules(calls: dict[Path, RunCalls], index: ProjectIndex | None = None,
                      ) -> dict[Path, dict[str, dict[int | str, tuple[str, ...]]]]:
    """{file: {"f" or "C.m": {position or keyword: ("@path:C", ...)}}}: the modules other files pass each file's
    functions (RunCalls.passes)."""
    modules = [_Module(path, _parts(path), told) for path, told in calls.items()]
    found: dict[Path, dict[str, dict[int | str, set[str]]]] = {}
    for caller in modules:
        for target, where, cls in caller.calls.passes:
            classes = {cls} if cls.startswith("@") else _as_class(cls, caller, modules, index)
            for module, member in _candidates(target, caller, modules):
                if module.path != caller.path and classes:
                    found.setdefault(module.path, {}).setdefault(member, {}).setdefault(where, set()).update(classes)
                break
    return {path: {m: {w: tuple(sorted(c)) for w, c in given.items()} for m, given in members.items()}
            for path, members in found.items()}
