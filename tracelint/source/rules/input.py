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
from tracelint.source.loader.arguments import DATALOADERS, NUM_WORKERS, PIN_MEMORY, Argument, pins_memory, violates
from tracelint.source.loader.batches import device_words
from tracelint.source.loader.facts import loader_facts
from tracelint.source.rule import SourceRule
from tracelint.source.semantic.callers import qualname
from tracelint.source.semantic.calls import Arguments, call_arguments, is_literal, set_keyword
from tracelint.source.semantic.model import FileContext, callee_name, dotted_name
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
        if method not in ("to", "cuda", "type"):  # .type(torch.cuda.FloatTensor, non_blocking=True) is one too
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
    triggers = (".cuda(", ".to(", ".type_as(", ".type(")

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in ("cuda", "to", "type_as", "type"):
            return
        built = self._host_built(func.value)
        if built is None:
            return
        made, leaf, fixable = built
        target = self._move(node)
        if target is _NOT_A_MOVE:
            return
        loop = self.step_loop(node)
        if loop is None or not (loop.on_device or self.facts.device_evidence()):
            return  # once, outside the steps: a one-time copy costs nothing per step
        fix = None
        if target is not None and fixable:
            value = '"cuda"' if target == "" else target
            edits = (set_keyword(self.ctx, made, "device", value), self._drop_move(func.value, node))
            # Random values drawn by the device's generator differ from the host's: a seeded run changes.
            fix = Fix(f"Create it on the device (device={value})", edits, safe=leaf in FILLED_CREATION)
        shown = f"torch.{leaf}(...)" if func.value is made else f"torch.{leaf}(...)…"
        self.report(node, f"`{shown}.{func.attr.value}()` in {loop.description} fills a tensor in host "
                          "memory and copies it to the device every step (a blocking copy that waits for the GPU); "
                          "create it on the device with device=", fix=fix)

    def _move(self, call: cst.Call) -> str | None | object:
        """``_move_target``, and the moves that also convert the dtype, which no ``device=`` alone rewrites
        (None): ``.to(t)`` of a tensor ``t`` (to its device and dtype), ``.type_as(t)`` (to ``t``'s tensor type,
        its device included) unless ``t`` is known to be on the host, ``.type(torch.cuda.FloatTensor)`` or of a
        name bound to a CUDA tensor type (``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor``)."""
        method = call.func.attr.value
        args = [a.value for a in call.args if not a.star]
        if method == "type_as":
            return None if len(args) == 1 and self.may_be_tensor(args[0]) else _NOT_A_MOVE
        if method == "type":
            return None if len(args) == 1 and self._cuda_type(args[0]) else _NOT_A_MOVE
        target = _move_target(self.ctx, call)
        if target is _NOT_A_MOVE and len(call.args) == 1 and call.args[0].keyword is None and \
                self.is_tensor(args[0]):
            return None
        return target

    def _cuda_type(self, expr: cst.BaseExpression) -> bool:
        """``torch.cuda.FloatTensor``, ``"torch.cuda.HalfTensor"``, or a name bound (in its function, else at
        module level) only to expressions naming one."""
        values: list = [expr]
        if isinstance(expr, cst.Name):
            value = self.facts.value_of(expr)
            values = [value] if value is not None else \
                [b.value for b in self.facts.bindings(self.ctx.module).bindings.get(expr.value, ())]
        return bool(values) and all(v is not None and "cuda." in self.ctx.code_for(v) and
                                    "Tensor" in self.ctx.code_for(v) for v in values)

    def _host_built(self, expr: cst.BaseExpression, depth: int = 0, filled: bool = False):
        """(creation call, its name, whether ``device=`` there and dropping the move is the fix) when ``expr`` is a
        tensor made on the host: a creation call (``torch.zeros(n)``; not ``torch.tensor(data)``: its values are on
        the host anyway), a legacy typed constructor given sizes and filled in place (``torch.FloatTensor(b,
        n).fill_(0)``), either followed by shape and dtype methods (``torch.arange(n).view(-1, 1)``,
        ``.float()``), or a torch function or arithmetic of such a tensor and host values (``torch.tril(
        torch.ones(n, n))``, ``torch.exp(-c * torch.arange(half) / half)``)."""
        if depth > 8:
            return None
        if isinstance(expr, cst.BinaryOperation):
            for side, other in ((expr.left, expr.right), (expr.right, expr.left)):
                found = self._host_built(side, depth + 1, filled)
                if found is not None and not self.is_tensor(other):
                    return found[0], found[1], False
            return None
        if isinstance(expr, cst.UnaryOperation):
            found = self._host_built(expr.expression, depth + 1, filled)
            return (found[0], found[1], False) if found is not None else None
        if not isinstance(expr, cst.Call):
            return None
        func = expr.func
        name = self.ctx.qualified_name(func) or ""
        leaf = name[len("torch."):] if name.startswith("torch.") else ""
        if leaf in FILLED_CREATION | RANDOM_CREATION:
            args = call_arguments(self.ctx, expr)
            device = args.get("device")
            if not args.known or device is not None and not _is_cpu_literal(device):
                return None  # ``torch.zeros(n, device=d).to(torch.half)``; or ``**kwargs`` that may hold a device
            if leaf in _SIZED_CREATION and _no_elements(expr):
                return None  # ``torch.empty(0).to(x.device)``: nothing to fill or copy
            return expr, leaf, True
        if leaf in _LEGACY_CONSTRUCTORS:
            # sizes, not data (``torch.FloatTensor(obs)`` of an array is a copy of values the host has): filled in
            # place after, every argument a size-like expression
            sizes = [a.value for a in expr.args]
            if filled and sizes and all(a.keyword is None and not a.star for a in expr.args) and all(
                    isinstance(v, (cst.Integer, cst.Name, cst.Attribute, cst.BinaryOperation, cst.Call))
                    and not self.is_tensor(v) for v in sizes):
                return expr, leaf, False  # no device= for a legacy constructor
            return None
        if isinstance(func, cst.Attribute) and func.attr.value in _KEEPS_PLACE:
            if func.attr.value == "type" and "cuda" in self.ctx.code_for(expr):
                return None  # .type(torch.cuda.FloatTensor) is the move itself
            found = self._host_built(func.value, depth + 1, filled or func.attr.value in _FILLS)
            if found is None:
                return None
            return found[0], found[1], found[2] is not False and func.attr.value in _SAFE_AFTER_DEVICE
        if leaf in _HOST_FUNCTIONS and expr.args:
            found = self._host_built(expr.args[0].value, depth + 1, filled)
            return (found[0], found[1], False) if found is not None else None
        return None

    def _drop_move(self, made: cst.Call, move: cst.Call) -> Edit:
        """The Edit that deletes the ``.cuda()`` / ``.to(device)`` after the creation call (``made``)."""
        end, stop = self.ctx.position(made).end, self.ctx.position(move).end
        return Edit(end.line, end.column + 1, stop.line, stop.column + 1, "")


