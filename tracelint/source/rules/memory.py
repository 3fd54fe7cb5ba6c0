"""TL3xx, optimizer and memory: ``zero_grad(set_to_none=False)`` keeps zero-filled gradient tensors (TL301: a fill
kernel per parameter tensor per step)."""
from __future__ import annotations

import libcst as cst

from tracelint.engine import Fix
from tracelint.source.calls import find_arg, is_literal, remove_argument
from tracelint.source.rule import SourceRule


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
