"""TL3xx, optimizer and memory: ``zero_grad(set_to_none=False)`` keeps zero-filled gradient tensors (TL301: a fill
kernel per parameter tensor per step); a torch optimizer kept off its multi-tensor kernels (TL303: a few kernels per
parameter tensor per step); an evaluation loop that runs the model with autograd on (TL304: the graph and its
activations kept for a backward that never comes); and, every step, ``torch.cuda.empty_cache()`` (TL305: the
allocator's blocks given back and allocated again), an output or loss kept with its graph (TL306: memory that grows
every step), ``retain_graph=True`` with no second backward (TL307), a memory report or snapshot (TL308)."""
from __future__ import annotations

import libcst as cst

from tracelint.engine import Fix, Severity
from tracelint.source.project import pinned_torch
from tracelint.source.rule import HotLoop, SourceRule
from tracelint.source.semantic.bindings import target_nodes
from tracelint.source.semantic.calls import call_arguments, find_arg, is_literal, remove_argument, set_keyword
from tracelint.source.semantic.model import callee_name, dotted_name, iter_descendants
from tracelint.source.semantic.steps import member_loop
from tracelint.source.semantic.values import Kind, words


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


def grad_off(rule: SourceRule, node: cst.CSTNode, *, uncalled: bool = True,
             mentions: tuple[str, ...] = ("set_grad_enabled", "requires_grad", "no_grad"), depth: int = 0) -> bool:
    """Autograd is off (or set explicitly) where ``node`` runs: a ``with`` of _NO_GRAD around it, a decorated function
    (or Lightning's evaluation hooks), a function whose text ``mentions`` one of the words (the state is set there in
    a way not followed), or every in-file call of its function is in one; ``uncalled`` for a function the file never
    calls (its callers elsewhere may turn autograd off)."""
    ctx = rule.ctx
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
            if any(word in text for word in mentions):
                return True
            callers = rule.facts.callers.callers(ancestor)
            if not callers or depth > 3:
                return uncalled
            return all(grad_off(rule, c, uncalled=uncalled, mentions=mentions, depth=depth + 1) for c in callers)
    return "set_grad_enabled(False)" in ctx.source


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
            if call is None or self._steps(loop) or grad_off(self, call):
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


# -- TL305-TL308: what the step does to device memory ------------------------------------------------------------
_EMPTY_CACHE = frozenset({"torch.cuda.empty_cache", "torch.cuda.memory.empty_cache"})
_GC_COLLECT = "gc.collect"


def _code(ctx, node: cst.CSTNode, limit: int = 48) -> str:
    text = " ".join(ctx.code_for(node).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class EmptyCacheInLoop(SourceRule):
    """``torch.cuda.empty_cache()`` run every step (a per-step loop, or a function called from one); a
    ``gc.collect()`` that runs in the same loop is named in the same finding."""

    code = "TL305"
    triggers = ("empty_cache",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.calls: list[tuple[cst.Call, HotLoop, bool]] = []  # (call, its loop, empty_cache: else gc.collect)

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func)
        if name in _EMPTY_CACHE or name == _GC_COLLECT:
            loop = self.step_loop(node)
            if loop is not None:
                self.calls.append((node, loop, name != _GC_COLLECT))

    def finish(self) -> None:
        for call, loop, empties in self.calls:
            if not empties:
                continue
            lines = sorted({self.ctx.location(c).line for c, other, e in self.calls
                            if not e and other.node is loop.node})
            also = f", and `gc.collect()` (line {', '.join(map(str, lines))}) walks the whole Python heap" \
                if lines else ""
            self.report(call, f"`{_code(self.ctx, call)}` in {loop.description} hands the caching allocator's "
                              f"free blocks back to the driver every step{also}: the next step allocates them "
                              "again with cudaMalloc, and cudaFree waits for the GPU. Remove it (call it once, "
                              "outside the loop, where memory must go back to other processes); on the project's "
                              "fixture (an 8-layer MLP, one H200) the step went from 3.50 to 3.07 ms without it "
                              "(1.14x; `tracelint verify --rule TL305` measured 1.55x)")


# Methods whose result keeps its receiver's autograd graph (``loss.cpu()`` does: only ``.detach()`` drops it).
_KEEPS_GRAPH = frozenset({
    "cpu", "cuda", "to", "float", "half", "double", "bfloat16", "clone", "contiguous", "view", "view_as", "reshape",
    "squeeze", "unsqueeze", "flatten", "permute", "transpose", "t", "expand", "expand_as", "mean", "sum", "norm",
    "softmax", "log_softmax", "sigmoid", "tanh", "exp", "log", "abs", "pow", "sqrt", "type_as",
})
_LOSS_WORDS = frozenset({"loss", "lossfn", "criterion", "crit"})
_ACCUMULATING = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide)
_TRAINING_HOOKS = frozenset({"training_step", "train_step"})  # step hooks that train (steps.STEP_HOOKS)


