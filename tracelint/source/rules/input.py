"""TL2xx, the input pipeline: a torch DataLoader that loads in the main process (TL201) or without pinned host memory
(TL202), a batch of a pinned loader copied to the GPU without ``non_blocking=True`` (TL203), and a tensor built on the
host every step only to be copied to the device (TL204: ``torch.zeros(n).cuda()``).

The three rules judge a loader by what its file shows of its use (``LoaderFacts``, computed once per file after the
traversal, when every node has its parent):

- where its batches are drawn: a loop over it (through ``enumerate``, ``tqdm``, ``zip``, ``iter``), ``next(it)``,
  followed through names, ``self`` attributes, functions and methods of the file it is passed to, factories of the
  file that return it, and ``accelerator.prepare`` / ``fabric.setup_dataloaders``;
- where those batches go: ``.to(device)`` / ``.cuda()`` / ``.type(cuda type)`` (a device copy), a call that takes a
  device, a consumer the file does not show, an RPC send, host-only reads;
- what one item costs: a dataset of in-memory tensors with trivial indexing needs no worker processes.

A loader whose use the file does not show at all (a module that builds loaders for others) is reported: the builder
is where the fix belongs. TL203 counts only batches of a loader built in the same file with ``pin_memory`` set (not
literal False): on an unpinned loader a non-blocking copy is still synchronous, and the missing pin_memory (TL202) is
the finding to fix first.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import libcst as cst

from tracelint.engine import Edit, Fix
from tracelint.source import loops
from tracelint.source.calls import Arguments, call_arguments, is_literal, literal, set_keyword
from tracelint.source.context import FileContext, callee_name, dotted_name, iter_children, iter_descendants
from tracelint.source.loops import runs_once
from tracelint.source.rule import SourceRule
from tracelint.source.values import words
from tracelint.source.vocab import FILLED_CREATION, GRAPH_BATCHING, HOST_ATTRS, RANDOM_CREATION

DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
# Positions in DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory)
DATASET_POS, NUM_WORKERS_POS, COLLATE_POS, PIN_MEMORY_POS = 0, 5, 6, 7
DEFAULT_WORKERS = 4


def dataloader_arguments(ctx: FileContext, node: cst.CSTNode) -> Arguments | None:
    """The arguments of ``node`` when it is a call of torch's DataLoader, else None."""
    if isinstance(node, cst.Call) and ctx.qualified_name(node.func) in DATALOADERS:
        return call_arguments(ctx, node)
    return None


def pins_memory(args: Arguments) -> bool:
    """``pin_memory`` is set, to anything but a literal False (a **kwargs dict literal counts)."""
    value = args.get(PIN_MEMORY.name, PIN_MEMORY.position)
    return value is not None and not is_literal(value, False)


@dataclass(frozen=True, slots=True)
class _Argument:
    """A DataLoader argument, its position, the literal value that is a violation, the value the fix writes, and
    whether that fix is safe."""

    name: str
    position: int
    bad: object
    good: str
    safe: bool


NUM_WORKERS = _Argument("num_workers", NUM_WORKERS_POS, bad=0, good=str(DEFAULT_WORKERS), safe=False)
PIN_MEMORY = _Argument("pin_memory", PIN_MEMORY_POS, bad=False, good="True", safe=True)


def _violates(args: Arguments, argument: _Argument) -> bool:
    """``argument`` is missing or set to its literal bad value; a non-literal value, or ``**kwargs`` that may set it,
    is not a violation."""
    value = args.get(argument.name, argument.position)
    if value is None:
        return args.known  # else **kwargs / *args may set it
    return is_literal(value, argument.bad)


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

    argument: ClassVar[_Argument]
    message: ClassVar[str]

    def matters(self, loader: cst.Call, args: Arguments) -> bool:
        raise NotImplementedError

    def finish(self) -> None:
        argument = self.argument
        for node in self.loaders:
            args = call_arguments(self.ctx, node)
            if not _violates(args, argument) or not self.matters(node, args):
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

    def finish(self) -> None:
        facts = loader_facts(self.ctx)
        copies: dict[cst.Call, None] = {}
        for node in self.loaders:
            if pins_memory(call_arguments(self.ctx, node)):
                copies.update(dict.fromkeys(facts.device_copies(node)))
        for call in copies:
            self._check_copy(call)

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
# Words of a name that holds a device (``device``, ``args.gpu``, ``local_rank``, ``self.dev``).
_DEVICE_WORDS = frozenset({"device", "dev", "gpu", "cuda", "rank", "devices"})


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
    """``expr`` names a device other than the CPU: ``"cuda"``, ``0``, ``torch.device(...)``, ``x.device``, or a
    name whose words say device (``device``, ``args.gpu``, ``local_rank``). A tensor (``.to(other)``) or a dtype
    does not."""
    if isinstance(expr, cst.SimpleString):
        return not is_literal(expr, "cpu", "meta") and isinstance(literal(expr), str)
    if isinstance(expr, cst.Integer):
        return True
    if isinstance(expr, cst.Call):
        return dotted_name(expr.func) == "torch.device" and not _is_cpu_literal(expr)
    if isinstance(expr, (cst.Name, cst.Attribute)):
        last = expr.attr.value if isinstance(expr, cst.Attribute) else expr.value
        return bool(words(last) & _DEVICE_WORDS)
    return False


