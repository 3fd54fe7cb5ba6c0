"""Which expressions are device tensors: a local guess, HOST / TENSOR / UNKNOWN, for the source rules.

``Values(tree).kind(expr)``: HOST (Python values, numpy, CPU tensors built without a device, anything already
``.item()``-ed or ``.cpu()``-ed), TENSOR (evidence of a possibly-device tensor: model/criterion outputs, torch ops,
``.to(dev)``) or UNKNOWN. Names are looked up through the nearest preceding binding in the same function, from
per-function binding tables computed once (bindings.py). Pure libcst over a ``Tree`` (the source FileContext
satisfies it); rules reach it through ``loops.facts(ctx)`` (``SourceRule.facts``), which adds the per-step-loop
questions.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from enum import Enum
from typing import Protocol

import libcst as cst

from tracelint.source.semantic.bindings import Binding, ScopeBindings, names_in, unpack_loop
from tracelint.source.semantic.callers import qualname
from tracelint.source.semantic.calls import literal
from tracelint.source.semantic.model import callee_name, dotted_name, iter_children
from tracelint.source.vocab import DEVICE_MODULES as _DEVICE_MODULES
from tracelint.source.vocab import DEVICE_NAMES as _DEVICE_NAMES
from tracelint.source.vocab import DEVICE_SUBSTRINGS as _DEVICE_SUBSTRINGS
from tracelint.source.vocab import HOST_ATTRS as _HOST_ATTRS
from tracelint.source.vocab import HOST_METHODS as _HOST_METHODS
from tracelint.source.vocab import PROCESS_MODULES as _PROCESS_MODULES
from tracelint.source.vocab import PROCESS_SUBSTRINGS as _PROCESS_SUBSTRINGS
from tracelint.source.vocab import STEP_HOOKS as _STEP_HOOKS
from tracelint.source.vocab import WORD
from tracelint.source.vocab import head_word as head_word
from tracelint.source.vocab import words as words


class Tree(Protocol):
    source: str
    module: cst.Module
    stack: list[cst.CSTNode]  # during a traversal: the ancestors of the node being visited
    imports: dict[str, str]   # {bound name: qualified name}

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None: ...
    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]: ...
    def qualified_name(self, expr: cst.BaseExpression) -> str | None: ...
    def spelled_name(self, expr: cst.BaseExpression) -> str | None: ...
    def code_for(self, node: cst.CSTNode) -> str: ...
    def bound(self, expr: cst.BaseExpression) -> list | None: ...  # flow.py: what it may hold (ast expressions)


class Kind(Enum):
    HOST = "host"        # a Python value, numpy array or CPU tensor: reading it does not wait for the GPU
    TENSOR = "tensor"    # evidence of a tensor that may live on the device
    UNKNOWN = "unknown"


# ---------------------------------------------------------------------------------------------------------------
# words (the heuristics here and in steps.py match on them)
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
    "from_file", "frombuffer", "empty_strided", "tril_indices", "triu_indices", "hann_window", "hamming_window",
    "blackman_window", "bartlett_window", "kaiser_window",
})
_TORCH_NON_TENSOR = frozenset({
    "device", "no_grad", "enable_grad", "is_tensor", "is_floating_point", "numel", "manual_seed", "get_default_dtype",
    "set_grad_enabled", "inference_mode", "autocast", "compile", "load", "save", "Size", "dtype", "finfo", "iinfo",
    "is_grad_enabled", "get_rng_state", "set_rng_state", "typename", "is_complex", "equal", "allclose",
})
_TENSOR_MODULES = ("torch.nn.functional.", "torch.linalg.", "torch.fft.", "torch.special.")
# torch functions outside those modules that return a tensor on the device of their inputs (the total norm).
_TENSOR_FUNCTIONS = frozenset({
    "torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_norm", "torch.nn.utils.get_total_norm",
    "torch.nn.utils.parameters_to_vector", "torch.nn.utils.rnn.pad_sequence",
})
# Methods of other objects that return such a tensor (``accelerator.clip_grad_norm_``, FSDP's, Fabric's).
_TENSOR_RESULT_METHODS = frozenset({"clip_grad_norm_"})
# torchmetrics: its functions return tensors on their inputs' device; so does ``metric.compute()`` (``_metric_object``).
_METRIC_FUNCTIONS = ("torchmetrics.functional.",)
# Config objects (argparse namespaces and the like): their attributes are Python values. A name of these bound
# from a call of another module whose name says so (``cfg = load_config(path)``, ``hps = utils.get_hparams()``).
_CONFIG_NAMES = frozenset({"args", "opt", "opts", "cfg", "config", "conf", "hparams", "hps", "options"})
_CONFIG_CALL_WORDS = frozenset({"parse", "args", "arguments", "config", "cfg", "conf", "options", "opts",
                                "hparams"})
_PARSE_METHODS = frozenset({"parse_args", "parse_known_args"})
# Methods that modules (and other objects) share with tensors: ``Net().cuda()`` is the module.
_MODULE_METHODS = frozenset({"to", "cuda", "half", "float", "double", "bfloat16", "type"})
_HOST_MODULES = ("numpy", "math", "random", "time", "os", "sys", "json", "pandas", "builtins.str", "builtins.len",
                 "builtins.int", "builtins.float", "builtins.bool", "builtins.round", "builtins.range",
                 "builtins.list", "builtins.dict", "builtins.tuple", "builtins.set", "builtins.isinstance",
                 "builtins.repr", "builtins.format", "builtins.hasattr", "builtins.type", "builtins.print")
# Callees whose result is a model output or loss: ``model(x)``, ``self.criterion(out, y)``, ``loss_fn(...)``.
_MODEL_WORDS = frozenset({
    "model", "net", "network", "criterion", "loss", "lossfn", "encoder", "decoder", "head", "classifier",
    "backbone", "generator", "discriminator", "policy", "actor", "critic", "ddp", "module", "forward", "crit",
})
# ...unless the callee builds or fetches the module itself: ``load_model(path)``, ``get_criterion()``, ``build_net()``.
_BUILD_WORDS = frozenset({"load", "build", "get", "create", "make", "init", "initialize", "setup", "instantiate",
                          "construct", "wrap", "new"})
_MODULE_NOUNS = (_MODEL_WORDS - {"loss", "forward"}) | {"fn", "func", "function", "optimizer", "scheduler"}
# Callees whose name ends saying they return a host copy: ``to_cpu(t)``, ``tensor2numpy(t)``, ``to_np(t)`` (not
# ``numpy_to_tensor``).
_HOST_CALL_WORDS = frozenset({"cpu", "numpy", "np"})
_MAX_DEPTH = 12
# Device evidence in the text (lower-cased): accelerator words, ``non_blocking=``/``pin_memory=`` other than False,
# a framework's step hook (``def training_step``: the batch is on the trainer's device).
_DEVICE_TEXT = re.compile(
    "|".join(map(re.escape, _DEVICE_SUBSTRINGS)) + r"|\b(?:" + "|".join(_DEVICE_NAMES) + r")\b"
    r"|\b(?:non_blocking|pin_memory)\s*=\s*(?!false\b)")
_PROCESS_TEXT = re.compile(
    "|".join(map(re.escape, _PROCESS_SUBSTRINGS)) + r"|\bdef\s+(?:" + "|".join(sorted(_STEP_HOOKS)) + r")\b")
_TO_OR_DEVICE = re.compile(r"\.\s*to\s*\(|device")


def _callee_kind(name: str) -> Kind:
    """What a call of a function or method named ``name`` returns, by its name (when nothing else is known)."""
    if name[:1].isupper():
        return Kind.UNKNOWN  # a class: ``Generator()`` is the module, ``generator(z)`` its output
    parts = WORD.findall(name)
    if parts and parts[-1].lower() in _HOST_CALL_WORDS:
        return Kind.HOST
    if _names_a_model(name):
        found = words(name)
        return Kind.UNKNOWN if found & _BUILD_WORDS and found & _MODULE_NOUNS else Kind.TENSOR  # load_model(...)
    return Kind.UNKNOWN


def _names_a_model(name: str) -> bool:
    """A callee named like a module (``model``, ``self.net``, ``criterion``, ``policy_head``): what it returns is the
    module's output."""
    return name in _MODEL_WORDS or bool(words(name) & _MODEL_WORDS)


