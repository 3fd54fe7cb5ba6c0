"""Device-side rewrites: a measurable variant for a sync finding that has no fix of its own.

``tracelint --fix`` only rewrites what it can rewrite safely everywhere (TL101's ``total += loss.item()`` in its
simple form). ``tracelint verify`` never writes the user's files, so it may measure an unsafe rewrite: one that
keeps the value on the device and reads it once per block (the harness's read interval, see deferred.py), which is
what "log every N steps" or "accumulate on the device" gives in the real fix. The rewritten script calls the
builtin ``_tracelint_verify`` the harness installs; no line moves.

Shapes, by the statement the sync is in (TL101 ``.item()``; TL103 ``float(t)`` in the first three):

- ``losses.append(loss.item())``: ``losses.append(_tracelint_verify.lazy(loss))``, a device scalar that behaves
  like the number (deferred.py);
- ``total += loss.item()`` (where ``--fix`` has no fix: a read in a guarded log line, several bindings, ...):
  ``total += _tracelint_verify.lazy(loss)``, summed on the device;
- ``value = loss.item()``, ``logs = {"loss": loss.item()}``, ``metrics["loss"] = loss.item()``: the same
  ``lazy(...)`` in place of the read;
- a logging statement of the loop, ``print(f"... {loss.item():.4f}")``, ``log.info("%f", loss.item())``,
  ``wandb.log({"loss": loss.item()})``, ``pbar.set_postfix(...)``, ``meter.update(loss.item(), n)`` (any
  expression statement that is a call, but ``.step()`` and ``.backward()``), and any TL102-TL105 sync in one:
  the statement runs later (``_tracelint_verify.defer(...)``), its ``.item()`` receivers evaluated now.

For the first three every other read of the variable is followed (libcst's scope analysis, across functions for
a module-level variable): a read after the loop or under an ``if`` inside it becomes
``_tracelint_verify.host(name)`` (the values are read there: the logging interval), arithmetic with it stays on the
device, a logging statement that uses it every step is deferred as above, and any other use every step (a
comparison, an argument of a call that is no logging statement, a ``return``) means no rewrite is built: the
rewrite would only move the sync there. Neither is one built for a value that decides control flow every step
(``if loss.item() > best``), leaves the function (``return loss.item()``) or is a TL106 boolean mask (its shape
depends on the data). ``NotBuilt`` says why, and the report shows the finding as ``not-measured`` with it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider, ScopeProvider

from tracelint.engine import Finding

RUNTIME = "_tracelint_verify"
VALUES = "__tracelint_values"
TRAINING_CALLS = frozenset({"step", "backward", "zero_grad"})  # never deferred: they are the training itself
COLLECTION_CALLS = frozenset({"append", "extend", "clear", "insert"})  # calls on a list that do not read it
ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.Power)
NO_REWRITE = {
    "TL106": "no device-side rewrite for a boolean mask or nonzero(): the result's shape depends on the data",
}


class NotBuilt(Exception):
    """No rewrite could be built for the finding; the message says why (one line for the report)."""


@dataclass(frozen=True, slots=True)
class Rewrite:
    text: str
    title: str


@dataclass(slots=True)
class _Op:
    """Replace the text between two offsets; ``inner`` ops apply inside it first (a deferred statement)."""

    start: int
    end: int
    text: str | None = None  # None: a deferral, built from the span's text and its inner ops
    line: int = 0
    receivers: tuple[str, ...] = ()


class _Source:
    """One script parsed once, with the metadata the rewrites need."""

    def __init__(self, text: str) -> None:
        self.text = text
        try:
            self.wrapper = MetadataWrapper(cst.parse_module(text))
        except cst.ParserSyntaxError as exc:
            raise NotBuilt(f"the script does not parse ({str(exc).splitlines()[0]})") from None
        self.module = self.wrapper.module
        self.positions = self.wrapper.resolve(PositionProvider)
        self.parents = self.wrapper.resolve(ParentNodeProvider)
        self.scopes = self.wrapper.resolve(ScopeProvider)
        self.starts = [0]
        for match in re.finditer(r"\r\n|\r|\n", text):
            self.starts.append(match.end())

    def offset(self, line: int, column: int) -> int:
        return self.starts[line - 1] + column if line - 1 < len(self.starts) else len(self.text)

    def span(self, node: cst.CSTNode) -> tuple[int, int]:
        pos = self.positions[node]
        return self.offset(pos.start.line, pos.start.column), self.offset(pos.end.line, pos.end.column)

    def line(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def code(self, node: cst.CSTNode) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode):
        node = self.parent(node)
        while node is not None:
            yield node
            node = self.parent(node)

    def node_at(self, line: int, column: int, end_line: int | None, end_column: int | None) -> cst.CSTNode | None:
        """The outermost expression spanning exactly the finding's range (else the smallest node that starts
        there)."""
        exact, starting = [], []
        for node, pos in self.positions.items():
            if (pos.start.line, pos.start.column) != (line, column):
                continue
            starting.append(node)
            if isinstance(node, cst.BaseExpression) and \
                    (end_line is None or (pos.end.line, pos.end.column) == (end_line, end_column)):
                exact.append(node)
        if exact:
            return min(exact, key=lambda n: sum(1 for _ in self.ancestors(n)))
        return min(starting, key=lambda n: len(self.code(n))) if starting else None


def _short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _call_name(call: cst.Call) -> str:
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else ""


def _item_receiver(node: cst.CSTNode) -> cst.BaseExpression | None:
    """``X`` of a ``X.item()`` call."""
    if isinstance(node, cst.Call) and not node.args and isinstance(node.func, cst.Attribute) \
            and node.func.attr.value == "item":
        return node.func.value
    return None


def _float_receiver(node: cst.CSTNode) -> cst.BaseExpression | None:
    """``X`` of a ``float(X)`` call (TL103)."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "float" \
            and len(node.args) == 1 and node.args[0].keyword is None and not node.args[0].star:
        return node.args[0].value
    return None


