"""TL201 / TL202: a torch DataLoader that loads in the main process, or without pinned host memory."""
from __future__ import annotations

import libcst as cst

from tracelint.engine import Fix
from tracelint.source.calls import Arguments, call_arguments, is_literal, with_keyword
from tracelint.source.context import FileContext
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


class _DataLoaderArgument(SourceRule):
    """A DataLoader argument that is missing or set to a literal bad value; a non-literal value, or ``**kwargs``
    that may set it, is not a violation. Subclasses name the argument, its bad value, its fix and the message."""

    code = ""  # a base, not a rule
    triggers = ("DataLoader",)
    argument: str
    position: int
    bad: object
    good: str
    safe: bool
    message: str

    def visit_Call(self, node: cst.Call) -> None:
        args = dataloader_arguments(self.ctx, node)
        if args is None:
            return
        value = args.get(self.argument, self.position)
        if value is None and not args.known:
            return  # **kwargs / *args may set it
        if value is not None and not is_literal(value, self.bad):
            return
        if value is None:
            fix = Fix(f"Add {self.argument}={self.good}",
                      (self.replace(node, with_keyword(node, self.argument, self.good)),), safe=self.safe)
        else:  # the literal may sit in the call or in a **kwargs dict built nearby
            fix = Fix(f"Set {self.argument}={self.good}", (self.edit(value, self.good),), safe=self.safe)
        self.report(node, self.message, fix=fix)


class DataLoaderWithoutWorkers(_DataLoaderArgument):
    code = "TL201"
    argument, position, bad, good, safe = "num_workers", NUM_WORKERS_POS, 0, str(DEFAULT_WORKERS), False
    message = ("DataLoader loads batches in the main process (num_workers is 0): the training loop waits for every "
               "batch; use worker processes")


class DataLoaderWithoutPinnedMemory(_DataLoaderArgument):
    code = "TL202"
    argument, position, bad, good, safe = "pin_memory", PIN_MEMORY_POS, False, "True", True
    message = ("DataLoader without pin_memory=True: batches are copied to the GPU from pageable memory, a slower "
               "copy that cannot overlap compute")
