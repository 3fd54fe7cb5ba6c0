"""What the files of one run tell each other about per-step calls (callers.py), as plain data, and ``resolve``,
which maps each file's per-step calls of imported functions to the files of the run that define them. No libcst
here: lint.py imports this before it knows whether a file needs parsing."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

MAX_ROUNDS = 6  # cross-file passes (a factory's module called in a loop of a third file: main -> engine -> model)


@dataclass(frozen=True, slots=True)
class Entry:
    """A function of this file that a per-step loop of another file of the run calls."""

    description: str  # how the loop is named at the sync: "`accuracy()` (called at train.py:88) in the loop over ..."
    on_device: bool   # the calling file puts work on a CUDA device


@dataclass(frozen=True, slots=True)
class HotCall:
    """A per-step call of a function another module defines, as the calling file names it."""

    target: str       # "pkg.metrics.accuracy", ".trainer.run" (relative), "pkg.algo.PPO.update" (a method)
    description: str
    on_device: bool


@dataclass(frozen=True, slots=True)
class RunCalls:
    """What one analysed file tells the others of the run (plain data: it comes back from a worker by pickle)."""

    defines: frozenset[str] = frozenset()  # "f", "C.m": module-level functions and methods of module-level classes
    hot_calls: tuple[HotCall, ...] = ()
    device: bool = False                   # the file shows device evidence itself
    device_calls: frozenset[str] = frozenset()  # with ``device``: the imported functions it calls anywhere
    sync_sites: bool = True                # the screen found host-device sync sites (device evidence matters)
    precision: frozenset[str] = frozenset()  # with ``pending``: the file's own precision settings
    imports: tuple[str, ...] = ()          # what it imports (import_targets): how programs connect files
    pending: frozenset[str] = frozenset()  # TL401/TL404: its findings stand only if its program agrees
    pinned: tuple[tuple[str, int | str], ...] = ()  # (target, position or keyword): a pinned DataLoader passed to
                                                    # an imported function (TL203 follows it there)
    stepping: frozenset[str] = frozenset()  # "f", "C.m" of this file whose body steps an optimizer (or calls backward)
    # (target, element): calls of another file's functions whose result the file calls as a module (``criterion =
    # build(args)[1]``; "*.get_model" for a method of an object of unknown class): the run resolves them (project.py)
    made: tuple[tuple[str, int | None], ...] = ()
    passes: tuple[tuple[str, int | str, str], ...] = ()  # (target, position or keyword, class): modules passed to
                                                         # another file's functions (project.parameter_modules)
    # (target, ((position or keyword, kind), ...)): what each per-step call of another file's function passes, the
    # kind a values.Kind value ("host", "tensor", "unknown"; "*"/"**" for a starred argument): argument_kinds
    arguments: tuple[tuple[str, tuple[tuple[int | str, str], ...]], ...] = ()


# -- resolving the calls of a run -----------------------------------------------------------------------------
@dataclass
class _Module:
    path: Path
    parts: tuple[str, ...]  # the path's parts without ".py" ("__init__" dropped)
    calls: RunCalls = field(default_factory=RunCalls)


def resolve(files: dict[Path, RunCalls]) -> tuple[dict[Path, dict[str, Entry]], set[Path]]:
    """The entry points of each file of a run, {file: {"f" or "C.m": Entry}}, from the others' per-step calls; and
    the files without device evidence of their own whose functions a file with device evidence calls (their code runs
    on the caller's device: a PPO module's ``update()`` called from a script that moves the model to CUDA)."""
    modules = [_Module(p, _parts(p), c) for p, c in files.items()]
    entries: dict[Path, dict[str, Entry]] = {}
    device: set[Path] = set()
    for caller in modules:
        for call in caller.calls.hot_calls:
            for module, member in _candidates(call.target, caller, modules):
                if module.path != caller.path:
                    entries.setdefault(module.path, {}).setdefault(member, Entry(call.description, call.on_device))
                break
        for target in caller.calls.device_calls if caller.calls.device else ():
            for module, _member in _candidates(target, caller, modules):
                if module.path != caller.path and not module.calls.device and module.calls.sync_sites:
                    device.add(module.path)
                break
    return entries, device


def stepping_calls(files: dict[Path, RunCalls]) -> dict[Path, frozenset[str]]:
    """{file: targets}: the imported functions each file calls (``device_calls``) that step an optimizer in another
    file of the run (``agent.update(rollouts)`` where A2C's ``update()`` runs one optimizer step): a loop whose own
    body calls one is a loop of steps, however many environment steps a nested loop takes first."""
    modules = [_Module(p, _parts(p), c) for p, c in files.items()]
    found: dict[Path, frozenset[str]] = {}
    for caller in modules:
        targets = set()
        for target in caller.calls.device_calls:
            for module, member in _candidates(target, caller, modules):
                if module.path != caller.path and member in module.calls.stepping:
                    targets.add(target)
                break
        if targets:
            found[caller.path] = frozenset(targets)
    return found


def pinned_parameters(files: dict[Path, RunCalls]) -> dict[Path, dict[str, frozenset[int | str]]]:
    """{file: {"f" or "C.m": positions or keywords}}: the parameters of each file's functions that another file of
    the run passes a pinned DataLoader (``evaluate(net, val_loader, device)`` with ``val_loader`` built in train.py
    with ``pin_memory=True``)."""
    found = _by_member(files, lambda calls: calls.pinned)
    return {path: {m: frozenset(w) for m, w in members.items()} for path, members in found.items()}


def argument_kinds(files: dict[Path, RunCalls]) -> dict[Path, dict[str, tuple[tuple[tuple[int | str, str], ...], ...]]]:
    """{file: {"f" or "C.m": (arguments of one call, ...)}}: what the per-step calls of other files of the run pass
    each function (``RunCalls.arguments``), for its parameters' kinds (values.Values._parameter_kind): the
    ``labels`` that YOLOX's trainer passes ``YOLOX.forward``, which passes them on to its head."""
    found = _by_member(files, lambda calls: calls.arguments)
    return {path: {m: tuple(sorted(given, key=str)) for m, given in members.items()} for path, members in found.items()}


def _by_member(files: dict[Path, RunCalls], pairs) -> dict[Path, dict[str, set]]:
    """{file: {member: values}} from each file's ``pairs(calls)``, (target, value) pairs: the values gathered on the
    member of another file of the run each target names."""
    modules = [_Module(p, _parts(p), c) for p, c in files.items()]
    found: dict[Path, dict[str, set]] = {}
    for caller in modules:
        for target, value in pairs(caller.calls):
            for module, member in _candidates(target, caller, modules):
                if module.path != caller.path:
                    found.setdefault(module.path, {}).setdefault(member, set()).add(value)
                break
    return found


@lru_cache(maxsize=8192)
def resolved(path: Path) -> Path:
    """``path.resolve()``, once per path and process: matching calls to modules asks it for every call of every file of
    a run (156,000 times on timm, most of a warm run's time)."""
    return path.resolve()


def _parts(path: Path) -> tuple[str, ...]:
    parts = resolved(path).with_suffix("").parts
    return parts[:-1] if parts and parts[-1] == "__init__" else parts


def _candidates(target: str, caller: _Module, modules: list[_Module], loose: bool = True):
    """(module, member) pairs ``target`` may name, the most specific first: a module of the run whose path ends with
    the import's module path (relative imports from the caller's folder) and defines the member; else the one module
    of the run that defines the member."""
    if target.startswith("@"):  # "@/abs/path.py:C.forward": a member of a file the run resolved (project.py)
        path, _, member = target[1:].partition(":")
        wanted = Path(path)
        for module in modules:
            if resolved(module.path) == wanted:
                yield module, member
                return
        return
    dots = len(target) - len(target.lstrip("."))
    names = target.lstrip(".").split(".")
    folder = resolved(caller.path).parent.parts
    base = folder[: len(folder) - max(0, dots - 1)]
    for split in (len(names) - 1, len(names) - 2):
        if split < 0:
            continue
        module_parts, member = tuple(names[:split]), ".".join(names[split:])
        want = base + module_parts if dots else module_parts
        for module in modules:
            if member in module.calls.defines and want and module.parts[-len(want):] == want:
                yield module, member
                return
    if not loose:  # only a module whose path is the import's
        return
    member_options = (".".join(names[-2:]), names[-1]) if len(names) > 1 else (names[-1],)
    for member in member_options:
        defining = [m for m in modules if member in m.calls.defines]
        if len(defining) == 1:
            yield defining[0], member
            return


# -- programs: the files of a run that import each other -------------------------------------------------------
_IMPORT_LINE = re.compile(rb"^[ \t]*(?:from[ \t]+([.\w]+)[ \t]+import[ \t]+\(?[ \t]*(\w+)|import[ \t]+([\w.]+))", re.M)


def import_targets(data: bytes) -> tuple[str, ...]:
    """What a file imports, as ``pkg.utils.setup`` / ``.utils`` / ``pkg.utils`` (matched to the run's files by
    ``_module_candidates``)."""
    return tuple((module + (b"" if module.endswith(b".") else b".") + name if module else plain)
                 .decode("ascii", "replace") for module, name, plain in _IMPORT_LINE.findall(data))


def programs(imports: dict[Path, tuple[str, ...]], asked: list[Path]) -> dict[Path, set[Path]]:
    """For each file of ``asked``, the files of its programs: itself, those it imports (directly or not) and those
    that import it (directly or not)."""
    modules = [_Module(p, _parts(p), RunCalls(frozenset({""}))) for p in imports]
    edges: dict[Path, set[Path]] = {}
    for module in modules:
        for target in imports[module.path]:
            for found, _member in _module_candidates(target, module, modules):
                edges.setdefault(module.path, set()).add(found.path)
    below: dict[Path, set[Path]] = {}
    for path in imports:  # the files each file imports, directly or not
        seen, work = {path}, [path]
        while work:
            for nxt in edges.get(work.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    work.append(nxt)
        below[path] = seen
    above: dict[Path, set[Path]] = {}  # the files that import each file, directly or not
    for path, seen in below.items():
        for p in seen:
            above.setdefault(p, set()).add(path)
    return {path: below.get(path, {path}) | above.get(path, set()) for path in asked}


def _module_candidates(target: str, caller: _Module, modules: list[_Module]):
    """The module of the run an import names, matched by the end of its path as ``_candidates`` matches calls:
    ``pkg.utils`` / ``.utils`` (a module), or ``pkg.utils.setup`` / ``from . import utils`` (a member of a module,
    or a module of a package)."""
    dots = len(target) - len(target.lstrip("."))
    names = tuple(n for n in target.lstrip(".").split(".") if n)
    folder = resolved(caller.path).parent.parts
    base = folder[: len(folder) - max(0, dots - 1)] if dots else ()
    for size in (len(names), len(names) - 1):
        want = base + names[:size]
        if size < 0 or not want or (not dots and size == 0):
            continue
        for module in modules:
            if module is not caller and (module.parts == want if dots else module.parts[-len(want):] == want):
                yield module, ""
                return
