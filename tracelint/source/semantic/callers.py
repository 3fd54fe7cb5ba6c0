"""Calls followed within a file and across the files of one run (issue #12): a function called once per step runs
once per step.

A sync in ``def train(): ...; return loss.item()`` is a per-step sync when ``train()`` is called inside a per-step
loop (``for epoch in range(epochs): train(epoch)`` of a full-batch model, ``for batch in loader: self.run_step()``).
``Facts.hot_loop`` (steps.py) asks ``Callers.per_step(function)`` when it climbs out of a function body:

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

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path, PurePath

import libcst as cst

from tracelint.source.runcalls import HotCall, RunCalls
from tracelint.source.semantic.model import callee_name, dotted_name, isinstance_test, iter_children
from tracelint.source.vocab import EXTERNAL_MODULES

MAX_DEPTH = 4  # calls followed from a sync to the per-step loop (train() -> step() -> log() -> sync)
_SELF = frozenset({"self", "cls"})


@dataclass(frozen=True, slots=True)
class HotLoop:
    """The per-step context a node runs in: the loop (or step hook) and how messages name it; what
    ``steps.Facts.hot_loop`` and ``Callers.per_step`` return."""

    node: cst.CSTNode
    description: str  # "the loop over `train_loader`", "the `while True` loop", "`training_step`"
    # The code reached this loop through a call from another file of the run whose code puts work on a CUDA device
    # (a helper module shows no device of its own: the caller's evidence counts).
    on_device: bool = False


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
        # What may hold a module (Modules): name -> every value assigned to it in the file, ``self.x = v`` -> x -> v,
        # and a loop's target name -> what the loop iterates (``for block in self.blocks``)
        self.assigned: dict[str, list[cst.BaseExpression]] = {}
        self.attributes: dict[str, list[cst.BaseExpression]] = {}
        self.iterated: dict[str, list[cst.BaseExpression]] = {}
        self.classes: dict[str, list[cst.ClassDef]] = {}
        self.unpacked: dict[str, list[tuple[cst.BaseExpression, int]]] = {}  # ``a, b = f()``: a -> (f(), 0)
        self.stored: dict[str, list[cst.BaseExpression]] = {}  # ``heads["segm"] = Segm()``: heads -> Segm()
        parents = getattr(tree, "parents", None)  # FileContext.parents (another tree: none recorded)
        stack: list[cst.CSTNode] = [tree.module]
        # Dispatch on the exact node type: isinstance against libcst's classes goes through ABCMeta (most of the
        # walk's time when written that way).
        call, function, klass, assign, annotated, loop, comp = (cst.Call, cst.FunctionDef, cst.ClassDef, cst.Assign,
                                                                 cst.AnnAssign, cst.For, cst.CompFor)
        while stack:
            node = stack.pop()
            kind = type(node)
            if kind is call:
                # "" for a callee without a name: ``heads["bbox"](x)``, ``make()(x)`` (instance calls: Modules)
                self.calls.setdefault(callee_name(node) or "", []).append(node)
            elif kind is function:
                self.functions.append(node)
            elif kind is klass:
                self.classes.setdefault(node.name.value, []).append(node)
            elif (kind is assign or kind is annotated) and node.value is not None:
                targets = [t.target for t in node.targets] if kind is assign else [node.target]
                for target in targets:
                    if type(target) is cst.Name and type(node.value) is call:
                        self.instances.setdefault(target.value, []).append(node.value)
                    self._assign(target, node.value)
            elif (kind is loop or kind is comp) and type(node.target) is cst.Name:
                self.iterated.setdefault(node.target.value, []).append(node.iter)
            for child in iter_children(node):
                if parents is not None:
                    parents[child] = node
                stack.append(child)

    def _assign(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name):
            self.assigned.setdefault(target.value, []).append(value)
        elif isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and \
                target.value.value in _SELF:
            self.attributes.setdefault(target.attr.value, []).append(value)
        elif isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
            self.stored.setdefault(target.value.value, []).append(value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            pairs = isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(target.elements)
            for i, element in enumerate(target.elements):
                if pairs:
                    self._assign(element.value, value.elements[i].value)
                elif isinstance(element.value, cst.Name) and isinstance(value, cst.Call):
                    self.unpacked.setdefault(element.value.value, []).append((value, i))

    @cached_property
    def functions_named(self) -> dict[str, list[cst.FunctionDef]]:
        """The file's functions and methods by name."""
        named: dict[str, list[cst.FunctionDef]] = {}
        for fn in self.functions:
            named.setdefault(fn.name.value, []).append(fn)
        return named

    def inside(self, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
        return any(parent is scope for parent in self.tree.ancestors(node))


# What an instance call runs: ``model(x)`` calls ``type(model).forward`` through ``nn.Module.__call__``.
MODULE_METHOD = "forward"
# Calls that return the module they are given (first argument) or called on (method), as far as which ``forward``
# runs is concerned: compilers, data-parallel wrappers, moves and mode switches.
_WRAPPING_FUNCTIONS = frozenset({
    "compile", "DistributedDataParallel", "DDP", "DataParallel", "FullyShardedDataParallel", "FSDP", "fully_shard",
    "checkpoint_wrapper", "convert_sync_batchnorm", "optimize", "prepare_model", "to_device",
})
_WRAPPING_METHODS = frozenset({
    "to", "cuda", "half", "float", "bfloat16", "double", "train", "eval", "requires_grad_", "to_empty", "apply",
    "type", "share_memory", "xpu", "cpu",
})
# Containers whose members are called as modules (``self.blocks = nn.ModuleList([...])``; ``nn.Sequential(...)``
# calls every member in its own forward).
_CONTAINERS = frozenset({"ModuleList", "Sequential", "ModuleDict", "list", "tuple", "dict"})
# Methods a call runs without naming them (``model(x)``, ``Dispatcher(...)``): messages name them with their class.
_RUN_BY_CALLS = (MODULE_METHOD, "__init__")
_CLASS_METHODS = tuple("." + name for name in _RUN_BY_CALLS)
# A method of an object of unknown class that builds the model (``self.exp.get_model()``): the run looks for the one
# definition of that name (project.factory_classes); other methods are not followed.
_FACTORY_NAME = re.compile(r"(get|build|create|make|init|load|setup|new)_?\w*$")
_MAX_HOLDS = 6  # assignments followed from a call's receiver to the constructor call


class Modules:
    """Which classes' ``forward`` a call runs: ``model(x)`` where ``model = Net().cuda()`` (or ``torch.compile(
    Net())``, DDP/FSDP of it), ``self.block(x)`` where ``self.block = Block()`` in any method of the file, ``layer(x)``
    in ``for layer in self.layers`` where ``self.layers = nn.ModuleList([Block() ...])``, and ``self.head(x)`` where
    ``self.head = nn.Sequential(..., Head())``. Names are looked up file-wide by name (every value the file assigns
    to ``model``), as ``CallIndex.instances`` does for ``agent.update()``: cheap, and a name reused for another
    module only adds that module's ``forward``."""

    def __init__(self, index: CallIndex) -> None:
        self.index = index
        tree = index.tree
        # From the run (lint._Run): {(target, element): ("@path:C", ...)}: the classes an imported factory returns;
        # {"f" or "C.m": {position or keyword: ("@path:C", ...)}}: the modules other files pass this file's functions
        self.factories: dict[tuple[str, int | None], tuple[str, ...]] = getattr(tree, "factories", None) or {}
        self.parameters: dict[str, dict[int | str, tuple[str, ...]]] = getattr(tree, "parameter_modules", None) or {}
        self.made: set[tuple[str, int | None]] = set()  # factory calls of other files this file's modules come from
        self._held: dict[int, tuple[cst.BaseExpression | str, ...]] = {}
        self._returns: dict[cst.FunctionDef, list[cst.BaseExpression]] = {}
        self._by_parameter: dict[str, list[str]] | None = None  # _passed's table

    def constructors(self, func: cst.BaseExpression) -> tuple[cst.BaseExpression | str, ...]:
        """The callee expressions (``Net``, ``models.Net``) of the constructor calls whose instance ``func`` may
        hold, and "@path:C" for a class of another file the run resolved (a factory's result, a parameter).
        The imported calls that may be factories are added to ``made`` for the run to resolve."""
        key = id(func)
        known = self._held.get(key)
        if known is None:
            found: list[cst.BaseExpression] = []
            self._holds(func, found, set(), 0)
            known = self._held[key] = tuple(found)
        return known

    def _holds(self, expr, found: list, seen: set, depth: int, element: int | None = None) -> None:
        """``element``: what element ``element`` of the value of ``expr`` holds (``a, b = make()``)."""
        key = (id(expr), element)
        if depth > _MAX_HOLDS or key in seen:
            return
        seen.add(key)
        index = self.index
        if isinstance(expr, (cst.Tuple, cst.List)) and element is not None:
            if element < len(expr.elements):
                self._holds(expr.elements[element].value, found, seen, depth + 1)
        elif element is not None and not isinstance(expr, (cst.Call, cst.Name, cst.BooleanOperation, cst.IfExp)):
            return
        elif isinstance(expr, (cst.List, cst.Tuple, cst.Set, cst.Dict, cst.ListComp, cst.GeneratorExp, cst.DictComp)):
            self._members(expr, found, seen, depth + 1)  # what ``x[k](...)`` or ``for m in x`` calls
        elif isinstance(expr, cst.Name):
            if element is None:
                found.extend(self._passed(expr.value))
            for value in index.assigned.get(expr.value, ()):
                self._holds(value, found, seen, depth + 1, element)
            for value, i in index.unpacked.get(expr.value, ()) if element is None else ():
                self._holds(value, found, seen, depth + 1, i)
            for source in index.iterated.get(expr.value, ()) if element is None else ():
                self._members(source, found, seen, depth + 1)
            for value in index.stored.get(expr.value, ()) if element is None else ():
                self._holds(value, found, seen, depth + 1)  # a member stored by key: what the container holds
        elif isinstance(expr, cst.BooleanOperation):  # ``sampler or UniformSampler()``
            self._holds(expr.left, found, seen, depth + 1, element)
            self._holds(expr.right, found, seen, depth + 1, element)
        elif isinstance(expr, cst.IfExp):
            self._holds(expr.body, found, seen, depth + 1, element)
            self._holds(expr.orelse, found, seen, depth + 1, element)
        elif isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value in _SELF:
            for value in index.attributes.get(expr.attr.value, ()):
                self._holds(value, found, seen, depth + 1)
        elif isinstance(expr, cst.Subscript):
            self._members(expr.value, found, seen, depth + 1)
        elif isinstance(expr, cst.Call):
            name = callee_name(expr)
            made_by = self._factories(expr)
            if made_by:  # a function of this file that returns the module (``model = build_model(cfg)``)
                for fn in made_by:
                    for value in self._returned(fn):
                        self._holds(value, found, seen, depth + 1, element)
            elif self._factory_target(expr.func, element, found):
                return
            elif element is not None:
                return
            elif name in _WRAPPING_METHODS and isinstance(expr.func, cst.Attribute):
                self._holds(expr.func.value, found, seen, depth + 1)
            elif name in _WRAPPING_FUNCTIONS and expr.args:
                self._holds(expr.args[0].value, found, seen, depth + 1)
            elif name == "Sequential":
                self._members(expr, found, seen, depth + 1)  # its forward calls each member
            elif name not in _CONTAINERS and name is not None:
                found.append(expr.func)

    def _factory_target(self, func: cst.BaseExpression, element: int | None, found: list) -> bool:
        """A call of another file's function that may return modules: ``build_model(args)`` imported, or
        ``self.exp.get_model()`` on a receiver of unknown class ("*.get_model"). What the run resolved is added to
        ``found`` (True: nothing more to do); otherwise the call is recorded in ``made``. A class of another file
        (``models.Net(...)``) is a constructor: False, unless the run said it is a factory."""
        target = self.index.tree.qualified_name(func)
        if target is None and isinstance(func, cst.Attribute) and not (isinstance(func.value, cst.Name) and
                                                                       func.value.value in _SELF):
            if not _FACTORY_NAME.match(func.attr.value):
                return False
            target = "*." + func.attr.value
        if target is None or target.split(".")[0] in EXTERNAL_MODULES:
            return False
        if element is None and not target.startswith("*.") and target.rsplit(".", 1)[-1][:1].isupper():
            return False  # ``models.Net(...)``: a class, whose instance the call is
        self.made.add((target, element))  # also once resolved: the run resolves what the file reports each round
        resolved = self.factories.get((target, element))
        if resolved is not None:
            found.extend(resolved)
            return True
        return target.startswith("*.") or element is not None

    def _passed(self, name: str) -> list[str]:
        """The classes other files of the run pass as parameter ``name`` of this file's functions."""
        if not self.parameters:
            return []
        table = self._by_parameter
        if table is None:  # parameter name -> what is passed as it, by keyword or position: one pass over the defs
            table = self._by_parameter = {}
            for fn in self.index.functions:
                given = self.parameters.get(qualname(fn, self.index.tree) or "")
                if not given:
                    continue
                names = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)]
                shift = 1 if names[:1] in (["self"], ["cls"]) else 0
                for position, each in enumerate(names):
                    table.setdefault(each, []).extend((*given.get(each, ()), *given.get(position - shift, ())))
                for param in fn.params.kwonly_params:
                    table.setdefault(param.name.value, []).extend(given.get(param.name.value, ()))
        return table.get(name, [])

    def _factories(self, call: cst.Call) -> list[cst.FunctionDef]:
        """The functions of this file ``call`` calls by name (``build(cfg)``: a module-level or nested ``def``
        the file does not import; ``self.build()``: a method of that name in the file)."""
        named = self.index.functions_named
        func = call.func
        if isinstance(func, cst.Name) and func.value not in self.index.classes:
            return [fn for fn in named.get(func.value, ()) if fn.name.value != "__init__"]
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in _SELF:
            return list(named.get(func.attr.value, ()))
        return []

    def _returned(self, fn: cst.FunctionDef) -> list[cst.BaseExpression]:
        """The values ``fn``'s own ``return`` statements return (not those of functions nested in it)."""
        known = self._returns.get(fn)
        if known is None:
            known = self._returns[fn] = []
            stack = list(iter_children(fn.body))
            while stack:
                node = stack.pop()
                if isinstance(node, cst.Return):
                    if node.value is not None:
                        known.append(node.value)
                elif not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                    stack.extend(iter_children(node))
        return known

    def _members(self, container, found: list, seen: set, depth: int) -> None:
        """The modules a container holds: a ModuleList/Sequential/ModuleDict call's arguments, a list, tuple, dict
        or comprehension's elements, or what a name or attribute bound to one holds."""
        if depth > _MAX_HOLDS:
            return
        if isinstance(container, cst.Call) and callee_name(container) in _CONTAINERS:
            # Sequential(a, b) holds its arguments; ModuleList([a, b]), ModuleDict({...}) and list(...) their members
            each = self._holds if callee_name(container) == "Sequential" else self._members
            for arg in container.args:
                each(arg.value, found, seen, depth + 1)
        elif isinstance(container, cst.Call) and callee_name(container) in ("values", "children", "modules") and \
                isinstance(container.func, cst.Attribute):
            self._members(container.func.value, found, seen, depth + 1)
        elif isinstance(container, (cst.List, cst.Tuple, cst.Set)):
            for element in container.elements:
                self._holds(element.value, found, seen, depth + 1)
        elif isinstance(container, cst.Dict):
            for element in container.elements:
                if isinstance(element, cst.DictElement):
                    self._holds(element.value, found, seen, depth + 1)
        elif isinstance(container, (cst.ListComp, cst.GeneratorExp, cst.SetComp)):
            self._holds(container.elt, found, seen, depth + 1)
        elif isinstance(container, cst.DictComp):
            self._holds(container.value, found, seen, depth + 1)
        elif isinstance(container, (cst.Name, cst.Attribute)):
            if isinstance(container, cst.Name):
                found.extend(self._passed(container.value))
                for value in self.index.stored.get(container.value, ()):
                    self._holds(value, found, seen, depth + 1)  # ``heads["segm"] = Segm()``
            for value in self._bound_values(container):
                self._members(value, found, seen, depth + 1)

    def _bound_values(self, expr) -> list[cst.BaseExpression]:
        if isinstance(expr, cst.Name):
            return list(self.index.assigned.get(expr.value, ()))
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value in _SELF:
            return list(self.index.attributes.get(expr.attr.value, ()))
        return []



