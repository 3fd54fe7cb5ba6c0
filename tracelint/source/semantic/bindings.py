"""Per-function binding tables (``ScopeBindings``): each name's bindings in source order, the order of every node,
the branches where a type test says a name is no tensor, and the device moves of each name. values.Values builds one
per function, once per file, and answers its name look-ups from them."""
from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from tracelint.source.semantic.model import callee_name, dotted_name, isinstance_test, iter_children

# What moves a tensor to a device (``Values._moved``): ``x.to(dev)``, ``x.cuda()``, ``x.type(torch.cuda.FloatTensor)``.
_MOVES = frozenset({"to", "cuda", "type"})


@dataclass(frozen=True, slots=True)
class Binding:
    order: int
    value: cst.BaseExpression | None  # None: bound opaquely (parameter, with/except target, import)
    element: int | None = None        # position in a tuple unpacking of ``value``
    augmented: bool = False           # ``name += value``
    loop_index: bool = False          # the counter of ``range``/``enumerate``
    loop: cst.CSTNode | None = None   # the ``for`` whose target binds it (an element of what the loop yields)


class ScopeBindings:
    """Bindings of one function (or module) in source order, and the order of every node in it.

    Walked with the source framework's field walk (libcst's own visitor machinery is several times slower).
    """

    def __init__(self, root: cst.CSTNode) -> None:
        self.root = root
        self.order: dict[cst.CSTNode, int] = {}
        self.bindings: dict[str, list[Binding]] = {}
        # (name, first, end): the orders of the branch of ``if torch.is_tensor(name):`` / ``isinstance(name,
        # torch.Tensor)`` (or its ``not``) in which ``name`` is not a tensor.
        self.not_tensor: list[tuple[str, int, int]] = []
        # name -> the ``name.to(...)`` / ``name.cuda()`` / ``name.type(...)`` calls of this scope (``Values._moved``)
        self.moves: dict[str, list[cst.Call]] = {}
        self._branches: dict[cst.CSTNode, str] = {}
        self._walk(root)

    def _walk(self, root: cst.CSTNode) -> None:
        # An explicit work list, like the framework's traversal: generated code nests expressions thousands deep.
        work: list[tuple[cst.CSTNode, bool]] = [(root, False)]
        while work:
            node, leaving = work.pop()
            if leaving:
                self._leave(node)
                continue
            self.order[node] = len(self.order)
            if node is not root and isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                continue
            if isinstance(node, (cst.For, cst.CompFor)):
                self._bind_loop_target(node.target, node.iter, self.order[node], node)
            elif isinstance(node, cst.WithItem) and node.asname is not None:
                self._bind(node.asname.name, self.order[node], None)
            elif isinstance(node, cst.Param):
                self._bind(node.name, self.order[node], None)
            elif isinstance(node, (cst.If, cst.IfExp)):
                self._type_test(node)
            elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and \
                    node.func.attr.value in _MOVES and isinstance(node.func.value, cst.Name):
                self.moves.setdefault(node.func.value.value, []).append(node)
            if isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.NamedExpr)) or node in self._branches:
                work.append((node, True))
            work.extend((kid, False) for kid in reversed(list(iter_children(node))))

    def _type_test(self, node: cst.If | cst.IfExp) -> None:
        """Note the branch of ``if torch.is_tensor(x):`` (``isinstance(x, torch.Tensor)``, ``not ...``) where ``x``
        is not a tensor: the ``else`` (``elif`` chain included), or the body under ``not``."""
        test, positive = node.test, True
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, positive = test.expression, not positive
        name = _type_tested(test)
        branch = node.orelse if positive else node.body
        if name is not None and branch is not None:
            self._branches[branch] = name

    def _leave(self, node: cst.CSTNode) -> None:
        # Assignments bind after their value is read (``x = x.to(device)``): their order is the one after the value.
        after = len(self.order)
        name = self._branches.get(node)
        if name is not None:
            self.not_tensor.append((name, self.order[node], after))
        if isinstance(node, cst.Assign):
            for t in node.targets:
                self._bind(t.target, after, node.value)
        elif isinstance(node, (cst.AnnAssign, cst.NamedExpr)):
            self._bind(node.target, after, node.value)
        elif isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name):
            self._bind(node.target, after, node.value, augmented=True)

    def _bind(self, target: cst.BaseExpression, at: int, value, element: int | None = None, **flags) -> None:
        if isinstance(target, cst.Name):
            self.bindings.setdefault(target.value, []).append(Binding(at, value, element, **flags))
        elif isinstance(target, (cst.Tuple, cst.List)):
            for i, el in enumerate(target.elements):
                inner = el.value
                if isinstance(inner, cst.StarredElement):
                    inner = inner.value
                sub_value = value
                if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(target.elements):
                    sub_value, index = value.elements[i].value, None
                else:
                    index = i
                if isinstance(inner, cst.Name):
                    self._bind(inner, at, sub_value, index, **flags)
                else:
                    self._bind(inner, at, None, **flags)

    def _bind_loop_target(self, target: cst.BaseExpression, iterable: cst.BaseExpression, at: int,
                          loop: cst.CSTNode) -> None:
        func = callee_name(iterable) if isinstance(iterable, cst.Call) else None
        if func in ("range", "trange"):
            self._bind(target, at, None, loop_index=True)
        elif func == "enumerate" and isinstance(target, cst.Tuple) and len(target.elements) == 2:
            self._bind(target.elements[0].value, at, None, loop_index=True)
            self._bind(target.elements[1].value, at, None, loop=loop)
        else:
            self._bind(target, at, None, loop=loop)


