"""Helpers for judging and rewriting call arguments: find an argument by keyword or position, read literals,
resolve a ``**kwargs`` dict built in the same function, and the fixes' edits of a call that keep its layout:
``set_keyword`` (add ``name=value`` or change the value given) and ``remove_argument``."""
from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import libcst as cst

from tracelint.engine import Edit
from tracelint.source.semantic.model import FileContext, dotted_name, iter_descendants
from tracelint.source.semantic.tree import UNSET as _UNSET
from tracelint.source.semantic.tree import evaluated


def literal(expr: cst.BaseExpression | None):
    """The Python value of a simple literal (int, float, True/False/None, string), else ``_UNSET``."""
    if isinstance(expr, cst.Integer | cst.Float | cst.SimpleString):
        return evaluated(expr)
    if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[expr.value]
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        value = literal(expr.expression)
        return -value if isinstance(value, int | float) and not isinstance(value, bool) else _UNSET
    return _UNSET


def is_literal(expr: cst.BaseExpression | None, *values) -> bool:
    """True when ``expr`` is a literal equal to one of ``values`` (``0`` does not match ``False``)."""
    value = literal(expr)
    return value is not _UNSET and any(type(value) is type(v) and value == v for v in values)


@dataclass(frozen=True, slots=True)
class Arguments:
    """The arguments of a call as far as they can be known from the source.

    ``known`` is False when a ``*args`` or an unresolvable ``**kwargs`` may supply any argument: then a missing
    argument is not evidence of anything.
    """

    call: cst.Call
    keywords: dict[str, cst.BaseExpression]
    positional: tuple[cst.BaseExpression, ...]
    star_args: bool
    known: bool

    def get(self, name: str, position: int | None = None) -> cst.BaseExpression | None:
        if name in self.keywords:
            return self.keywords[name]
        if position is not None and position < len(self.positional) and not self.star_args:
            return self.positional[position]
        return None

    def has(self, name: str, position: int | None = None) -> bool:
        return self.get(name, position) is not None


def call_arguments(ctx: FileContext, call: cst.Call) -> Arguments:
    keywords: dict[str, cst.BaseExpression] = {}
    positional: list[cst.BaseExpression] = []
    star_args = False
    known = True
    for arg in call.args:
        if arg.keyword is not None:
            keywords[arg.keyword.value] = arg.value
        elif arg.star == "*":
            star_args = True
            known = False
        elif arg.star == "**":
            resolved = kwargs_dict(ctx, arg.value, call)
            if resolved is None:
                known = False
            else:
                keywords.update(resolved)
        else:
            positional.append(arg.value)
    return Arguments(call, keywords, tuple(positional), star_args, known)


def _dict_literal(value: cst.BaseExpression) -> dict[str, cst.BaseExpression] | None:
    if isinstance(value, cst.Dict):
        out: dict[str, cst.BaseExpression] = {}
        for element in value.elements:
            if not isinstance(element, cst.DictElement):
                return None  # a ``**other`` inside the literal
            key = literal(element.key)
            if not isinstance(key, str):
                return None
            out[key] = element.value
        return out
    if isinstance(value, cst.Call) and dotted_name(value.func) == "dict":
        out = {}
        for arg in value.args:
            if arg.keyword is None:
                return None
            out[arg.keyword.value] = arg.value
        return out
    return None


def kwargs_dict(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode) -> dict[str, cst.BaseExpression] | None:
    """The keys of ``**expr`` when it is a dict literal, or a name bound once to a dict literal in the enclosing
    function (or module) and never changed afterwards; None when unknown."""
    direct = _dict_literal(expr)
    if direct is not None:
        return direct
    if not isinstance(expr, cst.Name):
        return None
    scope = next((a for a in ctx.ancestors(at) if isinstance(a, cst.FunctionDef)), ctx.module)
    values, mutated = _bindings_of(expr.value, scope)
    if mutated or len(values) != 1:
        return None
    return _dict_literal(values[0])


def _bindings_of(name: str, scope: cst.CSTNode) -> tuple[list[cst.BaseExpression], bool]:
    """The values assigned to ``name`` in ``scope`` (parameters and loop targets count, as unknown values), and
    whether the object it names is changed in place (``d[k] = v``, ``d |= ...``, ``d.update(...)``)."""
    values: list[cst.BaseExpression] = []
    mutated = False
    for node in iter_descendants(scope):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Name) and target.target.value == name:
                    values.append(node.value)
                elif isinstance(target.target, cst.Subscript) and dotted_name(target.target.value) == name:
                    mutated = True
        elif isinstance(node, cst.AnnAssign):
            if isinstance(node.target, cst.Name) and node.target.value == name and node.value is not None:
                values.append(node.value)
        elif isinstance(node, cst.AugAssign):
            mutated = mutated or dotted_name(node.target) == name
        elif isinstance(node, cst.Call):
            if isinstance(node.func, cst.Attribute) and dotted_name(node.func.value) == name:
                mutated = True  # kwargs.update(...), kwargs.setdefault(...), kwargs.pop(...)
        elif isinstance(node, cst.Param):
            if node.name.value == name:
                values.append(node.name)
        elif isinstance(node, cst.For | cst.CompFor):
            if name in _names(node.target):
                values.append(node.target)
    return values, mutated