def is_number(expr: cst.BaseExpression) -> bool:
    """A literal integer or float, signed or not (``3``, ``-0.5``)."""
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        return is_number(expr.expression)
    return isinstance(expr, (cst.Integer, cst.Float))


def is_python_scalar(expr: cst.BaseExpression, tree: Tree) -> bool:
    """A literal number, bool, ``float('-inf')`` or ``math.inf``: what ``x[mask] = value`` turns into masked_fill_."""
    if is_number(expr):
        return True
    if isinstance(expr, cst.UnaryOperation):
        return is_python_scalar(expr.expression, tree)
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return True
    if isinstance(expr, cst.Call) and tree.qualified_name(expr.func) in ("builtins.float", "builtins.int"):
        return True
    name = tree.qualified_name(expr) if isinstance(expr, cst.Attribute) else None
    return bool(name and name.split(".")[0] in ("math", "numpy"))


class Values:
    """Per-file caches behind ``kind``: the bindings of each function, computed once however many rules ask."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self._scopes: dict[cst.CSTNode, ScopeBindings] = {}
        self._device: bool | None = None
        self._functions: dict[str, cst.FunctionDef] | None = None
        self._configs: dict[tuple[str, cst.Call], bool] = {}
        self._parameters_open: set[tuple[cst.FunctionDef, str]] = set()  # parameters being judged (recursion)
        self._buffer_names: frozenset[str] | None = None  # _buffers

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

    def bindings(self, scope: cst.CSTNode) -> ScopeBindings:
        found = self._scopes.get(scope)
        if found is None:
            found = self._scopes[scope] = ScopeBindings(scope)
        return found

    def value_of(self, name: cst.Name) -> cst.BaseExpression | None:
        """The value of the nearest plain binding of ``name`` before it, in its function (None if there is none)."""
        binding = self._reaching(name)
        if binding is None or binding.augmented or binding.element is not None:
            return None
        return binding.value

    def _reaching(self, name: cst.Name) -> Binding | None:
        """The binding of ``name`` that holds where it is used on the common path: the nearest one before it in its
        function, passing over those made in a rare branch the use is not in (``_in_rare_branch``)."""
        table = self.bindings(self.scope_of(name))
        at = table.order.get(name)
        if at is None:
            return None
        before = self._common_path([b for b in table.bindings.get(name.value, ()) if b.order < at], name)
        return before[-1] if before else None

    def _common_path(self, before: list[Binding], use: cst.CSTNode) -> list[Binding]:
        """``before`` (a name's bindings before ``use``, in order) less the last ones made in a rare branch."""
        while len(before) > 1 and self._in_rare_branch(before[-1].value, use):
            before.pop()
        return before

    def module_output(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        """``expr`` is what a module returns, known by the callee's name only (``model(x)``, ``outputs`` bound to
        ``self.net(x)``): a tensor, or a list or tuple of them (YOLO's per-scale outputs)."""
        if isinstance(expr, cst.Name) and depth < 3:
            value = self.value_of(expr)
            return value is not None and self.module_output(value, depth + 1)
        if not isinstance(expr, cst.Call):
            return False
        return _names_a_model(callee_name(expr) or "")

    def _buffers(self) -> frozenset[str]:
        """The names the file's modules register as buffers (``self.register_buffer("queue_ptr", torch.zeros(1))``):
        ``self.queue_ptr`` is a tensor wherever the module is (on the GPU with it)."""
        if self._buffer_names is None:
            callers = getattr(self, "callers", None)  # its call index holds the file's calls by name: no new walk
            calls = callers.index.calls.get("register_buffer", ()) if callers is not None and \
                "register_buffer" in getattr(self.tree, "source", "") else ()
            self._buffer_names = frozenset(call.args[0].value.value[1:-1] for call in calls
                                           if call.args and isinstance(call.args[0].value, cst.SimpleString))
        return self._buffer_names

    def parameter_values(self, name: cst.Name) -> list[cst.BaseExpression] | None:
        """What the file's calls pass when ``name`` is a parameter of its function not rebound before it
        (``passed``); None otherwise."""
        scope = self.scope_of(name)
        before = self._bound_before(name, scope, None)
        if not isinstance(scope, cst.FunctionDef) or len(before) != 1 or before[0].value is not None or \
                before[0].loop is not None:
            return None
        return self.passed(scope, name.value)

    def returned_values(self, name: cst.Name) -> list[cst.BaseExpression] | None:
        """What ``name`` holds when its nearest plain binding before it is a call of one of this file's functions
        (``fg_mask = self.assign(x)``, ``_, fg_mask = self.get_assignments(x)``): the expressions that function
        returns (``returned``); None otherwise."""
        binding = self._reaching(name)
        if binding is None or binding.augmented or not isinstance(binding.value, cst.Call):
            return None
        return self.returned(binding.value, binding.element)

    def returned(self, call: cst.Call, element: int | None = None) -> list[cst.BaseExpression] | None:
        """The values the one function of this file that ``call`` calls returns (callers.Callers.callees), or
        element ``element`` of each when the call's result is unpacked; None when it calls none of them or several,
        when one of its ``return`` statements gives nothing, or, unpacked, a return is no tuple of that size."""
        callers = getattr(self, "callers", None)
        if callers is None:
            return None
        functions = callers.callees(call)
        if len(functions) != 1:
            return None
        returns = [r.value for r in _own_returns(functions[0])]
        if not returns or any(r is None for r in returns):
            return None
        if element is None:
            return returns  # type: ignore[return-value]
        found = []
        for value in returns:
            if not isinstance(value, cst.Tuple) or element >= len(value.elements) or \
                    any(isinstance(e, cst.StarredElement) for e in value.elements):
                return None
            found.append(value.elements[element].value)
        return found

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
            if self._config(expr.value, scope, at, depth + 1):
                return Kind.HOST  # ``args.lr``, ``hps.train.batch_size``
            base = k(expr.value)
            if expr.attr.value in _SAME_ATTRS or base is Kind.TENSOR:
                return base
            if isinstance(expr.value, cst.Name) and expr.value.value == "self" and \
                    expr.attr.value in self._buffers():
                return Kind.TENSOR  # a module's buffer: a tensor that moves with the module (MoCo's queue_ptr)
            return Kind.UNKNOWN
        if isinstance(expr, cst.Subscript):
            if _hyperparameter(expr):
                return Kind.HOST  # ``optimizer.param_groups[0]["lr"]``: a Python number (torch.optim's API)
            base = k(expr.value)
            # An element of a list or dict may be anything (``losses[-1]`` of a list of tensors).
            if base is Kind.HOST and self._holds_anything(expr.value, scope, at):
                return Kind.UNKNOWN
            return base
        if isinstance(expr, cst.Call):
            return self._call_kind(expr, k, scope, at, depth)
        if isinstance(expr, cst.BinaryOperation):
            if isinstance(expr.operator, cst.Modulo) and isinstance(expr.left, (cst.SimpleString,
                                                                                  cst.ConcatenatedString)):
                return Kind.HOST  # ``"%f" % t`` is a string (formatting it is TL104's finding)
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

    def _call_kind(self, call: cst.Call, k, scope, at: int | None, depth: int) -> Kind:
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
                if qualified.count(".") == 1 or qualified.startswith(_TENSOR_MODULES) or \
                        qualified in _TENSOR_FUNCTIONS:
                    return Kind.TENSOR
                return Kind.UNKNOWN
            if qualified.startswith("builtins."):
                return Kind.UNKNOWN
            if qualified.startswith(_METRIC_FUNCTIONS):
                return Kind.TENSOR
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method == "compute" and self._metric_object(func.value, scope, at, depth):
                return Kind.TENSOR  # a torchmetrics metric's value: a tensor on the metric's device
            if method in _HOST_METHODS or method in _PARSE_METHODS:
                return Kind.HOST
            if method == "to" and _to_cpu(call, self.tree):
                return Kind.HOST
            receiver = k(func.value)
            if receiver is Kind.HOST and method not in ("to", "cuda"):
                return Kind.HOST
            if receiver is not Kind.TENSOR and method in _MODULE_METHODS and \
                    self._module_object(func.value, scope, at, depth):
                return Kind.UNKNOWN  # ``Net().cuda()``: the module, moved
            if receiver is Kind.TENSOR or method in _TENSOR_ONLY_METHODS or method in _TENSOR_RESULT_METHODS or \
                    any(arg.keyword is not None and arg.keyword.value == "dim" for arg in call.args):
                return Kind.TENSOR  # (``x.sum(dim=1)``: ``dim=`` is torch's; numpy and pandas say ``axis=``)
            return _callee_kind(method)
        if isinstance(func, cst.Name):
            return _callee_kind(func.value)
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
        # ``if mode == "cpu": x = x.cpu()`` does not decide what ``x`` is on the common path
        before = self._common_path([b for b in found if b.order < at], name)
        if _not_tensor_here(table, name.value, at, before) or self._config(name, scope, at, depth) or \
                self._moved_later(name, at, table):
            return Kind.HOST
        if before:
            if self._host_element(name.value, before[-1], table):
                return Kind.HOST
            if isinstance(before[-1].loop, cst.For) and isinstance(scope, cst.FunctionDef):
                kind = self._keyword_values_kind(before[-1].loop, name.value, scope, depth)
                if kind is not Kind.UNKNOWN:
                    return kind
            if isinstance(before[-1].loop, (cst.For, cst.CompFor)) and \
                    self._row_of_tensor(before[-1].loop, name, depth):
                return Kind.TENSOR
            if before[-1].value is None and isinstance(scope, cst.FunctionDef) and len(before) == 1:
                return self._parameter_kind(scope, name.value, depth)
            return self._binding_kind(before[-1], found, scope, depth)
        if not found and scope is not self.tree.module and self._module_number(name.value):
            return Kind.HOST  # a module constant (``BOS_ID = 50256``)
        # A loop-carried name bound later in the loop: trust it only when every binding agrees.
        kinds = {self._binding_kind(b, found, scope, depth) for b in found}
        return kinds.pop() if len(kinds) == 1 else Kind.UNKNOWN

    def _row_of_tensor(self, loop: cst.For | cst.CompFor, name: cst.Name, depth: int) -> bool:
        """The loop binds ``name`` to an element of a tensor it walks (``for row in t``, through ``zip`` and
        ``enumerate``: ``for i, (mask, size) in enumerate(zip(masks, sizes))``): a row, a tensor where ``t`` is."""
        for element, source in unpack_loop(loop.target, loop.iter)[1]:
            if isinstance(element, cst.Name) and element.value == name.value:
                return self._kind(source, self.scope_of(source), None, depth + 1) is Kind.TENSOR
        return False

    def _in_rare_branch(self, node: cst.CSTNode | None, use: cst.CSTNode) -> bool:
        """``node`` (a binding's value, a move) is in the body of an ``if`` with a rare test (loops.guard_polarity),
        or in an ``except`` handler (``try: m = f(x) except OOM: m = f(x, "cpu")``), that ``use`` is not in: on most
        runs the name keeps its earlier binding."""
        polarity = getattr(self, "guard_polarity", None)
        if node is None or polarity is None:
            return False
        child = node
        for parent in self.tree.ancestors(node):
            if isinstance(parent, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return False
            if isinstance(parent, cst.If) and child is parent.body and polarity(parent.test) == 1 or \
                    isinstance(parent, cst.ExceptHandler):
                return not any(p is parent for p in self.tree.ancestors(use))
            child = parent
        return False

    def _parameter_kind(self, fn: cst.FunctionDef, name: str, depth: int) -> Kind:
        """A parameter's kind from what the file's calls of its function pass (callers.Callers: ``f(x)``,
        ``self.f(x)``, ``model(x)`` for a module's forward, ``C(x)`` for ``__init__``): the kind every such argument
        has, else UNKNOWN (no call in the file, a ``*args`` call, arguments of different kinds)."""
        callers = getattr(self, "callers", None)
        key = (fn, name)
        if callers is None or depth > _MAX_DEPTH - 3 or key in self._parameters_open:
            return Kind.UNKNOWN
        params = [*fn.params.posonly_params, *fn.params.params]
        names = [p.name.value for p in params]
        if name not in names:
            return Kind.UNKNOWN
        position = names.index(name) - (1 if names and names[0] in ("self", "cls") else 0)
        self._parameters_open.add(key)
        try:
            kinds = set()
            for given in self._run_arguments(fn):  # what other files' per-step calls pass (runcalls.argument_kinds)
                if any(where in ("*", "**") for where, _ in given):
                    return Kind.UNKNOWN
                if not _binds(fn, [where for where, _ in given]):
                    continue  # no call of ``fn``: another module's, where the receiver may be one of several
                passed = next((k for where, k in given if where == name), None) or \
                    next((k for where, k in given if where == position), None)
                if passed is None:
                    return Kind.UNKNOWN  # its default
                kinds.add(Kind(passed))
                if len(kinds) > 1 or Kind.UNKNOWN in kinds:
                    return Kind.UNKNOWN
            passed = self.passed(fn, name)
            if passed is None:
                return Kind.UNKNOWN
            for value in passed:
                kinds.add(self._kind(value, self.scope_of(value), None, depth + 1))
                if len(kinds) > 1 or Kind.UNKNOWN in kinds:
                    return Kind.UNKNOWN
            return kinds.pop() if kinds else Kind.UNKNOWN
        finally:
            self._parameters_open.discard(key)

    def passed(self, fn: cst.FunctionDef, name: str) -> list[cst.BaseExpression] | None:
        """What the file's calls of ``fn`` that can bind its parameters (``_binds``) pass as parameter ``name``, one
        expression per call (callers.Callers.callers: ``f(x)``, ``self.f(x)``, ``model(x)`` for a forward); None
        when one of them passes ``*args``/``**kwargs`` or leaves it to its default."""
        callers = getattr(self, "callers", None)
        params = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)]
        if callers is None or name not in params and name not in {p.name.value for p in fn.params.kwonly_params}:
            return None
        position = params.index(name) - (1 if params[:1] in (["self"], ["cls"]) else 0) if name in params else -1
        found = []
        for call in callers.callers(fn):
            if any(arg.star for arg in call.args):
                return None
            if not _binds(fn, [a.keyword.value if a.keyword is not None else i for i, a in enumerate(call.args)]):
                continue
            given = [a.value for a in call.args if a.keyword is not None and a.keyword.value == name]
            positional = [a.value for a in call.args if a.keyword is None]
            if not given and 0 <= position < len(positional):
                given = [positional[position]]
            if not given:
                return None  # its default
            found.append(given[0])
        return found

    def _keyword_values_kind(self, loop: cst.For, name: str, fn: cst.FunctionDef, depth: int) -> Kind:
        """A value of ``**kwargs`` the loop walks (``for k, v in kwargs.items()``, ``for v in kwargs.values()``):
        the kind every keyword argument the calls of ``fn`` pass there has (MetricLogger.update(loss=loss.item())
        gets floats), else UNKNOWN (no call known, a ``**dict`` passed on, kinds that differ)."""
        star = fn.params.star_kwarg
        iterable, target = loop.iter, loop.target
        if not isinstance(star, cst.Param) or not isinstance(iterable, cst.Call) or iterable.args or \
                not isinstance(iterable.func, cst.Attribute) or dotted_name(iterable.func.value) != star.name.value:
            return Kind.UNKNOWN
        method = iterable.func.attr.value
        pair = isinstance(target, cst.Tuple) and len(target.elements) == 2
        if method == "items" and pair and dotted_name(target.elements[0].value) == name:
            return Kind.HOST  # a keyword: a str
        value = target if method == "values" else target.elements[1].value if method == "items" and pair else None
        if dotted_name(value) != name if value is not None else True:
            return Kind.UNKNOWN
        named = {p.name.value for p in (*fn.params.posonly_params, *fn.params.params, *fn.params.kwonly_params)}
        kinds: set[Kind] = set()
        for given in self._run_arguments(fn):
            for where, kind in given:
                if where == "**":
                    return Kind.UNKNOWN
                if isinstance(where, str) and where != "*" and where not in named:
                    kinds.add(Kind(kind))
        callers = getattr(self, "callers", None)
        for call in callers.callers(fn) if callers is not None and depth < _MAX_DEPTH - 3 else ():
            for arg in call.args:
                if arg.star == "**":
                    return Kind.UNKNOWN
                if arg.keyword is not None and arg.keyword.value not in named:
                    kinds.add(self._kind(arg.value, self.scope_of(arg.value), None, depth + 1))
        return kinds.pop() if len(kinds) == 1 else Kind.UNKNOWN

    def _run_arguments(self, fn: cst.FunctionDef) -> tuple:
        """The arguments other files' per-step calls pass ``fn`` (FileContext.argument_kinds), by its qualified name
        in this file (``f``, ``C.m``)."""
        known = getattr(self.tree, "argument_kinds", None)
        if not known:
            return ()
        return known.get(qualname(fn, self.tree) or "", ())

    def _module_number(self, name: str) -> bool:
        """``name`` is bound at module level only to number literals."""
        bound = self.bindings(self.tree.module).bindings.get(name, ())
        return bool(bound) and all(isinstance(b.value, (cst.Integer, cst.Float)) and not b.augmented for b in bound)

    def _binding_kind(self, binding: Binding, all_bindings, scope, depth: int) -> Kind:
        if binding.loop_index:
            return Kind.HOST
        if binding.value is None:
            return Kind.UNKNOWN
        if isinstance(binding.value, cst.Call) and not binding.augmented and depth < _MAX_DEPTH - 2:
            # a call of one of this file's functions holds what that function returns, when its returns agree
            returned = self.returned(binding.value, binding.element)
            kinds = {self._kind(r, self.scope_of(r), None, depth + 2) for r in returned or ()}
            if len(kinds) == 1 and Kind.UNKNOWN not in kinds:
                return kinds.pop()
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

    # -- values that are not device tensors -----------------------------------------------------------------
    def _module_object(self, expr: cst.BaseExpression, scope, at: int | None, depth: int) -> bool:
        """``expr`` is a module or other object, not a tensor: an instance of a class (``Net()``,
        ``torch.nn.Linear(4, 4)``; not ``FloatTensor(...)``, ``Variable(...)``, ``Parameter(...)``), what a builder
        returns (``load_model(path)``), that moved or cast (``Net().cuda()``), or a name bound to one of those."""
        if depth > _MAX_DEPTH:
            return False
        if isinstance(expr, cst.Name):
            before = self._bound_before(expr, scope, at)
            return bool(before) and before[-1].element is None and not before[-1].augmented and \
                self._module_object(before[-1].value, scope, before[-1].order, depth + 1)
        if not isinstance(expr, cst.Call):
            return False
        name = callee_name(expr) or ""
        if isinstance(expr.func, cst.Attribute) and name in _MODULE_METHODS:
            return self._module_object(expr.func.value, scope, at, depth + 1)
        if name[:1].isupper():
            return not name.endswith("Tensor") and name not in ("Variable", "Parameter")
        found = words(name)
        return bool(found & _BUILD_WORDS and found & _MODULE_NOUNS)

    def _bound_before(self, name: cst.Name, scope, at: int | None) -> list:
        """The bindings of ``name`` in ``scope`` before its use (or before order ``at``), in order."""
        table = self.bindings(scope)
        where = table.order.get(name) if at is None else at
        return [b for b in table.bindings.get(name.value, ()) if where is not None and b.order < where]

    def _metric_object(self, expr: cst.BaseExpression, scope, at: int | None, depth: int) -> bool:
        """``expr`` is a torchmetrics metric (``acc = torchmetrics.Accuracy(...).to(device)``, or a name bound to
        one in the same function or at module level)."""
        if depth > _MAX_DEPTH:
            return False
        if isinstance(expr, cst.Name):
            before = self._bound_before(expr, scope, at)
            if not before and scope is not self.tree.module:
                before = self.bindings(self.tree.module).bindings.get(expr.value, [])
            return bool(before) and before[-1].value is not None and before[-1].element is None and \
                self._metric_object(before[-1].value, scope, before[-1].order, depth + 1)
        if isinstance(expr, cst.Attribute):  # self.metric, set in __init__ (flow.py)
            return any(self._metric_built(value) for value in self.tree.bound(expr) or ())
        if not isinstance(expr, cst.Call):
            return False
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _MODULE_METHODS:
            return self._metric_object(expr.func.value, scope, at, depth + 1)
        qualified = self.tree.qualified_name(expr.func) or ""
        return qualified.startswith("torchmetrics.") and not qualified.startswith(_METRIC_FUNCTIONS)

    def _metric_built(self, value: cst.BaseExpression | None) -> bool:
        """An expression that builds a torchmetrics metric (``torchmetrics.Accuracy(...).to(device)``)."""
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and \
                value.func.attr.value in _MODULE_METHODS:
            value = value.func.value
        qualified = self.tree.spelled_name(value.func) if isinstance(value, cst.Call) else None
        return qualified is not None and qualified.startswith("torchmetrics.") and \
            not qualified.startswith(_METRIC_FUNCTIONS)

    def _config(self, expr: cst.BaseExpression, scope, at: int | None, depth: int) -> bool:
        """``expr`` is a config object or one of its attributes: ``args = parser.parse_args()``, ``args =
        get_args()`` where this file's ``get_args`` returns one, ``cfg = load_config(path)`` from another module
        (the name and the callee's name both say so). A parameter is not one (``def train(args)``)."""
        while isinstance(expr, cst.Attribute):
            expr = expr.value
        if not isinstance(expr, cst.Name) or depth > _MAX_DEPTH:
            return False
        table = self.bindings(scope)
        where = table.order.get(expr) if at is None else at
        found = table.bindings.get(expr.value, ())
        before = [b for b in found if where is not None and b.order < where]
        if before:
            values = [before[-1].value]
        elif found:
            return False  # a loop-carried or later binding of this function
        else:  # a global: every binding at module level must be one
            module = self.tree.module
            values = [b.value for b in self.bindings(module).bindings.get(expr.value, ())] if scope is not module \
                else []
        return bool(values) and all(self._config_value(expr.value, v, depth + 1) for v in values)

    def _config_value(self, name: str, value: cst.BaseExpression | None, depth: int) -> bool:
        if not isinstance(value, cst.Call) or depth > _MAX_DEPTH:
            return False
        known = self._configs.get((name, value))
        if known is None:
            known = self._configs[(name, value)] = self._config_call(name, value, depth)
        return known

    def _config_call(self, name: str, call: cst.Call, depth: int) -> bool:
        func = call.func
        if callee_name(call) in _PARSE_METHODS:
            return True
        function = self._module_functions().get(func.value) if isinstance(func, cst.Name) else None
        if function is not None:  # this file's ``def get_args(): ...; return parser.parse_args()``
            returns = [n.value for n in _own_returns(function)]
            return bool(returns) and all(
                r is not None and (isinstance(r, cst.Name) and self._config(r, function, None, depth + 1) or
                                   self._config_value(name, r, depth + 1)) for r in returns)
        return name.lower() in _CONFIG_NAMES and bool(words(dotted_name(func) or "") & _CONFIG_CALL_WORDS)

    def _module_functions(self) -> dict[str, cst.FunctionDef]:
        if self._functions is None:
            self._functions = {s.name.value: s for s in self.tree.module.body if isinstance(s, cst.FunctionDef)}
        return self._functions

    def _host_element(self, name: str, binding: Binding, table: ScopeBindings) -> bool:
        """A name bound by a ``for`` target that the scope never moves to a device while it moves another name
        of the same target (``for _, imgs, targets in loader: imgs = imgs.type(Tensor)``: ``targets`` stays on the
        host). Conservative: any ``targets.to(...)`` / ``.cuda()`` in the scope, or a target of one name, says
        nothing."""
        if binding.loop is None:
            return False
        names = [n.value for n in names_in(binding.loop.target)]
        if len(names) < 2 or name not in names or name in table.moves:
            return False
        return any(self._moved(other, table) for other in names if other != name)

    def _moved(self, name: str, table: ScopeBindings) -> bool:
        return any(self._to_device(call) for call in table.moves.get(name, ()))

    def _to_device(self, call: cst.Call) -> bool:
        """``x.cuda()``, ``x.to(device)`` (not the CPU, not a dtype), ``x.type(torch.cuda.FloatTensor)``."""
        method = call.func.attr.value
        if method == "cuda":
            return True
        first = next((a.value for a in call.args if a.keyword is None or a.keyword.value == "device"), None)
        if method == "to" and first is not None and not _is_cpu(first, self.tree) and \
                not _is_dtype(first, self.tree):
            return True
        return method == "type" and first is not None and (isinstance(first, cst.Name) or
                                                           "cuda" in self.tree.code_for(first))

    def _moved_later(self, use: cst.Name, at: int, table: ScopeBindings) -> bool:
        """The value the name ``use`` holds at order ``at`` is moved to a device later in the scope (``x.to(
        "cuda")``, with at most ``x = x.to(dtype)`` / ``x = x.view(...)`` between): it is on the host until then (a
        data generator that builds a batch on the CPU and yields it moved). A move in a rare branch (``if mode ==
        "cpu": ... x = x.cuda()``: YOLOX's CPU fallback moving results back) says nothing of the common path."""
        name = use.value
        for call in table.moves.get(name, ()):
            order = table.order.get(call)
            if order is None or order <= at or not self._to_device(call) or self._in_rare_branch(call, use):
                continue
            between = [b for b in table.bindings.get(name, ()) if at < b.order < order]
            if all(_self_derived(b, name) and not self._to_device(b.value) for b in between):
                return True
        return False

    # -- device evidence ------------------------------------------------------------------------------------
    def device_evidence(self) -> bool:
        """Whether the file puts work on an accelerator anywhere: text naming one (``.cuda()``, ``"cuda:0"``,
        ``torch.cuda.is_available()``, ``args.gpu``, ``--no-cuda``, ``"nccl"``, ``mps``/``xpu``, ``cudnn``),
        ``non_blocking=`` / ``pin_memory=`` other than False, an import of ``torch.cuda``, apex, torch_xla...,
        or ``.to(device)`` / ``.to(0)`` / ``device=args.device``: a ``.to()`` argument or ``device=`` value that
        is neither the CPU, a dtype, nor a name only ever bound to those; or a file of the run with such evidence
        calls this file's functions (``FileContext.device_from_run``, runcalls.resolve). A process or framework
        setup (``torch.distributed``, DDP, accelerate, Lightning, ``LOCAL_RANK``, a step hook ``def
        training_step``) counts too, unless the file pins the CPU (a ``.to()`` or ``device=`` that names it) and
        names no accelerator: gloo jobs run on the CPU. Computed once per file: a scan of the text, and a walk of
        the module only for the ``.to()`` and ``device=`` arguments."""
        if self._device is None:
            self._device = bool(getattr(self.tree, "device_from_run", False)) or self._find_device()
        return self._device

    def _find_device(self) -> bool:
        imports = self.tree.imports.values()
        if any(_in_modules(q, _DEVICE_MODULES) for q in imports):
            return True
        text = self.tree.source.lower()
        if _DEVICE_TEXT.search(text):
            return True
        process = any(_in_modules(q, _PROCESS_MODULES) for q in imports) or _PROCESS_TEXT.search(text) is not None
        if not _TO_OR_DEVICE.search(text):
            return process
        pinned = False
        for _node, placed in self.device_nodes():
            if placed:
                return True
            pinned = pinned or placed is None
        return process and not pinned

    def device_nodes(self) -> Iterator[tuple[cst.CSTNode, bool | None]]:
        """Every node of the module with ``_device_node``'s verdict on it (True: a ``.to(X)`` / ``device=X`` that may
        name an accelerator; None: one that names the CPU; False: neither), each judged in its function's scope."""
        module = self.tree.module
        work: list[tuple[cst.CSTNode, cst.CSTNode]] = [(module, module)]
        while work:
            node, scope = work.pop()
            yield node, self._device_node(node, scope)
            if isinstance(node, (cst.FunctionDef, cst.Lambda)):
                scope = node
            work.extend((kid, scope) for kid in iter_children(node))

    def _device_node(self, node: cst.CSTNode, scope: cst.CSTNode) -> bool | None:
        """A ``.to(X)`` or ``device=X`` where X may name an accelerator: True; where X is the CPU: None."""
        cls = type(node)
        if cls is cst.Arg and node.keyword is not None and node.keyword.value == "device":
            where = node.value
        elif cls is cst.Call and isinstance(node.func, cst.Attribute) and node.func.attr.value == "to":
            where = next((a.value for a in node.args if a.keyword is None), None)
        else:
            return False
        if where is None:
            return False
        if self._may_be_device(where, scope, 0):
            return True
        return None if self._names_cpu(where, scope, 0) else False

    def _names_cpu(self, expr: cst.BaseExpression, scope: cst.CSTNode, depth: int) -> bool:
        """``expr`` is the CPU: ``"cpu"``, ``torch.device("cpu")``, or a name only ever bound to those."""
        if _is_cpu(expr, self.tree):
            return True
        if not isinstance(expr, cst.Name) or depth >= 4:
            return False
        found = self.bindings(scope).bindings.get(expr.value) or \
            self.bindings(self.tree.module).bindings.get(expr.value, ())
        return bool(found) and all(b.value is not None and self._names_cpu(b.value, scope, depth + 1) for b in found)

    def _may_be_device(self, expr: cst.BaseExpression, scope: cst.CSTNode, depth: int) -> bool:
        """``expr`` (a ``.to()`` argument or ``device=`` value) may name an accelerator: not the CPU, not a dtype,
        not a name only ever bound to those."""
        if _is_cpu(expr, self.tree) or _is_dtype(expr, self.tree):
            return False
        if isinstance(expr, cst.SimpleString):
            return literal(expr) != "meta"
        if isinstance(expr, cst.Name) and depth < 4:
            table = self.bindings(scope)
            found = table.bindings.get(expr.value) or self.bindings(self.tree.module).bindings.get(expr.value, ())
            return not found or any(b.value is None or self._may_be_device(b.value, scope, depth + 1) for b in found)
        return True


def _is_dtype(expr: cst.BaseExpression, tree: Tree) -> bool:
    """``torch.float16``, ``x.dtype``, ``dtype``: a dtype, not a device."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "dtype" or \
            isinstance(expr, cst.Name) and expr.value == "dtype":
        return True
    qualified = tree.qualified_name(expr) if isinstance(expr, (cst.Attribute, cst.Name)) else None
    return bool(qualified) and qualified.startswith("torch.") and qualified.count(".") == 1 and \
        not qualified.startswith("torch.device")


def _binds(fn: cst.FunctionDef, given: list[int | str]) -> bool:
    """A call passing ``given`` (positions, then keywords; no ``*``/``**``) can call ``fn`` (a method's ``self``
    not counted): not more positional arguments than it takes, no keyword it lacks, every parameter without a
    default given. A call that cannot is another function's (``heads["segm"](a, b, c, d)`` and
    ``heads["panoptic"](a, b, c)``: one container, modules of different signatures)."""
    params = [*fn.params.posonly_params, *fn.params.params]
    if params and params[0].name.value in ("self", "cls"):
        params = params[1:]
    positional = sum(1 for where in given if isinstance(where, int))
    keywords = {where for where in given if isinstance(where, str)}
    named = {p.name.value for p in (*params, *fn.params.kwonly_params)}
    if positional > len(params) and not isinstance(fn.params.star_arg, cst.Param) or \
            keywords - named and fn.params.star_kwarg is None:
        return False
    return all(i < positional or p.name.value in keywords for i, p in enumerate(params) if p.default is None) and \
        all(p.name.value in keywords for p in fn.params.kwonly_params if p.default is None)


def _not_tensor_here(table: ScopeBindings, name: str, at: int, before: list[Binding]) -> bool:
    """``name`` at order ``at`` is in a branch where a type test says it is not a tensor, and not rebound there."""
    for tested, first, end in table.not_tensor:
        if tested == name and first <= at < end and not any(b.order >= first for b in before):
            return True
    return False


# The hyperparameters of an optimizer's parameter group: Python numbers (``params`` holds the tensors).
_HYPERPARAMETERS = frozenset({"lr", "initial_lr", "weight_decay", "momentum", "dampening", "eps", "betas", "alpha",
                              "lr_scale"})


def _hyperparameter(expr: cst.Subscript) -> bool:
    """``opt.param_groups[0]["lr"]``, ``group["weight_decay"]`` of ``for group in opt.param_groups``' subscript."""
    key = expr.slice[0].slice if len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index) else None
    if key is None or not isinstance(key.value, cst.SimpleString) or key.value.value[1:-1] not in _HYPERPARAMETERS:
        return False
    base = expr.value
    if isinstance(base, cst.Subscript):
        base = base.value
    return isinstance(base, cst.Attribute) and base.attr.value == "param_groups"


def _own_returns(function: cst.FunctionDef) -> list[cst.Return]:
    """The ``return`` statements of ``function`` itself (not of functions or classes nested in it)."""
    found: list[cst.Return] = []
    work = list(iter_children(function.body))
    while work:
        node = work.pop()
        if isinstance(node, cst.Return):
            found.append(node)
        elif not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) and \
                not isinstance(node, cst.BaseExpression):
            work.extend(iter_children(node))
    return found


def _self_derived(binding: Binding, name: str) -> bool:
    """``x = x.to(torch.int32)``, ``x = x.view(n)``: ``name`` rebound to a method call on itself."""
    value = binding.value
    return not binding.augmented and binding.element is None and isinstance(value, cst.Call) and \
        isinstance(value.func, cst.Attribute) and isinstance(value.func.value, cst.Name) and \
        value.func.value.value == name


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