def unpack_loop(target, iterable) -> tuple[str | None, list[tuple[cst.BaseExpression, cst.BaseExpression]]]:
    """The loop's index (``i`` of ``for i in range(n)`` / ``for i, x in enumerate(t)``) and its (element target,
    what it is an element of) pairs: ``for x in t`` -> [(x, t)], ``for a, b in zip(s, t)`` -> [(a, s), (b, t)]."""
    index = None
    if isinstance(iterable, cst.Call) and callee_name(iterable) == "enumerate" and iterable.args and \
            isinstance(target, cst.Tuple) and len(target.elements) == 2:
        first = target.elements[0].value
        index = first.value if isinstance(first, cst.Name) else None
        target, iterable = target.elements[1].value, iterable.args[0].value
    if isinstance(iterable, cst.Call) and callee_name(iterable) == "zip" and isinstance(target, cst.Tuple) and \
            len(target.elements) == len(iterable.args) and not any(a.star or a.keyword for a in iterable.args):
        return index, [(t.value, a.value) for t, a in zip(target.elements, iterable.args, strict=True)]
    if isinstance(iterable, cst.Call) and callee_name(iterable) == "range":
        return (target.value if isinstance(target, cst.Name) else None), []
    return index, [(target, iterable)]


def _type_tested(test: cst.BaseExpression) -> str | None:
    """The name a test says is a tensor: ``torch.is_tensor(x)``, ``isinstance(x, torch.Tensor)`` (or a tuple of
    tensor types)."""
    if not isinstance(test, cst.Call) or not test.args or not isinstance(test.args[0].value, cst.Name):
        return None
    callee = callee_name(test)
    if callee == "is_tensor" and len(test.args) == 1:
        return test.args[0].value.value
    tested = isinstance_test(test)
    if tested is not None and tested[1] and all((dotted_name(t) or "").endswith("Tensor") for t in tested[1]):
        return test.args[0].value.value
    return None


def target_nodes(target: cst.CSTNode) -> list[cst.CSTNode]:
    """The Name / Attribute / Subscript nodes an assignment target binds."""
    if isinstance(target, cst.Tuple | cst.List):
        return [n for e in target.elements for n in target_nodes(e.value)]
    if isinstance(target, cst.StarredElement):
        return target_nodes(target.value)
    return [target]


def names_in(target: cst.BaseExpression) -> list[cst.Name]:
    """The names an assignment or loop target binds (``i, (x, y)`` -> i, x, y)."""
    return [n for n in target_nodes(target) if isinstance(n, cst.Name)]
