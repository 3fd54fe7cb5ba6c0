"""Constant and device data flow within a file (issue #29): what an integer size or a device argument was bound to.

``Flow(module)`` answers two questions on the file's libcst tree (the one ``FileContext.module`` holds: rules ask
with their own nodes, ``FileContext.ints`` / ``device`` / ``bound``):

- ``ints(expr)``: the integers ``expr`` may hold, or None when any way it gets its value is unknown. It follows
  literals and ``+ - * // %`` arithmetic; names through their assignments in the function, else the module
  (``hidden = 4 * dim``, ``VOCAB = 50257``); parameters through the calls of their function in the file and their
  defaults (``Block(1024)`` gives ``d`` in ``Block.__init__(self, d)`` the value 1024); ``self.x`` through the
  class's assignments to it; and ``obj.x`` through what ``obj`` holds: a call of a class of the file (``GPTConfig(
  n_embd=1024)``: the keyword, the positional argument of its ``__init__`` or dataclass field, else the field's
  default or ``__init__``'s assignment), or ``parser.parse_args()`` (the option's ``default=``).
- ``device(expr)``: True when ``expr`` names an accelerator (``"cuda"``, ``"cuda:1"``, ``f"cuda:{rank}"``, an
  integer index, ``torch.device(...)`` other than the CPU, ``x.device``, ``accelerator.device``,
  ``torch.cuda.current_device()``, ``args.device`` whose option defaults to one, a name bound to any of these,
  either branch of ``a if c else b``), False when it names the CPU or ``meta`` (every way it gets its value), None
  when nothing in the file binds it (then callers fall back on its words: ``loader.batches.device_words``).

Calls in other files are not followed: a value given by another file of the run is unknown here.
"""
from __future__ import annotations

from itertools import product

import libcst as cst

from tracelint.source.semantic.tree import dotted_name, evaluated, iter_children

