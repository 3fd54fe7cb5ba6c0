"""TL2xx, the input pipeline: a torch DataLoader that loads in the main process (TL201) or without pinned host memory
(TL202), and a batch of a pinned loader copied to the GPU without ``non_blocking=True`` (TL203).

TL203 counts only batches of a loader built in the same file with ``pin_memory`` set (not literal False): on an
unpinned loader a non-blocking copy is still synchronous, and the missing pin_memory (TL202) is the finding to fix
first.
"""
from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from tracelint.engine import Fix
from tracelint.source.calls import Arguments, call_arguments, is_literal, with_keyword
from tracelint.source.context import FileContext, dotted_name
from tracelint.source.rule import SourceRule

DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
# Positions in DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory)
NUM_WORKERS_POS, PIN_MEMORY_POS = 5, 7
DEFAULT_WORKERS = 4


def dataloader_arguments(ctx: FileContext, node: cst.CSTNode) -> Arguments | None:
    """The arguments of ``node`` when it is a call of torch's DataLoader, else None."""
    if isinstance(node, cst.Call) and ctx.qualified_name(node.func) in DATALOADERS:
        return call_arguments(ctx, node)
    return None


@dataclass(frozen=True, slots=True)
class _Argument:
    """A DataLoader argument, its position, the literal value that is a violation, and the value the fix writes."""

    name: str
    position: int
    bad: object
    good: str


NUM_WORKERS = _Argument("num_workers", NUM_WORKERS_POS, bad=0, good=str(DEFAULT_WORKERS))
PIN_MEMORY = _Argument("pin_memory", PIN_MEMORY_POS, bad=False, good="True")


def _check_argument(rule: SourceRule, node: cst.Call, argument: _Argument, message: str, *, safe: bool) -> None:
    """Report ``node`` when it is a DataLoader call with ``argument`` missing or set to its literal bad value; a
    non-literal value, or ``**kwargs`` that may set it, is not a violation."""
    args = dataloader_arguments(rule.ctx, node)
    if args is None:
        return
    value = args.get(argument.name, argument.position)
    if value is None and not args.known:
        return  # **kwargs / *args may set it
    if value is not None and not is_literal(value, argument.bad):
        return
    if value is None:
        fix = Fix(f"Add {argument.name}={argument.good}",
                  (rule.replace(node, with_keyword(node, argument.name, argument.good)),), safe=safe)
    else:  # the literal may sit in the call or in a **kwargs dict built nearby
        fix = Fix(f"Set {argument.name}={argument.good}", (rule.edit(value, argument.good),), safe=safe)
    rule.report(node, message, fix=fix)


class DataLoaderWithoutWorkers(SourceRule):
    code = "TL201"
    triggers = ("DataLoader",)

    def visit_Call(self, node: cst.Call) -> None:
        _check_argument(self, node, NUM_WORKERS, safe=False, message=(
            "DataLoader loads batches in the main process (num_workers is 0): the training loop waits for every "
            "batch; use worker processes"))


class DataLoaderWithoutPinnedMemory(SourceRule):
    code = "TL202"
    triggers = ("DataLoader",)

    def visit_Call(self, node: cst.Call) -> None:
        _check_argument(self, node, PIN_MEMORY, safe=True, message=(
            "DataLoader without pin_memory=True: batches are copied to the GPU from pageable memory, a slower copy "
            "that cannot overlap compute"))


# --------------------------------------------------------------------------------------------------------------
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
# Wrappers whose iteration yields the wrapped loader's batches (enumerate adds an index first).
_INDEXED = ("enumerate",)


