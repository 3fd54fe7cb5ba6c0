"""Constant and device data flow within a file (issue #29): what an integer size or a device argument was bound to.

``Flow(tree)`` answers two questions on Python's own ``ast`` (the screen's tree, or one parse of the file), so that
the screen and the rules share one answer:

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

libcst rules ask through ``FileContext.flow`` with their node's position (``node_at``). Calls in other files are not
followed: a value given by another file of the run is unknown here.
"""
from __future__ import annotations

import ast
from itertools import product

from tracelint.source.astnames import ast_dotted_name, children

MAX_DEPTH = 10       # bindings followed from a use to a literal
MAX_VALUES = 8       # the values a name may hold, at most (else unknown)
_DEVICE_PREFIXES = ("cuda", "mps", "xpu", "xla", "npu", "hpu")
_NOT_DEVICES = frozenset({"cpu", "meta"})
_ARITHMETIC = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.FloorDiv: lambda a, b: a // b if b else None, ast.Mod: lambda a, b: a % b if b else None}
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


class Flow:
    """See the module docstring. One walk of the tree when made; answers are memoized per node."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        # the function, lambda or module whose names a node sees (names, attributes and defs only; others: module)
        self.scopes: dict[ast.AST, ast.AST] = {}
        self.owner: dict[ast.AST, ast.ClassDef] = {}  # a method -> its class
        self.assigned: dict[ast.AST, dict[str, list[ast.expr | None]]] = {}  # scope -> name -> values (None: opaque)
        self.self_attrs: dict[ast.ClassDef, dict[str, list[ast.expr | None]]] = {}  # ``self.x = v`` in its methods
        self.fields: dict[ast.ClassDef, dict[str, ast.expr | None]] = {}  # class-level ``x: int = 768`` (dataclass)
        self.classes: dict[str, ast.ClassDef] = {}
        self.calls: dict[str, list[ast.Call]] = {}  # callee's last name -> calls
        self.options: dict[str, ast.expr | None] = {}  # argparse dest -> default
        self._at: dict[tuple[int, int, int, int], ast.expr] | None = None
        self._ints: dict[ast.AST, frozenset[int] | None] = {}
        self._devices: dict[ast.AST, bool | None] = {}
        self._walk()

    # -- the index -------------------------------------------------------------------------------------------------
    def _walk(self) -> None:
        # scope: where an assignment binds (a class body binds its fields); names: where a name is looked up
        work: list[tuple[ast.AST, ast.AST, ast.ClassDef | None, ast.AST]] = [(self.tree, self.tree, None, self.tree)]
        scopes = self.scopes
        while work:
            node, scope, cls, names = work.pop()
            kind = type(node)
            if kind is ast.Name or kind is ast.Attribute or kind is ast.FunctionDef or kind is ast.AsyncFunctionDef \
                    or kind is ast.Lambda:
                scopes[node] = names
            if kind is ast.Assign or kind is ast.AnnAssign or kind is ast.AugAssign:
                targets = node.targets if kind is ast.Assign else [node.target]
                value = None if kind is ast.AugAssign else node.value
                for target in targets:
                    self._bind(scope, target, value, cls)
                if kind is ast.AnnAssign and isinstance(scope, ast.ClassDef) and isinstance(node.target, ast.Name):
                    self.fields.setdefault(scope, {})[node.target.id] = node.value
                elif kind is ast.Assign and isinstance(scope, ast.ClassDef):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            self.fields.setdefault(scope, {})[target.id] = node.value
            elif kind is ast.NamedExpr:
                self._bind(scope, node.target, node.value, cls)
            elif kind is ast.For or kind is ast.AsyncFor or kind is ast.comprehension:
                self._bind(scope, node.target, None, cls)
            elif kind is ast.With or kind is ast.AsyncWith:
                for item in node.items:
                    if item.optional_vars is not None:
                        self._bind(scope, item.optional_vars, None, cls)
            elif kind is ast.Call:
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
                if name is not None:
                    self.calls.setdefault(name, []).append(node)
                    if name == "add_argument":
                        self._option(node)
            elif kind is ast.ClassDef and scope is self.tree:
                self.classes[node.name] = node
            if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                if isinstance(scope, ast.ClassDef):
                    self.owner[node] = scope
                work.extend((child, node, cls, node) for child in children(node))
            elif kind is ast.Lambda:
                work.extend((child, node, cls, node) for child in children(node))
            elif kind is ast.ClassDef:
                work.extend((child, node, node, names) for child in children(node))
            else:
                work.extend((child, scope, cls, names) for child in children(node))

    def _bind(self, scope: ast.AST, target: ast.expr, value: ast.expr | None, cls: ast.ClassDef | None) -> None:
        if isinstance(target, ast.Starred):
            self._bind(scope, target.value, None, cls)
        elif isinstance(target, ast.Name):
            self.assigned.setdefault(scope, {}).setdefault(target.id, []).append(value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            pairs = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
            for i, element in enumerate(target.elts):
                self._bind(scope, element, value.elts[i] if pairs else None, cls)
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self" \
                and cls is not None and isinstance(scope, _FUNCTIONS):
            self.self_attrs.setdefault(cls, {}).setdefault(target.attr, []).append(value)

    def _option(self, call: ast.Call) -> None:
        """``parser.add_argument("--device", default="cuda")``: the default of ``args.device``."""
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        dest = keywords.get("dest")
        if isinstance(dest, ast.Constant) and isinstance(dest.value, str):
            name = dest.value
        else:
            flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            longs = [f for f in flags if f.startswith("--")] or flags
            if not longs:
                return
            name = longs[0].lstrip("-").replace("-", "_")
        self.options[name] = keywords.get("default")

    # -- positions (libcst rules) ----------------------------------------------------------------------------------
    def node_at(self, start: tuple[int, int], end: tuple[int, int]) -> ast.expr | None:
        """The expression spanning (line, column) ``start`` to ``end`` (columns in characters from 0, as libcst
        reports them; a line with non-ASCII text before the node may not match: None)."""
        if self._at is None:
            self._at = {}
            for node in ast.walk(self.tree):
                if isinstance(node, ast.expr) and node.end_lineno is not None:
                    key = (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset or 0)
                    self._at.setdefault(key, node)
        return self._at.get((*start, *end))

    # -- what a name or attribute holds ----------------------------------------------------------------------------
    def _scope(self, node: ast.AST) -> ast.AST:
        """The function, lambda or module whose names ``node`` sees (for a def or lambda: the one around it)."""
        return self.scopes.get(node, self.tree)

    def _class_of(self, function: ast.AST) -> ast.ClassDef | None:
        return self.owner.get(function)

    def bound(self, expr: ast.expr, depth: int = 0) -> list[ast.expr | None] | None:
        """The expressions ``expr`` (a name or attribute) may hold (None in the list: bound opaquely); None when
        the file binds it nowhere it can see."""
        if depth > MAX_DEPTH:
            return None
        if isinstance(expr, ast.Name):
            scope = self._scope(expr)
            while True:
                found = self.assigned.get(scope, {}).get(expr.id)
                if found is not None:
                    return found
                if isinstance(scope, _FUNCTIONS):
                    param = self._parameter(scope, expr.id)
                    if param is not None:
                        return self._arguments(scope, param)
                if scope is self.tree:
                    return None
                scope = self._scope(scope)
        if isinstance(expr, ast.Attribute):
            receiver = expr.value
            if isinstance(receiver, ast.Name) and receiver.id == "self":
                function = self._scope(expr)
                cls = self._class_of(function) if isinstance(function, _FUNCTIONS) else None
                if cls is None:
                    return None
                found = self.self_attrs.get(cls, {}).get(expr.attr)
                if found is None and expr.attr in self.fields.get(cls, {}):
                    return [self.fields[cls][expr.attr]]
                return found
            holders = self.bound(receiver, depth + 1) if isinstance(receiver, (ast.Name, ast.Attribute)) else \
                [receiver] if isinstance(receiver, ast.Call) else None
            if not holders:
                return None
            out: list[ast.expr | None] = []
            for holder in holders:
                got = self._member(holder, expr.attr, depth + 1)
                if got is None:
                    return None
                out.extend(got)
            return out
        return None

    def _member(self, holder: ast.expr | None, attr: str, depth: int) -> list[ast.expr | None] | None:
        """What ``attr`` of the object ``holder`` evaluates to holds."""
        if isinstance(holder, (ast.Name, ast.Attribute)):
            inner = self.bound(holder, depth + 1)
            if not inner:
                return None
            out: list[ast.expr | None] = []
            for value in inner:
                got = self._member(value, attr, depth + 1)
                if got is None:
                    return None
                out.extend(got)
            return out
        if not isinstance(holder, ast.Call):
            return None
        func = holder.func
        if isinstance(func, ast.Attribute) and func.attr == "parse_args":
            return [self.options[attr]] if attr in self.options else None
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        cls = self.classes.get(name or "")
        if cls is None:
            return None
        for keyword in holder.keywords:
            if keyword.arg == attr:
                return [keyword.value]
        init = next((s for s in cls.body if isinstance(s, _FUNCTIONS) and s.name == "__init__"), None)
        order = [a.arg for a in init.args.args[1:]] if init is not None else list(self.fields.get(cls, {}))
        if attr in order and order.index(attr) < len(holder.args):
            value = holder.args[order.index(attr)]
            return None if any(isinstance(a, ast.Starred) for a in holder.args) else [value]
        if attr in self.fields.get(cls, {}):
            return [self.fields[cls][attr]]
        return self.self_attrs.get(cls, {}).get(attr)

    @staticmethod
    def _parameter(function: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> ast.arg | None:
        args = function.args
        return next((a for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.arg == name), None)

    def _arguments(self, function: ast.FunctionDef | ast.AsyncFunctionDef, param: ast.arg) -> list[ast.expr | None]:
        """The arguments the file's calls of ``function`` give ``param`` (its default where a call gives none)."""
        args = function.args
        positional = [*args.posonlyargs, *args.args]
        cls = self._class_of(function)
        method = cls is not None and not any(ast_dotted_name(d) == "staticmethod" for d in function.decorator_list)
        if method:
            positional = positional[1:]
            if param not in positional and param not in args.kwonlyargs:
                return [None]  # self
        defaults = dict(zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True))
        defaults.update((a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None)
        if cls is not None and function.name == "__init__":
            calls = [c for c in self.calls.get(cls.name, ()) if not isinstance(c.func, ast.Attribute)
                     or c.func.attr == cls.name]
        else:
            calls = [c for c in self.calls.get(function.name, ()) if isinstance(c.func, ast.Attribute) == method]
        out: list[ast.expr | None] = []
        for call in calls:
            if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
                out.append(None)
                continue
            given = next((k.value for k in call.keywords if k.arg == param.arg), None)
            if given is None and param in positional and positional.index(param) < len(call.args):
                given = call.args[positional.index(param)]
            out.append(given if given is not None else defaults.get(param))
        if not calls:
            out.append(defaults.get(param))
        return out

    # -- integers --------------------------------------------------------------------------------------------------
    def ints(self, expr: ast.expr | None, depth: int = 0) -> frozenset[int] | None:
        """The integers ``expr`` may hold (see the module docstring); None when unknown."""
        if expr is None or depth > MAX_DEPTH:
            return None
        if expr in self._ints:
            return self._ints[expr]
        self._ints[expr] = None  # a cycle stops here
        found = self._ints[expr] = self._compute_ints(expr, depth)
        return found

    def _compute_ints(self, expr: ast.expr, depth: int) -> frozenset[int] | None:
        if isinstance(expr, ast.Constant):
            value = expr.value
            return frozenset({value}) if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
            inner = self.ints(expr.operand, depth + 1)
            return frozenset(-v for v in inner) if inner is not None else None
        if isinstance(expr, ast.BinOp) and type(expr.op) in _ARITHMETIC:
            left, right = self.ints(expr.left, depth + 1), self.ints(expr.right, depth + 1)
            if left is None or right is None:
                return None
            apply = _ARITHMETIC[type(expr.op)]
            values = {apply(a, b) for a, b in product(left, right)}
            return frozenset(values) if None not in values and len(values) <= MAX_VALUES else None
        if isinstance(expr, (ast.Name, ast.Attribute)):
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
    def device(self, expr: ast.expr | None, depth: int = 0) -> bool | None:
        """True: an accelerator; False: the CPU or ``meta``; None: unknown (see the module docstring)."""
        if expr is None or depth > MAX_DEPTH:
            return None
        if expr in self._devices:
            return self._devices[expr]
        self._devices[expr] = None
        found = self._devices[expr] = self._compute_device(expr, depth)
        return found

    def _compute_device(self, expr: ast.expr, depth: int) -> bool | None:
        if isinstance(expr, ast.Constant):
            return _device_text(expr.value) if isinstance(expr.value, str) else \
                True if isinstance(expr.value, int) and not isinstance(expr.value, bool) else None
        if isinstance(expr, ast.JoinedStr):
            head = expr.values[0] if expr.values else None
            return _device_text(head.value) if isinstance(head, ast.Constant) and isinstance(head.value, str) \
                and head.value.split(":")[0] else None
        if isinstance(expr, ast.IfExp):
            branches = (self.device(expr.body, depth + 1), self.device(expr.orelse, depth + 1))
            return True if True in branches else False if branches == (False, False) else None
        if isinstance(expr, ast.Call):
            name = ast_dotted_name(expr.func) or ""
            if name.endswith("current_device"):
                return True
            if name.rsplit(".", 1)[-1] == "device" and name != "device":  # torch.device(...)
                first = expr.args[0] if expr.args else next((k.value for k in expr.keywords if k.arg == "type"), None)
                return self.device(first, depth + 1) is not False if first is not None else None
            return None
        if isinstance(expr, (ast.Name, ast.Attribute)):
            bound = self.bound(expr, depth + 1)
            if bound:
                verdicts = [self.device(v, depth + 1) for v in bound]
                if True in verdicts:
                    return True
                if verdicts and all(v is False for v in verdicts):
                    return False
            if isinstance(expr, ast.Attribute) and expr.attr == "device":
                return True  # x.device, accelerator.device, model.device: where the work already is
            return None
        return None


def _device_text(text: str) -> bool | None:
    kind = text.split(":")[0].strip().lower()
    if kind in _NOT_DEVICES:
        return False
    return True if kind.startswith(_DEVICE_PREFIXES) else None
