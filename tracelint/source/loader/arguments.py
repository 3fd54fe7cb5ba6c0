"""torch's DataLoader call: its qualified names, the positions of its arguments, and the two arguments the TL201 and
TL202 fixes set (``NUM_WORKERS``, ``PIN_MEMORY``: missing or set to a literal bad value is a violation)."""
from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from tracelint.source.semantic.calls import Arguments, call_arguments, is_literal
from tracelint.source.semantic.model import FileContext

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
class Argument:
    """A DataLoader argument, its position, the literal value that is a violation, the value the fix writes, and
    whether that fix is safe."""

    name: str
    position: int
    bad: object
    good: str
    safe: bool


NUM_WORKERS = Argument("num_workers", NUM_WORKERS_POS, bad=0, good=str(DEFAULT_WORKERS), safe=False)
PIN_MEMORY = Argument("pin_memory", PIN_MEMORY_POS, bad=False, good="True", safe=True)


def violates(args: Arguments, argument: Argument) -> bool:
    """``argument`` is missing or set to its literal bad value; a non-literal value, or ``**kwargs`` that may set it,
    is not a violation."""
    value = args.get(argument.name, argument.position)
    if value is None:
        return args.known  # else **kwargs / *args may set it
    return is_literal(value, argument.bad)

