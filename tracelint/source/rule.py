"""The source-rule framework: a rule is a libcst-style visitor; all rules on a file share ONE traversal.

Writing a rule (one module in ``tracelint/source/rules/``, one ``rules/TLxxx-name.md``, and the kinds of site it
reports on in ``screen.RULE_SITES``: files without such a site are not parsed for it; a test checks every rule is
listed)::

    class DataLoaderWithoutWorkers(SourceRule):
        code = "TL201"
        triggers = ("DataLoader",)          # the file's raw text must contain one of these, else the rule is skipped

        def visit_Call(self, node: cst.Call) -> None:
            if self.ctx.qualified_name(node.func) == "torch.utils.data.DataLoader":
                self.report(node, "DataLoader without worker processes", fix=...)

        def leave_For(self, node: cst.For) -> None: ...

- A rule instance is made per file, with the file's :class:`~tracelint.source.context.FileContext` as ``self.ctx``.
- ``visit_<NodeType>(node)`` runs before the node's children, ``leave_<NodeType>(node)`` after them (the libcst
  node class names: Call, For, While, Attribute, Name, FunctionDef, ...). Return values are ignored: children are
  always visited. Whitespace, comments and punctuation nodes (commas, parentheses, operators' tokens) are not visited.
- During the traversal ``self.ctx.stack`` holds the ancestors of the current node and ``self.ctx.parent(node)``
  works for every node visited so far.
- ``self.report(node, message, fix=Fix(...), severity=None)`` records a finding at the node's position; the
  severity defaults to the catalog's. ``self.edit(node, text)`` builds an Edit replacing a node's text, ``self.replace(node, new_node)`` one
  replacing it with a rewritten node (see calls.py: ``with_keyword``, ``without_argument``). A Fix is
  ``Fix(title, (edit, ...), safe=True)``; unsafe fixes apply only with --unsafe-fixes.
- ``finish()`` is called once after the traversal (for rules that decide at the end of the file).
- A rule with empty ``triggers`` runs on every file that mentions torch.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar

import libcst as cst

from tracelint.engine import Edit, Finding, Fix, Rule, Severity
from tracelint.engine.catalog import catalog
from tracelint.source.context import FileContext, iter_children


class SourceRule(Rule):
    code: ClassVar[str] = ""
    triggers: ClassVar[tuple[str, ...]] = ()

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.findings: list[Finding] = []

    @classmethod
    def wanted(cls, text: str) -> bool:
        """Cheap prefilter: does the raw text give this rule anything to look at?"""
        return not cls.triggers or any(word in text for word in cls.triggers)

    @classmethod
    def default_severity(cls) -> Severity:
        doc = catalog().get(cls.code)
        return doc.severity if doc else Severity.WARNING

    def report(self, node: cst.CSTNode, message: str, *, fix: Fix | None = None,
               severity: Severity | None = None) -> None:
        self.findings.append(Finding(
            code=self.code,
            severity=severity if severity is not None else self.default_severity(),
            message=message,
            location=self.ctx.location(node),
            fix=fix,
        ))

    def edit(self, node: cst.CSTNode, text: str) -> Edit:
        """An Edit that replaces ``node``'s source text with ``text`` (positions of the code, not the cell)."""
        rng = self.ctx.position(node)
        return Edit(rng.start.line, rng.start.column, rng.end.line, rng.end.column, text)

    def replace(self, node: cst.CSTNode, new: cst.CSTNode) -> Edit:
        """An Edit that replaces ``node`` with the code of ``new`` (a changed copy of it; e.g. from calls.py)."""
        if isinstance(new, cst.BaseExpression) and (getattr(new, "lpar", None) or getattr(new, "rpar", None)):
            new = new.with_changes(lpar=(), rpar=())  # positions exclude a node's own parentheses
        return self.edit(node, self.ctx.code_for(new))

    def insert_after(self, node: cst.CSTNode, text: str) -> Edit:
        rng = self.ctx.position(node)
        return Edit(rng.end.line, rng.end.column, rng.end.line, rng.end.column, text)

    def finish(self) -> None:
        """Called once after the traversal of the file."""


def run_rules(ctx: FileContext, rules: Sequence[SourceRule]) -> list[Finding]:
    """One traversal of ``ctx.module`` dispatching visit_/leave_ methods to all ``rules``; their findings."""
    visitors: dict[str, list[Callable]] = {}
    leavers: dict[str, list[Callable]] = {}
    for rule in rules:
        for attr in dir(type(rule)):
            if attr.startswith("visit_"):
                visitors.setdefault(attr[6:], []).append(getattr(rule, attr))
            elif attr.startswith("leave_"):
                leavers.setdefault(attr[6:], []).append(getattr(rule, attr))
    stack = ctx.stack
    parents = ctx._parents
    # An explicit work list instead of recursion: generated code nests expressions thousands deep.
    work: list[tuple[cst.CSTNode, bool]] = [(ctx.module, False)]
    while work:
        node, leaving = work.pop()
        kind = type(node).__name__
        if leaving:
            stack.pop()
            for fn in leavers.get(kind, ()):
                fn(node)
            continue
        for fn in visitors.get(kind, ()):
            fn(node)
        stack.append(node)
        work.append((node, True))
        children = list(iter_children(node))
        for child in reversed(children):
            parents[child] = node
            work.append((child, False))
    findings: list[Finding] = []
    for rule in rules:
        rule.finish()
        findings.extend(rule.findings)
    return findings


def active_rules(rule_classes: Iterable[type[SourceRule]], text: str) -> list[type[SourceRule]]:
    """The rules whose triggers the raw text mentions."""
    return [cls for cls in rule_classes if cls.wanted(text)]


__all__ = ["FileContext", "SourceRule", "active_rules", "run_rules"]