def root_name(expr: cst.BaseExpression) -> str | None:
    """``batch`` for ``batch``, ``batch["x"]``, ``batch.x``, ``batch[0].y``, ``batch.items()``."""
    while True:
        if isinstance(expr, cst.Name):
            return expr.value
        if isinstance(expr, cst.Attribute | cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            expr = expr.func.value
        else:
            return None


def _target_names(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, cst.Tuple | cst.List):
        return set().union(set(), *(_target_names(e.value) for e in target.elements))
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    return set()


class CopyWithoutNonBlocking(SourceRule):
    code = "TL203"
    triggers = ("pin_memory",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.pinned: set[str] = set()           # names / dotted attributes bound to a pinned loader
        self.loops: list[tuple[cst.For, set[str]]] = []  # enclosing loops over a pinned loader and their batch names

    def _is_pinned_loader(self, expr: cst.BaseExpression) -> bool:
        args = dataloader_arguments(self.ctx, expr)
        if args is not None:
            value = args.get(PIN_MEMORY.name, PIN_MEMORY.position)
            return value is not None and not is_literal(value, False)
        name = dotted_name(expr)
        return name is not None and name in self.pinned

    def visit_Assign(self, node: cst.Assign) -> None:
        pinned = self._is_pinned_loader(node.value)
        derived = bool(self.loops) and root_name(node.value) in self.loops[-1][1]
        for target in node.targets:
            name = dotted_name(target.target)
            if pinned and name:
                self.pinned.add(name)
            if derived:  # images, labels = batch  /  x = batch["image"]
                self.loops[-1][1].update(_target_names(target.target))

    def visit_For(self, node: cst.For) -> None:
        source, target = node.iter, node.target
        # Unwrap enumerate(loader), tqdm(loader), iter(loader): the batches are those of the first argument.
        while isinstance(source, cst.Call) and not self._is_pinned_loader(source) and source.args:
            wrapper = dotted_name(source.func) or ""
            if wrapper.split(".")[-1] in _INDEXED and isinstance(target, cst.Tuple) and len(target.elements) == 2:
                target = target.elements[1].value
            source = source.args[0].value
        if self._is_pinned_loader(source):
            self.loops.append((node, _target_names(target)))

    def leave_For(self, node: cst.For) -> None:
        if self.loops and self.loops[-1][0] is node:
            self.loops.pop()

    def _batch_names(self) -> set[str]:
        return set().union(*(names for _, names in self.loops))

    def _from_batch(self, receiver: cst.BaseExpression, call: cst.Call, names: set[str]) -> bool:
        root = root_name(receiver)
        if root is None:
            return False
        if root in names:
            return True
        # {k: v.to(device) for k, v in batch.items()}: a comprehension variable drawn from the batch
        for ancestor in self.ctx.ancestors(call):
            comp_for = getattr(ancestor, "for_in", None) if isinstance(ancestor, _COMPREHENSIONS) else None
            while comp_for is not None:
                if root in _target_names(comp_for.target):
                    return root_name(comp_for.iter) in names
                comp_for = comp_for.inner_for_in
        return False

    def visit_Call(self, node: cst.Call) -> None:
        if not self.loops or not isinstance(node.func, cst.Attribute) or node.func.attr.value not in ("to", "cuda"):
            return
        if not self._from_batch(node.func.value, node, self._batch_names()):
            return
        args = call_arguments(self.ctx, node)
        if not args.known:
            return
        non_blocking = args.get("non_blocking")
        if non_blocking is not None and not is_literal(non_blocking, False):
            return
        if node.func.attr.value == "to" and not self._is_device_copy(args):
            return
        if non_blocking is None:
            fix = Fix("Add non_blocking=True", (self.replace(node, with_keyword(node, "non_blocking", "True")),))
        else:
            fix = Fix("Set non_blocking=True", (self.edit(non_blocking, "True"),))
        self.report(node, f"`.{node.func.attr.value}()` of a batch from a pinned DataLoader without "
                          "non_blocking=True: the copy blocks the host instead of overlapping compute", fix=fix)

    def _is_device_copy(self, args) -> bool:
        """``.to(device)`` / ``.to("cuda")`` moves data; ``.to(torch.float16)`` or ``.to("cpu")`` does not."""
        target = args.get("device", 0)
        if target is None:
            return False
        if is_literal(target, "cpu"):
            return False
        qualified = self.ctx.qualified_name(target) or ""
        return not (qualified.startswith("torch.") and qualified.split(".")[-1] in _DTYPES)


_DTYPES = frozenset({
    "float", "float16", "float32", "float64", "bfloat16", "half", "double", "int", "int8", "int16", "int32",
    "int64", "long", "bool", "uint8", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2",
})
