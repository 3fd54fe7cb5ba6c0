"""Names in Python's own ``ast`` (the screen and the run-level scans use it before any libcst parse)."""
from __future__ import annotations

import ast


def ast_dotted_name(expr: ast.expr) -> str | None:
    """``a.b.c`` for an ``ast`` name or attribute chain, else None (context.dotted_name does the same for libcst)."""
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.id)
    return ".".join(reversed(parts))


# Fields that never hold what the walks look at: expression contexts (Load/Store/Del) and operators (Add, Eq...),
# nodes ``ast.iter_child_nodes`` yields all the same (a third of a typical tree).
_SKIPPED = frozenset({"ctx", "op", "ops", "type_comment"})
_FIELDS: dict[type, tuple[str, ...]] = {}
_LEAVES: dict[type, int] = {}


def skipped_depth(node: ast.AST) -> int:
    """1 when ``children`` leaves out a node below ``node`` (its context or operator), else 0: the depth of the tree
    is the same as with ``ast.iter_child_nodes``."""
    kind = type(node)
    found = _LEAVES.get(kind)
    if found is None:
        found = _LEAVES[kind] = int(any(f in _SKIPPED and f != "type_comment" for f in kind._fields))
    if found and type(node) is ast.Compare:
        return int(bool(node.ops))
    return found


def children(node: ast.AST) -> list[ast.AST]:
    """``list(ast.iter_child_nodes(node))`` without expression contexts and operators (see ``_SKIPPED``)."""
    kind = type(node)
    fields = _FIELDS.get(kind)
    if fields is None:
        fields = _FIELDS[kind] = tuple(f for f in kind._fields if f not in _SKIPPED)
    found: list[ast.AST] = []
    for name in fields:
        value = getattr(node, name, None)
        if isinstance(value, list):
            found.extend(item for item in value if isinstance(item, ast.AST))
        elif isinstance(value, ast.AST):
            found.append(value)
    return found
