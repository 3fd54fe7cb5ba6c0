"""The typed fast path of the event decoder: a chunk of events decoded by msgspec straight into small Structs that
hold only the fields readers.py reads (every other key, most of a trace's bytes, is skipped without building a
Python object), instead of a dict per event with every field.

It is only a faster route to the same records, never a different reading. A chunk whose decoding here could differ
from orjson's is not decoded here: invalid UTF-8 in a value msgspec skips (orjson refuses the chunk, and the loader's
repairs then replace the bytes and say so), and an integer field beyond 64 bits (orjson reads it as a float; here
the bounds refuse it). A number that overflows a double in a skipped value makes orjson refuse the chunk too, but
the loader's repairs read it as the same events, so it changes nothing. And any event its kind's strict reader
does not take (a field missing or of another type, an op whose args it reads further than its shapes) sends the
rest of its chunk to the dict reader (``TypedChunk.dicts``).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

try:
    import msgspec
except ImportError:  # an optional speed-up (pip install "tracelint[fast]"): without it every chunk is read as dicts
    msgspec = None

AVAILABLE = msgspec is not None


class TypedChunk(list):
    """Events of one chunk as Structs; ``dicts()`` decodes the same chunk as dicts, as the plain reader gives it."""

    __slots__ = ("dicts",)

    def __init__(self, events: list, dicts: Callable[[], list[Any]]) -> None:
        super().__init__(events)
        self.dicts = dicts


if msgspec is None:
    UNSET = object()  # never met: no chunk is typed

    def decode_typed(buf: bytes) -> None:
        """Without msgspec no chunk is decoded here (the loader reads it as dicts)."""
        return None

else:
    from msgspec import UNSET, Meta, UnsetType, field

    Int64 = Annotated[int, Meta(ge=-(1 << 63), le=(1 << 63) - 1)]

    class Args(msgspec.Struct, gc=False):
        """The args an event's typed reading uses; UNSET: the key is absent (its ``null`` would be None)."""

        correlation: Int64 | None = None
        device: Int64 | None = None
        stream: Int64 | str | None = None
        bytes: Int64 | None = None
        call_stack: str | None | UnsetType = field(default=UNSET, name="Call stack")
        collective: Any = field(default=UNSET, name="Collective name")
        device_type: Any = field(default=UNSET, name="Device Type")
        device_id: Any = field(default=UNSET, name="Device Id")
        alloc_bytes: Any = field(default=UNSET, name="Bytes")
        total_allocated: Any = field(default=UNSET, name="Total Allocated")
        # typed: a value of another kind or beyond 64 bits sends the chunk to the dict reader (read as it reads it)
        total_reserved: Int64 | None = field(default=None, name="Total Reserved")
        addr: Int64 | None = field(default=None, name="Addr")
        # a GEMM op's shapes (readers.shapes_of), kept undecoded (None: absent), decoded by orjson for the few ops read
        input_dims: msgspec.Raw = field(default=None, name="Input Dims")
        input_types: msgspec.Raw = field(default=None, name="Input type")
        concrete_inputs: msgspec.Raw = field(default=None, name="Concrete Inputs")

    class Event(msgspec.Struct, gc=False):
        cat: str | None = None
        name: str | None = None
        ts: int | float | None = None
        dur: int | float | None = None
        tid: Int64 | str | None = None
        args: Args | None = None

    _decode = msgspec.json.Decoder(list[Event]).decode

    def decode_typed(buf: bytes) -> list[Event] | None:
        """The events of ``buf`` (a JSON array of objects) as Structs; None when the chunk is not for this reader (not
        valid JSON, an entry not an object, a field of an unexpected type, or text orjson could read differently)."""
        if not buf.isascii():
            try:
                buf.decode("utf-8")
            except UnicodeDecodeError:
                return None
        try:
            return _decode(buf)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            return None
