"""Which trace of BASE is compared with which of NEW: single traces whatever their ranks, folders rank by rank, and
a folder's profiling cycles of one process by their latest.

A side is one or more runs (paths); a run is a trace file or a folder. ``torch.profiler.tensorboard_trace_handler``
writes one file per profiling cycle, ``<worker>.<time_ns>.pt.trace.json[.gz]`` (the worker name defaults to
``<host>_<pid>``), so a folder of a profile with ``repeat=2`` holds two traces of one process, neither naming a
rank. Such cycles are one process's, not ranks to pair: a run keeps, for each process (its rank where the trace
names one, else its worker name), its latest cycle, the one furthest from the start-up steps, and a note names the
ones it leaves (``--base FILE --new FILE`` compares any other)."""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from tracelint.engine import InputError


class Measured(Protocol):
    """What pairing reads of a measured trace (tracelint.diff.compare.Side)."""

    path: str
    rank: int | None
    start_us: float | None  # its first step or op: the later of two cycles of one process starts later


T = TypeVar("T", bound=Measured)

_CYCLE_FILE = re.compile(r"(?P<worker>.+)\.(?P<ns>\d+)\.pt\.trace\.json(?:\.gz)?")
ONE_A_SIDE = "--base FILE --new FILE"


def pair_runs(base: list[list[T]], new: list[list[T]], base_paths: list, new_paths: list
              ) -> tuple[list[tuple[list[T], list[T]]], list[InputError], list[str]]:
    """(BASE's runs, NEW's runs) of each rank, the errors of what cannot be paired, and the notes: each run's
    cycles reduced to its processes' latest; then single traces pair whatever their ranks; folders pair by rank, and
    every run of a side must hold the same ranks."""
    notes: list[str] = []
    kept = []
    for runs, paths in ((base, base_paths), (new, new_paths)):
        side = []
        for run, path in zip(runs, paths, strict=True):
            if run:  # an empty run's error is in the report already
                run, note = latest_cycles(run, path)
                side.append((run, path))
                notes.extend(note)
        kept.append(side)
    if not kept[0] or not kept[1]:
        return [], [], notes
    (base, base_paths), (new, new_paths) = (zip(*side, strict=True) for side in kept)
    if all(len(run) == 1 for run in (*base, *new)):
        return [([r[0] for r in base], [r[0] for r in new])], [], notes
    by_rank: list[list[dict]] = [[], []]
    errors = []
    for i, (runs, paths) in enumerate(((base, base_paths), (new, new_paths))):
        for run, path in zip(runs, paths, strict=True):
            ranks = {s.rank: s for s in run}
            if None in ranks or len(ranks) < len(run):
                which = "with no rank" if set(ranks) == {None} else "not each with a rank of its own"
                return [], [InputError(str(path), f"cannot pair its traces by rank: {len(run)} processes' traces "
                                                  f"{which} (distributedInfo); compare one trace a side: "
                                                  f"{ONE_A_SIDE}")], notes
            by_rank[i].append(ranks)
    all_base = set().union(*by_rank[0])
    all_new = set().union(*by_rank[1])
    for runs, paths, other, word in ((by_rank[0], base_paths, all_new, "NEW"),
                                     (by_rank[1], new_paths, all_base, "BASE")):
        for ranks, path in zip(runs, paths, strict=True):
            missing = sorted(other - set(ranks))
            if missing:
                errors.append(InputError(str(path), f"no trace of rank {', '.join(map(str, missing))} "
                                                    f"({word} has one)"))
    common = sorted(all_base & all_new)
    return [([run[r] for run in by_rank[0] if r in run], [run[r] for run in by_rank[1] if r in run])
            for r in common], errors, notes


def latest_cycles(run: Sequence[T], path) -> tuple[list[T], list[str]]:
    """The run's Sides with each process's latest profiling cycle only (module docstring), in the run's order, and
    a note naming what was left out when anything was."""
    by_process: dict[tuple, list[T]] = {}
    for side in run:
        by_process.setdefault(process_of(side), []).append(side)
    several = {key: sorted(sides, key=_cycle_order) for key, sides in by_process.items() if len(sides) > 1}
    if not several:
        return list(run), []
    latest = {id(sides[-1]) for sides in several.values()}
    kept = [s for s in run if id(s) in latest or process_of(s) not in several]
    if len(several) == 1:
        (key, sides), = several.items()
        who = "one process" + (f" (rank {key[1]})" if key[0] == "rank" else f" ({key[1]})")
        head = (f"{len(sides)} profiling cycles of {who}: comparing the latest, {_name(sides[-1])} (not "
                f"{', '.join(_name(s) for s in sides[:-1])})")
    else:
        counts = sorted({len(sides) for sides in several.values()})
        head = (f"{'-'.join(map(str, (counts[0], counts[-1]) if len(counts) > 1 else counts))} profiling cycles of "
                f"each of {len(several)} processes: comparing each one's latest")
    return kept, [f"{path}: {head}; to compare another cycle, give one trace a side: {ONE_A_SIDE}"]


def process_of(side: Measured) -> tuple:
    """The process a trace is a cycle of: its rank where the trace names one, else the worker name
    tensorboard_trace_handler put in its file name, else the file itself (a process of its own)."""
    if side.rank is not None:
        return ("rank", side.rank)
    match = _CYCLE_FILE.fullmatch(_name(side))
    if match:
        return ("worker", match["worker"])
    return ("file", side.path)


def _cycle_order(side: Measured) -> tuple:
    """Cycles of one process share its clock: the later cycle starts later (the file name's time as a fallback)."""
    match = _CYCLE_FILE.fullmatch(_name(side))
    return (side.start_us is not None, side.start_us or 0.0, int(match["ns"]) if match else 0, side.path)


def _name(side: Measured) -> str:
    return Path(side.path).name


__all__ = ["ONE_A_SIDE", "latest_cycles", "pair_runs", "process_of"]