class Callers:
    """The per-file call following behind ``Facts.hot_loop`` (see the module docstring)."""

    def __init__(self, facts) -> None:
        self.facts = facts
        self.tree = facts.tree
        self._index: CallIndex | None = None
        self._callers: dict[cst.FunctionDef, list[cst.Call]] = {}
        self._verdicts: dict[cst.FunctionDef, object] = {}
        self._open: set[cst.FunctionDef] = set()
        self._modules: Modules | None = None
        self._instance_calls: dict[str, list[cst.Call]] | None = None

    @property
    def modules(self) -> Modules:
        if self._modules is None:
            self._modules = Modules(self.index)
        return self._modules

    def _is_own(self, path: str) -> bool:
        return Path(path) == Path(self.tree.path).resolve()

    def instance_calls(self, cls: cst.ClassDef) -> list[cst.Call]:
        """The calls of this file that run ``cls.forward`` (``Modules``), and ``super().forward(...)`` in its
        subclasses."""
        if self._instance_calls is None:
            by_class: dict[str, list[cst.Call]] = {}
            classes = self.index.classes
            for calls in self.index.calls.values():
                for call in calls:
                    func = call.func
                    if isinstance(func, cst.Attribute) and func.attr.value == MODULE_METHOD and \
                            isinstance(func.value, cst.Call) and callee_name(func.value) == "super":
                        owner = next((p for p in self.tree.ancestors(call) if isinstance(p, cst.ClassDef)), None)
                        for base in owner.bases if owner is not None else ():
                            name = dotted_name(base.value)
                            if name is not None:
                                by_class.setdefault(name.rsplit(".", 1)[-1], []).append(call)
                        continue
                    for built in self.modules.constructors(func):
                        if isinstance(built, str):  # "@path:C" from the run: a class of this file?
                            path, _, name = built[1:].partition(":")
                            if name in classes and self._is_own(path):
                                by_class.setdefault(name, []).append(call)
                            continue
                        name = dotted_name(built)
                        if name is not None and name in classes and self.tree.qualified_name(built) is None:
                            by_class.setdefault(name, []).append(call)
            self._instance_calls = by_class
        return self._instance_calls.get(cls.name.value, [])

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
        module_method = name == MODULE_METHOD
        if source is not None and source.count(name + "(") <= 1 and (name + " (") not in source and not module_method \
                and name != "__init__":
            self._callers[fn] = []  # only its own ``def name(``: never called (the common case; no module walk)
            return []
        index, tree = self.index, self.tree
        owner = _owner(fn, tree)
        found = list(self.instance_calls(owner)) if module_method and isinstance(owner, cst.ClassDef) else []
        if name == "__init__" and isinstance(owner, cst.ClassDef):  # ``C(...)`` runs ``C.__init__``
            found += [call for call in index.calls.get(owner.name.value, ())
                      if isinstance(call.func, cst.Name) and tree.qualified_name(call.func) is None]
        heirs: list[cst.ClassDef] | None = None  # the subclasses that inherit it, found at the first ``self.name()``
        for call in index.calls.get(name, ()):
            func = call.func
            if isinstance(owner, cst.ClassDef):
                if not isinstance(func, cst.Attribute):
                    continue
                receiver = func.value
                if isinstance(receiver, cst.Name) and receiver.value in _SELF:
                    if heirs is None:
                        heirs = self._heirs(owner, name)
                    if index.inside(call, owner) or any(index.inside(call, sub) for sub in heirs):
                        found.append(call)
                elif dotted_name(receiver) == owner.name.value or self._instance_of(receiver, owner) or \
                        self._module_of(receiver, owner):
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
        return [fn for fn in self.index.functions_named.get(name, ()) if any(c is call for c in self.callers(fn))]

    def _heirs(self, cls: cst.ClassDef, method: str) -> list[cst.ClassDef]:
        """The classes of the file that inherit ``method`` from ``cls`` (subclasses, directly or not, that do not
        define it themselves): ``self.log_metrics(loss)`` in ``Trainer(BaseTrainer)`` runs BaseTrainer's."""
        classes = [c for group in self.index.classes.values() for c in group]
        heirs: list[cst.ClassDef] = []
        parents = {cls.name.value}
        grown = True
        while grown:
            grown = False
            for c in classes:
                if c in heirs or c is cls or not any(dotted_name(b.value) in parents for b in c.bases):
                    continue
                if any(isinstance(s, cst.FunctionDef) and s.name.value == method for s in c.body.body):
                    continue  # it overrides the method: its own runs (and its subclasses inherit that one)
                heirs.append(c)
                parents.add(c.name.value)
                grown = True
        return heirs

    def _module_of(self, receiver: cst.BaseExpression, cls: cst.ClassDef) -> bool:
        """``self.grid.build(x)`` where ``self.grid = Grid()`` (Modules: attributes bound in any method, factories,
        parameters): a method of the module an attribute or name holds."""
        if not isinstance(receiver, (cst.Attribute, cst.Name)):
            return False
        return any(not isinstance(built, str) and dotted_name(built) == cls.name.value
                   for built in self.modules.constructors(receiver))

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
                    description = f"{self._called(call, fn)} in {loop.description}"
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

    def _called(self, call: cst.Call, fn: cst.FunctionDef | str, with_path: bool = False) -> str:
        """How a message names the call that runs a function: "`train()` (called at line 11)", and for an instance
        call "`Net.forward()` (called as `model(x)` at train.py:23)"."""
        where = self._where(call, with_path)
        if isinstance(fn, str):  # a target of another file: "pkg.model.Net.forward", "@/path/model.py:Net.forward"
            fn = fn.rpartition(":")[2] if fn.startswith("@") else fn
            name = ".".join(fn.split(".")[-2:]) if fn.endswith(_CLASS_METHODS) else fn.rsplit(".", 1)[-1]
        else:
            owner = _owner(fn, self.tree)
            name = f"{owner.name.value}.{fn.name.value}" if isinstance(owner, cst.ClassDef) and \
                fn.name.value in _RUN_BY_CALLS else fn.name.value
        if callee_name(call) == name.rsplit(".", 1)[-1]:
            return f"`{name}()` (called at {where})"
        code = " ".join(self.tree.code_for(call).split())
        code = code if len(code) <= 40 else code[:39] + "…"
        return f"`{name}()` (called as `{code}` at {where})"

    def _where(self, call: cst.Call, with_path: bool = False) -> str:
        location = self.tree.location(call)
        where = f"line {location.line}" if not with_path else f"{_short_path(location.path)}:{location.line}"
        return where if location.cell is None else f"cell {location.cell}, {where}"

    # -- across the files of a run ----------------------------------------------------------------------------
    def run_calls(self, on_device: bool, project_calls: bool = True,
                  defines: frozenset[str] | None = None) -> RunCalls:
        """The functions this file defines, its per-step calls of imported functions, and (``on_device``: the file
        shows device evidence) every imported function it calls (``RunCalls``). ``defines`` is the screen's
        ``AstFacts.defines`` (None where Python's parser did not take the file: then they come from the walk).
        ``project_calls`` False (the screen saw no call of a project function in a loop) and no device evidence:
        only the definitions, without a walk of the module."""
        tree = self.tree
        stepping = self._stepping()
        if not project_calls and not on_device and defines is not None:
            return RunCalls(defines, (), on_device, stepping=stepping)
        if defines is None:
            defines = frozenset(q for fn in self.index.functions if (q := qualname(fn, tree)) is not None)
        hot: list[HotCall] = []
        arguments: list[tuple[str, tuple[tuple[int | str, str], ...]]] = []
        seen: set[str] = set()
        anywhere: set[str] = set()
        passes: set[tuple[str, int | str, str]] = set()
        for calls in self.index.calls.values():
            for call in calls:
                passes.update(self._passes(call))
                found = self.imported(call)
                targets = [t for t in found if t not in seen]
                anywhere.update(targets)
                if not targets and not (found and call.args):
                    continue
                loop = self.facts.hot_loop(call)
                if loop is None:
                    continue
                if call.args:  # what every per-step call passes (the first one alone names the loop)
                    given = self.argument_kinds(call)
                    arguments.extend((target, given) for target in found)
                if not targets:
                    continue
                seen.update(targets)
                for target in targets:
                    description = f"{self._called(call, target, with_path=True)} in {loop.description}"
                    hot.append(HotCall(target, description, on_device or loop.on_device))
        return RunCalls(defines, tuple(hot), on_device, frozenset(anywhere) if on_device else frozenset(),
                        stepping=stepping, made=tuple(sorted(self.modules.made, key=str)),
                        passes=tuple(sorted(passes, key=str)), arguments=tuple(sorted(set(arguments), key=str)))

    def argument_kinds(self, call: cst.Call) -> tuple[tuple[int | str, str], ...]:
        """What ``call`` passes, for another file's function to know its parameters (values.Values._parameter_kind):
        (position, kind) for a positional argument, (keyword, kind) for a named one, ("*", "unknown") after a
        ``*args`` and ("**", "unknown") for a ``**kwargs``; the kind is values.Kind's value (host, tensor, unknown)."""
        found: list[tuple[int | str, str]] = []
        position = 0
        for arg in call.args:
            if arg.star:
                found.append((arg.star, "unknown"))
                continue
            kind = self.facts.kind(arg.value).value
            if kind == "tensor" and self.facts.module_output(arg.value):
                kind = "unknown"  # a module's output by its name: a tensor, or a list of them (not passed on)
            if arg.keyword is not None:
                found.append((arg.keyword.value, kind))
            else:
                found.append((position, kind))
                position += 1
        return tuple(found)

    def _passes(self, call: cst.Call) -> list[tuple[str, int | str, str]]:
        """(target, position or keyword, class): the modules ``call`` passes an imported function of the project
        (``train_one_epoch(model, criterion, ...)``), as "@path:C" or the class's qualified name."""
        target = self.tree.qualified_name(call.func)
        if target is None or target.split(".")[0] in EXTERNAL_MODULES or not call.args:
            return []
        found = []
        position = 0
        for arg in call.args:
            if arg.star:
                break
            where: int | str = arg.keyword.value if arg.keyword is not None else position
            position += arg.keyword is None
            if not isinstance(arg.value, (cst.Name, cst.Attribute)):
                continue
            for built in self.modules.constructors(arg.value):
                cls = built if isinstance(built, str) else self.tree.qualified_name(built)
                if cls is None and not isinstance(built, str):
                    local = dotted_name(built)
                    cls = f"@{Path(self.tree.path).resolve()}:{local}" if local in self.index.classes else None
                if cls is not None and cls.split(".")[0] not in EXTERNAL_MODULES:
                    found.append((target, where, cls))
        return found

    def _stepping(self) -> frozenset[str]:
        """The module-level functions and methods of this file whose body steps an optimizer or calls backward,
        directly or through the file's own calls (``Facts.body_steps``)."""
        source = getattr(self.tree, "source", "")
        if ".step(" not in source and "backward(" not in source:
            return frozenset()
        return frozenset(q for fn in self.index.functions if (q := qualname(fn, self.tree)) is not None
                         and self.facts.body_steps(fn.body))

    def _narrowed(self, receiver: cst.BaseExpression, call: cst.Call) -> list[str]:
        """The imported classes an enclosing ``if isinstance(receiver, C):`` says ``receiver`` is an instance of
        where ``call`` runs (its body: improved-diffusion's ``if isinstance(self.schedule_sampler,
        LossAwareSampler): self.schedule_sampler.update_with_local_losses(...)``)."""
        code = " ".join(self.tree.code_for(receiver).split())
        child: cst.CSTNode = call
        for parent in self.tree.ancestors(call):
            if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                break
            if isinstance(parent, cst.If) and child is parent.body:
                found = _isinstance_classes(parent.test, code, self.tree)
                if found:
                    return found
            child = parent
        return []

    def imported(self, call: cst.Call) -> list[str]:
        """The qualified names of the imported function or methods ``call`` may call: ``helper(x)``,
        ``mod.helper(x)``, ``agent.update()`` with ``agent = algo.PPO(...)`` (every class the name is assigned in
        the file: ``if args.algo == "ppo": agent = algo.PPO(...) else: agent = algo.A2C(...)``)."""
        func = call.func
        target = self.tree.qualified_name(func)
        targets = [target] if target is not None else []
        if target is not None and target.rsplit(".", 1)[-1][:1].isupper():  # ``Dispatcher(...)`` runs its __init__
            targets.append(f"{target}.__init__")
        if target is None and isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            # every call the name is assigned anywhere in the file (a file-wide table: no per-function walk)
            for value in self.index.instances.get(func.value.value, ()):
                cls = self.tree.qualified_name(value.func)
                if cls is not None:
                    targets.append(f"{cls}.{func.attr.value}")
        if target is None and isinstance(func, cst.Attribute):  # ``self.head.get_losses(x)``, the head imported
            for built in self.modules.constructors(func.value):
                cls = built if isinstance(built, str) else self.tree.qualified_name(built)
                if cls is not None and not (isinstance(built, str) and self._is_own(built[1:].partition(":")[0])):
                    targets.append(f"{cls}.{func.attr.value}")
        if target is None and isinstance(func, cst.Attribute):  # under ``if isinstance(obj, C):``, obj is a C
            for cls in self._narrowed(func.value, call):
                targets.append(f"{cls}.{func.attr.value}")
        if target is None:  # an instance call: ``model(x)`` with ``model = models.Net()`` runs Net.forward
            for built in self.modules.constructors(func):
                cls = built if isinstance(built, str) else self.tree.qualified_name(built)
                if cls is not None and not (isinstance(built, str) and self._is_own(built[1:].partition(":")[0])):
                    targets.append(f"{cls}.{MODULE_METHOD}")
        return [t for t in targets if t.split(".")[0] not in EXTERNAL_MODULES]


def _isinstance_classes(test: cst.BaseExpression, receiver: str, tree) -> list[str]:
    """The qualified names of the classes ``isinstance(<receiver>, C)`` (or a tuple of classes) tests, where the
    first argument's code is ``receiver``; empty for any other test."""
    tested = isinstance_test(test)
    if tested is None or " ".join(tree.code_for(tested[0]).split()) != receiver:
        return []
    return [c for c in map(tree.qualified_name, tested[1]) if c is not None]


def _short_path(path: str) -> str:
    return PurePath(path).name