class GraphKeptAcrossSteps(SourceRule):
    """``acc.append(v)``, ``acc += v`` or ``acc = acc + v`` in a per-step loop, where ``acc`` outlives the step
    (bound before the loop and not rebound or cleared in it, an attribute of ``self``, or a name a per-step helper
    does not bind) and ``v`` holds an autograd graph: a model's output or a loss made with autograd on, or a tensor
    the step runs ``.backward()`` on, not passed through ``.detach()``/``.item()``/``.tolist()``. A graph the code
    later runs a backward through (REINFORCE's ``log_probs``) is not reported."""

    code = "TL306"
    triggers = ("append", "+")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        # (statement, accumulator, value, loop)
        self.candidates: list[tuple[cst.CSTNode, cst.BaseExpression, cst.BaseExpression, HotLoop]] = []
        self.backwards: list[cst.Call] = []
        self.assigns: dict[cst.CSTNode, list[cst.Assign | cst.AugAssign]] = {}  # region -> its assignments

    def _candidate(self, node: cst.CSTNode, acc: cst.BaseExpression, value: cst.BaseExpression) -> None:
        loop = self.step_loop(node)
        if loop is not None:
            self.candidates.append((node, acc, value, loop))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if _is_backward(self.ctx, node):
            self.backwards.append(node)
        elif isinstance(func, cst.Attribute) and func.attr.value == "append" and len(node.args) == 1 and \
                node.args[0].keyword is None and not node.args[0].star:
            self._candidate(node, func.value, node.args[0].value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.operator, cst.AddAssign):
            self._candidate(node, node.target, node.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if len(node.targets) != 1 or not isinstance(value, cst.BinaryOperation) or \
                not isinstance(value.operator, cst.Add):
            return
        acc = dotted_name(node.targets[0].target)
        if acc is not None and dotted_name(value.left) == acc:
            self._candidate(node, node.targets[0].target, value.right)
        elif acc is not None and dotted_name(value.right) == acc:
            self._candidate(node, node.targets[0].target, value.left)

    def finish(self) -> None:
        for stmt, acc, value, loop in self.candidates:
            origin = self._origin(value)
            if origin is None or not self._outlives(acc, stmt, loop):
                continue
            if not isinstance(stmt, cst.Call) and grad_off(self, stmt, uncalled=False, mentions=()):
                continue  # a sum made with autograd off records no graph, whatever its operands hold
            kind, node = origin
            if kind != "backward" and (grad_off(self, node, uncalled=not _trains(self, loop),
                                                mentions=("set_grad_enabled", "requires_grad"))
                                       or self._used_later(acc, stmt)):
                continue
            self._report(stmt, acc, value, loop, kind)

    def _report(self, stmt: cst.CSTNode, acc: cst.BaseExpression, value: cst.BaseExpression, loop: HotLoop,
                kind: str) -> None:
        ctx = self.ctx
        shown, kept, name = _code(ctx, stmt), _code(ctx, value, 32), _code(ctx, acc, 24)
        if kind == "backward":
            why = (f"after its backward the graph holds no activations, but every step's graph nodes stay alive "
                   f"through `{name}` (PyTorch's FAQ: \"don't accumulate history across your training loop\"): host "
                   "memory grows every step (about 22 KiB a step for the project's 8-layer MLP) for as long as "
                   f"`{name}` lives. Keep `{kept}.detach()` (or read it with `.item()` at a logging interval)")
        else:
            why = ("the graph holds the activations its forward saved for a backward that never runs, so device "
                   "memory grows by them every step until the device is full (the project's fixture, an 8-layer "
                   "MLP: +64 MiB a step, out of memory after about 2,200 steps on an H200). Run that forward under "
                   f"`torch.no_grad()`, or keep `{kept}.detach()`")
        # the edit spans the value without its own parentheses, code_for prints them
        code = ctx.code_for(value)
        atomic = value.lpar or isinstance(value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript))
        detached = f"{code}.detach()" if atomic else f"({code}).detach()"
        fix = Fix(f"Keep `{kept}.detach()`", (self.edit(value, detached),))
        self.report(stmt, f"`{shown}` in {loop.description} keeps `{kept}` with its autograd graph: {why}",
                    fix=fix)

    # -- what the value holds ----------------------------------------------------------------------------------
    def _origin(self, expr: cst.BaseExpression, depth: int = 0) -> tuple[str, cst.CSTNode] | None:
        """Why ``expr`` holds an autograd graph, and where the graph is made: ("backward", name) for a tensor the
        step runs a backward on, ("loss" | "output", call) for a loss or a model's output; None when local code
        does not show one (or shows it is detached or a host value)."""
        if depth > 6 or isinstance(expr, (cst.Name, cst.Attribute)) and self.facts.kind(expr) is Kind.HOST:
            return None  # (a call's kind says host for ``.cpu()``, which keeps the graph)
        if isinstance(expr, cst.Name):
            value = self.facts.value_of(expr)
            if value is not None and _detached(value):
                return None
            found = self._origin(value, depth + 1) if value is not None else None
            if self._backwarded(expr, follow=found is not None and found[0] != "backward"):
                return "backward", expr  # (``out = model(x)`` too where ``loss_fn(out, y).backward()``)
            if found is not None or value is not None:
                return found
            # a parameter: what the file's calls pass (``log_step(loss)`` after ``loss.backward()``)
            passed = self.facts.parameter_values(expr) or ()
            return next((found for found in map(lambda v: self._origin(v, depth + 1), passed) if found), None)
        if isinstance(expr, cst.Subscript):
            return self._origin(expr.value, depth + 1)
        if isinstance(expr, cst.Attribute):
            return None if expr.attr.value in ("data", "grad") else self._origin(expr.value, depth + 1)
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, _ACCUMULATING):
            return self._origin(expr.left, depth + 1) or self._origin(expr.right, depth + 1)
        if not isinstance(expr, cst.Call):
            return None
        qualified = self.ctx.qualified_name(expr.func)
        inputs = [a.value for a in expr.args if a.keyword is None and not a.star]
        if qualified is not None:
            leaf = qualified.rsplit(".", 1)[-1]
            loss = qualified.startswith("torch.nn.functional.") and (
                leaf.endswith(("loss", "entropy")) or leaf == "kl_div")
            return ("loss", expr) if loss and not (inputs and all(map(_detached, inputs))) else None
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _KEEPS_GRAPH:
            return self._origin(expr.func.value, depth + 1)
        if self.facts.kind(expr) is Kind.TENSOR and self.facts.module_output(expr):
            if words(callee_name(expr) or "") & _LOSS_WORDS:  # a criterion of detached inputs has no graph
                return None if inputs and all(map(_detached, inputs)) else ("loss", expr)
            return "output", expr
        return None

    def _backwarded(self, name: cst.Name, follow: bool) -> bool:
        """The function of ``name`` runs a backward through a tensor of that name (``loss.backward()``,
        ``scaler.scale(loss).backward()``, ``accelerator.backward(loss)``, ``torch.autograd.grad(loss, ...)``) or,
        with ``follow`` (``name`` holds a model's output or a loss), through one made from it (``out`` where
        ``loss = criterion(out, y)``)."""
        scope = self.facts.scope_of(name)
        held = self._holders(name.value, scope) if follow else {name.value}
        if isinstance(scope, cst.FunctionDef) and scope.name.value in _TRAINING_HOOKS and any(
                isinstance(n, cst.Return) and n.value is not None and _names(n.value) & held
                for n in iter_descendants(scope)):
            return True  # the framework runs the backward of what a training hook returns (Lightning)
        return any(self.facts.scope_of(call) is scope and held & _backward_roots(call) for call in self.backwards)

    def _holders(self, key: str, region: cst.CSTNode, skip: cst.CSTNode | None = None) -> set[str]:
        """``key`` and the names that assignments in ``region`` (but ``skip``) bind from it, followed a few
        assignments deep: ``loss = -(torch.stack(log_probs) * returns).sum()`` holds ``log_probs``."""
        assigns = self.assigns.get(region)
        if assigns is None:
            assigns = self.assigns[region] = [n for n in iter_descendants(region)
                                              if isinstance(n, (cst.Assign, cst.AugAssign))]
        held = {key}
        for _ in range(4):
            grown = {dotted_name(t) for n in assigns if n is not skip and _names(n.value) & held
                     for t in _targets(n)} - {None}
            if grown <= held:
                break
            held |= grown
        return held

    # -- the accumulator ---------------------------------------------------------------------------------------
    def _outlives(self, acc: cst.BaseExpression, stmt: cst.CSTNode, loop: HotLoop) -> bool:
        """``acc`` lives from one step to the next: bound before the loop (in the loop's function) and neither
        rebound nor cleared inside it; an attribute of ``self`` not reset in the function of ``stmt`` (in the loop,
        where the loop is in that function); a name a per-step helper or hook does not bind itself."""
        while isinstance(acc, (cst.Subscript, cst.Attribute)) and dotted_name(acc) is None or \
                isinstance(acc, cst.Attribute) and dotted_name(acc.value) not in (None, "self"):
            acc = acc.value  # history["loss"] -> history; self.stats.losses -> self.stats
        key = dotted_name(acc)
        if key is None or (isinstance(acc, cst.Attribute) and not key.startswith("self.")):
            return False
        facts, scope = self.facts, self.facts.scope_of(stmt)
        body = loop.node if isinstance(loop.node, (cst.For, cst.While)) and facts.scope_of(loop.node) is scope \
            else None
        region = body if body is not None else scope
        if _reset(region, key):
            return False
        if isinstance(acc, cst.Attribute):
            return True
        table = facts.bindings(scope)
        bound = [b for b in table.bindings.get(key, ()) if not b.augmented and
                 not (b.value is not None and key in _names(b.value))]
        if body is None:  # a helper or hook: its own bindings live one call (parameters and globals outlive it)
            return not any(b.value is not None or b.loop is not None for b in bound)
        start = table.order.get(body)
        # an assignment's order is the one after its value: the loop's own, for one just before the loop
        return start is not None and any(b.order <= start and b.loop is not body for b in bound)

    def _used_later(self, acc: cst.BaseExpression, stmt: cst.CSTNode) -> bool:
        """A graph kept on purpose: the file runs a backward through what ``acc`` holds (followed through
        assignments: ``loss = -(torch.stack(log_probs) * returns).sum()``), or the function returns it."""
        key = dotted_name(acc.value if isinstance(acc, cst.Subscript) else acc)
        if key is None:
            return True
        held = self._holders(key, self.ctx.module, stmt)
        if any(_names(call) & held for call in self.backwards):
            return True
        scope = self.facts.scope_of(stmt)
        return isinstance(scope, cst.FunctionDef) and any(
            isinstance(n, (cst.Return, cst.Yield)) and n.value is not None and _names(n.value) & held
            for n in iter_descendants(scope))


