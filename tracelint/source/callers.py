"""Calls followed within a file and across the files of one run (issue #12): a function called once per step runs
once per step.

A sync in ``def train(): ...; return loss.item()`` is a per-step sync when ``train()`` is called inside a per-step
loop (``for epoch in range(epochs): train(epoch)`` of a full-batch model, ``for batch in loader: self.run_step()``).
``Facts.hot_loop`` (loops.py) asks ``Callers.per_step(function)`` when it climbs out of a function body:

- **Within the file** (``CallIndex``, one walk of the module on first use, which also gives every node its parent):
  a module-level or nested ``def f`` is called by ``f(...)`` in the scope that defines it; a method ``def m`` of
  ``class C`` by ``self.m(...)``/``cls.m(...)`` inside ``C``, ``C.m(...)``, or ``obj.m(...)`` where ``obj = C(...)``.
  The function is per-step when one of those calls is itself per-step (``hot_loop`` of the call: a guarded call,
  ``if step % 100 == 0: evaluate()``, is not). Chains are followed to ``MAX_DEPTH`` calls; recursion stops.
- **Across the files of one run** (``tracelint check .``, or the files pre-commit passes): each analysed file
  reports its per-step calls of functions it imports (``RunCalls.hot_calls``: ``from .metrics import accuracy``,
  ``import utils; utils.to_cpu(x)``, ``agent = algo.PPO(...); agent.update(...)``) and the functions it defines.
  ``resolve`` maps each call to the file of the run that defines the function (the imported module's path, relative
  imports from the calling file's folder, else the one file of the run that defines that name), and that file is
  analysed again with the function as an entry point (``Entry``). A file linted alone (pre-commit on the helper
  module only) has no callers from other files: its functions are judged on their own.

The message names the chain: "`loss.item()` in `train()` (called at line 120) in the loop over
`range(args.epochs)`", and for another file "(called at train.py:88)".
"""
from __future__ import annotations

from pathlib import PurePath

import libcst as cst

from tracelint.source.context import callee_name, dotted_name, iter_children
from tracelint.source.hotloop import HotLoop
from tracelint.source.runcalls import HotCall, RunCalls
from tracelint.source.vocab import EXTERNAL_MODULES

MAX_DEPTH = 4  # calls followed from a sync to the per-step loop (train() -> step() -> log() -> sync)
_SELF = frozenset({"self", "cls"})


def qualname(fn: cst.FunctionDef, tree) -> str | None:
    """``f`` for a module-level function, ``C.m`` for a method of a module-level class; None for nested ones."""
    parent = _owner(fn, tree)
    if isinstance(parent, cst.Module):
        return fn.name.value
    if isinstance(parent, cst.ClassDef) and isinstance(_owner(parent, tree), cst.Module):
        return f"{parent.name.value}.{fn.name.value}"
    return None


def _owner(node: cst.CSTNode, tree) -> cst.CSTNode | None:
    """The function, class or module whose body holds ``node``."""
    for parent in tree.ancestors(node):
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Module, cst.Lambda)):
            return parent
    return None


