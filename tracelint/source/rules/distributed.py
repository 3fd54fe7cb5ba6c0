"""TL6xx, distributed training: ``nn.DataParallel`` (TL605), gradient accumulation whose every micro-step's backward
reduces the gradients of a DDP/FSDP model (TL606), and DDP's ``find_unused_parameters=True`` (TL607, info)."""
from __future__ import annotations

import libcst as cst

from tracelint.source.rule import SourceRule
from tracelint.source.rules.debug import is_test_file
from tracelint.source.semantic.calls import call_arguments, is_literal
from tracelint.source.semantic.model import dotted_name, iter_children
from tracelint.source.semantic.values import words

DATA_PARALLEL = frozenset({"torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
                           "torch.nn.parallel.data_parallel.DataParallel", "torch.nn.parallel.data_parallel"})
DDP = frozenset({"torch.nn.parallel.DistributedDataParallel", "torch.nn.DistributedDataParallel",
                 "torch.nn.parallel.distributed.DistributedDataParallel"})
FSDP = frozenset({"torch.distributed.fsdp.FullyShardedDataParallel",
                  "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel"})
FSDP2 = frozenset({"torch.distributed.fsdp.fully_shard", "torch.distributed._composable.fsdp.fully_shard",
                   "torch.distributed._composable.fsdp.fully_shard.fully_shard"})
# What turns a wrapper's gradient reduction off for a micro-step (DDP's and FSDP1's no_sync(), DDP's attribute, FSDP2's
# switch) or leaves it to a library that does so (accelerate's accumulate(), Lightning's strategies).
# Read in the code (calls and attributes), never in comments or docstrings; ``accumulate`` is no numpy or itertools one.
_SKIPS_REDUCTION = frozenset({"no_sync", "require_backward_grad_sync", "set_requires_gradient_sync", "accumulate"})
_NOT_A_SKIP = ("numpy.", "itertools.", "builtins.")
_OPTIMIZER_WORDS = frozenset({"opt", "optim", "optimizer", "optimizers", "scaler", "solver"})


class DataParallelModule(SourceRule):
    code = "TL605"
    triggers = ("DataParallel", "data_parallel")

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func)
        if name not in DATA_PARALLEL or is_test_file(self.ctx.path):
            return
        self.report(node, "`nn.DataParallel` on more than one GPU drives them all from one process: each step it "
                          "copies the model to each GPU, splits the batch, gathers the outputs on the first GPU, and "
                          "one Python thread per GPU shares the GIL (on one GPU it only calls the module). Use "
                          "DistributedDataParallel (one process per GPU, `torchrun`): "
                          "on the project's 2-GPU ResNet-50 fixture (2 x H200) DataParallel took 97-117 ms per step "
                          "and DDP 33.8 ms for the same work (2.9-3.5x)")


