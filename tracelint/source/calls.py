"""Helpers for judging and rewriting call arguments: find an argument by keyword or position, read literals,
resolve a ``**kwargs`` dict built in the same function, and add a keyword argument keeping the call's layout."""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import libcst as cst

from tracelint.source.context import FileContext, dotted_name, iter_descendants

_UNSET = object()


def evaluated(expr: cst.Integer | cst.Float | cst.SimpleString):
    """libcst's ``evaluated_value`` (``ast.literal_eval`` of the token), or ``_UNSET`` where that raises: a string
    holding a null byte, an integer of more than 4,300 digits (libcst parses files Python's parser rejects)."""
    try:
        with warnings.catch_warnings():  # literal_eval warns on stderr about "\d" and the like
            warnings.simplefilter("ignore")
            return expr.evaluated_value
    except (ValueError, SyntaxError, MemoryError, RecursionError, OverflowError):
        return _UNSET


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


def with_keyword(call: cst.Call, name: str, value_code: str) -> cst.Call:
    """``call`` with ``name=value`` appended, keeping a trailing comma and a one-argument-per-line layout."""
    new = cst.Arg(
        keyword=cst.Name(name), value=cst.parse_expression(value_code),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    args = list(call.args)
    if args and isinstance(args[-1].comma, cst.Comma):
        # The trailing comma (and the line break before ")") moves to the new last argument.
        previous = args[-2].comma if len(args) > 1 else None
        separator = previous.whitespace_after if isinstance(previous, cst.Comma) else cst.SimpleWhitespace(" ")
        new = new.with_changes(comma=args[-1].comma)
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=separator))
    elif args:
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*args, new])


def without_argument(call: cst.Call, arg: cst.Arg) -> cst.Call:
    """``call`` without ``arg`` (the comma before a removed last argument goes too)."""
    args = [a for a in call.args if a is not arg]
    if args and call.args[-1] is arg:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=args)


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
