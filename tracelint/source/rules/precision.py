"""TL4xx, precision and Tensor Cores: a CUDA training loop whose program never enables TF32 or reduced precision
(TL401, the source twin of the trace rule), and layer sizes that keep fp16/bf16 GEMMs off the Tensor Core tiles
(TL404).

Both judge a file by the precision settings of its program (precision_settings.py: TF32, autocast, a half/bf16
model or dtype, Lightning ``precision=``, accelerate ``mixed_precision=``...): in a run of several files those of
the files it imports and of the files that import it (``FileContext.program_precision``), else its own.
"""
from __future__ import annotations

from itertools import pairwise

import libcst as cst

from tracelint.engine import Edit, Fix, Severity
from tracelint.source.project import pinned_torch
from tracelint.source.rule import SourceRule
from tracelint.source.rules.convnets import ChannelsLastCheck, CudnnBenchmarkCheck
from tracelint.source.rules.precision_settings import CHOICES, REDUCED, file_settings, matmul_bound
from tracelint.source.semantic.calls import call_arguments, is_literal, set_keyword
from tracelint.source.semantic.model import FileContext, callee_name, dotted_name, iter_descendants
from tracelint.source.semantic.steps import is_step_call

TF32_DEFAULT_UNTIL = (1, 12)  # torch 1.7-1.11 ran fp32 matmuls as TF32 on Ampere by default


def program_settings(ctx: FileContext) -> frozenset[str]:
    """The precision settings of the programs the file is part of (see the module docstring); the file's own are
    read once, on its tree, for TL401 and TL404."""
    own = file_settings(ctx)
    return own | ctx.program_precision if ctx.program_precision is not None else own


class Fp32MatmulOffTensorCores(SourceRule):
    """A per-step loop that steps an optimizer (or calls backward) in a file that puts work on a GPU, in a program
    that computes large matmuls (``precision_settings.matmul_bound``) with no TF32, autocast or fp16/bf16 anywhere: its
    matmuls run in full fp32, off the Tensor Cores."""

    code = "TL401"
    triggers = ("backward", "step")

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        # per-step loop -> (the call reported: optimizer.step() before backward(), how messages name the loop)
        self.loops: dict[cst.CSTNode, tuple[cst.Call, str]] = {}

    def visit_Call(self, node: cst.Call) -> None:
        if not is_step_call(node) or not self.facts.imports_torch():
            return  # (a helper that never names torch, reached from another file's loop: that file reports it)
        loop = self.step_loop(node)
        if loop is None:
            return
        known = self.loops.get(loop.node)
        if known is None or (callee_name(known[0]) == "backward" and callee_name(node) == "step"):
            self.loops[loop.node] = (node, loop.description)

    def finish(self) -> None:
        if not self.loops or not self.facts.device_evidence():
            return
        settings = program_settings(self.ctx)
        if self.ctx.defer_precision and not settings & CHOICES:
            self.ctx.pending.add(self.code)  # the run keeps the findings if the programs compute matmuls, set nothing
        elif not matmul_bound(settings):
            return  # no matmuls that matter (convolutions use TF32 already), or the program chose its precision
        pinned = pinned_torch(self.ctx.path)
        if pinned is not None and pinned < TF32_DEFAULT_UNTIL:
            return  # TF32 matmuls were the default on Ampere then
        fix = self._fix()
        for call, where in self.loops.values():
            self.report(call, f"the training step in {where} runs its matmuls in full fp32: nothing "
                              "in the program enables TF32 or autocast, so on an Ampere or newer GPU they run off "
                              "the Tensor Cores; add torch.set_float32_matmul_precision(\"high\") or train under "
                              "torch.autocast", fix=fix, severity=Severity.INFO)

    def _fix(self) -> Fix | None:
        """``torch.set_float32_matmul_precision("high")`` after the file's leading imports (numerics change: unsafe)."""
        body = self.ctx.module.body
        last = None
        for index, stmt in enumerate(body):
            if isinstance(stmt, cst.SimpleStatementLine) and stmt.body and \
                    all(isinstance(s, cst.Import | cst.ImportFrom) for s in stmt.body):
                last = stmt
            elif not (index == 0 and _docstring(stmt)) and last is not None:
                break
        if last is None:
            return None
        torch = next((bound for bound, name in self.ctx.imports.items() if name == "torch"), None)
        line = self.ctx.position(last).end.line
        text = f'{torch}.set_float32_matmul_precision("high")\n' if torch else \
            'import torch\n\ntorch.set_float32_matmul_precision("high")\n'
        if line < len(self.ctx.lines):
            edit = Edit(line + 1, 1, line + 1, 1, text)
        else:
            end = len(self.ctx.lines[line - 1]) + 1 if line <= len(self.ctx.lines) else 1
            edit = Edit(line, end, line, end, "\n" + text.rstrip("\n"))
        return Fix('Enable TF32 matmuls: torch.set_float32_matmul_precision("high")', (edit,), safe=False)