# --------------------------------------------------------------------------------------------------------------
# What the file shows of a loader's use
@dataclass(frozen=True, slots=True)
class Draw:
    """A place where a loader's batches are taken: a loop over it (``For``/``CompFor``) or a ``next()`` call."""

    node: cst.CSTNode
    path: tuple[int, ...]  # the batch's position in each item (``enumerate``: 1; ``zip(a, b)``: 0 or 1)
    full: bool             # the whole loader is iterated (a loop whose body does not end in break/return)


@dataclass(slots=True)
class LoaderUse:
    draws: list[Draw] = field(default_factory=list)
    escapes: bool = False    # handed to code the file does not show (another module's function, a container...)
    on_device: bool = False  # wrapped by accelerate / Fabric, which move the batches to the device


@dataclass(slots=True)
class BatchUse:
    copies: list[cst.Call] = field(default_factory=list)  # device copies of batch values (.to / .cuda / .type)
    device: bool = False     # a device copy, or a call that takes a device (``to_device(batch, device)``)
    consumers: list[cst.CSTNode] = field(default_factory=list)  # handed to code the file does not show, or kept


# Calls whose result iterates the loader's batches: (position change of the batch in each item).
_ITERATORS = frozenset({"iter", "tqdm", "track", "islice", "cycle", "chain", "trange", "prefetch"})
# Calls that wrap a loader and move its batches to the device themselves (accelerate, Lightning Fabric).
_DEVICE_WRAPPERS = frozenset({"prepare", "prepare_data_loader", "setup_dataloaders"})
# Calls that only read a value (a loader's length, a batch's repr): neither a use of the batches nor an escape.
_READERS = frozenset({"len", "print", "isinstance", "hasattr", "getattr", "str", "repr", "id", "type", "vars",
                      "format", "int", "float", "bool", "round", "abs", "issubclass", "callable"})
# Calls whose result is the batch itself or a part of it (containers, ``Variable``, torch ops on host tensors).
_DERIVERS = frozenset({"iter", "next", "list", "tuple", "enumerate", "zip", "reversed", "dict", "sorted",
                       "Variable", "map", "filter"})
# Tensor methods that read on the host (vocab.HOST_METHODS also holds dict and str methods, which a batch that is a
# dict goes through: ``batch.items()``).
_HOST_READS = frozenset({"item", "tolist", "numpy", "cpu", "size", "dim", "ndimension", "numel", "nelement",
                         "element_size", "data_ptr", "stride", "get_device", "is_contiguous", "is_floating_point",
                         "is_complex", "storage_offset"})
_DEVICE_WORDS = frozenset({"device", "cuda", "gpu", "gpus"})
_DTYPES = frozenset({
    "float", "float16", "float32", "float64", "bfloat16", "half", "double", "int", "int8", "int16", "int32",
    "int64", "long", "bool", "uint8", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2",
})
_MAX_HOPS = 6  # functions followed from a loader to its batches' copy (train() -> run_epoch() -> step() ...)

# Cheap items (TL201): a dataset of tensors held in memory, indexed without per-item CPU work.
TENSOR_DATASETS = frozenset({"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"})
_SUBSETS = frozenset({"torch.utils.data.Subset", "torch.utils.data.dataset.Subset"})
_SPLITS = frozenset({"torch.utils.data.random_split", "torch.utils.data.dataset.random_split"})
_CONCATS = frozenset({"torch.utils.data.ConcatDataset", "torch.utils.data.dataset.ConcatDataset"})
_CHEAP_BUILTINS = frozenset({
    "int", "float", "str", "bool", "len", "range", "list", "tuple", "dict", "set", "min", "max", "abs", "sum", "zip",
    "enumerate", "round", "sorted", "reversed", "slice", "isinstance", "divmod", "hasattr", "getattr",
})
_CHEAP_TORCH = frozenset({
    "tensor", "as_tensor", "from_numpy", "stack", "cat", "full", "full_like", "zeros", "zeros_like", "ones",
    "ones_like", "empty", "arange", "LongTensor", "FloatTensor", "IntTensor", "BoolTensor", "Tensor",
    "pad_sequence", "pad", "flip", "where", "clamp", "randint", "rand", "randn", "randperm",
})
_CHEAP_METHODS = frozenset({
    "item", "tolist", "long", "float", "int", "half", "double", "bool", "type", "to", "clone", "contiguous", "view",
    "reshape", "squeeze", "unsqueeze", "flip", "t", "transpose", "permute", "narrow", "index_select", "astype",
    "copy", "join", "format", "split", "strip", "lower", "upper", "replace", "get", "keys", "values", "items",
    "append", "extend", "size", "dim", "numel", "unbind", "chunk", "fill_", "masked_fill", "masked_fill_", "clamp",
    "clamp_", "expand", "repeat", "new_full", "new_zeros", "new_ones",
})
# Storage read lazily by indexing (each item is a disk read): a dataset holding one is not in memory.
_LAZY_STORAGE = frozenset({"memmap", "open_memmap", "File", "open", "Environment", "open_file", "open_zarr"})
# Graph-library batching in a collate function: DataLoader pinning pins tensors only, not these objects.