class GradientAccumulationWithoutNoSync(SourceRule):
    """A ``backward()`` that runs several times per optimizer step (in a micro-step loop whose enclosing loop steps
    the optimizer, or every iteration of a loop that steps under ``if (i + 1) % accum == 0:``), in a file that wraps
    a model in DDP or FSDP and never turns the reduction off."""

    code = "TL606"
    triggers = ("backward",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.wrapper: str | None = None
        self.backwards: list[cst.Call] = []
        self.skips = False  # the file turns the reduction off somewhere (``_SKIPS_REDUCTION``)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value in _SKIPS_REDUCTION and not (self.ctx.spelled_name(node) or "").startswith(_NOT_A_SKIP):
            self.skips = True  # ``model.no_sync()``, ``model.require_backward_grad_sync = False``

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "backward":
            self.backwards.append(node)
            return
        if isinstance(func, cst.Name) and func.value in _SKIPS_REDUCTION:
            self.skips = True  # ``no_sync(model)``-style helpers imported by name
        name = self.ctx.qualified_name(func)
        if name in DDP:
            self.wrapper = self.wrapper or "DDP"
        elif name in FSDP:
            self.wrapper = self.wrapper or "FSDP"
        elif name in FSDP2:
            self.wrapper = "FSDP2"

    def finish(self) -> None:
        if self.wrapper is None or self.skips:
            return
        for call in self.backwards:
            how = self._accumulates(call)
            if how is not None:
                self.report(call, self._message(call, how))

    def _accumulates(self, call: cst.Call) -> str | None:
        """How ``call`` runs several times per optimizer step, or None."""
        loops = [a for a in self.ctx.ancestors(call) if isinstance(a, (cst.For, cst.While))]
        function = next((a for a in self.ctx.ancestors(call) if isinstance(a, (cst.FunctionDef, cst.Lambda))), None)
        if function is not None:
            loops = [loop for loop in loops if any(a is function for a in self.ctx.ancestors(loop))]
        if not loops:
            return None
        inner = loops[0]
        steps = _optimizer_steps(inner.body)
        if steps:
            guard = next((g for s in steps for g in self._modulo_guards(s, inner)), None)
            if guard is not None and not any(g is guard for g in self.ctx.ancestors(call)):
                return f"`{' '.join(self.ctx.code_for(guard.test).split())}` steps the optimizer"
            return None
        for outer in loops[1:]:
            if _optimizer_steps(outer.body):
                return "a micro-step loop inside the loop that steps the optimizer"
        return None

    def _modulo_guards(self, step: cst.Call, loop: cst.CSTNode) -> list[cst.If]:
        guards = []
        for ancestor in self.ctx.ancestors(step):
            if ancestor is loop:
                break
            if isinstance(ancestor, cst.If) and "%" in self.ctx.code_for(ancestor.test):
                guards.append(ancestor)
        return guards

    def _message(self, call: cst.Call, how: str) -> str:
        switch = {"DDP": "`with model.no_sync():` around all but the last micro-step",
                  "FSDP": "`with model.no_sync():` around all but the last micro-step",
                  "FSDP2": "`model.set_requires_gradient_sync(False)` for all but the last micro-step"}[self.wrapper]
        reduction = "reduce-scatters" if self.wrapper == "FSDP2" else "all-reduces"
        return (f"`{' '.join(self.ctx.code_for(call).split())}` runs in each micro-step of a gradient accumulation "
                f"({how}) of a {self.wrapper} model that never skips its gradient reduction: every backward "
                f"{reduction} the gradients, and all but the last micro-step's reductions are redundant. Use "
                f"{switch}: on the project's 2-GPU ResNet-50 fixtures (2 x H200, NVLink, 4 micro-steps) it saved "
                "2-4 % per step with DDP and 18 % with FSDP2 (1.22x); more with more gradient bytes or a slower "
                "interconnect")


def _optimizer_steps(body: cst.CSTNode) -> list[cst.Call]:
    """``opt.step()`` / ``scaler.step(opt)`` calls in ``body`` itself: not in a nested loop or def."""
    found = []
    stack = list(iter_children(body))
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "step" \
                and words(dotted_name(node.func.value) or "") & _OPTIMIZER_WORDS:
            found.append(node)
        stack.extend(iter_children(node))
    return found


class FindUnusedParameters(SourceRule):
    code = "TL607"
    triggers = ("find_unused_parameters",)

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualified_name(node.func) not in DDP:
            return
        if not is_literal(call_arguments(self.ctx, node).get("find_unused_parameters"), True):
            return
        self.report(node, "`find_unused_parameters=True` makes DDP walk the autograd graph from the outputs after "
                          "every forward, on the host, to find the parameters that will get no gradient. Leave it "
                          "off when every parameter is used in every step (DDP raises an error at the first step "
                          "where one is not). Its cost is host time that grows with the graph: on the project's "
                          "ResNet-50 under DDP (2 x H200) it was not measurable, 33.77 ms a step with the flag "
                          "against 33.90 ms without at batch 64 per GPU, 21.01 against 21.06 ms at batch 8")