def _names(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, cst.Tuple | cst.List):
        return set().union(*(_names(e.value) for e in target.elements)) if target.elements else set()
    return set()


# -- fixes that keep the layout ---------------------------------------------------------------------------------
# A fix edits only the text around the argument it adds, sets or removes; every other byte of the call stays as
# written: its indentation (inside an indented block too), line breaks (CRLF too), tabs, comments and commas.
# Printing a changed libcst node instead would lose the indentation of the enclosing block: libcst keeps a bracketed
# line's indentation relative to the block, and ``Module.code_for_node`` of one node knows no block.
_BREAK = re.compile(r"\r\n|\r|\n")  # Python's line breaks (as fix.apply_edits counts lines)
_LINE_STARTS: WeakKeyDictionary[FileContext, list[int]] = WeakKeyDictionary()  # per file: once, not per fix


class _Text:
    """``ctx.source`` and its offsets, converted to and from libcst's (line, column) positions."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.text = ctx.source
        starts = _LINE_STARTS.get(ctx)
        if starts is None:
            starts = _LINE_STARTS[ctx] = [0, *(m.end() for m in _BREAK.finditer(self.text))]
        self.starts = starts

    def start(self, node: cst.CSTNode) -> int:
        pos = self.ctx.position(node).start
        return self.starts[pos.line - 1] + pos.column

    def end(self, node: cst.CSTNode) -> int:
        pos = self.ctx.position(node).end
        return self.starts[pos.line - 1] + pos.column

    def line_start(self, offset: int) -> int:
        return self.starts[bisect_right(self.starts, offset) - 1]

    def begins_line(self, offset: int) -> bool:
        """Only whitespace precedes ``offset`` on its line."""
        return not self.text[self.line_start(offset):offset].strip()

    def brackets(self, call: cst.Call) -> tuple[int, int]:
        """The offsets of the call's ``(`` and ``)``."""
        close = self.end(call) - 1  # a call's position ends after its ")" (its own parentheses are not in it)
        # Between the callee and "(" there is at most the callee's own ")" and whitespace: the first "(" is the call's.
        return self.text.index("(", self.end(call.func), close), close

    def comma(self, start: int, stop: int) -> int | None:
        """The offset of the comma in ``text[start:stop]``, which holds only whitespace, comments and that comma."""
        i = start
        while i < stop:
            char = self.text[i]
            if char == ",":
                return i
            if char == "#":
                brk = _BREAK.search(self.text, i, stop)
                if brk is None:
                    return None
                i = brk.end()
            else:
                i += 1
        return None

    def newline(self, offset: int) -> str:
        """The line break at or after ``offset`` (else the file's first one, else \\n)."""
        brk = _BREAK.search(self.text, offset) or _BREAK.search(self.text)
        return brk.group() if brk else "\n"

    def edit(self, start: int, end: int, text: str) -> Edit:
        line, end_line = bisect_right(self.starts, start), bisect_right(self.starts, end)
        return Edit(line, start - self.starts[line - 1] + 1, end_line, end - self.starts[end_line - 1] + 1, text)


def set_keyword(ctx: FileContext, call: cst.Call, name: str, value_code: str, position: int | None = None) -> Edit:
    """The edit that makes ``call`` pass ``name=value_code``, written as a person would in that call's style.

    Where the call already gives ``name`` (by keyword, at ``position`` among the positional arguments, or in a
    ``**kwargs`` dict that ``call_arguments`` resolves), only that value's text is replaced. Otherwise the keyword
    goes after the last argument (after a ``**kwargs`` too), with the call's ``=`` spacing:

    - on that argument's line when the argument shares its line: ``f(a, b)`` -> ``f(a, b, name=v)``, and
      ``f(\\n    a, b,\\n)`` -> ``f(\\n    a, b, name=v,\\n)`` (the separator after the call's other commas);
    - on a line of its own when the last argument has one, with that argument's indentation and the line break
      of its line, after a comment on that line; a trailing comma stays the last thing before ``)``, and a call
      without one gets none: ``f(\\n    a,\\n    b  # c\\n)`` -> ``f(\\n    a,\\n    b,  # c\\n    name=v\\n)``,
      ``f(a,\\n  b)`` -> ``f(a,\\n  b,\\n  name=v)``.

    Everything else keeps its bytes; the edit spans at most the end of the last argument's line. A lone generator
    argument gets the parentheses Python then asks for.
    """
    current = call_arguments(ctx, call).get(name, position)
    src = _Text(ctx)
    if current is not None:
        return src.edit(src.start(current), src.end(current), value_code)
    keyword = f"{name}{_equals(call)}{value_code}"
    text = src.text
    if not call.args:
        opening, close = src.brackets(call)
        if "#" not in text[opening + 1:close]:
            return src.edit(opening + 1, close, keyword)  # f( ) and f(\n) become f(name=v)
        if not src.begins_line(close):  # f(  # comment\n): the comment stays, the keyword gets a line before ")"
            return src.edit(close, close, keyword)
        at = src.line_start(close)
        indent = text[at:close]
        return src.edit(at, at, f"{indent}{ctx.module.default_indent}{keyword}{src.newline(at)}")
    last = call.args[-1]
    start, end = src.start(last), src.end(last)
    close = src.end(call) - 1
    head, begin = "", end
    if len(call.args) == 1 and isinstance(last.value, cst.GeneratorExp) and not last.value.lpar:
        head, begin = f"({text[start:end]})", start  # f(x for x in y, k=v) does not parse
    if not src.begins_line(start):
        return src.edit(begin, end, f"{head},{_separator(call)}{keyword}")
    indent = text[src.line_start(start):start]
    comma = src.comma(end, close) if isinstance(last.comma, cst.Comma) else None
    after = end if comma is None else comma + 1
    brk = _BREAK.search(text, after, close)  # the end of the last argument's line, unless ")" is on it
    at = brk.start() if brk else after
    line = f"{src.newline(end)}{indent}{keyword}"
    if comma is not None:
        return src.edit(at, at, f"{line},")
    return src.edit(begin, at, f"{head},{text[end:at]}{line}")


