"""The checks of untrusted event fields: every value of a trace is read through these (or through the exact-type
checks of readers.py's strict readers, which accept a subset of what these accept and give the same values).

What survives has the types the rest relies on: str names, finite float times (int where the trace wrote ints)
within range, durations >= 0, hashable thread ids (int or str), int-or-None correlation ids and byte counts, int
device ids, all integers within 64 bits. An event that cannot be used is dropped and counted by reason; a field
that is optional and wrong (a correlation id that is a list, args that are not an object) is ignored and counted.
"""
from __future__ import annotations

from operator import itemgetter

I64 = 1 << 63
MAX_TS = 1e18  # µs: ~31,700 years; anything beyond is no clock (and would overflow sums of times)
MAX_DUR = 1e12  # µs: 11.6 days; a profiler records seconds to hours (CUPTI's wrapped 2^64 ns durations are 1.8e13)

by_start = itemgetter(2)  # the start of an Op, RuntimeCall or SyncEvent (or of their plain tuples)


class Bad(Exception):
    """An event the tolerant reader drops; ``args[0]`` says why (one warning per reason)."""


class Slow(Exception):
    """An event a strict reader leaves to the tolerant one (a field missing, of another type, or out of range)."""


def int64(value) -> int | None:
    """An integer within 64 bits (a number, or a string holding one), else None."""
    if value.__class__ is not int:
        if value is None or isinstance(value, (bool, dict, list)):
            return None
        try:
            value = int(value)
        except (TypeError, ValueError, OverflowError):
            return None
    return value if -I64 <= value < I64 else None


def int_str(value) -> str | None:
    value = int64(value)
    return None if value is None else str(value)


def time_of(value, field: str) -> float | int:
    """A time in µs: a number (or a string holding one, as some converters write it) within ±1e18."""
    if value.__class__ is not float and value.__class__ is not int:
        if value.__class__ is not str:
            raise Bad(f"`{field}` not a number")
        try:
            value = float(value)
        except ValueError:
            raise Bad(f"`{field}` not a number") from None
    if not -MAX_TS <= value <= MAX_TS:
        raise Bad(f"`{field}` out of range (NaN, infinite or beyond 1e18 µs)")
    return value


def duration_of(value) -> float | int:
    """A duration in µs, 0 when absent."""
    if value is None:
        return 0.0
    value = time_of(value, "dur")
    if not 0 <= value <= MAX_DUR:
        raise Bad("`dur` negative" if value < 0 else "`dur` over 1e12 µs (11.6 days)")
    return value


def tid_of(value) -> int | str | None:
    """A thread id: an int within 64 bits or a string (a bigger int becomes its string); None: no thread, one
    "thread" of its own."""
    if value is None:
        return None
    if value.__class__ is int or value.__class__ is str:
        return value if value.__class__ is str or -I64 <= value < I64 else str(value)
    if value.__class__ is float and value.is_integer():
        return int(value)
    raise Bad("`tid` not an integer or string")