_NOT_A_MOVE = object()
# Methods that keep a tensor where it is (shape, dtype, in-place fill); those after which ``device=`` on the creation
# and no move is the same tensor (not ``.type(torch.ByteTensor)``, which would bring it back to the host).
_SAFE_AFTER_DEVICE = frozenset({"view", "reshape", "unsqueeze", "squeeze", "expand", "repeat", "contiguous", "t",
                                "transpose", "permute", "float", "long", "int", "double", "bool", "half", "flip",
                                "clone", "fill_", "zero_"})
_FILLS = frozenset({"fill_", "zero_", "uniform_", "normal_"})
_KEEPS_PLACE = _SAFE_AFTER_DEVICE | _FILLS | {"type", "bfloat16"}
_LEGACY_CONSTRUCTORS = frozenset({f"{kind}Tensor" for kind in ("Float", "Double", "Half", "BFloat16", "Long", "Int",
                                                                 "Short", "Char", "Byte", "Bool")})
# torch functions of one tensor computed where it is: a host tensor's result is on the host
_HOST_FUNCTIONS = frozenset({"tril", "triu", "exp", "log", "sin", "cos", "sqrt", "abs", "outer", "flip", "diag"})


_SIZED_CREATION = frozenset({"zeros", "ones", "empty", "full", "rand", "randn"})  # sizes first


def _no_elements(call: cst.Call) -> bool:
    """A creation given a literal size of 0 (``torch.empty(0)``, ``torch.zeros((0, 4))``): an empty tensor."""
    sizes = [a.value for a in call.args if a.keyword is None and not a.star]
    if sizes and (isinstance(sizes[0], (cst.Tuple, cst.List)) or callee_name(call) == "full"):
        sizes = [e.value for e in sizes[0].elements] if isinstance(sizes[0], (cst.Tuple, cst.List)) else sizes[:1]
    return any(is_literal(size, 0) for size in sizes)


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
