"""TL3xx, optimizer and memory: ``zero_grad(set_to_none=False)`` keeps zero-filled gradient tensors (TL301: a fill
kernel per parameter tensor per step); a torch optimizer kept off its multi-tensor kernels (TL303: a few kernels per
parameter tensor per step); an evaluation loop that runs the model with autograd on (TL304: the graph and its
activations kept for a backward that never comes)."""
from __future__ import annotations

import libcst as cst

from tracelint.engine import Fix
from tracelint.source.project import pinned_torch
from tracelint.source.rule import SourceRule
from tracelint.source.semantic.calls import call_arguments, find_arg, is_literal, remove_argument, set_keyword
from tracelint.source.semantic.model import callee_name, dotted_name, iter_descendants
from tracelint.source.semantic.values import words


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


# What turns autograd off around code: context managers and decorators (``@torch.no_grad()``, ``@torch.no_grad``).
_NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode", "torch.set_grad_enabled", "torch.autograd.no_grad",
                      "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode",
                      "torch.enable_grad"})
_EVAL_WORDS = frozenset({"val", "valid", "validation", "test", "eval", "evaluation", "dev"})
_MODEL_WORDS = frozenset({"model", "net", "network", "classifier", "encoder", "backbone"})
# Evaluation hooks whose framework turns autograd off itself (Lightning).
_FRAMEWORK_EVAL = frozenset({"validation_step", "test_step", "predict_step", "validation_epoch_end"})


class EvaluationWithAutograd(SourceRule):
    """A loop that calls a model (``model(x)``, ``self.net(x)``) over a validation/test loader, or after
    ``model.eval()`` in its function, with no backward or optimizer step in it and no ``no_grad`` /
    ``inference_mode`` / ``set_grad_enabled`` around it: not in the loop, not on its function (decorator), not
    around any of the file's calls of its function. A function the file never calls is not judged (its callers may
    turn autograd off)."""

    code = "TL304"
    triggers = ("eval",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.loops: list[cst.For] = []

    def visit_For(self, node: cst.For) -> None:
        self.loops.append(node)

    def finish(self) -> None:
        for loop in self.loops:
            call = self._model_call(loop)
            if call is None or self._steps(loop) or self._grad_off(call):
                continue
            reason = self._evaluates(loop)
            if reason is None:
                continue
            self.report(call, f"`{' '.join(self.ctx.code_for(call).split())}` in {reason} runs with autograd on: "
                              "every op records the graph and keeps the activations a backward would need until "
                              "the output is freed, time and memory an evaluation never uses. Wrap the loop in "
                              "`with torch.inference_mode():` (or `torch.no_grad()`, or decorate the function with "
                              "`@torch.inference_mode()`); on the project's host-bound fixture (a small CNN "
                              "evaluated over 16 batches of 128, H200) the pass went from 10.3 to 7.1 ms (1.45x) "
                              "and its peak memory from 0.32 to 0.14 GiB")

    def _model_call(self, loop: cst.For) -> cst.Call | None:
        for node in iter_descendants(loop.body):
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return None
            if isinstance(node, cst.Call):
                name = dotted_name(node.func) or ""
                last = name.rsplit(".", 1)[-1]
                if last and words(last) & _MODEL_WORDS and last not in ("eval", "train") and \
                        self.ctx.qualified_name(node.func) is None:
                    return node
        return None

    def _steps(self, loop: cst.For) -> bool:
        return any(isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and
                   n.func.attr.value in ("backward", "step", "zero_grad") for n in iter_descendants(loop))

    def _grad_off(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Autograd is off (or set explicitly) around ``node``: a ``with`` of _NO_GRAD, a decorated function, a
        ``set_grad_enabled``/``requires_grad`` in its function, or every in-file call of its function is in one."""
        ctx = self.ctx
        for ancestor in ctx.ancestors(node):
            if isinstance(ancestor, cst.With) and any(isinstance(i.item, cst.Call) and
                                                      ctx.qualified_name(i.item.func) in _NO_GRAD
                                                      for i in ancestor.items):
                return True
            if isinstance(ancestor, cst.FunctionDef):
                if ancestor.name.value in _FRAMEWORK_EVAL or any(
                        ctx.qualified_name(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator)
                        in _NO_GRAD for d in ancestor.decorators):
                    return True
                text = ctx.code_for(ancestor)
                if "set_grad_enabled" in text or "requires_grad" in text or "no_grad" in text:
                    return True
                callers = self.facts.callers.callers(ancestor)
                if not callers or depth > 3:
                    return True  # called from elsewhere: its callers may turn autograd off
                return all(self._grad_off(c, depth + 1) for c in callers)
        return "set_grad_enabled(False)" in ctx.source

    def _evaluates(self, loop: cst.For) -> str | None:
        """The loop evaluates: it iterates a validation/test loader, or its function called ``.eval()`` before it."""
        source = loop.iter
        while isinstance(source, cst.Call) and callee_name(source) in ("enumerate", "tqdm", "iter") and source.args:
            source = source.args[0].value
        name = dotted_name(source) or ""
        if words(name.rsplit(".", 1)[-1]) & _EVAL_WORDS:
            return f"the loop over `{name}`"
        scope = next((a for a in self.ctx.ancestors(loop) if isinstance(a, (cst.FunctionDef, cst.Module))), None)
        start = self.ctx.position(loop).start.line
        evals = [n for n in iter_descendants(scope) if isinstance(n, cst.Call) and callee_name(n) in ("eval", "train")
                 and isinstance(n.func, cst.Attribute) and not n.args and self.ctx.position(n).start.line < start]
        if evals and callee_name(max(evals, key=lambda n: self.ctx.position(n).start.line)) == "eval":
            return f"the loop over `{' '.join(self.ctx.code_for(loop.iter).split())}` after `.eval()`"
        return None