class _Nodes(cst.CSTVisitor):
    """Every node of a subtree, in order."""

    def __init__(self) -> None:
        self.found: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.found.append(node)
        return True


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    visitor = _Nodes()
    node.visit(visitor)
    return visitor.found


class _Builder:
    """Builds the rewrite of one finding (or several, one after the other, for the "all fixes" variant)."""

    def __init__(self, source: _Source, filename: str) -> None:
        self.src = source
        self.filename = filename
        self.ops: list[_Op] = []
        self.deferred: dict[cst.CSTNode, _Op] = {}

    # --- the site ---------------------------------------------------------------------------------------------

    def build(self, finding: Finding) -> str:
        """Plan the ops for ``finding``; the title of the rewrite (NotBuilt when there is none)."""
        if finding.code in NO_REWRITE:
            raise NotBuilt(NO_REWRITE[finding.code])
        loc = finding.source
        if loc is None or loc.column is None:
            raise NotBuilt("the finding has no source position")
        site = self.src.node_at(loc.line, loc.column - 1, loc.end_line,  # libcst's columns are 0-based
                                loc.end_column - 1 if loc.end_column is not None else None)
        if site is None:
            raise NotBuilt("the finding's position does not match the code")
        statement = self._statement(site)
        receiver = _item_receiver(site)
        if receiver is None and finding.code == "TL103":
            receiver = _float_receiver(site)
        if self._deferrable(statement) and not self._appends(statement):
            self._defer(statement)
            return f"log later: line {self.src.line(statement)} runs deferred, its values read once per block"
        if receiver is None:
            raise NotBuilt(self._why_not(statement, site))
        return self._lazy_value(site, receiver, statement)

    def _statement(self, node: cst.CSTNode) -> cst.CSTNode:
        for ancestor in self.src.ancestors(node):
            if isinstance(ancestor, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
                return ancestor
        raise NotBuilt("the finding is not inside a statement")

    def _why_not(self, statement: cst.CSTNode, site: cst.CSTNode) -> str:
        line = self.src.line(statement)
        if isinstance(statement, (cst.If, cst.While)):
            return f"the value decides control flow every step (line {line}): no device-side rewrite is built"
        if isinstance(statement, cst.Return):
            return f"the value is returned to the caller (line {line}): verify does not follow it there"
        if _item_receiver(site) is None and _float_receiver(site) is None:
            return (f"no device-side rewrite for `{_short(self.src.code(site))}` outside a logging statement "
                    f"(line {line})")
        return (f"`{_short(self.src.code(site))}` is used right away at line {line}; a device-side rewrite is "
                "built only for a logging statement, an append, a `+=` or an assignment")

    # --- deferral of a logging statement ------------------------------------------------------------------------

    def _deferrable(self, statement: cst.CSTNode) -> bool:
        if not (isinstance(statement, cst.Expr) and isinstance(statement.value, cst.Call)):
            return False
        if _call_name(statement.value) in TRAINING_CALLS:
            return False
        for node in _walk(statement):
            if isinstance(node, (cst.NamedExpr, cst.Yield, cst.Await)):
                return False
            if isinstance(node, cst.Name) and node.value in ("super", "locals", "globals", "vars"):
                return False
        return True

    def _appends(self, statement: cst.CSTNode) -> bool:
        """``NAME.append(...)``: handled as a list of device values, not deferred (later reads see the items)."""
        call = statement.value if isinstance(statement, cst.Expr) else None
        return (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
                and call.func.attr.value == "append" and isinstance(call.func.value, cst.Name))

    def _defer(self, statement: cst.CSTNode) -> None:
        if statement in self.deferred:
            return
        start, end = self.src.span(statement)
        op = _Op(start, end, None, self.src.line(statement))
        bound = {n.value for node in _walk(statement) if isinstance(node, (cst.CompFor, cst.Lambda))
                 for n in _walk(node.target if isinstance(node, cst.CompFor) else node.params)
                 if isinstance(n, cst.Name)}
        receivers = []
        for node in _walk(statement):
            receiver = _item_receiver(node)
            if receiver is None or {n.value for n in _walk(receiver) if isinstance(n, cst.Name)} & bound:
                continue  # a receiver bound inside the statement (a comprehension) is read when it runs
            if any(self.src.span(node)[0] >= o.start and self.src.span(node)[1] <= o.end and o.text is not None
                   for o in self.ops):
                continue
            s, e = self.src.span(node)
            self.ops.append(_Op(s, e, f"{VALUES}[{len(receivers)}]"))
            receivers.append(self.src.code(receiver))
        op.receivers = tuple(receivers)
        self.deferred[statement] = op
        self.ops.append(op)

    # --- a value kept on the device -----------------------------------------------------------------------------

    def _lazy_value(self, site: cst.CSTNode, receiver: cst.BaseExpression, statement: cst.CSTNode) -> str:
        if isinstance(statement, (cst.If, cst.While, cst.For, cst.Return)) or \
                not isinstance(statement, (cst.Expr, cst.Assign, cst.AugAssign, cst.AnnAssign)):
            raise NotBuilt(self._why_not(statement, site))
        name, kind = self._variable(statement, site)
        self._flows_into(site, statement)
        start, end = self.src.span(site)
        self.ops.append(_Op(start, end, f"{RUNTIME}.lazy({self.src.code(receiver)})"))
        self._follow_reads(name, statement)
        value = _short(self.src.code(receiver), 24)
        return {
            "append": f"append `{value}` on the device; read `{name.value}` where it is used",
            "accumulate": f"sum `{value}` on the device; read `{name.value}` where it is used",
        }.get(kind, f"keep `{value}` on the device; read `{name.value}` where it is used")

    def _variable(self, statement: cst.CSTNode, site: cst.CSTNode) -> tuple[cst.Name, str]:
        """The variable the value goes into, and how: append | accumulate | assign."""
        line = self.src.line(statement)
        if isinstance(statement, cst.Expr):
            call = statement.value
            if self._appends(statement) and self._is_argument(site, call):
                return call.func.value, "append"
            if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == \
                    "append":
                raise NotBuilt(f"appends to `{_short(self.src.code(call.func.value))}` (line {line}), whose reads "
                               "verify does not follow")
            raise NotBuilt(self._why_not(statement, site))
        if isinstance(statement, cst.AugAssign):
            target, kind = statement.target, "accumulate"
            if not isinstance(statement.operator, (cst.AddAssign, cst.SubtractAssign)):
                raise NotBuilt(f"`{_short(self.src.code(statement))}` (line {line}) is not a sum")
        elif isinstance(statement, cst.Assign):
            if len(statement.targets) != 1:
                raise NotBuilt(f"several targets at line {line}")
            target, kind = statement.targets[0].target, "assign"
        else:
            target, kind = statement.target, "assign"
        if isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
            target = target.value  # metrics["loss"] = loss.item(): the dict is the variable
        if not isinstance(target, cst.Name):
            raise NotBuilt(f"the value goes into `{_short(self.src.code(target))}` (line {line}), whose reads verify "
                           "does not follow")
        return target, kind

    def _flows_into(self, site: cst.CSTNode, statement: cst.CSTNode) -> None:
        """The value goes into the variable as it is, or through arithmetic and containers: nothing on the way
        (a call, a comparison, an index) would need the number itself."""
        child = site
        for ancestor in self.src.ancestors(site):
            if ancestor is statement:
                return
            transparent = (
                isinstance(ancestor, cst.BinaryOperation) and isinstance(ancestor.operator, ARITHMETIC)
                or isinstance(ancestor, cst.UnaryOperation) and isinstance(ancestor.operator, cst.Minus)
                or isinstance(ancestor, (cst.Dict, cst.List, cst.Tuple, cst.Element, cst.AssignTarget))
                or isinstance(ancestor, cst.DictElement) and child is ancestor.value
                or isinstance(ancestor, cst.Arg) and self._appends(statement)
                or isinstance(ancestor, cst.Call) and self._appends(statement) and ancestor is statement.value
            )
            if not transparent:
                if isinstance(ancestor, cst.Arg):
                    ancestor = self.src.parent(ancestor)
                raise NotBuilt(f"`{_short(self.src.code(site))}` is used right away at line "
                               f"{self.src.line(statement)} (in `{_short(self.src.code(ancestor))}`); a "
                               "device-side rewrite is built only where the value is logged, appended, summed or "
                               "stored")
            child = ancestor

    def _is_argument(self, site: cst.CSTNode, call: cst.Call) -> bool:
        return any(a is call for a in self.src.ancestors(site))

    # --- the other reads of the variable ------------------------------------------------------------------------

    def _accesses(self, name: cst.Name) -> list[cst.Name]:
        scope = self.src.scopes.get(name)
        if scope is None:
            raise NotBuilt(f"no scope for `{name.value}`")
        assignments = [a for a in scope[name.value] if getattr(a, "node", None) is not None]
        if not assignments:
            raise NotBuilt(f"`{name.value}` is never assigned in this file")
        found = {id(r.node): r.node for a in assignments for r in a.references if isinstance(r.node, cst.Name)}
        return sorted(found.values(), key=lambda n: self.src.span(n))

    def _hot_region(self, statement: cst.CSTNode) -> cst.CSTNode | None:
        """The loop the statement runs in every step (its nearest For/While in the same function), else its
        function (called every step: the finding names the call chain), else None (module level)."""
        for ancestor in self.src.ancestors(statement):
            if isinstance(ancestor, (cst.For, cst.While)):
                return ancestor.body
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return ancestor.body if isinstance(ancestor, cst.FunctionDef) else None
        return None

    def _per_step(self, node: cst.CSTNode, region: cst.CSTNode | None) -> bool:
        """``node`` runs every time the region runs: inside it, under no ``if`` body (``elif``/``else`` included)
        and in no ``except`` handler (a ``try`` body, its ``else`` and ``finally``, a ``with`` or an inner loop
        run every step)."""
        if region is None:
            return False
        child = node
        for ancestor in self.src.ancestors(node):
            if ancestor is region:
                return True
            if isinstance(ancestor, cst.If) and child is not ancestor.test:
                return False
            if isinstance(ancestor, (cst.ExceptHandler, cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return False
            child = ancestor
        return False

    def _follow_reads(self, name: cst.Name, statement: cst.CSTNode) -> None:
        region = self._hot_region(statement)
        inside = {id(n) for n in _walk(statement)}
        for access in self._accesses(name):
            if id(access) in inside:
                continue  # the rewritten statement's own target
            parent = self.src.parent(access)
            if isinstance(parent, cst.AugAssign) and parent.target is access:
                continue  # total += ...: stays on the device
            if isinstance(parent, cst.Attribute) and parent.value is access and \
                    parent.attr.value in COLLECTION_CALLS and isinstance(self.src.parent(parent), cst.Call):
                continue  # losses.append(...), losses.clear(): no read of the values
            if isinstance(parent, (cst.Del, cst.Global, cst.Nonlocal)):
                continue
            if self._per_step(access, region):
                self._per_step_read(access, name)
            else:
                self._wrap(access)

    def _per_step_read(self, access: cst.Name, name: cst.Name) -> None:
        parent = self.src.parent(access)
        if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, ARITHMETIC) or \
                isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Minus) or \
                isinstance(parent, cst.AugAssign) and parent.value is access:
            return  # arithmetic with a device value stays on the device
        statement = self._statement(access)
        if self._deferrable(statement) and not self._appends(statement):
            self._defer(statement)
            self._wrap(access)
            return
        raise NotBuilt(f"`{name.value}` is used every step at line {self.src.line(access)} "
                       f"(`{_short(self.src.code(statement))}`): the rewrite would only move the sync there")

    def _wrap(self, access: cst.Name) -> None:
        start, end = self.src.span(access)
        if any(o.start <= start and end <= o.end and o.text is not None for o in self.ops):
            return
        self.ops.append(_Op(start, end, f"{RUNTIME}.host({access.value})"))

    # --- the text ------------------------------------------------------------------------------------------------

    def apply(self) -> str:
        """The script with every planned op applied (a deferral's inner ops inside its statement text)."""
        deferrals = sorted((o for o in self.ops if o.text is None), key=lambda o: o.start)
        plain = [o for o in self.ops if o.text is not None]
        outer: list[tuple[int, int, str]] = []
        for op in plain:
            if not any(d.start <= op.start and op.end <= d.end for d in deferrals):
                outer.append((op.start, op.end, op.text))
        for d in deferrals:
            inner = sorted((o for o in plain if d.start <= o.start and o.end <= d.end), key=lambda o: -o.start)
            body = self.src.text[d.start:d.end]
            for o in inner:
                body = body[: o.start - d.start] + o.text + body[o.end - d.start:]
            values = "".join(f"{r}, " for r in d.receivers)
            outer.append((d.start, d.end, f"{RUNTIME}.defer({body!r}, {self.filename!r}, {d.line}, globals(), "
                                          f"locals(), ({values}))"))
        text = self.src.text
        previous = len(text) + 1
        for start, end, new in sorted(outer, key=lambda t: (-t[0], -t[1])):
            if end > previous:
                raise NotBuilt("the rewrite's edits overlap")
            text = text[:start] + new + text[end:]
            previous = start
        return text


def rewrite(text: str, finding: Finding, filename: str) -> Rewrite:
    """The script ``text`` rewritten so that ``finding``'s sync is read on the device's schedule; NotBuilt when no
    such rewrite exists (the reason is its message). ``filename`` names the script in deferred tracebacks."""
    builder = _Builder(_Source(text), filename)
    title = builder.build(finding)
    new = builder.apply()
    try:
        cst.parse_module(new)
    except cst.ParserSyntaxError:  # a shape the ops do not handle: no variant rather than a broken one
        raise NotBuilt("the rewritten script does not parse") from None
    return Rewrite(new, title)
