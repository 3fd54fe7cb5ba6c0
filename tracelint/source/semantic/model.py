"""What a source rule knows about the file it checks: text, parsed module, positions, parents and imports.

API for rule authors (one ``FileContext`` per file, shared by every rule on that file)::

    ctx.path                  the path as the user gave it (str), used in findings
    ctx.source / ctx.lines    the (code-cell) text and its lines (no line endings)
    ctx.module                the libcst Module
    ctx.position(node)        libcst CodeRange (1-based lines, 0-based columns); computed lazily, once per file
    ctx.location(node)        the engine SourceLocation of a node (notebook cell + line within the cell)
    ctx.parent(node)          the parent node (None for the Module); valid for nodes already visited
    ctx.ancestors(node)       parent, grandparent, ... up to the Module
    ctx.entries               {"f" or "C.m": callers.Entry}: functions other files of the run call every step
    ctx.device_from_run       a file of the run with device evidence calls this file's functions
    ctx.argument_kinds        {"f" or "C.m": calls' arguments}: the kinds other files' per-step calls pass its functions
    ctx.graph_collates        names of the run's functions that batch graphs (a collate_fn defined elsewhere)
    ctx.program_precision     in a run of several files: the precision settings (precision_settings.TF32, ...) of
                              the programs the file is part of (rules/precision_settings.py); None outside a run,
                              and in a plain run, where ``ctx.defer_precision`` is set: rules that depend on them
                              add their code to ``ctx.pending`` and the run settles them
                              (precision_settings.standing_pending)
    ctx.ints(expr) / ctx.device(expr)   constant and device data flow (flow.py): the integers ``expr`` may hold
                              (None: unknown), and whether it names an accelerator (True), the CPU (False) or
                              nothing the file binds (None)
    ctx.stack                 during a traversal: the ancestors of the node being visited (outermost first)
    ctx.qualified_name(expr)  "torch.utils.data.DataLoader" for ``DL``/``tud.DataLoader``/..., resolved through
                              the file's imports and simple aliases (``DL = torch.utils.data.DataLoader``);
                              "builtins.print" for an unshadowed builtin; None for names the file defines itself
                              (a local ``class DataLoader`` is not torch's) and for anything it cannot resolve
    ctx.imports               the file's import map {bound name: qualified name}
    ctx.local_names           names the file binds by def/class/assignment/parameter (never torch's)
    ctx.code_for(node)        the source text of a node
    ctx.mentions(word)        True when the raw text contains ``word`` (cheap prefilter inside a rule)

    iter_children(node) / iter_descendants(node)   the non-layout child / descendant nodes in order; several
                              times faster than ``node.visit(SomeCSTVisitor())``, which rebuilds every node

The import map is built from statements only (no expression walk): imports anywhere in the file count, as do
module-level and function-level ``def``/``class`` and assignments. It deliberately ignores scoping subtleties; it is
meant to be cheap (libcst's QualifiedNameProvider is precise but made TorchFix ~10x slower than a bare parse).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property

import libcst as cst
from libcst.metadata import CodePosition, CodeRange, MetadataWrapper, PositionProvider

from tracelint.engine import SourceLocation
from tracelint.source.semantic.names import Names

# The node helpers live in tree.py (flow.py reads them too); rules may import them from here.
from tracelint.source.semantic.tree import SKIP_NODES as SKIP_NODES
from tracelint.source.semantic.tree import callee_name as callee_name
from tracelint.source.semantic.tree import dotted_name as dotted_name
from tracelint.source.semantic.tree import evaluated
from tracelint.source.semantic.tree import isinstance_test as isinstance_test
from tracelint.source.semantic.tree import iter_children as iter_children
from tracelint.source.semantic.tree import iter_descendants as iter_descendants


def _module_name(expr: cst.BaseExpression | None) -> str:
    return dotted_name(expr) or "" if expr is not None else ""


class _NamesReader:
    """Reads one file's statements into ``names.Names`` (a statement-only walk: no expression is visited)."""

    def __init__(self, module: cst.Module) -> None:
        self.names = Names()
        self._walk(module.body)
        self.names.finish()

    def _walk(self, body) -> None:
        for stmt in body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    self._small(small)
            elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                self.names.define(stmt.name.value)
                if isinstance(stmt, cst.FunctionDef):
                    self._params(stmt.params)
                self._walk(self._body(stmt.body))
            else:
                self._compound(stmt)

    def _compound(self, stmt) -> None:
        if isinstance(stmt, (cst.For,)):
            self._target(stmt.target)
        if isinstance(stmt, cst.With):
            for item in stmt.items:
                if item.asname is not None:
                    self._target(item.asname.name)
        for attr in ("body", "orelse", "finalbody"):
            part = getattr(stmt, attr, None)
            if part is not None:
                self._walk(self._body(part))
        for handler in getattr(stmt, "handlers", ()):
            if handler.name is not None:
                self._target(handler.name.name)
            self._walk(self._body(handler.body))

    @staticmethod
    def _body(part) -> tuple:
        # IndentedBlock / SimpleStatementSuite / Else / Finally / If (elif) all end in .body
        while not isinstance(part, (tuple, list)):
            if isinstance(part, cst.If):  # elif chain
                return (part,)
            part = part.body
        return tuple(part)

    def _params(self, params: cst.Parameters) -> None:
        for p in (*params.posonly_params, *params.params, *params.kwonly_params):
            self.names.define(p.name.value)
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                self.names.define(star.name.value)

    def _small(self, small) -> None:
        if isinstance(small, cst.Import):
            for alias in small.names:
                renamed = alias.asname is not None and isinstance(alias.asname.name, cst.Name)
                self.names.import_module(dotted_name(alias.name) or "", alias.asname.name.value if renamed else None)
        elif isinstance(small, cst.ImportFrom):
            if isinstance(small.names, cst.ImportStar):
                return
            for alias in small.names:
                renamed = alias.asname is not None and isinstance(alias.asname.name, cst.Name)
                self.names.import_from(_module_name(small.module), len(small.relative), dotted_name(alias.name) or "",
                                       alias.asname.name.value if renamed else None)
        elif isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
            for target in targets:
                if isinstance(target, cst.Name) and isinstance(small, cst.Assign):
                    self.names.assign(target.value, dotted_name(small.value))
                else:
                    self._target(target)

    def _target(self, target) -> None:
        if isinstance(target, cst.Name):
            self.names.assign(target.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                self._target(el.value)
        elif isinstance(target, cst.StarredElement):
            self._target(target.value)


try:  # libcst's codegen state (not exported): positions by our own state, else by PositionProvider
    from libcst._nodes.internal import CodegenState as _CodegenState
except ImportError:  # pragma: no cover - another libcst's layout
    _CodegenState = None  # type: ignore[assignment,misc]
_NEWLINE = re.compile(r"\r\n?|\n")  # libcst's own (position_provider.NEWLINE_RE)


if _CodegenState is not None:
    class _Positions(_CodegenState):  # type: ignore[misc,valid-type]
        """libcst's PositionProvider, as a codegen pass that records (start line, start column, end line, end
        column) tuples: the same numbers, in a third of the time (the provider splits every token with a regular
        expression and makes two objects per node; a CodeRange is made here only for the nodes asked for).
        ``record_syntactic_position`` is the provider's: a node whose position leaves out its own whitespace."""

        def __init__(self, module: cst.Module) -> None:
            super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
            self.line, self.column = 1, 0
            self.starts: list[tuple[int, int]] = []
            self.computed: dict[cst.CSTNode, tuple[int, int, int, int]] = {}

        def add_indent_tokens(self) -> None:
            for token in self.indent_tokens:
                self.add_token(token)

        def add_token(self, value: str) -> None:
            self.tokens.append(value)  # Module's codegen asks whether any was added
            if "\n" in value or "\r" in value:
                segments = _NEWLINE.split(value)
                self.line += len(segments) - 1
                self.column = len(segments[-1])
            else:
                self.column += len(value)

        def before_codegen(self, node: cst.CSTNode) -> None:
            self.starts.append((self.line, self.column))

        def after_codegen(self, node: cst.CSTNode) -> None:
            start = self.starts.pop()
            if node not in self.computed:  # (a syntactic position recorded inside it stands)
                self.computed[node] = (*start, self.line, self.column)

        @contextmanager
        def record_syntactic_position(self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None,
                                      end_node: cst.CSTNode | None = None) -> Iterator[None]:
            start = (self.line, self.column)
            try:
                yield
            finally:
                end = (self.line, self.column)
                computed = self.computed
                self.computed[node] = (*(computed[start_node][:2] if start_node is not None else start),
                                       *(computed[end_node][2:] if end_node is not None else end))


def _positions(module: cst.Module) -> dict:
    """{node: (start line, start column, end line, end column) or CodeRange} for every node of ``module``."""
    if _CodegenState is not None:
        try:
            state = _Positions(module)
            module._codegen(state)
            return state.computed
        except (AttributeError, TypeError):  # another libcst's internals
            pass
    # Through MetadataWrapper.resolve the provider also walks the whole tree once more for the batchable providers
    # there are none of (a quarter of the time on a file with 17,000 findings): run it directly where it can be.
    provider = PositionProvider()
    try:
        provider._gen_impl(module)
        return provider._computed
    except AttributeError:  # another libcst's internals: the public way
        return dict(MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider))