def remove_argument(ctx: FileContext, call: cst.Call, arg: cst.Arg) -> Edit:
    """The edit that removes ``arg`` from ``call``, keeping the layout of what stays.

    An argument with a line (or lines) to itself goes with its lines, a comment on them included; one sharing a
    line goes with the comma and spaces that separate it from its neighbour. The call keeps its trailing-comma
    convention (``f(\\n    a,\\n    b\\n)`` -> ``f(\\n    a\\n)``), and a call left without arguments is ``f()``.
    """
    src = _Text(ctx)
    text = src.text
    args = list(call.args)
    i = next(n for n, a in enumerate(args) if a is arg)
    start, end = src.start(arg), src.end(arg)
    opening, close = src.brackets(call)
    stop = src.start(args[i + 1]) if i + 1 < len(args) else close
    comma = src.comma(end, stop) if isinstance(arg.comma, cst.Comma) else None
    after = end if comma is None else comma + 1
    brk = _BREAK.search(text, after, stop)
    previous = src.comma(src.end(args[i - 1]), start) if i > 0 else None
    if src.begins_line(start) and brk is not None:  # its own line(s)
        cut, keep, cut_end = src.line_start(start), "", brk.end()
        if i == len(args) - 1 and comma is None and previous is not None:  # no trailing comma: none left behind
            cut, keep = previous, text[previous + 1:cut]
    elif i + 1 < len(args):  # a later argument follows: this one and its comma (and spaces, on one line) go
        cut, keep, cut_end = start, "", after if brk else stop
    elif previous is not None:  # the last one: the comma before it goes
        cut, cut_end = previous, end
        between = text[previous + 1:start]
        keep = between if "#" in between else ""  # a comment after the previous argument stays
    else:
        cut, keep, cut_end = start, "", after
    if len(args) == 1 and not (text[opening + 1:cut] + keep + text[cut_end:close]).strip():
        return src.edit(opening + 1, close, "")  # nothing left but whitespace: f()
    return src.edit(cut, cut_end, keep)


def _equals(call: cst.Call) -> str:
    """The call's spelling of a keyword's ``=`` (``=`` unless its keywords are written ``name = value``)."""
    for arg in reversed(call.args):
        equal = arg.equal
        if isinstance(equal, cst.AssignEqual) and isinstance(equal.whitespace_before, cst.SimpleWhitespace) \
                and isinstance(equal.whitespace_after, cst.SimpleWhitespace):
            before, after = equal.whitespace_before.value, equal.whitespace_after.value
            if not (before + after).strip():  # no backslash continuation
                return f"{before}={after}"
    return "="


def _separator(call: cst.Call) -> str:
    """What follows a comma between two arguments on one line in this call (a space unless it writes ``f(a,b)``)."""
    for arg in reversed(call.args[:-1]):
        comma = arg.comma
        if isinstance(comma, cst.Comma) and isinstance(comma.whitespace_after, cst.SimpleWhitespace) \
                and not comma.whitespace_after.value.strip():
            return comma.whitespace_after.value
    return " "


def find_arg(call: cst.Call, name: str, position: int | None = None) -> cst.Arg | None:
    """The ``Arg`` node giving ``name`` (by keyword, or at ``position`` among the positional arguments)."""
    index = 0
    for arg in call.args:
        if arg.keyword is not None:
            if arg.keyword.value == name:
                return arg
        elif not arg.star:
            if index == position:
                return arg
            index += 1
    return None
