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