class LoaderFacts:
    """Per-file answers about torch DataLoaders (see the module docstring); one object per file (``loader_facts``)."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.facts = loops.facts(ctx)
        self.names: dict[str, list[cst.Name]] = {}           # every Name read, by identifier
        self.attributes: dict[str, list[cst.Attribute]] = {}  # every ``x.attr`` read, by attr
        self.classes: dict[str, list[cst.ClassDef]] = {}
        self.functions: dict[str, list[cst.FunctionDef]] = {}
        self._stores: set[cst.CSTNode] = set()
        self._uses: dict[cst.Call, LoaderUse] = {}
        self._index()

    def _index(self) -> None:
        """One walk of the module: the names read, attributes, classes, functions, and the binding targets. The
        names that are no reads are never pushed (``x.attr``'s attr, a keyword's name, a def's name, imports)."""
        stores = self._stores
        work: list[cst.CSTNode] = [self.ctx.module]
        while work:
            node = work.pop()
            kind = type(node)
            if kind is cst.Name:
                self.names.setdefault(node.value, []).append(node)
                continue
            if kind is cst.Attribute:
                self.attributes.setdefault(node.attr.value, []).append(node)
                work.append(node.value)
                continue
            if kind is cst.Arg:
                work.append(node.value)
                continue
            if kind in (cst.Import, cst.ImportFrom):
                continue
            if kind is cst.ClassDef:
                self.classes.setdefault(node.name.value, []).append(node)
                work.extend(k for k in iter_children(node) if k is not node.name)
                continue
            if kind is cst.FunctionDef:
                self.functions.setdefault(node.name.value, []).append(node)
                work.extend(k for k in iter_children(node) if k is not node.name)
                continue
            if kind is cst.Assign:
                for target in node.targets:
                    stores.update(_target_nodes(target.target))
            elif kind in (cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor, cst.NamedExpr):
                stores.update(_target_nodes(node.target))
            elif kind is cst.Param:
                stores.add(node.name)
            elif kind is cst.AsName:
                stores.update(_target_nodes(node.name))
            elif kind is cst.Del:
                stores.update(_target_nodes(node.target))
            work.extend(iter_children(node))

    # -- the questions the rules ask ------------------------------------------------------------------------------
    def rarely_read(self, loader: cst.Call) -> bool:
        """All of the loader's use is in sight, and it only gives a batch now and then: ``next(iter(loader))``
        before training, or in a function that runs at a sample interval; a loop that ends in ``break``."""
        use = self.use(loader)
        return not use.escapes and bool(use.draws) and all(self._rare(d) for d in use.draws)

    def pinning_helps(self, loader: cst.Call, args: Arguments) -> bool:
        """Whether pinned memory would speed the copies of the loader's batches to the GPU, as far as the file shows:
        false for graph-library batches, a loader read now and then, and batches that stay on the host or are sent
        over RPC; true when the file does not show where they go."""
        if self._graph_batches(args):
            return False
        use = self.use(loader)
        if use.escapes or not use.draws:
            return True
        hot = [d for d in use.draws if not self._rare(d)]
        if not hot:
            return False
        if use.on_device:
            return True
        batches = BatchUse()
        for draw in hot:
            self._batches(draw, batches)
        if batches.device:
            return True
        # handed to a model or function: on the GPU if the file puts anything there, or if it comes from elsewhere
        return bool(batches.consumers) and (self.facts.device_evidence() or
                                            not all(self._host_consumer(c) for c in batches.consumers))

    def device_copies(self, loader: cst.Call) -> list[cst.Call]:
        """The ``.to(device)`` / ``.cuda()`` / ``.type(cuda type)`` calls of the loader's batches (or their parts)."""
        batches = BatchUse()
        for draw in self.use(loader).draws:
            self._batches(draw, batches)
        return batches.copies

    def cheap_items(self, args: Arguments) -> bool:
        """The loader's items cost no CPU work worth a worker process: an in-memory dataset (``TensorDataset``, a
        list, a class of the file whose ``__getitem__`` only indexes what it holds and converts to tensors) and no
        collate function, or one of the file doing the same."""
        dataset = args.get("dataset", DATASET_POS)
        if dataset is None or not self._cheap_dataset(dataset, 0):
            return False
        collate = args.get("collate_fn", COLLATE_POS)
        if collate is None or is_literal(collate, None):
            return True
        bodies = self._callable_bodies(collate)
        return bool(bodies) and all(self._cheap_body(body) for body in bodies)

    # -- where the loader goes --------------------------------------------------------------------------------------
    def use(self, loader: cst.Call) -> LoaderUse:
        found = self._uses.get(loader)
        if found is None:
            found = self._uses[loader] = LoaderUse()
            # A work list, not recursion: a chain of thousands of ``a = b`` must not overflow the stack.
            work: list[tuple[cst.BaseExpression, tuple[int, ...], int | None, int]] = [(loader, (), None, 0)]
            seen: set = set()
            while work:
                item = work.pop()
                if item in seen:
                    continue
                seen.add(item)
                if item[3] > _MAX_HOPS:
                    found.escapes = True
                    continue
                self._follow_loader(*item, found, work.append)
        return found

    def _rare(self, draw: Draw) -> bool:
        return not draw.full and self.facts.hot_loop(draw.node) is None

    def _follow_loader(self, expr: cst.BaseExpression, path: tuple[int, ...], element: int | None, hops: int,
                       use: LoaderUse, push) -> None:
        """One step after the value of ``expr`` (the loader, an iterator or wrapper of it; with ``element``, a tuple
        holding it there): where its batches are drawn (``use.draws``), where it leaves the file's sight
        (``use.escapes``), or the expressions it flows to (``push``-ed to be followed in turn)."""
        follow = lambda e, p=path, el=None, h=hops: push((e, p, el, h))  # noqa: E731
        parent = self.ctx.parent(expr)
        if isinstance(parent, cst.Attribute) and parent.value is expr:
            call = self.ctx.parent(parent)
            if parent.attr.value == "__iter__" and isinstance(call, cst.Call) and call.func is parent:
                follow(call)
            return  # loader.dataset, loader.sampler.set_epoch(epoch), len(loader.dataset): not a draw
        if element is not None:
            self._follow_element(expr, parent, element, lambda e, el: follow(e, path, el), use)
            return
        if isinstance(parent, cst.Arg) and parent.value is expr and not parent.star:
            call = self.ctx.parent(parent)
            if isinstance(call, cst.Call):
                self._loader_argument(call, parent, path, hops, use, push)
                return
        if isinstance(parent, cst.For) and parent.iter is expr:
            use.draws.append(Draw(parent, path, full=not runs_once(parent)))
        elif isinstance(parent, cst.CompFor) and parent.iter is expr:
            use.draws.append(Draw(parent, path, full=True))
        elif isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is expr:
            targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
            for target in targets:
                refs = self._references(target)
                if refs is None:
                    use.escapes = True
                for ref in refs or ():
                    follow(ref)
        elif isinstance(parent, cst.Return):
            self._through_return(parent, lambda call: follow(call, path, None, hops + 1), use)
        elif isinstance(parent, (cst.Element, cst.StarredElement)):
            self._follow_packed(expr, lambda e, el: follow(e, path, el), use)
        elif isinstance(parent, (cst.IfExp, cst.BooleanOperation)) and getattr(parent, "test", None) is not expr:
            follow(parent)
        elif not isinstance(parent, (cst.Expr, cst.Comparison, cst.If, cst.Del)):
            use.escapes = True  # yield, a dict value, a lambda, an index...

    def _loader_argument(self, call: cst.Call, arg: cst.Arg, path, hops, use: LoaderUse, push) -> None:
        """The loader is an argument of ``call``."""
        follow = lambda e, p=path, el=None, h=hops: push((e, p, el, h))  # noqa: E731
        name = callee_name(call)
        qualified = self.ctx.qualified_name(call.func) or ""
        builtin = qualified.startswith("builtins.")
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if arg.keyword is None and qualified == "builtins.next":
            use.draws.append(Draw(call, path, full=False))
        elif name == "enumerate" and builtin and arg.keyword is None:
            follow(call, (*path, 1))
        elif name == "zip" and builtin and arg in positional:
            follow(call, (*path, positional.index(arg)))
        elif name in _ITERATORS and (arg.keyword is None or arg.keyword.value == "iterable"):
            follow(call, path)
        elif name in _DEVICE_WRAPPERS and isinstance(call.func, cst.Attribute) and not builtin and \
                not self.facts.callers.callees(call):
            use.on_device = True
            if len(call.args) == 1:
                follow(call, path)
            else:  # model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                follow(call, path, call.args.index(arg))
        elif name in _READERS and (builtin or qualified == ""):
            return
        else:
            params = self._parameters(call, arg)
            if params is None:
                use.escapes = True
            for param in params or ():
                for ref in self._references(param.name) or ():
                    follow(ref, path, None, hops + 1)

    def _follow_element(self, expr, parent, element: int, follow, use: LoaderUse) -> None:
        """``expr`` holds a tuple whose ``element``-th item is followed: ``a, b = f()``, ``f()[1]``, ``return``."""
        if isinstance(parent, cst.Assign) and parent.value is expr:
            for target in (t.target for t in parent.targets):
                if isinstance(target, cst.Tuple | cst.List) and element < len(target.elements) and \
                        not any(isinstance(e, cst.StarredElement) for e in target.elements):
                    for ref in self._references(target.elements[element].value) or ():
                        follow(ref, None)
                else:
                    for ref in self._references(target) or ():
                        follow(ref, element)
        elif isinstance(parent, cst.Subscript) and parent.value is expr and len(parent.slice) == 1 and \
                isinstance(parent.slice[0].slice, cst.Index) and is_literal(parent.slice[0].slice.value, element):
            follow(parent, None)
        elif isinstance(parent, cst.Return):
            self._through_return(parent, lambda call: follow(call, element), use)
        else:
            use.escapes = True

    def _follow_packed(self, expr, follow, use) -> None:
        """``expr`` is an item of a tuple/list literal: followed when the literal is returned or unpacked."""
        element = self.ctx.parent(expr)
        literal = self.ctx.parent(element)
        if not isinstance(literal, cst.Tuple | cst.List) or isinstance(element, cst.StarredElement):
            use.escapes = True
            return
        index = next(i for i, e in enumerate(literal.elements) if e is element)
        follow(literal, index)

    def _through_return(self, node: cst.Return, follow, use) -> None:
        """A function of the file returns the value: followed at each of its calls in the file (none: out of sight)."""
        function = next((a for a in self.ctx.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.Lambda))), None)
        if not isinstance(function, cst.FunctionDef) or _is_generator(function):
            use.escapes = True
            return
        calls = self.facts.callers.callers(function)
        if not calls:
            use.escapes = True  # a factory for other modules: its use is out of sight
        for call in calls:
            follow(call)

    # -- where the batches go -------------------------------------------------------------------------------------
    def _batches(self, draw: Draw, batches: BatchUse) -> None:
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
            for name in _names_in(_at_path(target, draw.path)):
                work.extend((ref, 0) for ref in self._references(name) or ())
        seen: set = set()
        while work:
            expr, hops = work.pop()
            if expr not in seen and hops <= _MAX_HOPS:
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
                for name in _names_in(target):
                    for ref in self._references(name) or ():
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
            for name in _names_in(parent.target):
                for ref in self._references(name) or ():
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
        if name in _READERS and (qualified.startswith("builtins.") or not qualified):
            return
        if name in _DERIVERS or qualified.startswith("torch."):
            follow(call)  # Variable(x), torch.cat(batch), list(batch): the result is the batch's data
            return
        params = self._parameters(call, arg)
        if params:
            for param in params:
                for ref in self._references(param.name) or ():
                    follow(ref, hops + 1)
            return
        if words(name) & _DEVICE_WORDS or any(
                a is not arg and (a.keyword is not None and a.keyword.value in ("device", "non_blocking") or
                                  words(self.ctx.code_for(a.value)) & _DEVICE_WORDS) for a in call.args):
            batches.device = True  # to_device(batch, device), fabric.to_device(batch), prepare(batch, self.device)
            return
        batches.consumers.append(call)

    def _host_consumer(self, node: cst.CSTNode) -> bool:
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
        value = self._value(func)
        if not isinstance(value, cst.Call):
            return func.value in self.classes or func.value in self.functions
        qualified = self.ctx.qualified_name(value.func) or ""
        built = dotted_name(value.func) or ""
        return qualified.startswith(("torch.", "torchvision.")) or built in self.classes or built in self.functions

    def _device_copy(self, call: cst.Call) -> bool:
        """``.to(device)`` / ``.to("cuda")`` / ``.type(torch.cuda.FloatTensor)`` moves data to a device;
        ``.to(torch.float16)``, ``.to("cpu")``, ``.to(dtype=...)`` do not."""
        args = call_arguments(self.ctx, call)
        if callee_name(call) == "type":
            target = args.get("dtype", 0)
            if target is None:
                return False
            value = self._value(target) if isinstance(target, cst.Name) else None
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
            value = self._value(expr)
            return value is not None and self._host_target(value, depth + 1)
        return False

    # -- what an item costs ----------------------------------------------------------------------------------------
    def _cheap_dataset(self, expr: cst.BaseExpression, depth: int) -> bool:
        if depth > 4:
            return False
        if isinstance(expr, (cst.List, cst.Tuple, cst.ListComp)):
            return True  # items already built and held in a list
        if isinstance(expr, cst.Name):
            value = self._value(expr)
            if value is not None:
                return self._cheap_dataset(value, depth + 1)
            split = self._split_of(expr)  # train_set, val_set = random_split(dataset, ...)
            return split is not None and self._cheap_dataset(split, depth + 1)
        if isinstance(expr, cst.Subscript):  # {"train": train_set, "test": test_set}[split]
            container = self._value(expr.value) if isinstance(expr.value, cst.Name) else expr.value
            return isinstance(container, cst.Dict) and bool(container.elements) and all(
                isinstance(e, cst.DictElement) and self._cheap_dataset(e.value, depth + 1) for e in container.elements)
        if not isinstance(expr, cst.Call):
            return False
        qualified = self.ctx.qualified_name(expr.func)
        if qualified in TENSOR_DATASETS:
            return True
        if qualified in _SUBSETS and expr.args:
            return self._cheap_dataset(expr.args[0].value, depth + 1)
        if qualified in _CONCATS and expr.args:
            parts = expr.args[0].value
            return isinstance(parts, cst.List | cst.Tuple) and all(
                self._cheap_dataset(e.value, depth + 1) for e in parts.elements)
        if qualified is None and isinstance(expr.func, cst.Name):
            classes = self.classes.get(expr.func.value, ())
            return bool(classes) and all(self._cheap_class(c, depth + 1) for c in classes)
        return False

    def _split_of(self, name: cst.Name) -> cst.BaseExpression | None:
        """The dataset split by ``random_split`` into the tuple ``name`` was unpacked from."""
        for target in (n for n in self.names.get(name.value, ()) if n in self._stores):
            packing = (cst.Element, cst.Tuple, cst.List, cst.AssignTarget)
            assign = next(a for a in self.ctx.ancestors(target) if not isinstance(a, packing))
            value = assign.value if isinstance(assign, cst.Assign) else None
            if isinstance(value, cst.Call) and self.ctx.qualified_name(value.func) in _SPLITS and value.args:
                return value.args[0].value
        return None

    def _cheap_class(self, cls: cst.ClassDef, depth: int) -> bool:
        if depth > 4:
            return False
        methods = {s.name.value: s for s in cls.body.body if isinstance(s, cst.FunctionDef)}
        init = methods.get("__init__")
        if init is not None and any(isinstance(n, cst.Call) and callee_name(n) in _LAZY_STORAGE and
                                    self.ctx.qualified_name(n.func) != "builtins.open"
                                    for n in iter_descendants(init)):
            return False  # np.memmap / h5py.File / lmdb.open: indexing reads the disk
        getitem = methods.get("__getitem__")
        if getitem is not None:
            return self._cheap_body(getitem)
        for base in cls.bases:
            qualified = self.ctx.qualified_name(base.value)
            if qualified in TENSOR_DATASETS:
                return True
            local = [c for c in self.classes.get(dotted_name(base.value) or "", ()) if c is not cls] \
                if qualified is None else []
            if local and all(self._cheap_class(c, depth + 1) for c in local):
                return True
        return False

    def _cheap_body(self, body: cst.CSTNode) -> bool:
        """``body`` only indexes what it holds and converts it: every call is one of ``_CHEAP_*`` (no file read,
        decode, transform or tokenizer), and no loop, comprehension or string formatting runs per item (minGPT's
        adder dataset, which formats and parses a few digits per item, ran 1.2x faster with 4 workers)."""
        for node in iter_descendants(body):
            if isinstance(node, (cst.With, cst.Yield, cst.For, cst.While, cst.ListComp, cst.SetComp, cst.DictComp,
                                 cst.GeneratorExp, cst.FormattedString)):
                return False
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo) and \
                    isinstance(node.left, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
                return False
            if not isinstance(node, cst.Call):
                continue
            qualified = self.ctx.qualified_name(node.func)
            leaf = callee_name(node)
            if qualified is not None:
                if qualified.startswith("builtins.") and leaf in _CHEAP_BUILTINS:
                    continue
                if qualified.startswith("torch.") and leaf in _CHEAP_TORCH:
                    continue
                return False
            if not (isinstance(node.func, cst.Attribute) and leaf in _CHEAP_METHODS):
                return False
        return True

    def _callable_bodies(self, expr: cst.BaseExpression, depth: int = 0) -> list[cst.CSTNode]:
        """The bodies ``expr`` (a collate function) may run: a function or lambda of this file, ``obj.method`` of a
        class of the file; [] when unknown."""
        if isinstance(expr, cst.Lambda):
            return [expr.body]
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name):  # collate = Collate(): its __call__
            return self._methods(expr.func.value, "__call__")
        if isinstance(expr, cst.Name) and self.ctx.qualified_name(expr) is None:
            value = self._value(expr)
            if value is not None:
                return self._callable_bodies(value, depth + 1) if depth < 4 else []
            return [f.body for f in self.functions.get(expr.value, ())]
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
            value = self._value(expr.value)
            cls = dotted_name(value.func) if isinstance(value, cst.Call) else None
            return self._methods(cls or "", expr.attr.value)
        return []

    def _methods(self, cls: str, name: str) -> list[cst.CSTNode]:
        return [s.body for c in self.classes.get(cls, ()) for s in c.body.body
                if isinstance(s, cst.FunctionDef) and s.name.value == name]

    def _graph_batches(self, args: Arguments) -> bool:
        """The collate function batches graphs (``dgl.batch``, PyG's ``Batch.from_data_list``)."""
        collate = args.get("collate_fn", COLLATE_POS)
        if collate is None:
            return False
        if _last_name(collate) in self.ctx.graph_collates:  # defined in another file of the run
            return True
        for body in self._callable_bodies(collate):
            for node in iter_descendants(body):
                if isinstance(node, cst.Call) and self.ctx.qualified_name(node.func) in GRAPH_BATCHING:
                    return True
        return False

    # -- names -----------------------------------------------------------------------------------------------------
    def _value(self, name: cst.Name) -> cst.BaseExpression | None:
        """The value ``name`` is bound to before it in its function, else its one binding at module level."""
        value = self.facts.value_of(name)
        if value is not None:
            return value
        scope = self.facts.scope_of(name)
        if scope is self.ctx.module or name.value in self.facts.bindings(scope).bindings:
            return None
        bound = self.facts.bindings(self.ctx.module).bindings.get(name.value, ())
        return bound[0].value if len(bound) == 1 and bound[0].element is None else None

    def _references(self, target: cst.BaseExpression) -> list[cst.BaseExpression] | None:
        """The reads of the binding that ``target`` makes (a name bound by an assignment, loop, comprehension or
        parameter; ``self.attr`` bound in a method); None when they cannot be known (``obj.attr = ...``,
        ``d[k] = ...``, or a ``self`` attribute also read through another object)."""
        if isinstance(target, cst.Name):
            return self._name_references(target)
        name = dotted_name(target) if isinstance(target, cst.Attribute) else None
        if name is None or name.count(".") != 1 or not name.startswith("self."):
            return None
        cls = next((a for a in self.ctx.ancestors(target) if isinstance(a, cst.ClassDef)), None)
        if cls is None:
            return None
        found = []
        for node in self.attributes.get(target.attr.value, ()):
            if node is target or node in self._stores:
                continue
            if not (isinstance(node.value, cst.Name) and node.value.value == "self") or \
                    not any(a is cls for a in self.ctx.ancestors(node)):
                return None  # trainer.train_loader read from outside the class
            found.append(node)
        return found

    def _name_references(self, target: cst.Name) -> list[cst.BaseExpression]:
        facts, name = self.facts, target.value
        statement = next(a for a in self.ctx.ancestors(target)
                         if isinstance(a, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.NamedExpr, cst.For,
                                           cst.CompFor, cst.Param, cst.WithItem, cst.Module)))
        reads = [n for n in self.names.get(name, ()) if n is not target and n not in self._stores]
        if isinstance(statement, cst.CompFor):  # a comprehension variable is read inside its comprehension only
            comprehension = self.ctx.parent(statement)
            while isinstance(comprehension, cst.CompFor):
                comprehension = self.ctx.parent(comprehension)
            return [n for n in reads if any(a is comprehension for a in self.ctx.ancestors(n))
                    and not any(a is statement.iter for a in self.ctx.ancestors(n))]
        scope = facts.scope_of(target)
        table = facts.bindings(scope)
        start = table.order.get(statement)
        if start is None:
            return []
        orders = sorted(b.order for b in table.bindings.get(name, ()))
        if isinstance(statement, (cst.For, cst.Param, cst.WithItem)):
            mine = start
        else:  # an assignment binds after its value: its binding is the first one past the statement's start
            mine = next((o for o in orders if o > start), start)
        found: list[cst.BaseExpression] = []
        for node in reads:
            where = facts.scope_of(node)
            if where is scope:
                at = table.order.get(node)
                if at is not None and at > mine and max((o for o in orders if o < at), default=None) == mine:
                    found.append(node)
            elif name not in facts.bindings(where).bindings and (
                    scope is self.ctx.module or any(a is scope for a in self.ctx.ancestors(where))):
                found.append(node)  # a global or closure read from a function defined after the binding
        return found

    def _parameters(self, call: cst.Call, arg: cst.Arg) -> list[cst.Param] | None:
        """The parameters of this file's functions, methods or classes (``__init__``, an instance's ``forward``) that
        ``arg`` of ``call`` binds; None when ``call`` is none of those (another module's function)."""
        targets: list[tuple[cst.FunctionDef, bool]] = []
        for function in self.facts.callers.callees(call):
            owner = self.ctx.parent(self.ctx.parent(function))
            method = isinstance(owner, cst.ClassDef) and not any(
                dotted_name(d.decorator) == "staticmethod" for d in function.decorators)
            through_class = isinstance(call.func, cst.Attribute) and isinstance(owner, cst.ClassDef) and \
                dotted_name(call.func.value) == owner.name.value
            targets.append((function, method and not through_class))
        if not targets and self.ctx.qualified_name(call.func) is None:
            cls_name, method_name = None, None
            if isinstance(call.func, cst.Name) and call.func.value in self.classes:
                cls_name, method_name = call.func.value, "__init__"
            elif isinstance(call.func, cst.Name):  # model(x) where model = Net(...)
                value = self._value(call.func)
                if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
                    cls_name, method_name = value.func.value, "forward"
            for cls in self.classes.get(cls_name or "", ()):
                targets += [(s, True) for s in cls.body.body
                            if isinstance(s, cst.FunctionDef) and s.name.value == method_name]
        if not targets:
            return None
        found = [p for function, bound in targets if (p := _parameter(function, call, arg, bound)) is not None]
        return found if len(found) == len(targets) else None


