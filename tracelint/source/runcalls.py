"""What the files of one run tell each other about per-step calls (callers.py), as plain data, and ``resolve``,
which maps each file's per-step calls of imported functions to the files of the run that define them. No libcst
here: lint.py imports this before it knows whether a file needs parsing."""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from tracelint.source.screen import _dotted
from tracelint.source.vocab import GRAPH_BATCHING

MAX_ROUNDS = 3  # cross-file passes (a helper module's helper in a third file)


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


def _parts(path: Path) -> tuple[str, ...]:
    parts = path.resolve().with_suffix("").parts
    return parts[:-1] if parts and parts[-1] == "__init__" else parts


def _candidates(target: str, caller: _Module, modules: list[_Module]):
    """(module, member) pairs ``target`` may name, the most specific first: a module of the run whose path ends with
    the import's module path (relative imports from the caller's folder) and defines the member; else the one module
    of the run that defines the member."""
    dots = len(target) - len(target.lstrip("."))
    names = target.lstrip(".").split(".")
    base = caller.path.resolve().parent.parts[: len(caller.path.resolve().parent.parts) - max(0, dots - 1)]
    for split in (len(names) - 1, len(names) - 2):
        if split < 0:
            continue
        module_parts, member = tuple(names[:split]), ".".join(names[split:])
        want = base + module_parts if dots else module_parts
        for module in modules:
            if member in module.calls.defines and want and module.parts[-len(want):] == want:
                yield module, member
                return
    member_options = (".".join(names[-2:]), names[-1]) if len(names) > 1 else (names[-1],)
    for member in member_options:
        defining = [m for m in modules if member in m.calls.defines]
        if len(defining) == 1:
            yield defining[0], member
            return


# -- collate functions that batch graphs -------------------------------------------------------------------------
_GRAPH_WORDS = (b"dgl", b"torch_geometric")


def graph_collates(paths: list[Path]) -> frozenset[str]:
    """The names of the functions and methods of the run's files whose body batches graphs (``dgl.batch``, PyG's
    ``Batch.from_data_list``): a DataLoader whose ``collate_fn`` is one of them (``collate_fn=dataset.collate``,
    the dataset class defined in another module) yields graph objects, which pinning does not pin (TL202). Only
    files that mention a graph library are parsed (Python's ``ast``), before the run, so that ``--fix`` never adds
    ``pin_memory=True`` there."""
    names: set[str] = set()
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if not any(word in data for word in _GRAPH_WORDS):
            continue
        try:
            tree = ast.parse(data)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        names.update(_graph_functions(tree))
    return frozenset(names)


def _graph_functions(tree: ast.Module) -> set[str]:
    imports: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imports[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else \
                    alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and _resolved(call.func, imports) in GRAPH_BATCHING:
                    found.add(node.name)
                    break
    return found


def _resolved(func: ast.expr, imports: dict[str, str]) -> str | None:
    """``func``'s dotted name with its head replaced through the file's imports."""
    dotted = _dotted(func)
    if dotted is None:
        return None
    head, _, rest = dotted.partition(".")
    head = imports.get(head, head)
    return f"{head}.{rest}" if rest else head
