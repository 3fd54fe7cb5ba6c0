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


class DataLoaderWithoutWorkers(SourceRule):
    code = "TL201"
    triggers = ("DataLoader",)

    def visit_Call(self, node: cst.Call) -> None:
        args = dataloader_arguments(self.ctx, node)
        if args is None:
            return
        value = args.get("num_workers", NUM_WORKERS_POS)
        if value is None and not args.known:
            return  # **kwargs / *args may set it
        if value is not None and not is_literal(value, 0):
            return
        fix = None
        if value is None:
            fix = Fix(f"Add num_workers={DEFAULT_WORKERS}",
                      (self.replace(node, with_keyword(node, "num_workers", str(DEFAULT_WORKERS))),), safe=False)
        else:  # the literal may sit in the call or in a **kwargs dict built nearby
            fix = Fix(f"Set num_workers={DEFAULT_WORKERS}", (self.edit(value, str(DEFAULT_WORKERS)),), safe=False)
        self.report(node, "DataLoader loads batches in the main process (num_workers is 0): the training loop "
                          "waits for every batch; use worker processes", fix=fix)


class DataLoaderWithoutPinnedMemory(SourceRule):
    code = "TL202"
    triggers = ("DataLoader",)

    def visit_Call(self, node: cst.Call) -> None:
        args = dataloader_arguments(self.ctx, node)
        if args is None:
            return
        value = args.get("pin_memory", PIN_MEMORY_POS)
        if value is None and not args.known:
            return
        if value is not None and not is_literal(value, False):
            return
        fix = None
        if value is None:
            fix = Fix("Add pin_memory=True", (self.replace(node, with_keyword(node, "pin_memory", "True")),))
        else:
            fix = Fix("Set pin_memory=True", (self.edit(value, "True"),))
        self.report(node, "DataLoader without pin_memory=True: batches are copied to the GPU from pageable memory, "
                          "a slower copy that cannot overlap compute", fix=fix)
