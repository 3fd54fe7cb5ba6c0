"""TL2xx, the input pipeline: a torch DataLoader that loads in the main process (TL201) or without pinned host memory
(TL202), a batch of a pinned loader copied to the GPU without ``non_blocking=True`` (TL203), and a tensor built on the
host every step only to be copied to the device (TL204: ``torch.zeros(n).cuda()``).

The three rules judge a loader by what its file shows of its use (``loader.facts.LoaderFacts``, computed once per
file after the traversal, when every node has its parent): where its batches are drawn, where those batches go, and
what one item costs (tracelint/source/loader/ says how each is found).

A loader whose use the file does not show at all (a module that builds loaders for others) is reported: the builder
is where the fix belongs. TL203 counts only batches of a loader built in the same file with ``pin_memory`` set (not
literal False): on an unpinned loader a non-blocking copy is still synchronous, and the missing pin_memory (TL202) is
the finding to fix first.
"""
from __future__ import annotations

from typing import ClassVar

import libcst as cst

from tracelint.engine import Edit, Fix
from tracelint.source.callers import qualname
from tracelint.source.calls import Arguments, call_arguments, is_literal, set_keyword
from tracelint.source.context import FileContext, callee_name, dotted_name
from tracelint.source.loader.arguments import DATALOADERS, NUM_WORKERS, PIN_MEMORY, Argument, pins_memory, violates
from tracelint.source.loader.batches import device_words
from tracelint.source.loader.facts import loader_facts
from tracelint.source.rule import SourceRule
from tracelint.source.vocab import FILLED_CREATION, RANDOM_CREATION


class _LoaderRule(SourceRule):
    """Collects torch DataLoader calls during the traversal; judges them in ``finish`` (see the module docstring)."""

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self.loaders: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualified_name(node.func) in DATALOADERS:
            self.loaders.append(node)


class _ArgumentRule(_LoaderRule):
    """A DataLoader argument missing or set to its bad value, reported where the file's use of the loader says it
    matters (``matters``)."""

    argument: ClassVar[Argument]
    message: ClassVar[str]

    def matters(self, loader: cst.Call, args: Arguments) -> bool:
        raise NotImplementedError

    def finish(self) -> None:
        argument = self.argument
        for node in self.loaders:
            args = call_arguments(self.ctx, node)
            if not violates(args, argument) or not self.matters(node, args):
                continue
            value = args.get(argument.name, argument.position)
            verb = "Add" if value is None else "Set"  # a literal set may sit in the call or in a **kwargs dict nearby
            edit = set_keyword(self.ctx, node, argument.name, argument.good, argument.position)
            self.report(node, self.message,
                        fix=Fix(f"{verb} {argument.name}={argument.good}", (edit,), safe=argument.safe))


class DataLoaderWithoutWorkers(_ArgumentRule):
    code = "TL201"
    triggers = ("DataLoader",)
    argument = NUM_WORKERS
    message = ("DataLoader loads batches in the main process (num_workers is 0): the training loop waits for every "
               "batch; use worker processes")

    def matters(self, loader: cst.Call, args: Arguments) -> bool:
        facts = loader_facts(self.ctx)
        return not facts.rarely_read(loader) and not facts.cheap_items(args)


class DataLoaderWithoutPinnedMemory(_ArgumentRule):
    code = "TL202"
    triggers = ("DataLoader",)
    argument = PIN_MEMORY
    message = ("DataLoader without pin_memory=True: batches are copied to the GPU from pageable memory, a slower copy "
               "that cannot overlap compute")

    def matters(self, loader: cst.Call, args: Arguments) -> bool:
        return loader_facts(self.ctx).pinning_helps(loader, args)


class CopyWithoutNonBlocking(_LoaderRule):
    code = "TL203"
    triggers = ("pin_memory",)
    follows_pinned_loaders = True

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self.functions: list[cst.FunctionDef] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self.ctx.pinned_parameters:
            self.functions.append(node)

    def finish(self) -> None:
        facts = loader_facts(self.ctx)
        copies: dict[cst.Call, None] = {}
        for node in self.loaders:
            if pins_memory(call_arguments(self.ctx, node)):
                copies.update(dict.fromkeys(facts.device_copies(node)))
        for param in self._pinned_parameters():  # a pinned loader another file of the run passes in
            copies.update(dict.fromkeys(facts.parameter_copies(param)))
        for call in copies:
            self._check_copy(call)

    def _pinned_parameters(self) -> list[cst.Param]:
        found = []
        for function in self.functions:
            given = self.ctx.pinned_parameters.get(qualname(function, self.ctx) or "")
            if not given:
                continue
            params = [*function.params.posonly_params, *function.params.params]
            owner = self.ctx.parent(self.ctx.parent(function))
            if isinstance(owner, cst.ClassDef) and params and not any(
                    dotted_name(d.decorator) == "staticmethod" for d in function.decorators):
                params = params[1:]  # self
            by_name = {p.name.value: p for p in (*params, *function.params.kwonly_params)}
            for where in given:
                param = params[where] if isinstance(where, int) and where < len(params) else by_name.get(str(where))
                if param is not None:
                    found.append(param)
        return found

    def _check_copy(self, node: cst.Call) -> None:
        method = callee_name(node)
        if method not in ("to", "cuda"):  # .type(torch.cuda.FloatTensor) is a copy, but not one TL203 rewrites
            return
        args = call_arguments(self.ctx, node)
        if not args.known:
            return
        non_blocking = args.get("non_blocking")
        if non_blocking is not None and not is_literal(non_blocking, False):
            return
        if self.step_loop(node) is None:
            return  # a copy of a batch taken once, or under an evaluation interval: nothing to overlap per step
        verb = "Add" if non_blocking is None else "Set"
        fix = Fix(f"{verb} non_blocking=True", (set_keyword(self.ctx, node, "non_blocking", "True"),))
        self.report(node, f"`.{method}()` of a batch from a pinned DataLoader without non_blocking=True: the copy "
                          "blocks the host instead of overlapping compute", fix=fix)