# id(tree) -> (tree, positions): the positions of the last trees analysed in this process (a tree analysed in several
# rounds of a run: lint._parse keeps it); the tree is held, so its id is not reused while it is here.
_POSITIONS: dict[int, tuple[cst.Module, dict]] = {}


class FileContext:
    """One parsed file, shared by all rules that check it (see the module docstring for the API)."""

    def __init__(self, path: str, source: str, module: cst.Module, *,
                 cell_lines: tuple[tuple[int, int], ...] | None = None, entries: dict | None = None,
                 device_from_run: bool = False, graph_collates: frozenset[str] = frozenset(),
                 program_precision: frozenset[str] | None = None, defer_precision: bool = False) -> None:
        self.path = path
        # Functions of this file that per-step loops of other files of the run call (callers.py: {"f": Entry}).
        self.entries = entries or {}
        # A file of the run with device evidence calls this file's functions (values.Values.device_evidence).
        self.device_from_run = device_from_run
        # Names of functions of other files of the run that batch graphs in a collate (loader.collates.graph_collates).
        self.graph_collates = graph_collates
        # The precision settings of the programs this file is part of (precision_settings.program_precision); None:
        # one file. In a run whose programs' settings are settled after the analysis
        # (precision_settings.standing_pending): the rules whose findings stand only if the programs agree
        # (``pending``).
        self.program_precision = program_precision
        # {"f" or "C.m": positions or keywords}: parameters another file of the run passes a pinned DataLoader
        self.pinned_parameters: dict[str, frozenset[int | str]] = {}
        # imported functions that step an optimizer in another file of the run (runcalls.stepping_calls)
        self.stepping_targets: frozenset[str] = frozenset()
        # {"f" or "C.m": (arguments of one call, ...)}: what other files' per-step calls pass this file's functions
        # (runcalls.argument_kinds), for the kinds of their parameters (values.Values._parameter_kind)
        self.argument_kinds: dict[str, tuple[tuple[tuple[int | str, str], ...], ...]] = {}
        self.defer_precision = defer_precision
        self.pending: set[str] = set()
        self.source = source
        self.lines = source.splitlines()
        self.module = module
        # For a notebook: entry i is (cell number, line within the cell) of line i+1 of ``source``.
        self.cell_lines = cell_lines
        self.stack: list[cst.CSTNode] = []
        # node -> parent, for every node a walk of the file has reached (rule.run_rules, callers.CallIndex): the
        # traversal that visits a node records its children, so ``parent`` works for the node being visited
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self._positions = None
        self._memo: dict[str, object] = {}

    @cached_property
    def flow(self):
        """The file's constant and device data flow (flow.Flow on ``module``), made when a rule first asks."""
        from tracelint.source.semantic.flow import Flow

        return Flow(self.module)

    def ints(self, expr: cst.BaseExpression) -> frozenset[int] | None:
        """The integers ``expr`` may hold (flow.Flow.ints), None when unknown."""
        if isinstance(expr, cst.Integer):  # a literal written in digits only (``1_024``, ``0x400``: unknown)
            value = evaluated(expr) if expr.value.isdigit() else None
            return frozenset({value}) if isinstance(value, int) else None
        return self.flow.ints(expr)

    def bound(self, expr: cst.BaseExpression) -> list | None:
        """What a name or attribute (``self.metric``) may hold, as expressions of ``module`` (flow.Flow.bound)."""
        return self.flow.bound(expr)

    def device(self, expr: cst.BaseExpression) -> bool | None:
        """Whether ``expr`` names an accelerator (flow.Flow.device): True, False (the CPU), None (unknown)."""
        return self.flow.device(expr)

    def memo(self, key: str, compute):
        """``compute(self)`` once per file: facts several rules share (loops.facts, the loader facts of TL2xx)."""
        if key not in self._memo:
            self._memo[key] = compute(self)
        return self._memo[key]

    # -- text -----------------------------------------------------------------------------------------------
    def mentions(self, word: str) -> bool:
        return word in self.source

    def code_for(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    # -- positions --------------------------------------------------------------------------------------------
    def position(self, node: cst.CSTNode) -> CodeRange:
        if self._positions is None:
            known = _POSITIONS.get(id(self.module))
            if known is not None and known[0] is self.module:  # the same tree analysed again (lint._parse keeps it)
                self._positions = known[1]
            else:
                # Positions cost a codegen pass over the whole file: only files that report anything pay for it.
                self._positions = _positions(self.module)
                if len(_POSITIONS) >= 64:
                    _POSITIONS.pop(next(iter(_POSITIONS)))
                _POSITIONS[id(self.module)] = (self.module, self._positions)
        found = self._positions[node]
        if type(found) is tuple:
            return CodeRange(CodePosition(found[0], found[1]), CodePosition(found[2], found[3]))
        return found

    def location(self, node: cst.CSTNode) -> SourceLocation:
        rng = self.position(node)
        line, end_line, cell = rng.start.line, rng.end.line, None
        if self.cell_lines:
            cell, line = self.cell_lines[min(rng.start.line, len(self.cell_lines)) - 1]
            end_cell, end_line = self.cell_lines[min(rng.end.line, len(self.cell_lines)) - 1]
            if end_cell != cell:
                end_line = line
        # libcst counts columns from 0; a SourceLocation from 1, as editors and every report do.
        return SourceLocation(self.path, line, rng.start.column + 1, end_line, rng.end.column + 1, cell=cell)

    # -- tree -------------------------------------------------------------------------------------------------
    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        parent = self.parents.get(node)
        while parent is not None:
            yield parent
            parent = self.parents.get(parent)

    # -- names ------------------------------------------------------------------------------------------------
    @cached_property
    def names(self) -> Names:
        """The file's imports, aliases and local names (names.Names, the one import resolver)."""
        return _NamesReader(self.module).names

    @property
    def imports(self) -> dict[str, str]:
        return self.names.imports

    @property
    def local_names(self) -> frozenset[str]:
        return frozenset(self.names.local)

    def qualified_name(self, expr: cst.BaseExpression) -> str | None:
        return self.names.qualified(dotted_name(expr))

    def spelled_name(self, expr: cst.BaseExpression) -> str | None:
        """``expr``'s dotted name with its head replaced through the imports and aliases (names.Names.spelled)."""
        dotted = dotted_name(expr)
        return None if dotted is None else self.names.spelled(dotted)
