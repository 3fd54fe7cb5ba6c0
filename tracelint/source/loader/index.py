"""One walk of a module for the loader facts (``FileIndex``): every name read, attribute, class and function, and the
binding targets; and what the other loader modules follow values with: the value a name holds, the reads of a
binding, the parameters of this file's functions an argument binds."""
from __future__ import annotations

import libcst as cst

from tracelint.source.semantic import steps as loops
from tracelint.source.semantic.bindings import target_nodes
from tracelint.source.semantic.model import FileContext, dotted_name, iter_children

# Calls that only read a value (a loader's length, a batch's repr): neither a use of the batches nor an escape.
READERS = frozenset({"len", "print", "isinstance", "hasattr", "getattr", "str", "repr", "id", "type", "vars",
                     "format", "int", "float", "bool", "round", "abs", "issubclass", "callable"})
MAX_HOPS = 6  # functions followed from a loader to its batches' copy (train() -> run_epoch() -> step() ...)


class FileIndex:
    """The names, attributes, classes and functions of one file, by name (see the module docstring)."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.facts = loops.facts(ctx)
        self.names: dict[str, list[cst.Name]] = {}           # every Name read, by identifier
        self.attributes: dict[str, list[cst.Attribute]] = {}  # every ``x.attr`` read, by attr
        self.classes: dict[str, list[cst.ClassDef]] = {}
        self.functions: dict[str, list[cst.FunctionDef]] = {}
        self.stores: set[cst.CSTNode] = set()                # the targets of bindings (no reads)
        self._index()

    def _index(self) -> None:
        """One walk of the module: the names read, attributes, classes, functions, and the binding targets. The
        names that are no reads are never pushed (``x.attr``'s attr, a keyword's name, a def's name, imports)."""
        stores = self.stores
        work: list[cst.CSTNode] = [self.ctx.module]
        while work:
            node = work.pop()
            kind = type(node)
            if kind is cst.Name:
                self.names.setdefault(node.value, []).append(node)
                continue
            if kind is cst.Attribute:
                self.attributes.setdefault(node.attr.value, []).append(node)
                work.append(node.value)
                continue
            if kind is cst.Arg:
                work.append(node.value)
                continue
            if kind in (cst.Import, cst.ImportFrom):
                continue
            if kind is cst.ClassDef:
                self.classes.setdefault(node.name.value, []).append(node)
                work.extend(k for k in iter_children(node) if k is not node.name)
                continue
            if kind is cst.FunctionDef:
                self.functions.setdefault(node.name.value, []).append(node)
                work.extend(k for k in iter_children(node) if k is not node.name)
                continue
            if kind is cst.Assign:
                for target in node.targets:
                    stores.update(target_nodes(target.target))
            elif kind in (cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor, cst.NamedExpr):
                stores.update(target_nodes(node.target))
            elif kind is cst.Param:
                stores.add(node.name)
            elif kind is cst.AsName:
                stores.update(target_nodes(node.name))
            elif kind is cst.Del:
                stores.update(target_nodes(node.target))
            work.extend(iter_children(node))

    def value(self, name: cst.Name) -> cst.BaseExpression | None:
        """The value ``name`` is bound to before it in its function, else its one binding at module level."""
        value = self.facts.value_of(name)
        if value is not None:
            return value
        scope = self.facts.scope_of(name)
        if scope is self.ctx.module or name.value in self.facts.bindings(scope).bindings:
            return None
        bound = self.facts.bindings(self.ctx.module).bindings.get(name.value, ())
        return bound[0].value if len(bound) == 1 and bound[0].element is None else None

    def references(self, target: cst.BaseExpression) -> list[cst.BaseExpression] | None:
        """The reads of the binding that ``target`` makes (a name bound by an assignment, loop, comprehension or
        parameter; ``self.attr`` bound in a method); None when they cannot be known (``obj.attr = ...``,
        ``d[k] = ...``, or a ``self`` attribute also read through another object)."""
        if isinstance(target, cst.Name):
            return self._name_references(target)
        name = dotted_name(target) if isinstance(target, cst.Attribute) else None
        if name is None or name.count(".") != 1 or not name.startswith("self."):
            return None
        cls = next((a for a in self.ctx.ancestors(target) if isinstance(a, cst.ClassDef)), None)
        if cls is None:
            return None
        found = []
        for node in self.attributes.get(target.attr.value, ()):
            if node is target or node in self.stores:
                continue
            if not (isinstance(node.value, cst.Name) and node.value.value == "self") or \
                    not any(a is cls for a in self.ctx.ancestors(node)):
                return None  # trainer.train_loader read from outside the class
            found.append(node)
        return found

    def _name_references(self, target: cst.Name) -> list[cst.BaseExpression]:
        facts, name = self.facts, target.value
        statement = next(a for a in self.ctx.ancestors(target)
                         if isinstance(a, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.NamedExpr, cst.For,
                                           cst.CompFor, cst.Param, cst.WithItem, cst.Module)))
        reads = [n for n in self.names.get(name, ()) if n is not target and n not in self.stores]
        if isinstance(statement, cst.CompFor):  # a comprehension variable is read inside its comprehension only
            comprehension = self.ctx.parent(statement)
            while isinstance(comprehension, cst.CompFor):
                comprehension = self.ctx.parent(comprehension)
            return [n for n in reads if any(a is comprehension for a in self.ctx.ancestors(n))
                    and not any(a is statement.iter for a in self.ctx.ancestors(n))]
        scope = facts.scope_of(target)
        table = facts.bindings(scope)
        start = table.order.get(statement)
        if start is None:
            return []
        orders = sorted(b.order for b in table.bindings.get(name, ()))
        if isinstance(statement, (cst.For, cst.Param, cst.WithItem)):
            mine = start
        else:  # an assignment binds after its value: its binding is the first one past the statement's start
            mine = next((o for o in orders if o > start), start)
        found: list[cst.BaseExpression] = []
        for node in reads:
            where = facts.scope_of(node)
            if where is scope:
                at = table.order.get(node)
                if at is not None and at > mine and max((o for o in orders if o < at), default=None) == mine:
                    found.append(node)
            elif name not in facts.bindings(where).bindings and (
                    scope is self.ctx.module or any(a is scope for a in self.ctx.ancestors(where))):
                found.append(node)  # a global or closure read from a function defined after the binding
        return found

    def parameters(self, call: cst.Call, arg: cst.Arg) -> list[cst.Param] | None:
        """The parameters of this file's functions, methods or classes (``__init__``, an instance's ``forward``) that
        ``arg`` of ``call`` binds; None when ``call`` is none of those (another module's function)."""
        targets: list[tuple[cst.FunctionDef, bool]] = []
        for function in self.facts.callers.callees(call):
            owner = self.ctx.parent(self.ctx.parent(function))
            method = isinstance(owner, cst.ClassDef) and not any(
                dotted_name(d.decorator) == "staticmethod" for d in function.decorators)
            through_class = isinstance(call.func, cst.Attribute) and isinstance(owner, cst.ClassDef) and \
                dotted_name(call.func.value) == owner.name.value
            targets.append((function, method and not through_class))
        if not targets and self.ctx.qualified_name(call.func) is None:
            cls_name, method_name = None, None
            if isinstance(call.func, cst.Name) and call.func.value in self.classes:
                cls_name, method_name = call.func.value, "__init__"
            elif isinstance(call.func, cst.Name):  # model(x) where model = Net(...)
                value = self.value(call.func)
                if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
                    cls_name, method_name = value.func.value, "forward"
            for cls in self.classes.get(cls_name or "", ()):
                targets += [(s, True) for s in cls.body.body
                            if isinstance(s, cst.FunctionDef) and s.name.value == method_name]
        if not targets:
            return None
        found = [p for function, bound in targets if (p := _parameter(function, call, arg, bound)) is not None]
        return found if len(found) == len(targets) else None


def _parameter(function: cst.FunctionDef, call: cst.Call, arg: cst.Arg, bound: bool) -> cst.Param | None:
    params = function.params
    positional = [*params.posonly_params, *params.params][1 if bound else 0:]
    if arg.keyword is not None:
        match = next((p for p in (*positional, *params.kwonly_params) if p.name.value == arg.keyword.value), None)
        return match or (params.star_kwarg if isinstance(params.star_kwarg, cst.Param) else None)
    if arg.star:
        return None
    index = [a for a in call.args if a.keyword is None and not a.star].index(arg)
    if index < len(positional):
        return positional[index]
    return params.star_arg if isinstance(params.star_arg, cst.Param) else None
