"""Where a loader's batches are drawn (``Draws.use``): a loop over it (through ``enumerate``, ``tqdm``, ``zip``,
``iter``), ``next(it)``, followed through names, ``self`` attributes, functions and methods of the file it is passed
to, factories of the file that return it, and ``accelerator.prepare`` / ``fabric.setup_dataloaders``; or where it
leaves the file's sight."""
from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from tracelint.source.loader.index import MAX_HOPS, READERS, FileIndex
from tracelint.source.semantic.calls import is_literal
from tracelint.source.semantic.model import callee_name, iter_children
from tracelint.source.semantic.steps import runs_once


@dataclass(frozen=True, slots=True)
class Draw:
    """A place where a loader's batches are taken: a loop over it (``For``/``CompFor``) or a ``next()`` call."""

    node: cst.CSTNode
    path: tuple[int, ...]  # the batch's position in each item (``enumerate``: 1; ``zip(a, b)``: 0 or 1)
    full: bool             # the whole loader is iterated (a loop whose body does not end in break/return)


@dataclass(slots=True)
class LoaderUse:
    draws: list[Draw] = field(default_factory=list)
    escapes: bool = False    # handed to code the file does not show (another module's function, a container...)
    on_device: bool = False  # wrapped by accelerate / Fabric, which move the batches to the device
    handed: list[tuple[cst.Call, cst.Arg]] = field(default_factory=list)  # (call, argument) of another module's
                                                                           # function it is passed to


# Calls whose result iterates the loader's batches: (position change of the batch in each item).
_ITERATORS = frozenset({"iter", "tqdm", "track", "islice", "cycle", "chain", "trange", "prefetch"})
# Calls that wrap a loader and move its batches to the device themselves (accelerate, Lightning Fabric).
_DEVICE_WRAPPERS = frozenset({"prepare", "prepare_data_loader", "setup_dataloaders"})


