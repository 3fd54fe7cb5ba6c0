"""Interval arithmetic on sorted disjoint intervals kept as two parallel lists (starts, ends): the busy union of a
device, and how much of a span it covers."""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from operator import itemgetter


def merge(intervals: Iterable[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """The union of (start, end) intervals as sorted disjoint (starts, ends)."""
    starts: list[float] = []
    ends: list[float] = []
    # Sorted by start only: the union does not depend on the order of equal starts, and a float key sorts much
    # faster than tuples.
    for s, e in sorted(intervals, key=itemgetter(0)):
        if e <= s:
            continue
        if ends and s <= ends[-1]:
            if e > ends[-1]:
                ends[-1] = e
        else:
            starts.append(s)
            ends.append(e)
    return starts, ends


def overlap(union: tuple[list[float], list[float]], a: float, b: float) -> float:
    """Length of [a, b] covered by a merged union."""
    starts, ends = union
    i = bisect_right(ends, a)
    total = 0.0
    while i < len(starts) and starts[i] < b:
        total += min(ends[i], b) - max(starts[i], a)
        i += 1
    return total
