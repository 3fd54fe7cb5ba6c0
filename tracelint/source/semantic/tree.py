"""libcst nodes as every analysis of the source half reads them: dotted names, literal values, and the children that
carry something (layout and punctuation left out), walked through the nodes' fields."""
from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator

import libcst as cst


def dotted_name(expr: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(expr, cst.Attribute):
        parts.append(expr.attr.value)
        expr = expr.value
    if not isinstance(expr, cst.Name):
        return None
    parts.append(expr.value)
    return ".".join(reversed(parts))


UNSET = object()


def evaluated(expr: cst.Integer | cst.Float | cst.SimpleString):
    """libcst's ``evaluated_value`` (``ast.literal_eval`` of the token), or ``UNSET`` where that raises: a string
    holding a null byte, an integer of more than 4,300 digits (libcst parses files Python's parser rejects)."""
    try:
        with warnings.catch_warnings():  # literal_eval warns on stderr about "\d" and the like
            warnings.simplefilter("ignore")
            return expr.evaluated_value
    except (ValueError, SyntaxError, MemoryError, RecursionError, OverflowError):
        return UNSET


def callee_name(call: cst.Call) -> str | None:
    """The last name of what ``call`` calls: ``f`` for ``f(x)``, ``step`` for ``self.opt.step()``; else None."""
    func = call.func
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return None


def isinstance_test(test: cst.BaseExpression) -> tuple[cst.BaseExpression, list[cst.BaseExpression]] | None:
    """(the object, the class expressions) of ``isinstance(obj, C)`` or ``isinstance(obj, (A, B))``; None for any
    other expression."""
    if not isinstance(test, cst.Call) or callee_name(test) != "isinstance" or len(test.args) != 2:
        return None
    classes = test.args[1].value
    return test.args[0].value, [e.value for e in classes.elements] if isinstance(classes, cst.Tuple) else [classes]


# Node types never dispatched nor descended into: layout and punctuation carry nothing a rule judges.
SKIP_NODES = (
    cst.BaseParenthesizableWhitespace, cst.TrailingWhitespace, cst.EmptyLine, cst.Newline, cst.Comment,
    cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket, cst.LeftCurlyBrace,
    cst.RightCurlyBrace, cst.Comma, cst.Dot, cst.Semicolon, cst.Colon, cst.AssignEqual, cst.ImportStar,
    cst.Asynchronous,
)
_LAYOUT_FIELDS = ("whitespace", "leading_lines", "lines_after", "lpar", "rpar", "header", "footer", "lbracket",
                  "rbracket", "lbrace", "rbrace", "comma", "semicolon", "equal", "colon", "dot")
_child_fields: dict[type, tuple[str, ...]] = {}


def child_fields(cls: type) -> tuple[str, ...]:
    """The dataclass fields of a node type that may hold child nodes (layout fields dropped by name)."""
    names = _child_fields.get(cls)
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(cls) if not f.name.startswith(_LAYOUT_FIELDS))
        _child_fields[cls] = names
    return names


_visit_type: dict[type, bool] = {}


def is_visited_node(value: object) -> bool:
    """True for a node the traversal visits (a CSTNode that is not layout). Cached per type: isinstance against
    libcst's abstract base classes goes through ABCMeta and was the walk's largest cost."""
    cls = type(value)
    verdict = _visit_type.get(cls)
    if verdict is None:
        verdict = _visit_type[cls] = isinstance(value, cst.CSTNode) and not isinstance(value, SKIP_NODES)
    return verdict


def iter_children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    visited = _visit_type
    for name in child_fields(type(node)):
        value = getattr(node, name)
        cls = type(value)
        if cls is tuple or cls is list:
            for item in value:
                if visited.get(type(item)) or (visited.get(type(item)) is None and is_visited_node(item)):
                    yield item
        elif visited.get(cls) or (visited.get(cls) is None and is_visited_node(value)):
            yield value


def iter_descendants(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every node below ``node`` (not ``node`` itself), parents before children, in source order."""
    stack = [iter_children(node)]
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
            continue
        yield child
        stack.append(iter_children(child))