def _trains(rule: SourceRule, loop: HotLoop) -> bool:
    """The per-step loop trains (its body steps an optimizer or runs a backward, or it is a training hook):
    autograd is on there whatever its callers do."""
    node = loop.node
    if isinstance(node, (cst.For, cst.While)):
        return rule.facts.body_steps(node.body)
    return isinstance(node, cst.FunctionDef) and node.name.value in _TRAINING_HOOKS


def _detached(expr: cst.BaseExpression) -> bool:
    """``expr`` reads its tensor without the graph: ``.detach()``, ``.item()``, ``.tolist()``, ``.numpy()``,
    ``.data``, anywhere along its chain of methods (``loss.detach().cpu()``)."""
    while True:
        if isinstance(expr, cst.Attribute):
            if expr.attr.value == "data":
                return True
            expr = expr.value
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            if expr.func.attr.value in ("detach", "detach_", "item", "tolist", "numpy"):
                return True
            expr = expr.func.value
        else:
            return False


def _is_backward(ctx, call: cst.Call) -> bool:
    """``x.backward(...)`` (a tensor's, ``accelerator.backward(loss)``), ``torch.autograd.backward/grad``."""
    if isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward":
        return True
    return ctx.qualified_name(call.func) in ("torch.autograd.backward", "torch.autograd.grad")