class Draws:
    """The draws of each loader of a file, followed once per loader."""

    def __init__(self, index: FileIndex) -> None:
        self.index = index
        self.ctx = index.ctx
        self.facts = index.facts
        self._uses: dict[cst.Call, LoaderUse] = {}

    def use(self, loader: cst.Call) -> LoaderUse:
        """Where ``loader``'s batches are drawn, and whether it leaves the file's sight (see the module docstring)."""
        found = self._uses.get(loader)
        if found is None:
            found = self._uses[loader] = self._follow([loader])
        return found

    def use_of_parameter(self, param: cst.Param) -> LoaderUse:
        """``use`` for a loader another file of the run passes in as ``param`` (runcalls.resolve: a pinned one)."""
        return self._follow(self.index.references(param.name) or [])

    def _follow(self, seeds: list[cst.BaseExpression]) -> LoaderUse:
        found = LoaderUse()
        # A work list, not recursion: a chain of thousands of ``a = b`` must not overflow the stack.
        work: list[tuple[cst.BaseExpression, tuple[int, ...], int | None, int]] = [(s, (), None, 0) for s in seeds]
        seen: set = set()
        while work:
            item = work.pop()
            if item in seen:
                continue
            seen.add(item)
            if item[3] > MAX_HOPS:
                found.escapes = True
                continue
            self._follow_loader(*item, found, work.append)
        return found

    def _follow_loader(self, expr: cst.BaseExpression, path: tuple[int, ...], element: int | None, hops: int,
                       use: LoaderUse, push) -> None:
        """One step after the value of ``expr`` (the loader, an iterator or wrapper of it; with ``element``, a tuple
        holding it there): where its batches are drawn (``use.draws``), where it leaves the file's sight
        (``use.escapes``), or the expressions it flows to (``push``-ed to be followed in turn)."""
        follow = lambda e, p=path, el=None, h=hops: push((e, p, el, h))  # noqa: E731
        parent = self.ctx.parent(expr)
        if isinstance(parent, cst.Attribute) and parent.value is expr:
            call = self.ctx.parent(parent)
            if parent.attr.value == "__iter__" and isinstance(call, cst.Call) and call.func is parent:
                follow(call)
            return  # loader.dataset, loader.sampler.set_epoch(epoch), len(loader.dataset): not a draw
        if element is not None:
            self._follow_element(expr, parent, element, lambda e, el: follow(e, path, el), use)
            return
        if isinstance(parent, cst.Arg) and parent.value is expr and not parent.star:
            call = self.ctx.parent(parent)
            if isinstance(call, cst.Call):
                self._loader_argument(call, parent, path, hops, use, push)
                return
        if isinstance(parent, cst.For) and parent.iter is expr:
            use.draws.append(Draw(parent, path, full=not runs_once(parent)))
        elif isinstance(parent, cst.CompFor) and parent.iter is expr:
            use.draws.append(Draw(parent, path, full=True))
        elif isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is expr:
            targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
            for target in targets:
                refs = self.index.references(target)
                if refs is None:
                    use.escapes = True
                for ref in refs or ():
                    follow(ref)
        elif isinstance(parent, cst.Return):
            self._through_return(parent, lambda call: follow(call, path, None, hops + 1), use)
        elif isinstance(parent, (cst.Element, cst.StarredElement)):
            self._follow_packed(expr, lambda e, el: follow(e, path, el), use)
        elif isinstance(parent, (cst.IfExp, cst.BooleanOperation)) and getattr(parent, "test", None) is not expr:
            follow(parent)
        elif not isinstance(parent, (cst.Expr, cst.Comparison, cst.If, cst.Del)):
            use.escapes = True  # yield, a dict value, a lambda, an index...

    def _loader_argument(self, call: cst.Call, arg: cst.Arg, path, hops, use: LoaderUse, push) -> None:
        """The loader is an argument of ``call``."""
        follow = lambda e, p=path, el=None, h=hops: push((e, p, el, h))  # noqa: E731
        name = callee_name(call)
        qualified = self.ctx.qualified_name(call.func) or ""
        builtin = qualified.startswith("builtins.")
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if arg.keyword is None and qualified == "builtins.next":
            use.draws.append(Draw(call, path, full=False))
        elif name == "enumerate" and builtin and arg.keyword is None:
            follow(call, (*path, 1))
        elif name == "zip" and builtin and arg in positional:
            follow(call, (*path, positional.index(arg)))
        elif name in _ITERATORS and (arg.keyword is None or arg.keyword.value == "iterable"):
            follow(call, path)
        elif name in _DEVICE_WRAPPERS and isinstance(call.func, cst.Attribute) and not builtin and \
                not self.facts.callers.callees(call):
            use.on_device = True
            if len(call.args) == 1:
                follow(call, path)
            else:  # model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                follow(call, path, call.args.index(arg))
        elif name in READERS and (builtin or qualified == ""):
            return
        else:
            params = self.index.parameters(call, arg)
            if params is None:
                use.escapes = True
                use.handed.append((call, arg))
            for param in params or ():
                for ref in self.index.references(param.name) or ():
                    follow(ref, path, None, hops + 1)

    def _follow_element(self, expr, parent, element: int, follow, use: LoaderUse) -> None:
        """``expr`` holds a tuple whose ``element``-th item is followed: ``a, b = f()``, ``f()[1]``, ``return``."""
        if isinstance(parent, cst.Assign) and parent.value is expr:
            for target in (t.target for t in parent.targets):
                if isinstance(target, cst.Tuple | cst.List) and element < len(target.elements) and \
                        not any(isinstance(e, cst.StarredElement) for e in target.elements):
                    for ref in self.index.references(target.elements[element].value) or ():
                        follow(ref, None)
                else:
                    for ref in self.index.references(target) or ():
                        follow(ref, element)
        elif isinstance(parent, cst.Subscript) and parent.value is expr and len(parent.slice) == 1 and \
                isinstance(parent.slice[0].slice, cst.Index) and is_literal(parent.slice[0].slice.value, element):
            follow(parent, None)
        elif isinstance(parent, cst.Return):
            self._through_return(parent, lambda call: follow(call, element), use)
        else:
            use.escapes = True

    def _follow_packed(self, expr, follow, use) -> None:
        """``expr`` is an item of a tuple/list literal: followed when the literal is returned or unpacked."""
        element = self.ctx.parent(expr)
        literal = self.ctx.parent(element)
        if not isinstance(literal, cst.Tuple | cst.List) or isinstance(element, cst.StarredElement):
            use.escapes = True
            return
        index = next(i for i, e in enumerate(literal.elements) if e is element)
        follow(literal, index)

    def _through_return(self, node: cst.Return, follow, use) -> None:
        """A function of the file returns the value: followed at each of its calls in the file (none: out of sight)."""
        function = next((a for a in self.ctx.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.Lambda))), None)
        if not isinstance(function, cst.FunctionDef) or _is_generator(function):
            use.escapes = True
            return
        calls = self.facts.callers.callers(function)
        if not calls:
            use.escapes = True  # a factory for other modules: its use is out of sight
        for call in calls:
            follow(call)


def _is_generator(function: cst.FunctionDef) -> bool:
    work = list(iter_children(function.body))
    while work:
        node = work.pop()
        if isinstance(node, cst.Yield):
            return True
        if not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            work.extend(iter_children(node))
    return False