def _parameter(function: cst.FunctionDef, call: cst.Call, arg: cst.Arg, bound: bool) -> cst.Param | None:
    params = function.params
    positional = [*params.posonly_params, *params.params][1 if bound else 0:]
    if arg.keyword is not None:
        match = next((p for p in (*positional, *params.kwonly_params) if p.name.value == arg.keyword.value), None)
        return match or (params.star_kwarg if isinstance(params.star_kwarg, cst.Param) else None)
    if arg.star:
        return None
    index = [a for a in call.args if a.keyword is None and not a.star].index(arg)
    if index < len(positional):
        return positional[index]
    return params.star_arg if isinstance(params.star_arg, cst.Param) else None


def _is_generator(function: cst.FunctionDef) -> bool:
    work = list(iter_children(function.body))
    while work:
        node = work.pop()
        if isinstance(node, cst.Yield):
            return True
        if not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            work.extend(iter_children(node))
    return False


def _target_nodes(target: cst.CSTNode) -> list[cst.CSTNode]:
    """The Name / Attribute / Subscript nodes an assignment target binds."""
    if isinstance(target, cst.Tuple | cst.List):
        return [n for e in target.elements for n in _target_nodes(e.value)]
    if isinstance(target, cst.StarredElement):
        return _target_nodes(target.value)
    return [target]


