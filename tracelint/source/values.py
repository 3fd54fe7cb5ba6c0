"""Which expressions are device tensors: a local guess, HOST / TENSOR / UNKNOWN, for the source rules.

``Values(tree).kind(expr)``: HOST (Python values, numpy, CPU tensors built without a device, anything already
``.item()``-ed or ``.cpu()``-ed), TENSOR (evidence of a possibly-device tensor: model/criterion outputs, torch ops,
``.to(dev)``) or UNKNOWN. Names are looked up through the nearest preceding binding in the same function, from
per-function binding tables computed once. Pure libcst over a ``Tree`` (the source FileContext satisfies it); rules
reach it through ``loops.facts(ctx)`` (``SourceRule.facts``), which adds the per-step-loop questions.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import libcst as cst

from tracelint.source.calls import literal
from tracelint.source.context import iter_children
from tracelint.source.vocab import HOST_ATTRS as _HOST_ATTRS
from tracelint.source.vocab import HOST_METHODS as _HOST_METHODS


class Tree(Protocol):
    stack: list[cst.CSTNode]  # during a traversal: the ancestors of the node being visited
    imports: dict[str, str]   # {bound name: qualified name}

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None: ...
    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]: ...
    def qualified_name(self, expr: cst.BaseExpression) -> str | None: ...
    def code_for(self, node: cst.CSTNode) -> str: ...


class Kind(Enum):
    HOST = "host"        # a Python value, numpy array or CPU tensor: reading it does not wait for the GPU
    TENSOR = "tensor"    # evidence of a tensor that may live on the device
    UNKNOWN = "unknown"


# ---------------------------------------------------------------------------------------------------------------
# words (the heuristics here and in loops.py match on them)
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def words(text: str) -> frozenset[str]:
    """Lower-case words of identifiers in ``text``: ``trainLoader.next_batch`` -> {train, loader, next, batch}."""
    return frozenset(w.lower() for w in _WORD.findall(text))


def callee_name(call: cst.Call) -> str | None:
    func = call.func
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return None


# ---------------------------------------------------------------------------------------------------------------
# tensor-ness
_SAME_ATTRS = frozenset({"T", "mT", "H", "data", "grad", "real", "imag"})
# Methods only tensors have (numpy and Python objects lack them): a receiver of unknown kind becomes a tensor.
_TENSOR_ONLY_METHODS = frozenset({
    "detach", "float", "half", "bfloat16", "double", "long", "bool", "cuda", "to", "softmax", "log_softmax",
    "contiguous", "view_as", "masked_fill", "sigmoid", "unsqueeze", "permute", "expand", "type_as",
    "norm", "eq", "ne", "gt", "lt", "ge", "le", "isnan", "isinf", "isfinite", "logical_and", "logical_or",
    "logical_not", "argmax", "argmin", "topk", "clone",
})
_CREATION = frozenset({
    "tensor", "as_tensor", "zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "rand", "randn",
    "randint", "randperm", "eye", "from_numpy", "Tensor", "FloatTensor", "LongTensor", "IntTensor", "BoolTensor",
})
_TORCH_NON_TENSOR = frozenset({
    "device", "no_grad", "enable_grad", "is_tensor", "is_floating_point", "numel", "manual_seed", "get_default_dtype",
    "set_grad_enabled", "inference_mode", "autocast", "compile", "load", "save", "Size", "dtype", "finfo", "iinfo",
    "is_grad_enabled", "get_rng_state", "set_rng_state", "typename", "is_complex", "equal", "allclose",
})
_TENSOR_MODULES = ("torch.nn.functional.", "torch.linalg.", "torch.fft.", "torch.special.")
_HOST_MODULES = ("numpy", "math", "random", "time", "os", "sys", "json", "pandas", "builtins.str", "builtins.len",
                 "builtins.int", "builtins.float", "builtins.bool", "builtins.round", "builtins.range",
                 "builtins.list", "builtins.dict", "builtins.tuple", "builtins.set", "builtins.isinstance",
                 "builtins.repr", "builtins.format", "builtins.hasattr", "builtins.type", "builtins.print")
# Callees whose result is a model output or loss: ``model(x)``, ``self.criterion(out, y)``, ``loss_fn(...)``.
_MODEL_WORDS = frozenset({
    "model", "net", "network", "criterion", "loss", "lossfn", "encoder", "decoder", "head", "classifier",
    "backbone", "generator", "discriminator", "policy", "actor", "critic", "ddp", "module", "forward", "crit",
})
_MAX_DEPTH = 12


def _is_number(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        return _is_number(expr.expression)
    return isinstance(expr, (cst.Integer, cst.Float))


def is_python_scalar(expr: cst.BaseExpression, tree: Tree) -> bool:
    """A literal number, bool, ``float('-inf')`` or ``math.inf``: what ``x[mask] = value`` turns into masked_fill_."""
    if _is_number(expr):
        return True
    if isinstance(expr, cst.UnaryOperation):
        return is_python_scalar(expr.expression, tree)
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return True
    if isinstance(expr, cst.Call) and tree.qualified_name(expr.func) in ("builtins.float", "builtins.int"):
        return True
    name = tree.qualified_name(expr) if isinstance(expr, cst.Attribute) else None
    return bool(name and name.split(".")[0] in ("math", "numpy"))


@dataclass(frozen=True, slots=True)
class _Binding:
    order: int
    value: cst.BaseExpression | None  # None: bound opaquely (parameter, with/except target, import)
    element: int | None = None        # position in a tuple unpacking of ``value``
    augmented: bool = False           # ``name += value``
    loop_index: bool = False          # the counter of ``range``/``enumerate``


class _ScopeBindings:
    """Bindings of one function (or module) in source order, and the order of every node in it.

    Walked with the source framework's field walk (libcst's own visitor machinery is several times slower).
    """

    def __init__(self, root: cst.CSTNode) -> None:
        self.root = root
        self.order: dict[cst.CSTNode, int] = {}
        self.bindings: dict[str, list[_Binding]] = {}
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
                self._bind_loop_target(node.target, node.iter, self.order[node])
            elif isinstance(node, cst.WithItem) and node.asname is not None:
                self._bind(node.asname.name, self.order[node], None)
            elif isinstance(node, cst.Param):
                self._bind(node.name, self.order[node], None)
            if isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.NamedExpr)):
                work.append((node, True))
            work.extend((kid, False) for kid in reversed(list(iter_children(node))))

    def _leave(self, node: cst.CSTNode) -> None:
        # Assignments bind after their value is read (``x = x.to(device)``): their order is the one after the value.
        after = len(self.order)
        if isinstance(node, cst.Assign):
            for t in node.targets:
                self._bind(t.target, after, node.value)
        elif isinstance(node, (cst.AnnAssign, cst.NamedExpr)):
            self._bind(node.target, after, node.value)
        elif isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name):
            self._bind(node.target, after, node.value, augmented=True)

    def _bind(self, target: cst.BaseExpression, at: int, value, element: int | None = None, **flags) -> None:
        if isinstance(target, cst.Name):
            self.bindings.setdefault(target.value, []).append(_Binding(at, value, element, **flags))
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
                    self._bind(inner, at, sub_value, index)
                else:
                    self._bind(inner, at, None)

    def _bind_loop_target(self, target: cst.BaseExpression, iterable: cst.BaseExpression, at: int) -> None:
        func = callee_name(iterable) if isinstance(iterable, cst.Call) else None
        if func in ("range", "trange"):
            self._bind(target, at, None, loop_index=True)
        elif func == "enumerate" and isinstance(target, cst.Tuple) and len(target.elements) == 2:
            self._bind(target.elements[0].value, at, None, loop_index=True)
            self._bind(target.elements[1].value, at, None)
        else:
            self._bind(target, at, None)


class Values:
    """Per-file caches behind ``kind``: the bindings of each function, computed once however many rules ask."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self._scopes: dict[cst.CSTNode, _ScopeBindings] = {}

    def scope_of(self, node: cst.CSTNode) -> cst.CSTNode:
        """The function (or module) whose bindings ``node`` sees."""
        parent = self.tree.parent(node)
        last = node
        while parent is not None:
            if isinstance(parent, (cst.FunctionDef, cst.Lambda)):
                return parent
            last, parent = parent, self.tree.parent(parent)
        if isinstance(last, cst.Module) or not self.tree.stack:
            return last
        # Mid-traversal, a child of the visited node has no parent yet: the traversal stack holds its ancestors.
        for ancestor in reversed(self.tree.stack):
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
                return ancestor
        return self.tree.stack[0]

    def bindings(self, scope: cst.CSTNode) -> _ScopeBindings:
        found = self._scopes.get(scope)
        if found is None:
            found = self._scopes[scope] = _ScopeBindings(scope)
        return found

    def value_of(self, name: cst.Name) -> cst.BaseExpression | None:
        """The value of the nearest plain binding of ``name`` before it, in its function (None if there is none)."""
        table = self.bindings(self.scope_of(name))
        at = table.order.get(name)
        before = [b for b in table.bindings.get(name.value, ()) if at is not None and b.order < at]
        if not before or before[-1].augmented or before[-1].element is not None:
            return None
        return before[-1].value

    def kind(self, expr: cst.BaseExpression) -> Kind:
        """HOST, TENSOR or UNKNOWN for ``expr`` at its place in the file (see the module docstring)."""
        return self._kind(expr, self.scope_of(expr), None, 0)

    def is_host(self, expr: cst.BaseExpression) -> bool:
        return self.kind(expr) is Kind.HOST

    def is_tensor(self, expr: cst.BaseExpression) -> bool:
        return self.kind(expr) is Kind.TENSOR

    def _kind(self, expr, scope, at: int | None, depth: int) -> Kind:
        if depth > _MAX_DEPTH:
            return Kind.UNKNOWN
        k = lambda e: self._kind(e, scope, at, depth + 1)  # noqa: E731
        if isinstance(expr, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
                             cst.FormattedString, cst.List, cst.Tuple, cst.Dict, cst.Set, cst.ListComp,
                             cst.DictComp, cst.SetComp, cst.Ellipsis)):
            return Kind.HOST
        if isinstance(expr, cst.Name):
            return self._name_kind(expr, scope, at, depth)
        if isinstance(expr, cst.Attribute):
            if expr.attr.value in _HOST_ATTRS:
                return Kind.HOST
            if _in_modules(self.tree.qualified_name(expr), _HOST_MODULES):
                return Kind.HOST
            base = k(expr.value)
            if expr.attr.value in _SAME_ATTRS or base is Kind.TENSOR:
                return base
            return Kind.UNKNOWN
        if isinstance(expr, cst.Subscript):
            base = k(expr.value)
            # An element of a list or dict may be anything (``losses[-1]`` of a list of tensors).
            if base is Kind.HOST and self._holds_anything(expr.value, scope, at):
                return Kind.UNKNOWN
            return base
        if isinstance(expr, cst.Call):
            return self._call_kind(expr, k)
        if isinstance(expr, cst.BinaryOperation):
            return _combine(k(expr.left), k(expr.right))
        if isinstance(expr, cst.UnaryOperation):
            return Kind.HOST if isinstance(expr.operator, cst.Not) and k(expr.expression) is not Kind.TENSOR \
                else k(expr.expression)
        if isinstance(expr, cst.Comparison):
            if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in expr.comparisons):
                return Kind.HOST
            return _combine(k(expr.left), *(k(c.comparator) for c in expr.comparisons))
        if isinstance(expr, cst.BooleanOperation):
            left, right = k(expr.left), k(expr.right)
            return Kind.HOST if left is right is Kind.HOST else Kind.UNKNOWN
        if isinstance(expr, cst.IfExp):
            body, orelse = k(expr.body), k(expr.orelse)
            return body if body is orelse else Kind.UNKNOWN
        return Kind.UNKNOWN

    def _holds_anything(self, expr, scope, at: int | None) -> bool:
        containers = (cst.List, cst.Tuple, cst.Dict, cst.Set, cst.ListComp, cst.DictComp, cst.SetComp)
        if isinstance(expr, containers):
            return True
        if not isinstance(expr, cst.Name):
            return False
        table = self.bindings(scope)
        at = table.order.get(expr) if at is None else at
        before = [b for b in table.bindings.get(expr.value, ()) if at is not None and b.order < at and not b.augmented]
        return bool(before) and isinstance(before[-1].value, containers) and before[-1].element is None

    def _call_kind(self, call: cst.Call, k) -> Kind:
        func = call.func
        qualified = self.tree.qualified_name(func)
        if qualified:
            if _in_modules(qualified, _HOST_MODULES):
                return Kind.HOST
            if qualified.startswith("torch."):
                leaf = qualified.rsplit(".", 1)[-1]
                if leaf in _CREATION:
                    return Kind.TENSOR if _device_kwarg(call, self.tree) else Kind.HOST
                if leaf in _TORCH_NON_TENSOR or leaf.startswith(("is_", "get_", "set_")):
                    return Kind.HOST
                if qualified.count(".") == 1 or qualified.startswith(_TENSOR_MODULES):
                    return Kind.TENSOR
                return Kind.UNKNOWN
            if qualified.startswith("builtins."):
                return Kind.UNKNOWN
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method in _HOST_METHODS:
                return Kind.HOST
            if method == "to" and _to_cpu(call, self.tree):
                return Kind.HOST
            receiver = k(func.value)
            if receiver is Kind.HOST and method not in ("to", "cuda"):
                return Kind.HOST
            if receiver is Kind.TENSOR or method in _TENSOR_ONLY_METHODS:
                return Kind.TENSOR
            return Kind.TENSOR if method in _MODEL_WORDS or words(method) & _MODEL_WORDS else Kind.UNKNOWN
        if isinstance(func, cst.Name) and words(func.value) & _MODEL_WORDS:
            return Kind.TENSOR
        return Kind.UNKNOWN

    def _name_kind(self, name: cst.Name, scope, at: int | None, depth: int) -> Kind:
        if name.value in ("True", "False", "None"):
            return Kind.HOST
        if _in_modules(self.tree.qualified_name(name), _HOST_MODULES):
            return Kind.HOST
        table = self.bindings(scope)
        if at is None:
            at = table.order.get(name)
            if at is None:
                return Kind.UNKNOWN
        found = table.bindings.get(name.value, ())
        before = [b for b in found if b.order < at]
        if before:
            return self._binding_kind(before[-1], found, scope, depth)
        # A loop-carried name bound later in the loop: trust it only when every binding agrees.
        kinds = {self._binding_kind(b, found, scope, depth) for b in found}
        return kinds.pop() if len(kinds) == 1 else Kind.UNKNOWN

    def _binding_kind(self, binding: _Binding, all_bindings, scope, depth: int) -> Kind:
        if binding.loop_index:
            return Kind.HOST
        if binding.value is None:
            return Kind.UNKNOWN
        value = self._kind(binding.value, scope, binding.order, depth + 1)
        if binding.augmented:
            if value is Kind.TENSOR:
                return Kind.TENSOR
            earlier = [b for b in all_bindings if b.order < binding.order]
            previous = self._binding_kind(earlier[-1], all_bindings, scope, depth + 1) if earlier else Kind.UNKNOWN
            return _combine(previous, value)
        if binding.element is not None and value is Kind.TENSOR:
            # ``_, pred = out.max(1)`` unpacks tensors; ``loss, count = model.forward_loss(b)`` may hold a count.
            method = binding.value.func.attr.value if isinstance(binding.value, cst.Call) and \
                isinstance(binding.value.func, cst.Attribute) else None
            tensor_method = method is not None and method not in _MODEL_WORDS and not words(method) & _MODEL_WORDS
            return Kind.TENSOR if tensor_method else Kind.UNKNOWN
        return value