class TensorBuiltOnHost(SourceRule):
    code = "TL204"
    triggers = (".cuda(", ".to(")

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in ("cuda", "to"):
            return
        made = func.value
        if not isinstance(made, cst.Call):
            return
        name = self.ctx.qualified_name(made.func) or ""
        leaf = name[len("torch."):]
        # Not the constructors of data (``torch.tensor(list)``, ``as_tensor``, ``from_numpy``): their values are on
        # the host, and ``device=`` copies them all the same.
        if not name.startswith("torch.") or leaf not in FILLED_CREATION | RANDOM_CREATION:
            return
        made_args = call_arguments(self.ctx, made)
        device = made_args.get("device")
        if not made_args.known or device is not None and not _is_cpu_literal(device):
            return  # ``torch.zeros(n, device=d).to(torch.half)``; or ``**kwargs`` that may hold a device
        target = _move_target(self.ctx, node)
        if target is _NOT_A_MOVE:
            return
        loop = self.step_loop(node)
        if loop is None or not (loop.on_device or self.facts.device_evidence()):
            return  # once, outside the steps: a one-time copy costs nothing per step
        fix = None
        if target is not None:
            value = '"cuda"' if target == "" else target
            edits = (set_keyword(self.ctx, made, "device", value), self._drop_move(made, node))
            # Random values drawn by the device's generator differ from the host's: a seeded run changes.
            fix = Fix(f"Create it on the device (device={value})", edits, safe=leaf in FILLED_CREATION)
        self.report(node, f"`torch.{leaf}(...).{func.attr.value}()` in {loop.description} fills a tensor in host "
                          "memory and copies it to the device every step (a blocking copy that waits for the GPU); "
                          "create it on the device with device=", fix=fix)

    def _drop_move(self, made: cst.Call, move: cst.Call) -> Edit:
        """The Edit that deletes the ``.cuda()`` / ``.to(device)`` after the creation call (``made``)."""
        end, stop = self.ctx.position(made).end, self.ctx.position(move).end
        return Edit(end.line, end.column + 1, stop.line, stop.column + 1, "")


_NOT_A_MOVE = object()


def _is_cpu_literal(expr: cst.BaseExpression) -> bool:
    return is_literal(expr, "cpu") or isinstance(expr, cst.Call) and dotted_name(expr.func) == "torch.device" and \
        bool(expr.args) and is_literal(expr.args[0].value, "cpu")


def _move_target(ctx: FileContext, call: cst.Call) -> str | None | object:
    """What ``call`` (``.cuda(...)`` / ``.to(...)``) moves its receiver to, as code for ``device=``: ``""`` for a
    bare ``.cuda()``, None when it is a move to a device the fix cannot name in one keyword (``.to(device, dtype)``,
    ``.to(other_tensor)`` is not a move we can judge: ``_NOT_A_MOVE``), ``_NOT_A_MOVE`` when it is not a move to a
    device (``.to(torch.float16)``, ``.to("cpu")``)."""
    args = call_arguments(ctx, call)
    if not args.known:
        return _NOT_A_MOVE
    extra = set(args.keywords) - {"device", "non_blocking"}
    positional = list(args.positional)
    if call.func.attr.value == "cuda":
        target = args.get("device", 0)
        if target is None:
            return None if extra else ""
        return None if extra or len(positional) > 1 else ctx.code_for(target)
    target = args.get("device", 0)
    if target is None or not _names_device(ctx, target):
        return _NOT_A_MOVE
    return None if extra or len(positional) > 1 else ctx.code_for(target)


def _names_device(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    """``expr`` names a device other than the CPU: what the file bound it to says so (``ctx.device``: ``"cuda"``,
    ``0``, ``torch.device(...)``, ``x.device``, ``dev = torch.device("cuda")``, ``args.device`` defaulting to CUDA);
    where the file binds nothing, a name whose words say device (``device``, ``args.gpu``, ``self.cuda_dev``:
    ``device_words``). A tensor (``.to(other)``) or a dtype does not."""
    if isinstance(expr, cst.Call) and _is_cpu_literal(expr):
        return False
    verdict = ctx.device(expr)
    if verdict is not None:
        return verdict
    if isinstance(expr, (cst.Name, cst.Attribute)):
        return device_words(expr.attr.value if isinstance(expr, cst.Attribute) else expr.value)
    return False
