"""TL3xx, optimizer and memory: ``zero_grad(set_to_none=False)`` keeps zero-filled gradient tensors (TL301: a fill
kernel per parameter tensor per step); a torch optimizer kept off its multi-tensor kernels (TL303: a few kernels per
parameter tensor per step)."""
from __future__ import annotations

import libcst as cst

from tracelint.engine import Fix
from tracelint.source.calls import call_arguments, find_arg, is_literal, remove_argument, set_keyword
from tracelint.source.rule import SourceRule
from tracelint.source.rules.precision import pinned_torch


class ZeroGradKeepsGrads(SourceRule):
    code = "TL301"
    triggers = ("zero_grad",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.candidates: list[tuple[cst.Call, cst.Arg]] = []
        self.mutates_grads = False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute):
            return
        if func.attr.value == "zero_grad":
            arg = find_arg(node, "set_to_none", 0)
            if arg is not None and is_literal(arg.value, False):
                self.candidates.append((node, arg))
        elif func.attr.value.endswith("_") and _is_grad(func.value):
            self.mutates_grads = True  # p.grad.add_(g), p.grad.mul_(s), ...

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if _is_grad(node.target):
            self.mutates_grads = True  # p.grad += g

    def visit_Assign(self, node: cst.Assign) -> None:
        if any(isinstance(t.target, cst.Subscript) and _is_grad(t.target.value) for t in node.targets):
            self.mutates_grads = True  # p.grad[mask] = 0

    def finish(self) -> None:
        # Code that accumulates into .grad in place needs the zero-filled tensors to exist.
        if self.mutates_grads:
            return
        for call, arg in self.candidates:
            fix = Fix("Remove set_to_none=False (the default since PyTorch 2.0 frees the gradients)",
                      (remove_argument(self.ctx, call, arg),))
            self.report(call, "zero_grad(set_to_none=False) fills every gradient with zeros each step (a fill "
                              "kernel per parameter tensor) instead of freeing them", fix=fix)


def _is_grad(expr: cst.BaseExpression) -> bool:
    while isinstance(expr, cst.Subscript) or (isinstance(expr, cst.Attribute) and expr.attr.value == "data"):
        expr = expr.value  # p.grad[i], p.grad.data
    return isinstance(expr, cst.Attribute) and expr.attr.value == "grad"


# torch.optim's optimizers with a multi-tensor (foreach) implementation, the default on CUDA since torch 2.0 unless
# ``foreach`` or ``fused`` is given; those with a fused CUDA kernel (``fused=True``: Adam/AdamW since 2.0, SGD 2.3).
FOREACH_OPTIMIZERS = frozenset({"Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam",
                                "ASGD", "Rprop"})
FUSED_OPTIMIZERS = frozenset({"Adam", "AdamW", "SGD"})
FOREACH_DEFAULT_SINCE = (2, 0)
_SHARDING = ("FSDP", "FullyShardedDataParallel", "fully_shard")
FOREACH_ARGUMENT_SINCE = (1, 12)


class OptimizerWithoutForeach(SourceRule):
    """``torch.optim.X(..., foreach=False)``, or ``fused=False`` without ``foreach`` (torch then takes neither fast
    path), or, where the project pins a torch before 2.0, an optimizer without ``foreach=True``."""

    code = "TL303"
    triggers = tuple(sorted(FOREACH_OPTIMIZERS))

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func) or ""
        module, _, optimizer = name.rpartition(".")
        if optimizer not in FOREACH_OPTIMIZERS or not module.startswith("torch.optim"):
            return
        args = call_arguments(self.ctx, node)
        foreach, fused = args.get("foreach"), args.get("fused")
        if is_literal(args.get("differentiable"), True) or is_literal(fused, True):
            return  # no multi-tensor path for a differentiable step; fused=True is the fastest one
        if any(self.ctx.mentions(word) for word in _SHARDING):
            return  # FSDP's flat parameters: a short loop over a few large tensors, foreach=False to save memory
        hint = " (or fused=True, on CUDA)" if optimizer in FUSED_OPTIMIZERS else ""
        if is_literal(foreach, False) or (foreach is None and is_literal(fused, False)):
            key = "foreach" if foreach is not None else "fused"
            arg = find_arg(node, key)  # None: set in a **kwargs dict
            given = "foreach=False" if foreach is not None else "fused=False without foreach"
            fix = Fix(f"Remove {key}=False (torch's default: the multi-tensor path on CUDA)",
                      (remove_argument(self.ctx, node, arg),)) if arg is not None else None
            self.report(node, f"`{optimizer}` with {given} updates the parameters one tensor at a time: a few small "
                              "kernels per parameter tensor every step instead of a few multi-tensor kernels for all "
                              f"of them; use the default foreach path{hint}", fix=fix)
            return
        pinned = pinned_torch(self.ctx.path)
        if foreach is None and fused is None and args.known and pinned is not None and pinned < FOREACH_DEFAULT_SINCE:
            version = ".".join(map(str, pinned))
            fix = Fix("Add foreach=True", (set_keyword(self.ctx, node, "foreach", "True"),)) \
                if pinned >= FOREACH_ARGUMENT_SINCE else None
            advice = "pass foreach=True" if fix else "upgrade torch (2.0 uses the multi-tensor path by default)"
            self.report(node, f"`{optimizer}` on the pinned torch {version} updates the parameters one tensor at a "
                              "time (foreach is off by default before torch 2.0): a few small kernels per parameter "
                              f"tensor every step; {advice}", fix=fix)
