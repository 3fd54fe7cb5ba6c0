"""What ``torch.compile`` compiles in a file, and the code in it that breaks the compiled graph (TL503's facts).

Compiled: a module class whose instance ``torch.compile(...)`` is given (``torch.compile(Net().cuda())``, ``model =
Net(); model = torch.compile(model)``: callers.Modules sees through moves and wrappers) or whose instance calls
``.compile()``, and a function of the file decorated with ``@torch.compile`` or given to ``torch.compile(f)``.
Reached: the compiled function's body, the methods it calls on ``self``, the ``forward`` of the modules it calls
(``self.block(x)``, ``for layer in self.layers: layer(x)``) and the functions of the file it calls by name, to
``MAX_DEPTH`` calls (Dynamo inlines them all into the graph it traces).

Breaks (pytorch docs, compile/programming_model.common_graph_breaks): direct data access (``.item()`` unless
``capture_scalar_outputs`` is set, ``.tolist()``, ``.data_ptr()``), printing and warnings (``print``,
``warnings.warn``), and data-dependent control flow (an ``if``/``while`` on a tensor). NumPy is not one: Dynamo
traces ``t.numpy()`` and NumPy calls on it (``config.trace_numpy``, on since torch 2.1).
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import libcst as cst

from tracelint.source.semantic.model import dotted_name, iter_children

MAX_DEPTH = 4
_COMPILE = frozenset({"torch.compile"})
_DATA_ACCESS = frozenset({"item", "tolist", "data_ptr"})
_PRINTS = frozenset({"builtins.print", "warnings.warn"})
_REDUCTIONS = frozenset({"sum", "mean", "max", "min", "amax", "amin", "any", "all", "norm", "abs", "count_nonzero"})
_TESTED = (cst.If, cst.While)


class Reached(NamedTuple):
    """A function the compiled code runs, and how it is reached (for messages: "`Block.forward()` in the compiled
    `GPT`")."""

    function: cst.FunctionDef
    compiled: str  # the compiled class or function, as the file names it
    line: int  # where the file compiles it


def compiled_code(rule) -> list[Reached]:
    """The functions of the file that ``torch.compile``d code runs (module docstring), once per file."""
    return rule.ctx.memo("compiled-code", lambda ctx: _compiled_code(rule))


def _compiled_code(rule) -> list[Reached]:
    ctx, callers = rule.ctx, rule.facts.callers
    index = callers.index
    roots: list[tuple[cst.FunctionDef, str, cst.CSTNode]] = []
    for fn in index.functions:
        for decorator in fn.decorators:
            target = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
            if ctx.qualified_name(target) in _COMPILE:
                roots.append((fn, fn.name.value, decorator))
    for calls in (index.calls.get("compile", ()),):
        for call in calls:
            if ctx.qualified_name(call.func) in _COMPILE and call.args and call.args[0].keyword is None:
                roots += [(fn, name, call) for fn, name in _targets(rule, call.args[0].value)]
            elif isinstance(call.func, cst.Attribute) and not ctx.qualified_name(call.func):
                roots += [(fn, name, call) for fn, name in _targets(rule, call.func.value, modules_only=True)]
    reached: dict[cst.FunctionDef, Reached] = {}
    for fn, name, at in roots:
        line = ctx.position(at).start.line
        _reach(rule, fn, name, line, reached, 0)
    return list(reached.values())


def _targets(rule, expr: cst.BaseExpression, modules_only: bool = False) -> list[tuple[cst.FunctionDef, str]]:
    """The ``forward`` of the file's classes ``expr`` holds an instance of, or the file's function ``expr`` names."""
    callers, index = rule.facts.callers, rule.facts.callers.index
    found = []
    if not modules_only and isinstance(expr, cst.Name) and rule.ctx.qualified_name(expr) is None:
        found += [(fn, fn.name.value) for fn in index.functions if fn.name.value == expr.value and
                  _is_function(fn, index)]
    for built in callers.modules.constructors(expr):
        name = dotted_name(built) if not isinstance(built, str) else None
        if name is None or name not in index.classes or rule.ctx.qualified_name(built) is not None:
            continue
        for cls in index.classes[name]:
            found += [(m, name) for m in _methods(cls) if m.name.value == "forward"]
    return found


def _is_function(fn: cst.FunctionDef, index) -> bool:
    return not any(isinstance(a, cst.ClassDef) for a in index.tree.ancestors(fn))


def _methods(cls: cst.ClassDef) -> Iterator[cst.FunctionDef]:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    return (s for s in body if isinstance(s, cst.FunctionDef))


def _reach(rule, fn: cst.FunctionDef, compiled: str, line: int, reached: dict, depth: int) -> None:
    if fn in reached or depth > MAX_DEPTH:
        return
    reached[fn] = Reached(fn, compiled, line)
    callers = rule.facts.callers
    for call in own_nodes(fn.body, cst.Call):
        for callee in callers.callees(call):  # f(x), self.helper(x), obj.method(x)
            _reach(rule, callee, compiled, line, reached, depth + 1)
        for forward, _ in _targets(rule, call.func, modules_only=True):  # self.block(x), layer(x)
            _reach(rule, forward, compiled, line, reached, depth + 1)


def own_nodes(body: cst.CSTNode, kind: type) -> Iterator:
    """The nodes of type ``kind`` in ``body``, not inside a nested def or class (they run when called)."""
    stack = list(iter_children(body))
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(node, kind):
            yield node
        stack.extend(iter_children(node))


def breaks(rule, fn: cst.FunctionDef) -> Iterator[tuple[cst.CSTNode, str]]:
    """The graph breaks in ``fn``'s own code that a compiled training step runs: (node, what it is)."""
    ctx = rule.ctx
    scalars = ctx.mentions("capture_scalar_outputs")
    for node in own_nodes(fn.body, (cst.Call, cst.If, cst.While)):
        if _not_in_training(ctx, node, fn):
            continue
        if isinstance(node, _TESTED):
            if _tensor_valued(rule, node.test):
                shown = " ".join(ctx.code_for(node.test).split())
                yield node.test, f"`{'if' if isinstance(node, cst.If) else 'while'} {shown}:` (a tensor-valued test)"
            continue
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in _DATA_ACCESS and not node.args:
            if func.attr.value == "item" and scalars or not rule.may_be_tensor(func.value):
                continue
            yield node, f"`.{func.attr.value}()`"
        elif ctx.qualified_name(func) in _PRINTS:
            yield node, f"`{dotted_name(func)}()`"


_NEVER_COMPILED = ("is_scripting", "is_tracing", "onnx")


def _not_in_training(ctx, node: cst.CSTNode, fn: cst.FunctionDef) -> bool:
    """``node`` runs only in evaluation (``if not self.training:``, the ``else`` of ``if self.training:``) or only
    outside Dynamo (``if torch.jit.is_scripting():``, tracing, ONNX export: constant False when compiled)."""
    child = node
    for ancestor in ctx.ancestors(node):
        if ancestor is fn:
            return False
        if isinstance(ancestor, cst.If) and child is not ancestor.test:
            test = " ".join(ctx.code_for(ancestor.test).split())
            in_body = child is ancestor.body
            if in_body and (any(word in test for word in _NEVER_COMPILED) or test == "not self.training") or \
                    not in_body and test == "self.training":
                return True
        child = ancestor
    return False


def _tensor_valued(rule, test: cst.BaseExpression) -> bool:
    if isinstance(test, cst.UnaryOperation):
        return _tensor_valued(rule, test.expression)
    if isinstance(test, cst.BooleanOperation):
        return _tensor_valued(rule, test.left) or _tensor_valued(rule, test.right)
    if isinstance(test, cst.Comparison):
        if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in test.comparisons):
            return False
        return any(_tensor_valued(rule, side) for side in (test.left, *(c.comparator for c in test.comparisons)))
    if isinstance(test, cst.Call) and isinstance(test.func, cst.Attribute) and test.func.attr.value in _REDUCTIONS \
            and not test.args:
        return rule.may_be_tensor(test.func.value)
    return rule.is_tensor(test)