def _backward_roots(call: cst.Call) -> set[str]:
    """The names of the tensors a backward call may run through: the receiver of ``.backward()`` (through ``x / n``,
    ``scaler.scale(x)``, methods) and its first argument (``accelerator.backward(loss)``,
    ``torch.autograd.grad(loss, params)``)."""
    func = call.func
    work = [func.value] if isinstance(func, cst.Attribute) and func.attr.value == "backward" else []
    work += [a.value for a in call.args[:1] if a.keyword is None and not a.star]
    found: set[str] = set()
    while work:
        node = work.pop()
        if isinstance(node, cst.Name):
            found.add(node.value)
        elif isinstance(node, cst.BinaryOperation):
            work += [node.left, node.right]
        elif isinstance(node, (cst.Subscript, cst.Attribute)):
            work.append(node.value)
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            work.append(node.args[0].value if node.func.attr.value == "scale" and node.args else node.func.value)
    return found


def _names(node: cst.CSTNode) -> set[str]:
    """The dotted names (``x``, ``self.outputs``) read in ``node``."""
    found = {dotted_name(n) for n in (node, *iter_descendants(node)) if isinstance(n, (cst.Name, cst.Attribute))}
    return found - {None}


def _targets(node: cst.Assign | cst.AugAssign) -> list[cst.BaseExpression]:
    if isinstance(node, cst.AugAssign):
        return [node.target]
    return [t for target in node.targets for t in target_nodes(target.target)]