MAX_DEPTH = 10       # bindings followed from a use to a literal
MAX_VALUES = 8       # the values a name may hold, at most (else unknown)
_DEVICE_PREFIXES = ("cuda", "mps", "xpu", "xla", "npu", "hpu")
_NOT_DEVICES = frozenset({"cpu", "meta"})
_ARITHMETIC = {cst.Add: lambda a, b: a + b, cst.Subtract: lambda a, b: a - b, cst.Multiply: lambda a, b: a * b,
               cst.FloorDivide: lambda a, b: a // b if b else None, cst.Modulo: lambda a, b: a % b if b else None}
_STRINGS = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


def positional(call: cst.Call) -> list[cst.BaseExpression | None]:
    """The positional arguments of ``call`` in order (None for a ``*args``: its values are unknown)."""
    return [a.value if not a.star else None for a in call.args if a.keyword is None and a.star != "**"]


def keywords(call: cst.Call) -> dict[str, cst.BaseExpression]:
    """The keyword arguments of ``call`` by name (``**kwargs`` left out)."""
    return {a.keyword.value: a.value for a in call.args if a.keyword is not None}


def _unpacks(call: cst.Call) -> bool:
    """Whether ``call`` passes ``*args`` or ``**kwargs`` (which argument lands where is then unknown)."""
    return any(a.star for a in call.args)


def _text(expr: cst.BaseExpression | None) -> str | None:
    """The value of a string literal without placeholders (``"cuda"``, ``"cu" "da"``), else None."""
    if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
        value = evaluated(expr)
        return value if isinstance(value, str) else None
    return None


class Flow:
    """See the module docstring. One walk of the tree when made; answers are memoized per node."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        # the function, lambda or module whose names a node sees (names, attributes and defs only; others: module)
        self.scopes: dict[cst.CSTNode, cst.CSTNode] = {}
        self.owner: dict[cst.FunctionDef, cst.ClassDef] = {}  # a method -> its class
        # scope -> name -> values (None: opaque)
        self.assigned: dict[cst.CSTNode, dict[str, list[cst.BaseExpression | None]]] = {}
        self.self_attrs: dict[cst.ClassDef, dict[str, list[cst.BaseExpression | None]]] = {}  # ``self.x = v``
        self.fields: dict[cst.ClassDef, dict[str, cst.BaseExpression | None]] = {}  # ``x: int = 768`` (dataclass)
        self.classes: dict[str, cst.ClassDef] = {}
        self.calls: dict[str, list[cst.Call]] = {}  # callee's last name -> calls
        self.options: dict[str, cst.BaseExpression | None] = {}  # argparse dest -> default
        self._ints: dict[cst.CSTNode, frozenset[int] | None] = {}
        self._devices: dict[cst.CSTNode, bool | None] = {}
        self._walk()

    # -- the index -------------------------------------------------------------------------------------------------
    def _walk(self) -> None:
        # scope: where an assignment binds (a class body binds its fields); names: where a name is looked up. A work
        # list, not recursion: generated code nests thousands deep.
        module = self.module
        work: list[tuple[cst.CSTNode, cst.CSTNode, cst.ClassDef | None, cst.CSTNode]] = [(module, module, None,
                                                                                          module)]
        scopes = self.scopes
        while work:
            node, scope, cls, names = work.pop()
            kind = type(node)
            if kind is cst.Name or kind is cst.Attribute or kind is cst.FunctionDef or kind is cst.Lambda:
                scopes[node] = names
            if kind is cst.Assign:
                for target in node.targets:
                    self._bind(scope, target.target, node.value, cls)
                if isinstance(scope, cst.ClassDef):
                    for target in node.targets:
                        if isinstance(target.target, cst.Name):
                            self.fields.setdefault(scope, {})[target.target.value] = node.value
            elif kind is cst.AnnAssign:
                self._bind(scope, node.target, node.value, cls)
                if isinstance(scope, cst.ClassDef) and isinstance(node.target, cst.Name):
                    self.fields.setdefault(scope, {})[node.target.value] = node.value
            elif kind is cst.AugAssign:
                self._bind(scope, node.target, None, cls)
            elif kind is cst.NamedExpr:
                self._bind(scope, node.target, node.value, cls)
            elif kind is cst.For or kind is cst.CompFor:
                self._bind(scope, node.target, None, cls)
            elif kind is cst.With:
                for item in node.items:
                    if item.asname is not None:
                        self._bind(scope, item.asname.name, None, cls)
            elif kind is cst.Call:
                func = node.func
                name = func.attr.value if isinstance(func, cst.Attribute) else \
                    func.value if isinstance(func, cst.Name) else None
                if name is not None:
                    self.calls.setdefault(name, []).append(node)
                    if name == "add_argument":
                        self._option(node)
            elif kind is cst.ClassDef and scope is module:
                self.classes[node.name.value] = node
            if kind is cst.FunctionDef:
                if isinstance(scope, cst.ClassDef):
                    self.owner[node] = scope
                work.extend((child, node, cls, node) for child in iter_children(node))
            elif kind is cst.Lambda:
                work.extend((child, node, cls, node) for child in iter_children(node))
            elif kind is cst.ClassDef:
                work.extend((child, node, node, names) for child in iter_children(node))
            else:
                work.extend((child, scope, cls, names) for child in iter_children(node))

    def _bind(self, scope: cst.CSTNode, target: cst.BaseExpression, value: cst.BaseExpression | None,
              cls: cst.ClassDef | None) -> None:
        if isinstance(target, cst.StarredElement):
            self._bind(scope, target.value, None, cls)
        elif isinstance(target, cst.Name):
            self.assigned.setdefault(scope, {}).setdefault(target.value, []).append(value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            pairs = isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(target.elements)
            for i, element in enumerate(target.elements):
                given = value.elements[i] if pairs else None  # type: ignore[union-attr]
                self._bind(scope, element if isinstance(element, cst.StarredElement) else element.value,
                           given.value if isinstance(given, cst.Element) else None, cls)
        elif isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and \
                target.value.value == "self" and cls is not None and isinstance(scope, cst.FunctionDef):
            self.self_attrs.setdefault(cls, {}).setdefault(target.attr.value, []).append(value)

    def _option(self, call: cst.Call) -> None:
        """``parser.add_argument("--device", default="cuda")``: the default of ``args.device``."""
        named = keywords(call)
        dest = _text(named.get("dest"))
        if dest is not None:
            name = dest
        else:
            flags = [text for a in positional(call) if (text := _text(a)) is not None]
            longs = [f for f in flags if f.startswith("--")] or flags
            if not longs:
                return
            name = longs[0].lstrip("-").replace("-", "_")
        self.options[name] = named.get("default")

    # -- what a name or attribute holds ----------------------------------------------------------------------------
    def _scope(self, node: cst.CSTNode) -> cst.CSTNode:
        """The function, lambda or module whose names ``node`` sees (for a def or lambda: the one around it)."""
        return self.scopes.get(node, self.module)

    def bound(self, expr: cst.BaseExpression, depth: int = 0) -> list[cst.BaseExpression | None] | None:
        """The expressions ``expr`` (a name or attribute) may hold (None in the list: bound opaquely); None when
        the file binds it nowhere it can see."""
        if depth > MAX_DEPTH:
            return None
        if isinstance(expr, cst.Name):
            scope = self._scope(expr)
            while True:
                found = self.assigned.get(scope, {}).get(expr.value)
                if found is not None:
                    return found
                if isinstance(scope, cst.FunctionDef):
                    param = _parameter(scope, expr.value)
                    if param is not None:
                        return self._arguments(scope, param)
                if scope is self.module:
                    return None
                scope = self._scope(scope)
        if isinstance(expr, cst.Attribute):
            receiver = expr.value
            if isinstance(receiver, cst.Name) and receiver.value == "self":
                function = self._scope(expr)
                cls = self.owner.get(function) if isinstance(function, cst.FunctionDef) else None
                if cls is None:
                    return None
                attr = expr.attr.value
                found = self.self_attrs.get(cls, {}).get(attr)
                if found is None and attr in self.fields.get(cls, {}):
                    return [self.fields[cls][attr]]
                return found
            holders = self.bound(receiver, depth + 1) if isinstance(receiver, (cst.Name, cst.Attribute)) else \
                [receiver] if isinstance(receiver, cst.Call) else None
            if not holders:
                return None
            out: list[cst.BaseExpression | None] = []
            for holder in holders:
                got = self._member(holder, expr.attr.value, depth + 1)
                if got is None:
                    return None
                out.extend(got)
            return out
        return None

    def _member(self, holder: cst.BaseExpression | None, attr: str,
                depth: int) -> list[cst.BaseExpression | None] | None:
        """What ``attr`` of the object ``holder`` evaluates to holds."""
        if isinstance(holder, (cst.Name, cst.Attribute)):
            inner = self.bound(holder, depth + 1)
            if not inner:
                return None
            out: list[cst.BaseExpression | None] = []
            for value in inner:
                got = self._member(value, attr, depth + 1)
                if got is None:
                    return None
                out.extend(got)
            return out
        if not isinstance(holder, cst.Call):
            return None
        func = holder.func
        if isinstance(func, cst.Attribute) and func.attr.value == "parse_args":
            return [self.options[attr]] if attr in self.options else None
        name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) \
            else None
        cls = self.classes.get(name or "")
        if cls is None:
            return None
        named = keywords(holder)
        if attr in named:
            return [named[attr]]
        body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
        init = next((s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None)
        order = [p.name.value for p in init.params.params[1:]] if init is not None else \
            list(self.fields.get(cls, {}))
        given = positional(holder)
        if attr in order and order.index(attr) < len(given):
            return None if any(a.star == "*" for a in holder.args) else [given[order.index(attr)]]
        if attr in self.fields.get(cls, {}):
            return [self.fields[cls][attr]]
        return self.self_attrs.get(cls, {}).get(attr)

    def _arguments(self, function: cst.FunctionDef, param: cst.Param) -> list[cst.BaseExpression | None]:
        """The arguments the file's calls of ``function`` give ``param`` (its default where a call gives none)."""
        params = function.params
        ordered = [*params.posonly_params, *params.params]
        cls = self.owner.get(function)
        method = cls is not None and not any(dotted_name(d.decorator) == "staticmethod" for d in function.decorators)
        if method:
            ordered = ordered[1:]
            if param not in ordered and param not in params.kwonly_params:
                return [None]  # self
        default = param.default
        name = param.name.value
        if cls is not None and function.name.value == "__init__":
            calls = [c for c in self.calls.get(cls.name.value, ()) if not isinstance(c.func, cst.Attribute)
                     or c.func.attr.value == cls.name.value]
        else:
            calls = [c for c in self.calls.get(function.name.value, ())
                     if isinstance(c.func, cst.Attribute) == method]
        out: list[cst.BaseExpression | None] = []
        for call in calls:
            if _unpacks(call):
                out.append(None)
                continue
            given = keywords(call).get(name)
            if given is None and param in ordered:
                values = positional(call)
                if ordered.index(param) < len(values):
                    given = values[ordered.index(param)]
            out.append(given if given is not None else default)
        if not calls:
            out.append(default)
        return out

    # -- integers --------------------------------------------------------------------------------------------------
    def ints(self, expr: cst.BaseExpression | None, depth: int = 0) -> frozenset[int] | None:
        """The integers ``expr`` may hold (see the module docstring); None when unknown."""
        if expr is None or depth > MAX_DEPTH:
            return None
        if expr in self._ints:
            return self._ints[expr]
        self._ints[expr] = None  # a cycle stops here
        found = self._ints[expr] = self._compute_ints(expr, depth)
        return found

    def _compute_ints(self, expr: cst.BaseExpression, depth: int) -> frozenset[int] | None:
        if isinstance(expr, cst.Integer):
            value = evaluated(expr)
            return frozenset({value}) if isinstance(value, int) else None
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
            inner = self.ints(expr.expression, depth + 1)
            return frozenset(-v for v in inner) if inner is not None else None
        if isinstance(expr, cst.BinaryOperation) and type(expr.operator) in _ARITHMETIC:
            left, right = self.ints(expr.left, depth + 1), self.ints(expr.right, depth + 1)
            if left is None or right is None:
                return None
            apply = _ARITHMETIC[type(expr.operator)]
            values = {apply(a, b) for a, b in product(left, right)}
            return frozenset(values) if None not in values and len(values) <= MAX_VALUES else None
        if isinstance(expr, (cst.Name, cst.Attribute)):
            bound = self.bound(expr, depth + 1)
            if not bound:
                return None
            values: set[int] = set()
            for value in bound:
                got = self.ints(value, depth + 1)
                if got is None:
                    return None
                values |= got
            return frozenset(values) if len(values) <= MAX_VALUES else None
        return None

    # -- devices ---------------------------------------------------------------------------------------------------
    def device(self, expr: cst.BaseExpression | None, depth: int = 0) -> bool | None:
        """True: an accelerator; False: the CPU or ``meta``; None: unknown (see the module docstring)."""
        if expr is None or depth > MAX_DEPTH:
            return None
        if expr in self._devices:
            return self._devices[expr]
        self._devices[expr] = None
        found = self._devices[expr] = self._compute_device(expr, depth)
        return found

    def _compute_device(self, expr: cst.BaseExpression, depth: int) -> bool | None:
        if isinstance(expr, cst.Integer):
            return True  # a device index
        if isinstance(expr, _STRINGS):
            if _formatted(expr):  # f"cuda:{rank}": the text before the first placeholder
                head = _leading_text(expr)
                return _device_text(head) if head is not None and head.split(":")[0] else None
            text = _text(expr)
            return _device_text(text) if text is not None else None
        if isinstance(expr, cst.IfExp):
            branches = (self.device(expr.body, depth + 1), self.device(expr.orelse, depth + 1))
            return True if True in branches else False if branches == (False, False) else None
        if isinstance(expr, cst.Call):
            name = dotted_name(expr.func) or ""
            if name.endswith("current_device"):
                return True
            if name.rsplit(".", 1)[-1] == "device" and name != "device":  # torch.device(...)
                given = positional(expr)
                if given:
                    first = given[0]
                elif "type" in (named := keywords(expr)):
                    first = named["type"]
                else:
                    return None
                return self.device(first, depth + 1) is not False
            return None
        if isinstance(expr, (cst.Name, cst.Attribute)):
            bound = self.bound(expr, depth + 1)
            if bound:
                verdicts = [self.device(v, depth + 1) for v in bound]
                if True in verdicts:
                    return True
                if verdicts and all(v is False for v in verdicts):
                    return False
            if isinstance(expr, cst.Attribute) and expr.attr.value == "device":
                return True  # x.device, accelerator.device, model.device: where the work already is
            return None
        return None


def _parameter(function: cst.FunctionDef, name: str) -> cst.Param | None:
    params = function.params
    return next((p for p in (*params.posonly_params, *params.params, *params.kwonly_params)
                 if p.name.value == name), None)


def _formatted(expr: cst.BaseExpression) -> bool:
    """An f-string, or a concatenation holding one (whose value is known only at run time)."""
    if isinstance(expr, cst.ConcatenatedString):
        return _formatted(expr.left) or _formatted(expr.right)
    return isinstance(expr, cst.FormattedString)


def _leading_text(expr: cst.BaseExpression) -> str | None:
    """The text of an f-string (or of a concatenation holding one) before its first placeholder; None when it
    starts with one."""
    parts: list[cst.BaseExpression] = [expr]
    text = ""
    while parts:
        part = parts.pop(0)
        if isinstance(part, cst.ConcatenatedString):
            parts[:0] = [part.left, part.right]
        elif isinstance(part, cst.SimpleString):
            value = _text(part)
            if value is None:
                return None
            text += value
        elif isinstance(part, cst.FormattedString):
            for piece in part.parts:
                if not isinstance(piece, cst.FormattedStringText):
                    return text or None
                text += piece.value.replace("{{", "{").replace("}}", "}")
        else:
            return None
    return text or None


def _device_text(text: str) -> bool | None:
    kind = text.split(":")[0].strip().lower()
    if kind in _NOT_DEVICES:
        return False
    return True if kind.startswith(_DEVICE_PREFIXES) else None
