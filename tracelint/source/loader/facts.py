"""``LoaderFacts``: the questions the TL2xx rules (rules/input.py) ask about a torch DataLoader, answered from what
its file shows of its use; one object per file (``loader_facts``), built after the traversal, when every node has
its parent."""
from __future__ import annotations

import libcst as cst

from tracelint.source.loader.arguments import DATALOADERS, pins_memory
from tracelint.source.loader.batches import Batches
from tracelint.source.loader.draws import Draw, Draws
from tracelint.source.loader.index import FileIndex
from tracelint.source.loader.items import Items
from tracelint.source.semantic.calls import Arguments, call_arguments
from tracelint.source.semantic.model import FileContext


class LoaderFacts:
    """Per-file answers about torch DataLoaders (see the package docstring); one object per file (``loader_facts``)."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = FileIndex(ctx)
        self.facts = self.index.facts
        self.draws = Draws(self.index)
        self.batches = Batches(self.index)
        self.items = Items(self.index)

    def rarely_read(self, loader: cst.Call) -> bool:
        """All of the loader's use is in sight, and it only gives a batch now and then: ``next(iter(loader))``
        before training, or in a function that runs at a sample interval; a loop that ends in ``break``."""
        use = self.draws.use(loader)
        return not use.escapes and bool(use.draws) and all(self._rare(d) for d in use.draws)

    def pinning_helps(self, loader: cst.Call, args: Arguments) -> bool:
        """Whether pinned memory would speed the copies of the loader's batches to the GPU, as far as the file shows:
        false for graph-library batches, a loader read now and then, and batches that stay on the host or are sent
        over RPC; true when the file does not show where they go."""
        if self.items.graph_batches(args):
            return False
        use = self.draws.use(loader)
        if use.escapes or not use.draws:
            return True
        hot = [d for d in use.draws if not self._rare(d)]
        if not hot:
            return False
        if use.on_device:
            return True
        went = self.batches.of(hot)
        if went.device:
            return True
        # handed to a model or function: on the GPU if the file puts anything there, or if it comes from elsewhere
        return bool(went.consumers) and (self.facts.device_evidence() or
                                         not all(self.batches.host_consumer(c) for c in went.consumers))

    def device_copies(self, loader: cst.Call) -> list[cst.Call]:
        """The ``.to(device)`` / ``.cuda()`` / ``.type(cuda type)`` calls of the loader's batches (or their parts)."""
        return self.batches.of(self.draws.use(loader).draws).copies

    def parameter_copies(self, param: cst.Param) -> list[cst.Call]:
        """``device_copies`` of a loader another file of the run passes in as ``param``."""
        return self.batches.of(self.draws.use_of_parameter(param).draws).copies

    def handed(self, loader: cst.Call) -> list[tuple[cst.Call, cst.Arg]]:
        """The calls of other modules' functions the loader is passed to (and the argument)."""
        return self.draws.use(loader).handed

    def cheap_items(self, args: Arguments) -> bool:
        """The loader's items cost no CPU work worth a worker process (``Items.cheap_items``)."""
        return self.items.cheap_items(args)

    def _rare(self, draw: Draw) -> bool:
        return not draw.full and self.facts.hot_loop(draw.node) is None


def loader_facts(ctx: FileContext) -> LoaderFacts:
    """The one LoaderFacts of a file (shared by TL201-TL203), built after the traversal."""
    return ctx.memo("loader-facts", LoaderFacts)


def pinned_handoffs(ctx: FileContext) -> tuple[tuple[str, int | str], ...]:
    """(target, position or keyword) of each call of an imported function that this file passes a DataLoader with
    pinned memory (runcalls.RunCalls.pinned)."""
    if "pin_memory" not in ctx.source:
        return ()
    facts = loader_facts(ctx)
    callers = facts.facts.callers
    found: list[tuple[str, int | str]] = []
    for calls in callers.index.calls.values():
        for loader in calls:
            if ctx.qualified_name(loader.func) not in DATALOADERS or not pins_memory(call_arguments(ctx, loader)):
                continue
            for call, arg in facts.handed(loader):
                positional = [a for a in call.args if a.keyword is None and not a.star]
                where: int | str = arg.keyword.value if arg.keyword is not None else positional.index(arg)
                found.extend((target, where) for target in callers.imported(call))
    return tuple(dict.fromkeys(found))