class CallIndex:
    """Every call of a file by callee name, and every node's parent (set on the tree): one walk of the module."""

    def __init__(self, tree) -> None:
        self.tree = tree
        self.calls: dict[str, list[cst.Call]] = {}
        self.functions: list[cst.FunctionDef] = []
        self.instances: dict[str, list[cst.Call]] = {}  # name -> the calls it is assigned (``agent = PPO(...)``)
        set_parent = getattr(tree, "_set_parent", None)
        stack: list[cst.CSTNode] = [tree.module]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Call):
                name = callee_name(node)
                if name is not None:
                    self.calls.setdefault(name, []).append(node)
            elif isinstance(node, cst.FunctionDef):
                self.functions.append(node)
            elif isinstance(node, cst.Assign) and isinstance(node.value, cst.Call):
                for target in node.targets:
                    if isinstance(target.target, cst.Name):
                        self.instances.setdefault(target.target.value, []).append(node.value)
            for child in iter_children(node):
                if set_parent is not None:
                    set_parent(child, node)
                stack.append(child)

    def inside(self, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
        return any(parent is scope for parent in self.tree.ancestors(node))


class Callers:
    """The per-file call following behind ``Facts.hot_loop`` (see the module docstring)."""

    def __init__(self, facts) -> None:
        self.facts = facts
        self.tree = facts.tree
        self._index: CallIndex | None = None
        self._by_name: dict[str, list[cst.FunctionDef]] | None = None
        self._callers: dict[cst.FunctionDef, list[cst.Call]] = {}
        self._verdicts: dict[cst.FunctionDef, object] = {}
        self._open: set[cst.FunctionDef] = set()

    @property
    def index(self) -> CallIndex:
        if self._index is None:
            self._index = CallIndex(self.tree)
        return self._index

    # -- within the file --------------------------------------------------------------------------------------
    def callers(self, fn: cst.FunctionDef) -> list[cst.Call]:
        """The calls of ``fn`` in this file (see the module docstring for which calls count)."""
        known = self._callers.get(fn)
        if known is not None:
            return known
        name = fn.name.value
        source = getattr(self.tree, "source", None)
        if source is not None and source.count(name + "(") <= 1 and (name + " (") not in source:
            self._callers[fn] = []  # only its own ``def name(``: never called (the common case; no module walk)
            return []
        index, tree = self.index, self.tree
        owner = _owner(fn, tree)
        found = []
        for call in index.calls.get(name, ()):
            func = call.func
            if isinstance(owner, cst.ClassDef):
                if not isinstance(func, cst.Attribute):
                    continue
                receiver = func.value
                if isinstance(receiver, cst.Name) and receiver.value in _SELF:
                    if index.inside(call, owner):
                        found.append(call)
                elif dotted_name(receiver) == owner.name.value or self._instance_of(receiver, owner):
                    found.append(call)
            elif isinstance(func, cst.Name):
                if isinstance(owner, cst.Module) or owner is not None and index.inside(call, owner):
                    found.append(call)
        self._callers[fn] = found
        return found

    def callees(self, call: cst.Call) -> list[cst.FunctionDef]:
        """The functions of this file ``call`` may call (the inverse of ``callers``)."""
        name = callee_name(call)
        if name is None:
            return []
        source = getattr(self.tree, "source", None)
        if source is not None and f"def {name}(" not in source and f"def {name} (" not in source:
            return []  # the file defines no function of that name (no module walk)
        if self._by_name is None:
            self._by_name = {}
            for fn in self.index.functions:
                self._by_name.setdefault(fn.name.value, []).append(fn)
        return [fn for fn in self._by_name.get(name, ()) if any(c is call for c in self.callers(fn))]

    def _instance_of(self, receiver: cst.BaseExpression, cls: cst.ClassDef) -> bool:
        """``obj`` bound by ``obj = C(...)`` before the call, in its function."""
        if not isinstance(receiver, cst.Name):
            return False
        value = self.facts.value_of(receiver)
        return isinstance(value, cst.Call) and callee_name(value) == cls.name.value

    def per_step(self, fn: cst.FunctionDef, depth: int = 0):
        """The HotLoop through which ``fn``'s body runs every step (an in-file per-step call, or an entry point from
        another file of the run), or None."""
        if fn in self._verdicts:
            return self._verdicts[fn]
        if fn in self._open or depth > MAX_DEPTH:
            return None
        self._open.add(fn)
        try:
            verdict = None
            for call in self.callers(fn):
                loop = self.facts.hot_loop(call, depth + 1)
                if loop is not None:
                    description = f"`{fn.name.value}()` (called at {self._where(call)}) in {loop.description}"
                    verdict = HotLoop(loop.node, description, loop.on_device)
                    break
            if verdict is None:
                entry = self.facts.entries.get(qualname(fn, self.tree) or "")
                if entry is not None:
                    verdict = HotLoop(fn, entry.description, entry.on_device)
        finally:
            self._open.discard(fn)
        self._verdicts[fn] = verdict
        return verdict

    def _where(self, call: cst.Call, with_path: bool = False) -> str:
        location = self.tree.location(call)
        where = f"line {location.line}" if not with_path else f"{_short_path(location.path)}:{location.line}"
        return where if location.cell is None else f"cell {location.cell}, {where}"

    # -- across the files of a run ----------------------------------------------------------------------------
    def run_calls(self, on_device: bool, project_calls: bool = True,
                  defines: frozenset[str] | None = None) -> RunCalls:
        """The functions this file defines, its per-step calls of imported functions, and (``on_device``: the file
        shows device evidence) every imported function it calls (``RunCalls``). ``defines`` is the screen's
        ``Look.defines`` (None where Python's parser did not take the file: then they come from the walk).
        ``project_calls`` False (the screen saw no call of a project function in a loop) and no device evidence:
        only the definitions, without a walk of the module."""
        tree = self.tree
        stepping = self._stepping()
        if not project_calls and not on_device and defines is not None:
            return RunCalls(defines, (), on_device, stepping=stepping)
        if defines is None:
            defines = frozenset(q for fn in self.index.functions if (q := qualname(fn, tree)) is not None)
        hot: list[HotCall] = []
        seen: set[str] = set()
        anywhere: set[str] = set()
        for name, calls in self.index.calls.items():
            for call in calls:
                targets = [t for t in self.imported(call) if t not in seen]
                if not targets:
                    continue
                anywhere.update(targets)
                loop = self.facts.hot_loop(call)
                if loop is None:
                    continue
                seen.update(targets)
                description = f"`{name}()` (called at {self._where(call, with_path=True)}) in {loop.description}"
                hot.extend(HotCall(target, description, on_device or loop.on_device) for target in targets)
        return RunCalls(defines, tuple(hot), on_device, frozenset(anywhere) if on_device else frozenset(),
                        stepping=stepping)

    def _stepping(self) -> frozenset[str]:
        """The module-level functions and methods of this file whose body steps an optimizer or calls backward,
        directly or through the file's own calls (``Facts.body_steps``)."""
        source = getattr(self.tree, "source", "")
        if ".step(" not in source and "backward(" not in source:
            return frozenset()
        return frozenset(q for fn in self.index.functions if (q := qualname(fn, self.tree)) is not None
                         and self.facts.body_steps(fn.body))

    def imported(self, call: cst.Call) -> list[str]:
        """The qualified names of the imported function or methods ``call`` may call: ``helper(x)``,
        ``mod.helper(x)``, ``agent.update()`` with ``agent = algo.PPO(...)`` (every class the name is assigned in
        the file: ``if args.algo == "ppo": agent = algo.PPO(...) else: agent = algo.A2C(...)``)."""
        func = call.func
        target = self.tree.qualified_name(func)
        targets = [target] if target is not None else []
        if target is None and isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            # every call the name is assigned anywhere in the file (a file-wide table: no per-function walk)
            for value in self.index.instances.get(func.value.value, ()):
                cls = self.tree.qualified_name(value.func)
                if cls is not None:
                    targets.append(f"{cls}.{func.attr.value}")
        return [t for t in targets if t.split(".")[0] not in EXTERNAL_MODULES]


def _short_path(path: str) -> str:
    return PurePath(path).name