def _in_modules(qualified: str | None, modules: tuple[str, ...]) -> bool:
    return bool(qualified) and any(qualified == m or qualified.startswith(m + ".") for m in modules)


def _combine(*kinds: Kind) -> Kind:
    if Kind.TENSOR in kinds:
        return Kind.TENSOR
    return Kind.HOST if all(k is Kind.HOST for k in kinds) else Kind.UNKNOWN


def _device_kwarg(call: cst.Call, tree: Tree) -> bool:
    """``device=...`` other than the CPU, or ``pin_memory=True`` (not the device)."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "device":
            return not _is_cpu(arg.value, tree)
    return False


def _is_cpu(expr: cst.BaseExpression, tree: Tree) -> bool:
    if isinstance(expr, cst.SimpleString):
        return literal(expr) == "cpu"  # (libcst's evaluated_value raises on a null byte, say)
    if isinstance(expr, cst.Call) and tree.qualified_name(expr.func) == "torch.device" and expr.args:
        return _is_cpu(expr.args[0].value, tree)
    return False


def _to_cpu(call: cst.Call, tree: Tree) -> bool:
    """``x.to("cpu")``, ``x.to(torch.device("cpu"))``, ``x.to(device="cpu")``."""
    for arg in call.args:
        if arg.keyword is None or arg.keyword.value == "device":
            return _is_cpu(arg.value, tree)
    return False


def is_to_cpu(call: cst.Call, tree: Tree) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "to" and _to_cpu(call, tree)