def _docstring(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and \
        isinstance(stmt.body[0], cst.Expr) and isinstance(stmt.body[0].value, cst.SimpleString | cst.ConcatenatedString)


# Layers whose sizes become GEMM dimensions: {qualified name: (argument name, position) of each size judged}.
_LAYERS = {
    "torch.nn.Linear": (("in_features", 0), ("out_features", 1)),
    "torch.nn.Embedding": (("num_embeddings", 0),),
    **{f"torch.nn.Conv{n}d": (("in_channels", 0), ("out_channels", 1)) for n in (1, 2, 3)},
}
TILE = 8        # fp16/bf16 Tensor Core GEMMs want every dimension a multiple of 8 (16 bytes)
PAD_TO = 64     # what the doc's Use instead pads to (nanoGPT's 50304)
MIN_SIZE = 1024  # smaller layers (a classifier's 10 outputs, an RGB conv's 3 inputs) cost too little to matter


class GemmShapeOffTensorCoreTiles(SourceRule):
    """``nn.Linear`` / ``nn.Conv*d`` (and an ``nn.Embedding`` whose weight a tied output layer multiplies) with a
    literal size of at least ``MIN_SIZE`` that is not a multiple of 8, in a program that computes in fp16/bf16."""

    code = "TL404"
    triggers = ("Linear", "Embedding", "Conv")

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self.sizes: list[tuple[str, str, cst.BaseExpression, int]] = []  # (layer, argument, size, value)
        self.tied = False  # ``lm_head.weight = wte.weight``: the embedding's table is an output GEMM's weight

    def visit_Call(self, node: cst.Call) -> None:
        layer = self.ctx.qualified_name(node.func)
        if layer not in _LAYERS:
            return
        args = call_arguments(self.ctx, node)
        for name, position in _LAYERS[layer]:
            expr = args.get(name, position)
            values = self.ctx.ints(expr) if expr is not None else None  # literals and data flow (flow.py)
            if values and all(v >= MIN_SIZE and v % TILE for v in values):
                self.sizes.append((layer.rsplit(".", 1)[-1], name, expr, max(values)))

    def visit_Assign(self, node: cst.Assign) -> None:
        if (dotted_name(node.value) or "").endswith(".weight") and \
                any((dotted_name(t.target) or "").endswith(".weight") for t in node.targets):
            self.tied = True

    def finish(self) -> None:
        if not self.sizes:
            return
        if REDUCED not in program_settings(self.ctx):
            if not self.ctx.defer_precision:
                return
            self.ctx.pending.add(self.code)  # the run keeps the findings if its programs compute in fp16/bf16
        for layer, name, expr, value in self.sizes:
            if layer == "Embedding" and not self.tied:
                continue  # a lookup table: no GEMM unless an output layer shares its weight
            padded = -(-value // PAD_TO) * PAD_TO
            self.report(expr, f"`nn.{layer}` {name}={value} is not a multiple of {TILE}: in fp16/bf16 its GEMMs "
                              "miss the Tensor Core tiles and run on slower kernels; pad it (to "
                              f"{padded}, a multiple of {PAD_TO}) and ignore the extra rows")


# --------------------------------------------------------------------------------------------------------------
# TL403 (bias-before-batch-norm): a layer's bias that the BatchNorm right after it cancels.
_BIASED = {f"torch.nn.{name}": 7 for name in ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
                                               "ConvTranspose3d")} | {"torch.nn.Linear": 2}  # bias's position
_BATCH_NORMS = frozenset(f"torch.nn.{name}" for name in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
                                                         "SyncBatchNorm"))
_AFFINE_POSITION = 3