def _names_in(target: cst.BaseExpression) -> list[cst.Name]:
    return [n for n in _target_nodes(target) if isinstance(n, cst.Name)]


def _at_path(target: cst.BaseExpression, path: tuple[int, ...]) -> cst.BaseExpression:
    """The part of a loop target that holds the batch: ``(i, (x, y))`` with path (1,) -> ``(x, y)``. A target that
    does not unpack that far holds it whole (``for item in enumerate(loader)``)."""
    for index in path:
        if not isinstance(target, cst.Tuple | cst.List) or index >= len(target.elements) or \
                any(isinstance(e, cst.StarredElement) for e in target.elements):
            return target
        target = target.elements[index].value
    return target


def loader_facts(ctx: FileContext) -> LoaderFacts:
    """The one LoaderFacts of a file (shared by TL201-TL203), built after the traversal."""
    return ctx.memo("loader-facts", LoaderFacts)


def _last_name(expr: cst.BaseExpression) -> str | None:
    """``collate`` for ``dataset.collate``, ``collate_fn``, ``partial(dataset.collate, ...)``."""
    if isinstance(expr, cst.Call) and (dotted_name(expr.func) or "").rsplit(".", 1)[-1] == "partial" and expr.args:
        expr = expr.args[0].value
    name = dotted_name(expr)
    return name.rsplit(".", 1)[-1] if name else None

