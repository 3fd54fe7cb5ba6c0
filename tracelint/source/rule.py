"""The source-rule framework: a rule is a libcst-style visitor; all rules on a file share ONE traversal.

Writing a rule takes one class in the module of its family in ``tracelint/source/rules/`` (``sync`` TL1xx,
``input`` TL2xx, ``memory`` TL3xx: the trace half's module names) and one ``rules/TLxxx-name.md``; the class is
discovered, and its name is the rule's name without dashes (``dataloader-without-workers``:
``DataLoaderWithoutWorkers``)::

    class DataLoaderWithoutWorkers(SourceRule):
        code = "TL201"
        triggers = ("DataLoader",)          # the file's raw text must contain one of these, else the rule is skipped

        def visit_Call(self, node: cst.Call) -> None:
            if self.ctx.qualified_name(node.func) == "torch.utils.data.DataLoader":
                self.report(node, "DataLoader without worker processes", fix=...)

        def leave_For(self, node: cst.For) -> None: ...

- A rule instance is made per file, with the file's :class:`~tracelint.source.semantic.model.FileContext`
  as ``self.ctx``.
- ``visit_<NodeType>(node)`` runs before the node's children, ``leave_<NodeType>(node)`` after them (the libcst
  node class names: Call, For, While, Attribute, Name, FunctionDef, ...). Return values are ignored: children are
  always visited. Whitespace, comments and punctuation nodes (commas, parentheses, operators' tokens) are not visited.
- During the traversal ``self.ctx.stack`` holds the ancestors of the current node and ``self.ctx.parent(node)``
  works for every node visited so far.
- ``self.report(node, message, fix=Fix(...), severity=None)`` records a finding at the node's position; the
  severity defaults to the catalog's. ``self.edit(node, text)`` builds an Edit replacing a node's text,
  ``self.replace(node, new_node)`` one replacing it with a rewritten node (printed alone: inside an indented
  block, its continuation lines lose the block's indentation). To add, set or remove a call's argument use
  calls.py's ``set_keyword(ctx, call, name, value)`` and ``remove_argument(ctx, call, arg)``: edits that keep
  the call's layout. A Fix is ``Fix(title, (edit, ...), safe=True)``; unsafe fixes apply only with
  --unsafe-fixes. A safe fix must turn each *Example* of the rule's doc into one of its *Use instead* examples
  (tests/source/test_catalog_fixes.py checks it).
- ``finish()`` is called once after the traversal (for rules that decide at the end of the file).
- A rule with empty ``triggers`` runs on every file that mentions torch.

Where a node runs and what a value is (semantic/steps.py, semantic/values.py; computed once per file, shared by all
rules):

- ``self.step_loop(node) -> HotLoop | None``: the per-step loop ``node`` runs in on every iteration (DataLoader
  iteration, ``while True``, ``range(max_steps)``, env steps, eval loops, ``training_step``) in a file that imports
  torch; None outside one, in an epoch loop, or under a periodic or rare guard (``if step % 100 == 0:``).
  ``HotLoop.description`` names the loop for messages ("the loop over `train_loader`"). Call it with the node
  being visited (its children have no parents yet).
- ``self.needs_host_value(node)``: the value is fed to an environment step (``env.step(action.item())``), so reading
  it on the host is not a waste; a host-device-sync rule reports ``node`` only when
  ``step_loop(node) is not None and not needs_host_value(node)``.
- ``self.is_tensor(expr)``: local code shows ``expr`` is a tensor that may be on the device (a model or loss
  output, a ``torch.*`` op, ``.to(device)``); ``self.may_be_tensor(expr)``: it is not known to be a host value
  (Python value, numpy array, CPU tensor, ``.item()``-ed). ``self.facts`` is the per-file object behind these
  (``kind``, ``value_of``, ``bindings``, ``loop_description``, ``imports_torch``).

The kinds of site a rule reports on go in its doc's front matter (``sites: item, host-copy``; the kinds are
``screen.SITE_KINDS``): a file without any of them is not parsed for the rule, and a test checks the screen never
holds back a file the rule reports on (extend ``screen.py`` with a new kind when the existing ones do not cover the
rule). A rule whose doc has no ``sites`` runs on every file that mentions torch.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar

import libcst as cst

from tracelint.engine import Edit, Finding, Fix, Rule, Severity
from tracelint.engine.catalog import catalog
from tracelint.source.semantic import steps as loops
from tracelint.source.semantic.callers import HotLoop
from tracelint.source.semantic.model import FileContext, iter_children
from tracelint.source.semantic.values import Kind


class SourceRule(Rule):
    code: ClassVar[str] = ""
    triggers: ClassVar[tuple[str, ...]] = ()
    # Runs in a file another file of the run passes a pinned DataLoader, whatever its text (ctx.pinned_parameters)
    follows_pinned_loaders: ClassVar[bool] = False

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
        # libcst counts columns from 0, an Edit from 1
        return Edit(rng.start.line, rng.start.column + 1, rng.end.line, rng.end.column + 1, text)

    def replace(self, node: cst.CSTNode, new: cst.CSTNode) -> Edit:
        """An Edit that replaces ``node`` with the code of ``new`` (a changed copy of it; e.g. from calls.py)."""
        if isinstance(new, cst.BaseExpression) and (getattr(new, "lpar", None) or getattr(new, "rpar", None)):
            new = new.with_changes(lpar=(), rpar=())  # positions exclude a node's own parentheses
        return self.edit(node, self.ctx.code_for(new))

    def insert_after(self, node: cst.CSTNode, text: str) -> Edit:
        rng = self.ctx.position(node)
        return Edit(rng.end.line, rng.end.column + 1, rng.end.line, rng.end.column + 1, text)

    def finish(self) -> None:
        """Called once after the traversal of the file."""

    # -- where a node runs, what a value is (see the module docstring) ------------------------------------------
    @property
    def facts(self) -> loops.Facts:
        return loops.facts(self.ctx)

    def step_loop(self, node: cst.CSTNode) -> HotLoop | None:
        """The per-step loop ``node`` runs in on every iteration, in a file that imports torch or whose functions
        other files of the run call every step (a helper given tensors need not import torch); else None."""
        facts = self.facts
        return facts.hot_loop(node) if facts.imports_torch() or self.ctx.entries else None

    def needs_host_value(self, node: cst.CSTNode) -> bool:
        """An environment step needs ``node``'s value on the host (``env.step(action.item())``)."""
        return self.facts.needs_host_value(node)

    def is_tensor(self, expr: cst.BaseExpression) -> bool:
        """Local code shows ``expr`` is a tensor that may live on the device."""
        return self.facts.kind(expr) is Kind.TENSOR

    def may_be_tensor(self, expr: cst.BaseExpression) -> bool:
        """``expr`` is not known to be a host value (a Python value, numpy array or CPU tensor)."""
        return self.facts.kind(expr) is not Kind.HOST


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
    parents = ctx.parents
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


__all__ = ["FileContext", "HotLoop", "SourceRule", "active_rules", "run_rules"]