def _reset(region: cst.CSTNode, key: str) -> bool:
    """``region`` empties or rebinds ``key`` (``key = []``, ``key.clear()``, ``del key[:]``) other than by adding
    to it: what it holds lives one pass of the region."""
    for node in iter_descendants(region):
        if isinstance(node, cst.Assign) and any(dotted_name(t) == key for t in _targets(node)) and \
                key not in _names(node.value):
            return True
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "clear" \
                and dotted_name(node.func.value) == key:
            return True
        if isinstance(node, cst.Del) and key in _names(node.target):
            return True
    return False


class RetainGraphInLoop(SourceRule):
    """``.backward(retain_graph=True)``, ``torch.autograd.backward/grad(..., retain_graph=True)`` in a per-step
    loop, when the step runs no other backward (the retained graph is never used) and the call does not repeat
    within the step (a loop over losses or optimizers around it)."""

    code = "TL307"
    triggers = ("retain_graph",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.backwards: list[cst.Call] = []
        self.retained: list[tuple[cst.Call, HotLoop]] = []

    def visit_Call(self, node: cst.Call) -> None:
        if not _is_backward(self.ctx, node):
            return
        self.backwards.append(node)
        if is_literal(call_arguments(self.ctx, node).get("retain_graph"), True):
            loop = self.step_loop(node)
            if loop is not None:
                self.retained.append((node, loop))

    def finish(self) -> None:
        for call, loop in self.retained:
            if self._repeats(call, loop) or any(self._same_step(other, loop) for other in self.backwards
                                                if other is not call):
                continue
            self.report(call, f"`{_code(self.ctx, call)}` in {loop.description} keeps the graph and the "
                              "activations it saved after the backward, and nothing in the step runs a second "
                              "backward through them: they stay allocated until the next step replaces the loss "
                              "(at the next forward's peak the activations are held twice: 226 -> 243 MiB on the "
                              "project's 8-layer MLP, one H200), and a tensor carried into the next step without "
                              "`.detach()` (an RNN's hidden state) makes every backward walk all earlier steps. "
                              "Drop retain_graph=True; if it silenced \"Trying to backward through the graph a "
                              "second time\", detach what the step carries over (`hidden = hidden.detach()`)")

    def _same_step(self, other: cst.Call, loop: HotLoop) -> bool:
        """``other`` runs in the same step as the loop's body: inside it (any branch), or reached from it."""
        if any(a is loop.node for a in self.ctx.ancestors(other)):
            return True
        found = self.step_loop(other)
        return found is not None and found.node is loop.node

    def _repeats(self, call: cst.Call, loop: HotLoop) -> bool:
        """A loop (or comprehension) between ``call`` and the per-step loop runs it several times a step; so does a
        loop over a step's members (``for loss in losses:``) or one inside another per-step loop, which the model
        takes for a step loop of its own because it calls backward."""
        if member_loop(loop.node) or self.step_loop(loop.node) is not None:
            return True  # a loop the model takes for a step loop inside another one: a loop within the step
        for ancestor in self.ctx.ancestors(call):
            if ancestor is loop.node or isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
                return False
            if isinstance(ancestor, (cst.For, cst.While, cst.ListComp, cst.GeneratorExp, cst.SetComp,
                                     cst.DictComp)):
                return True
        return False


# A memory query -> what it costs each call, and the severity of calling it every step.
_REPORTS = {
    "memory_summary": ("formats a table of every allocator counter", None),
    "memory_snapshot": ("copies the state of every allocator segment and block to Python objects", None),
    "_snapshot": ("copies every allocator segment and block, and the allocations recorded with their stacks, to "
                  "Python objects", None),
    "_dump_snapshot": ("pickles every allocator segment, block and recorded allocation with its stack, and writes "
                       "the file", None),
    "_record_memory_history": ("switches the recording of a stack trace for every allocation on or off", None),
    "memory_stats": ("builds a dict of every allocator counter (0.12-0.16 ms of host time a call on the "
                     "project's H200 host)", Severity.INFO),
}
_MEMORY_MODULES = ("torch.cuda.", "torch.cuda.memory.")


class MemoryReportPerStep(SourceRule):
    """``torch.cuda.memory_summary()``, ``memory_snapshot()``, ``memory_stats()`` (info) and the memory
    visualizer's ``torch.cuda.memory._snapshot()``, ``_dump_snapshot()``, ``_record_memory_history()`` called on
    every iteration of a per-step loop (not under a periodic or rare guard)."""

    code = "TL308"
    triggers = ("memory_s", "_snapshot", "_record_memory_history")

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func) or ""
        module, _, leaf = name.rpartition(".")
        if leaf not in _REPORTS or module + "." not in _MEMORY_MODULES or \
                leaf.startswith("_") and module != "torch.cuda.memory":
            return
        loop = self.step_loop(node)
        if loop is None:
            return
        what, severity = _REPORTS[leaf]
        self.report(node, f"`{_code(self.ctx, node)}` in {loop.description} {what} every step: host time in "
                          "every step for a report that changes little from one step to the next. Call it every "
                          "few hundred steps (`if step % 500 == 0:`), or once where memory is investigated",
                    severity=severity)