class BiasBeforeBatchNorm(SourceRule):
    """A conv or linear layer with a bias feeding straight into a BatchNorm with affine parameters: adjacent items
    of an ``nn.Sequential(...)`` or of a list literal of layers, or ``self.bn(self.conv(x))`` / ``x = self.conv(x)``
    then ``x = self.bn(x)`` in a method of a class whose ``__init__`` builds both."""

    code = "TL403"
    triggers = ("BatchNorm",)

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._pairs: list[tuple] = []
        self._classes: list[cst.ClassDef] = []

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualified_name(node.func) == "torch.nn.Sequential":
            # a ``*layers`` between two items breaks their adjacency: it stands as None
            items = [None if a.star or a.keyword is not None else a.value for a in node.args]
            self._pairs.extend(pair for pair in pairwise(items) if None not in pair)

    def visit_List(self, node: cst.List) -> None:
        items = [e.value if isinstance(e, cst.Element) else None for e in node.elements]
        self._pairs.extend(pair for pair in pairwise(items) if None not in pair)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.append(node)

    def finish(self) -> None:
        reported: set[cst.Call] = set()
        for first, second in [*self._pairs, *(p for cls in self._classes for p in self._forward_pairs(cls))]:
            layer, norm = self._layer(first), self._layer(second)
            if layer is None or norm is None or layer in reported or not self._biased(layer) or \
                    not self._affine(norm):
                continue
            reported.add(layer)
            name = self.ctx.qualified_name(layer.func).rsplit(".", 1)[-1]
            norm_name = self.ctx.qualified_name(norm.func).rsplit(".", 1)[-1]
            fix = Fix("Add bias=False (the BatchNorm's shift replaces it)",
                      (set_keyword(self.ctx, layer, "bias", "False", _BIASED[self.ctx.qualified_name(layer.func)]),),
                      safe=False)
            self.report(layer, f"`{name}` with a bias feeds straight into `{norm_name}`, which subtracts each "
                               "channel's mean: the bias is cancelled, yet it is added and its gradient reduced every "
                               "step; pass bias=False", fix=fix)

    def _layer(self, expr: cst.BaseExpression, depth: int = 0) -> cst.Call | None:
        """The constructor call ``expr`` is (or a name bound to one is) when it builds a layer TL403 judges."""
        if isinstance(expr, cst.Name) and depth < 2:
            value = self.facts.value_of(expr)
            return self._layer(value, depth + 1) if value is not None else None
        if isinstance(expr, cst.Call):
            name = self.ctx.qualified_name(expr.func)
            if name in _BIASED or name in _BATCH_NORMS:
                return expr
        return None

    def _biased(self, call: cst.Call) -> bool:
        name = self.ctx.qualified_name(call.func)
        if name not in _BIASED:
            return False
        args = call_arguments(self.ctx, call)
        bias = args.get("bias", _BIASED[name])
        return args.known if bias is None else is_literal(bias, True)

    def _affine(self, call: cst.Call) -> bool:
        if self.ctx.qualified_name(call.func) not in _BATCH_NORMS:
            return False
        args = call_arguments(self.ctx, call)
        affine = args.get("affine", _AFFINE_POSITION)
        return args.known if affine is None else is_literal(affine, True)

    def _forward_pairs(self, cls: cst.ClassDef):
        """(layer, norm) constructor calls of ``cls`` applied one straight after the other in one of its methods."""
        built: dict[str, cst.BaseExpression] = {}
        methods = [s for s in cls.body.body if isinstance(s, cst.FunctionDef)]
        for method in methods:
            if method.name.value != "__init__":
                continue
            for node in iter_descendants(method.body):
                if isinstance(node, cst.Assign) and len(node.targets) == 1:
                    attr = _self_attribute(node.targets[0].target)
                    if attr is not None:
                        built[attr] = node.value
        if not built:
            return
        for method in methods:
            if method.name.value == "__init__":
                continue
            for node in (method.body, *iter_descendants(method.body)):
                if isinstance(node, cst.Call):  # self.bn(self.conv(x))
                    outer, inner = _self_call(node), None
                    if outer is not None and len(node.args) == 1 and isinstance(node.args[0].value, cst.Call):
                        inner = _self_call(node.args[0].value)
                    if inner in built and outer in built:
                        yield built[inner], built[outer]
                elif isinstance(node, cst.IndentedBlock):  # x = self.conv(x); x = self.bn(x)
                    statements = [s.body[0] if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 else None
                                  for s in node.body]
                    for first, second in pairwise(statements):
                        pair = _chained(first, second)
                        if pair is not None and pair[0] in built and pair[1] in built:
                            yield built[pair[0]], built[pair[1]]


def _self_attribute(expr: cst.BaseExpression) -> str | None:
    """``X`` of ``self.X``."""
    if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
        return expr.attr.value
    return None


def _self_call(call: cst.Call) -> str | None:
    """``X`` of a call ``self.X(arg)`` with one positional argument."""
    if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
        return None
    return _self_attribute(call.func)


def _chained(first: cst.CSTNode | None, second: cst.CSTNode | None) -> tuple[str, str] | None:
    """(A, B) of ``t = self.A(x)`` followed by ``u = self.B(t)`` (or ``return self.B(t)``)."""
    if not isinstance(first, cst.Assign) or len(first.targets) != 1 or \
            not isinstance(first.targets[0].target, cst.Name) or not isinstance(first.value, cst.Call):
        return None
    value = second.value if isinstance(second, (cst.Assign, cst.Return)) else None
    if not isinstance(value, cst.Call):
        return None
    inner, outer = _self_call(first.value), _self_call(value)
    arg = value.args[0].value if outer is not None else None
    if inner is None or not isinstance(arg, cst.Name) or arg.value != first.targets[0].target.value:
        return None
    return inner, outer


# Conv nets: the checks live in convnets.py; the classes are here, in the module of their family (TL4xx).
class HalfPrecisionConvWithoutChannelsLast(ChannelsLastCheck):
    code = "TL405"


class ConvNetWithoutCudnnBenchmark(CudnnBenchmarkCheck):
    code = "TL406"
