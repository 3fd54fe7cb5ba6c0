"""Where a loader's batches go (``Batches.of``): ``.to(device)`` / ``.cuda()`` / ``.type(cuda type)`` (a device copy),
a call that takes a device, a consumer the file does not show, an RPC send, host-only reads."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import libcst as cst

from tracelint.source.loader.draws import Draw
from tracelint.source.loader.index import MAX_HOPS, READERS, FileIndex
from tracelint.source.semantic.bindings import names_in
from tracelint.source.semantic.calls import call_arguments, is_literal
from tracelint.source.semantic.model import callee_name, dotted_name
from tracelint.source.semantic.values import words
from tracelint.source.vocab import HOST_ATTRS


@dataclass(slots=True)
class BatchUse:
    copies: list[cst.Call] = field(default_factory=list)  # device copies of batch values (.to / .cuda / .type)
    device: bool = False     # a device copy, or a call that takes a device (``to_device(batch, device)``)
    consumers: list[cst.CSTNode] = field(default_factory=list)  # handed to code the file does not show, or kept


# Calls whose result is the batch itself or a part of it (containers, ``Variable``, torch ops on host tensors).
_DERIVERS = frozenset({"iter", "next", "list", "tuple", "enumerate", "zip", "reversed", "dict", "sorted",
                       "Variable", "map", "filter"})
# Tensor methods that read on the host (vocab.HOST_METHODS also holds dict and str methods, which a batch that is a
# dict goes through: ``batch.items()``).
_HOST_READS = frozenset({"item", "tolist", "numpy", "cpu", "size", "dim", "ndimension", "numel", "nelement",
                         "element_size", "data_ptr", "stride", "get_device", "is_contiguous", "is_floating_point",
                         "is_complex", "storage_offset"})
# Words of a callee or argument that moves batches to a device (``to_device(batch, device)``); TL204 reads the
# target of a ``.to()`` by them too (rules/input.py).
DEVICE_WORDS = frozenset({"device", "cuda", "gpu", "gpus"})


def device_words(name: str) -> bool:
    """The fallback where the file binds nothing a device question can follow (flow.py): a name whose words say
    device (``device``, ``args.gpu``, ``self.cuda_dev``; not ``local_rank``)."""
    return bool(words(name) & DEVICE_WORDS)
_DTYPES = frozenset({
    "float", "float16", "float32", "float64", "bfloat16", "half", "double", "int", "int8", "int16", "int32",
    "int64", "long", "bool", "uint8", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2",
})


class Batches:
    """The batches of a loader's draws, followed to their device copies and consumers."""

    def __init__(self, index: FileIndex) -> None:
        self.index = index
        self.ctx = index.ctx

    def of(self, draws: Iterable[Draw]) -> BatchUse:
        """Where the batches of ``draws`` go, together."""
        batches = BatchUse()
        for draw in draws:
            self._follow(draw, batches)
        return batches

    def _follow(self, draw: Draw, batches: BatchUse) -> None:
        """Follow the batches of ``draw`` (a work list, as for the loader) into ``batches``."""
        work: list[tuple[cst.BaseExpression, int]] = []
        node = draw.node
        targets = [node.target] if isinstance(node, (cst.For, cst.CompFor)) else []
        parent = self.ctx.parent(node)
        if isinstance(node, cst.Call) and draw.path and isinstance(parent, cst.Assign) and parent.value is node:
            targets = [t.target for t in parent.targets]  # i, (x, y) = next(enumerate_iter)
        elif isinstance(node, cst.Call):
            work.append((node, 0))
        for target in targets:
            for name in names_in(_at_path(target, draw.path)):
                work.extend((ref, 0) for ref in self.index.references(name) or ())
        seen: set = set()
        while work:
            expr, hops = work.pop()
            if expr not in seen and hops <= MAX_HOPS:
                seen.add(expr)
                self._follow_batch(expr, hops, batches, work.append)

    def _follow_batch(self, expr: cst.BaseExpression, hops: int, batches: BatchUse, push) -> None:
        """One step after a batch value (or a part of it): its device copies, the calls that consume it, host reads,
        or the expressions it flows to (``push``-ed)."""
        follow = lambda e, h=hops: push((e, h))  # noqa: E731
        ctx = self.ctx
        while True:  # up the chain of attributes, subscripts and method calls on the value
            parent = ctx.parent(expr)
            if isinstance(parent, cst.Subscript) and parent.value is expr:
                expr = parent
                continue
            if not (isinstance(parent, cst.Attribute) and parent.value is expr):
                break
            call = ctx.parent(parent)
            if not (isinstance(call, cst.Call) and call.func is parent):
                if parent.attr.value in HOST_ATTRS:
                    return
                expr = parent
                continue
            method = parent.attr.value
            if method in _HOST_READS:
                return
            if method == "cuda" or method in ("to", "type") and self._device_copy(call):
                batches.copies.append(call)
                batches.device = True
                return
            expr = call
        self._batch_context(expr, ctx.parent(expr), hops, batches, follow)

    def _batch_context(self, expr, parent, hops: int, batches: BatchUse, follow) -> None:
        if isinstance(parent, (cst.Assign, cst.AnnAssign, cst.AugAssign)) and parent.value is expr:
            targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
            for target in targets:
                for name in names_in(target):
                    for ref in self.index.references(name) or ():
                        follow(ref)
                if not isinstance(target, cst.Name | cst.Tuple | cst.List):
                    batches.consumers.append(parent)  # self.batch = batch, cache[k] = x
        elif isinstance(parent, cst.Arg) and parent.value is expr:
            call = self.ctx.parent(parent)
            if isinstance(call, cst.Call):
                self._batch_argument(call, parent, hops, batches, follow)
        elif isinstance(parent, (cst.Element, cst.StarredElement, cst.DictElement, cst.StarredDictElement)):
            follow(self.ctx.parent(parent))
        elif isinstance(parent, (cst.Tuple, cst.List, cst.BinaryOperation, cst.UnaryOperation)):
            follow(parent)
        elif isinstance(parent, cst.IfExp) and parent.test is not expr:
            follow(parent)
        elif isinstance(parent, (cst.For, cst.CompFor)) and parent.iter is expr:
            for name in names_in(parent.target):
                for ref in self.index.references(name) or ():
                    follow(ref)
        elif isinstance(parent, (cst.ListComp, cst.SetComp, cst.GeneratorExp)) and parent.elt is expr or \
                isinstance(parent, cst.DictComp) and parent.value is expr:
            follow(parent)
        elif not isinstance(parent, (cst.Expr, cst.Comparison, cst.If, cst.While, cst.Assert, cst.BooleanOperation,
                                     cst.FormattedStringExpression, cst.IfExp, cst.DictComp, cst.Del)):
            batches.consumers.append(parent)  # returned, yielded, an index...

    def _batch_argument(self, call: cst.Call, arg: cst.Arg, hops: int, batches: BatchUse, follow) -> None:
        name = callee_name(call) or ""
        qualified = self.ctx.qualified_name(call.func) or ""
        if qualified.startswith("torch.distributed.rpc."):
            return  # sent over RPC: serialised, pinning does not help
        if name in READERS and (qualified.startswith("builtins.") or not qualified):
            return
        if name in _DERIVERS or qualified.startswith("torch."):
            follow(call)  # Variable(x), torch.cat(batch), list(batch): the result is the batch's data
            return
        params = self.index.parameters(call, arg)
        if params:
            for param in params:
                for ref in self.index.references(param.name) or ():
                    follow(ref, hops + 1)
            return
        if words(name) & DEVICE_WORDS or any(
                a is not arg and (a.keyword is not None and a.keyword.value in ("device", "non_blocking") or
                                  self._names_device(a.value)) for a in call.args):
            batches.device = True  # to_device(batch, device), fabric.to_device(batch), prepare(batch, self.device)
            return
        batches.consumers.append(call)

    def _names_device(self, expr: cst.BaseExpression) -> bool:
        """An argument that names a device: bound to one (flow.py; an integer here is no device index), else by its
        words (``device_words``)."""
        verdict = self.ctx.device(expr)
        if verdict is not None:
            return verdict and self.ctx.ints(expr) is None
        return bool(words(self.ctx.code_for(expr)) & DEVICE_WORDS)

    def host_consumer(self, node: cst.CSTNode) -> bool:
        """A call the file shows runs on the host when nothing in the file puts work on a device: a torch function,
        or a model / function built in this file or by torch (``net = Net()``, ``nn.Linear(...)``)."""
        if not isinstance(node, cst.Call):
            return False
        func = node.func
        while isinstance(func, cst.Attribute):
            func = func.value
        if (self.ctx.qualified_name(node.func) or "").startswith("torch."):
            return True
        if not isinstance(func, cst.Name):
            return False
        index = self.index
        value = index.value(func)
        if not isinstance(value, cst.Call):
            return func.value in index.classes or func.value in index.functions
        qualified = self.ctx.qualified_name(value.func) or ""
        built = dotted_name(value.func) or ""
        return qualified.startswith(("torch.", "torchvision.")) or built in index.classes or built in index.functions

    def _device_copy(self, call: cst.Call) -> bool:
        """``.to(device)`` / ``.to("cuda")`` / ``.type(torch.cuda.FloatTensor)`` moves data to a device;
        ``.to(torch.float16)``, ``.to("cpu")``, ``.to(dtype=...)`` do not."""
        args = call_arguments(self.ctx, call)
        if callee_name(call) == "type":
            target = args.get("dtype", 0)
            if target is None:
                return False
            value = self.index.value(target) if isinstance(target, cst.Name) else None
            return "cuda" in self.ctx.code_for(target) or value is not None and "cuda" in self.ctx.code_for(value)
        target = args.get("device", 0)
        return target is not None and not self._host_target(target, 0)

    def _host_target(self, expr: cst.BaseExpression, depth: int) -> bool:
        if is_literal(expr, "cpu"):
            return True
        if isinstance(expr, cst.Call) and self.ctx.qualified_name(expr.func) == "torch.device" and expr.args:
            return is_literal(expr.args[0].value, "cpu")
        if isinstance(expr, cst.Attribute) and expr.attr.value == "dtype":
            return True
        qualified = self.ctx.qualified_name(expr) or ""
        if qualified.startswith("torch.") and qualified.split(".")[-1] in _DTYPES:
            return True
        if isinstance(expr, cst.Name) and depth < 3:
            value = self.index.value(expr)
            return value is not None and self._host_target(value, depth + 1)
        return False


def _at_path(target: cst.BaseExpression, path: tuple[int, ...]) -> cst.BaseExpression:
    """The part of a loop target that holds the batch: ``(i, (x, y))`` with path (1,) -> ``(x, y)``. A target that
    does not unpack that far holds it whole (``for item in enumerate(loader)``)."""
    for index in path:
        if not isinstance(target, cst.Tuple | cst.List) or index >= len(target.elements) or \
                any(isinstance(e, cst.StarredElement) for e in target.elements):
            return target
        target = target.elements[index].value
    return target
