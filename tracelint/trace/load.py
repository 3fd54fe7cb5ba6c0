"""The one door into a trace file: reads a Chrome/Kineto trace (.json or gzip'd) and yields its events in chunks.

Speed and memory are the point. The (decompressed) bytes are read once; the traceEvents array is cut into chunks of
128 KB at candidate event boundaries (`}` `,` `{`) and each chunk is decoded as one array: by msgspec into typed
Structs of the fields the analysis reads when the consumer asks for them (`iter_chunks(typed=True)`, events.py),
else (or when that fails) by orjson into dicts. A cut that fell inside a string or a nested object makes the chunk
invalid JSON, never wrong JSON, so a chunk that fails is retried at the next boundaries, then with `_jsonfix`'s
repairs of the quirks profilers write (inf/NaN/N/A, invalid escapes, control characters, Latin-1 bytes), and only
then handed to a string-aware scanner that finds the real event boundaries (and, at a cut, the last complete event).
Valid files never leave the fast path. A file that ends early (a killed run) yields every complete event before the
cut and says so in `warnings`.

The bytes, and the limits on what they may cost, come from filetext.py (regular files only, mmap, gzip, UTF-16).
The chunk cutter, its retry ladder, the truncation scanner and the fork-per-core parallel read stay together here:
they share one buffer and one set of offsets, and splitting them across modules would spread that invariant over
several files without making any part independently usable.
"""
from __future__ import annotations

import gc
import mmap
import os
import re
from collections.abc import Callable, Generator, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any, TypeVar

import orjson

from tracelint.engine.workers import WorkerFailed, can_fork, fork
from tracelint.trace._jsonfix import loads_lenient
from tracelint.trace.events import AVAILABLE as TYPED_AVAILABLE
from tracelint.trace.events import TypedChunk, decode_typed
from tracelint.trace.filetext import DEFAULT_MAX_STRING_BYTES, Limits, TraceReadError, format_size, read_text

# ~500 events per chunk: enough to amortise the per-chunk calls, and small enough that the decoded dicts are still
# in the CPU cache when the model's loop reads them (2 MB chunks measured ~20% slower on the 250 MB bench trace).
CHUNK_BYTES = 128 << 10

PARALLEL_MIN_BYTES = 32 << 20  # below this, forking costs more than it saves
MAX_PARTS = 8
Progress = Callable[[int, int], None]
R = TypeVar("R")

_LBRACE, _RBRACE, _LBRACKET, _RBRACKET, _QUOTE, _COMMA, _COLON = b"{}[]\",:"
_WS = re.compile(rb"\s*")
_SEP = re.compile(rb"[\s,]*")  # between events; tolerates a trailing or doubled comma
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.S)
# Structural tokens; a string is one token (also one cut short by the end of the data).
_TOKEN = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)|[][{}]', re.S)
_SCALAR = re.compile(rb"[^,}\]\s]*")

# How a scan of the events array stopped.
_MORE, _END, _EOF_CLEAN, _EOF_CUT, _PART_END = "more", "end", "eof-clean", "eof-cut", "part-end"
# How a walk over an object's members stopped.
_AT_EVENTS, _OBJECT_END, _AT_EOF = "events", "object-end", "eof"


class NotATrace(TraceReadError):
    """The file is well-formed JSON of another kind (an object without ``traceEvents``: a manifest, a config)."""


@dataclass(eq=False)
class TraceFile:
    """An opened trace. `meta` holds the top-level keys other than traceEvents; keys written after the events
    array are added while `iter_chunks()` runs, so meta is complete once iteration ends."""

    path: Path
    meta: dict[str, Any]
    warnings: list[str]
    truncated: bool
    nbytes: int  # length of the JSON text (after decompression)
    _data: bytes | bytearray | mmap.mmap = field(repr=False)
    _events_start: int = field(repr=False)
    _bare: bool = field(repr=False)  # the bare-array form `[ {...}, ... ]`
    _gzip_problem: str | None = field(repr=False)
    _progress: Progress | None = field(repr=False)
    _open_warnings: tuple[str, ...] = field(repr=False)
    _max_string: int = field(default=DEFAULT_MAX_STRING_BYTES, repr=False)
    events_read: int = 0  # event objects the last complete iteration (or map_parts) gave

    def iter_chunks(self, typed: bool = False) -> ChunkStream:
        """Event dicts in file order, one list per chunk. Iterating again starts over. ``typed``: a chunk that
        msgspec can decode comes as a TypedChunk of events.Event Structs instead (read_events.py reads both)."""
        self.warnings[:] = self._open_warnings
        self.truncated = False
        self.events_read = 0
        return ChunkStream(self, typed)

    def close(self) -> None:
        """Drop the raw bytes (the largest thing held); iter_chunks() cannot run afterwards."""
        self._data = b""

    def __enter__(self) -> TraceFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_trace(path: str | os.PathLike[str], *, progress: Progress | None = None,
               limits: Limits | None = None) -> TraceFile:
    """Read a trace file and parse everything before its events; raises TraceReadError for unreadable input (and
    for input over `limits`, by default those of the environment: `Limits.from_env()`)."""
    path = Path(path)
    limits = limits or Limits.from_env()
    warnings: list[str] = []
    # memory-mapped from the size read in parallel: each process pages in only its own part
    data, start, gzip_problem = read_text(path, limits, warnings, map_from=PARALLEL_MIN_BYTES)
    start = _WS.match(data, start).end()
    if start >= len(data):
        raise TraceReadError("empty file (only whitespace)")
    first = data[start]
    if first == _LBRACKET:
        meta: dict[str, Any] = {}
        events_start, bare = start + 1, True
    elif first == _LBRACE:
        meta, events_start = _read_header(data, start, gzip_problem, limits.string_bytes, warnings)
        bare = False
    else:
        raise TraceReadError(f"not a JSON trace: expected '{{' or '[' at byte {start}, found {_show(data, start)}")
    return TraceFile(
        path=path, meta=meta, warnings=list(warnings), truncated=False, nbytes=len(data), _data=data,
        _events_start=events_start, _bare=bare, _gzip_problem=gzip_problem, _progress=progress,
        _open_warnings=tuple(warnings), _max_string=limits.string_bytes,
    )


class ChunkStream:
    """What `iter_chunks()` returns: an iterator of event chunks that a consumer can also split across processes
    with `map_parts`."""

    def __init__(self, trace: TraceFile, typed: bool = False) -> None:
        self._trace = trace
        self._typed = typed
        self._chunks = _EventReader(trace, typed).run()

    def __iter__(self) -> ChunkStream:
        return self

    def __next__(self) -> list[dict[str, Any]]:
        return next(self._chunks)

    def map_parts(self, fn: Callable[[Iterator[list[dict[str, Any]]]], R]) -> list[R]:
        """`fn(chunks)` over consecutive parts of the events array, results in file order; warnings, `truncated`
        and `meta` end up as iterating gives them. A big trace on a machine with several cores is cut into one
        part per core at event boundaries, and the parts after the first run in forked processes at the same time
        (their results come back pickled: `fn` should return compact data). When any part needs the slow path
        the parallel results are dropped and the whole stream is read here, so odd files behave as they always
        did."""
        results = _map_parallel(self._trace, fn, self._typed)
        return results if results is not None else [fn(self)]


# ---- the top-level object --------------------------------------------------------------------------------------


def _show(data: bytes | bytearray, pos: int) -> str:
    if pos >= len(data):
        return "the end of the data"
    b = data[pos]
    return f"'{chr(b)}'" if 0x20 <= b < 0x7F else f"byte 0x{b:02x}"


def _read_header(data: bytes | bytearray, start: int, gzip_problem: str | None, max_string: int = 0,
                 warnings: list[str] | None = None) -> tuple[dict[str, Any], int]:
    """Meta keys before traceEvents, and the offset just after traceEvents' '['."""
    meta: dict[str, Any] = {}
    pos, how = _read_members(data, start + 1, meta, need_comma=False, stop_at_events=True, max_string=max_string,
                             warnings=warnings)
    if how == _AT_EVENTS:
        if data[pos] != _LBRACKET:
            raise TraceReadError(f"not a trace: traceEvents is not an array (found {_show(data, pos)})")
        return meta, pos + 1
    if how == _OBJECT_END:
        keys = ", ".join(_printable(key) for key in list(meta)[:8]) or "none"
        raise NotATrace(f"not a trace: the JSON object has no traceEvents (keys: {keys})")
    raise TraceReadError(f"{_ends_at(len(data), gzip_problem)} before traceEvents (truncated?)")


def _printable(text: str, limit: int = 40) -> str:
    """A key from the file as one line of plain text: control characters escaped, long ones cut."""
    shown = text if text.isprintable() else text.encode("unicode_escape").decode("ascii")
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def _ends_at(n: int, gzip_problem: str | None) -> str:
    return f"the gzip stream {gzip_problem}: data ends at byte {n}" if gzip_problem else f"file ends at byte {n}"


def _read_members(
    data: bytes | bytearray, pos: int, meta: dict[str, Any], *, need_comma: bool, stop_at_events: bool,
    max_string: int = 0, warnings: list[str] | None = None,
) -> tuple[int, str]:
    """Walk `"key": value` members of an object from `pos` into `meta`, up to the object's end, the traceEvents
    value (when `stop_at_events`; returns its offset) or the end of the data. A value that cannot be decoded (one
    nested deeper than the decoders go, garbage) is left out with a note in `warnings`, when given."""
    n = len(data)
    while True:
        pos = _WS.match(data, pos).end()
        if pos >= n:
            return n, _AT_EOF
        if data[pos] == _RBRACE:
            return pos + 1, _OBJECT_END
        if need_comma:
            if data[pos] != _COMMA:
                raise TraceReadError(f"not a JSON trace: expected ',' or '}}' at byte {pos}, found {_show(data, pos)}")
            pos = _WS.match(data, pos + 1).end()
        m = _STRING.match(data, pos)
        if m is None:
            if pos >= n or data[pos] == _QUOTE:
                return n, _AT_EOF
            raise TraceReadError(f"not a JSON trace: expected a key at byte {pos}, found {_show(data, pos)}")
        _check_string(m.end() - pos, pos, max_string)
        key = _loads_value(m.group(), pos)
        pos = _WS.match(data, m.end()).end()
        if pos >= n:
            return n, _AT_EOF
        if data[pos] != _COLON:
            raise TraceReadError(f"not a JSON trace: expected ':' at byte {pos}, found {_show(data, pos)}")
        pos = _WS.match(data, pos + 1).end()
        if pos >= n:
            return n, _AT_EOF
        if key == "traceEvents" and stop_at_events:
            return pos, _AT_EVENTS
        end = _value_end(data, pos)
        if end is None:
            return n, _AT_EOF
        if data[pos] == _QUOTE:
            _check_string(end - pos, pos, max_string)
        if key != "traceEvents":  # a second events array after the first is not meta
            try:
                meta[str(key)] = _loads_value(data[pos:end], pos)
            except TraceReadError:
                if warnings is None:
                    raise
                warnings.append(f"ignored the top-level key {_printable(str(key))!r}: its value at byte {pos:,} "
                                "is not readable JSON")
        pos, need_comma = end, True


def _check_string(length: int, pos: int, max_string: int) -> None:
    if max_string and length > max_string:
        raise TraceReadError(f"a string over the {format_size(max_string)} limit at byte {pos:,} "
                             "(TRACELINT_MAX_STRING_BYTES)")


def _loads_value(raw: bytes | bytearray, pos: int) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        return loads_lenient(raw)[0]
    except ValueError:
        raise TraceReadError(f"not a JSON trace: invalid JSON value at byte {pos}") from None


def _value_end(data: bytes | bytearray, pos: int) -> int | None:
    """End offset of the JSON value starting at `pos`, or None when the data ends first."""
    n = len(data)
    c = data[pos]
    if c == _QUOTE:
        m = _STRING.match(data, pos)
        return m.end() if m else None
    if c not in (_LBRACE, _LBRACKET):
        end = _SCALAR.match(data, pos).end()
        return end if end < n else None
    depth = 0
    for m in _TOKEN.finditer(data, pos):
        t = data[m.start()]
        if t == _QUOTE:
            continue
        depth += 1 if t in (_LBRACE, _LBRACKET) else -1
        if depth == 0:
            return m.end()
    return None


# ---- the events array ------------------------------------------------------------------------------------------


@dataclass
class _Notes:
    """What the slow path met, summarised into warnings at the end."""

    events: int = 0
    not_objects: int = 0
    unreadable: int = 0
    first_unreadable: str = ""
    utf8_replaced: bool = False
    stray_braces: int = 0


class _EventReader:
    def __init__(self, trace: TraceFile, typed: bool = False) -> None:
        self.trace = trace
        self.data = trace._data
        self.notes = _Notes()
        self.typed = typed and TYPED_AVAILABLE  # without msgspec (tracelint[fast]) every chunk is read as dicts
        # Backing off the typed decode where the reader needs dicts anyway (a distributed trace's collectives and
        # communication ops are read from dicts): after a typed chunk that needed its dicts, the next 2, 4, ... 64
        # chunks are decoded as dicts only; a typed chunk read without them resets the wait.
        self._handed_typed = self._needed_dicts = False
        self._typed_wait = self._typed_skip = 0

    def run(self) -> Iterator[list[dict[str, Any]]]:
        if not self.data:
            raise TraceReadError("the trace was closed")
        # The collector would walk the fresh event dicts again and again (they hold no cycles): measured 1.6x
        # faster with it paused for the whole iteration, restored when the iterator ends or is dropped.
        enabled = gc.isenabled()
        gc.disable()
        try:
            yield from self._chunks()
        finally:
            if enabled:
                gc.enable()

    def _chunks(self) -> Iterator[list[dict[str, Any]]]:
        next_pos, how = yield from self._part(self.trace._events_start, None)
        self._finish(next_pos, how)

    def _part(self, pos: int, stop: int | None) -> Generator[list[dict[str, Any]], None, tuple[int, str]]:
        """Chunks from `pos` (between events) to the end of the events array, or, for a part of a parallel read,
        up to `stop` (just after an event's `}`): such a part stays on the fast path or raises _SlowPart."""
        data, n, notes = self.data, len(self.data), self.notes
        progress = self.trace._progress
        while True:
            pos = _SEP.match(data, pos).end()
            events, next_pos = self._fast_chunk(pos, stop)
            if events is None:
                if stop is not None:
                    raise _SlowPart
                spans, next_pos, how = _scan(data, pos, pos + CHUNK_BYTES, notes, self.trace._max_string)
                events = self._decode_spans(spans)
            else:
                how = _PART_END if next_pos == stop else _MORE
            if events.__class__ is not TypedChunk:  # (a typed chunk holds objects only)
                events = self._keep_objects(events)
            notes.events += len(events)
            if events:
                yield events
            if progress is not None:
                progress(min(next_pos, n), n)
            if how != _MORE:
                return next_pos, how
            pos = next_pos

    def _fast_chunk(self, pos: int, stop: int | None = None) -> tuple[list[Any] | None, int]:
        """Decode [pos, boundary) as one array at the first candidate boundary that gives JSON: with orjson, or
        else with the quirk repairs (a cut inside a string or a nested object stays invalid JSON either way).
        Within a part that ends at `stop`, the chunk that would reach it ends exactly there."""
        data, n = self.data, len(self.data)
        target = pos + CHUNK_BYTES
        if stop is not None and target >= stop:
            cuts = [(stop, stop)]
        else:
            tries = list(islice(_BOUNDARY.finditer(data, target), 3)) if target < n else []
            if not tries:  # the last chunk: try the last boundaries, so that the slow path sees one event + the tail
                tries = list(_BOUNDARY.finditer(data, pos))[-3:][::-1]
            cuts = [(m.start() + 1, m.end() - 1) for m in tries]  # (end of this chunk, start of the next)
            if stop is not None:
                cuts = [c for c in cuts if c[0] < stop] or [(stop, stop)]
            if self.trace._max_string:  # a chunk this long may hold a string over the limit: the slow path checks
                cuts = [c for c in cuts if c[0] - pos <= CHUNK_BYTES + self.trace._max_string]
        view = memoryview(data)
        if self.typed and self._try_typed():
            for end, next_pos in cuts:
                buf = b"".join((b"[", view[pos:end], b"]"))
                events = decode_typed(buf)
                if events is not None:
                    self._handed_typed = True
                    return TypedChunk(events, lambda buf=buf: self._dicts(buf)), next_pos
        for decode in (_decode_fast, self._decode_repaired):
            for end, next_pos in cuts:
                events = decode(b"".join((b"[", view[pos:end], b"]")))
                if events is not None:
                    return events, next_pos
        return None, pos

    def _try_typed(self) -> bool:
        """Whether to decode the next chunk typed (the consumer is done with the chunk before: it asks for the next
        one only then)."""
        if self._handed_typed:
            self._typed_wait = min(2 * self._typed_wait or 2, 64) if self._needed_dicts else 0
            self._typed_skip = self._typed_wait
            self._handed_typed = self._needed_dicts = False
        if self._typed_skip:
            self._typed_skip -= 1
            return False
        return True

    def _dicts(self, buf: bytes) -> list[Any]:
        """The events of a chunk that decode_typed read, as dicts (for the events read_events.py reads from dicts)."""
        self._needed_dicts = True
        events = _decode_fast(buf)
        if events is None:
            events = self._decode_repaired(buf)
        if events is None:  # decode_typed reads only what orjson reads
            raise TraceReadError("a chunk of events msgspec decoded is not readable as JSON")
        return events

    def _decode_repaired(self, buf: bytes) -> list[Any] | None:
        try:
            return self._lenient(buf)
        except ValueError:
            return None

    def _decode_spans(self, spans: list[tuple[int, int]]) -> list[Any]:
        if not spans:
            return []
        view = memoryview(self.data)
        parts: list[Any] = [b"["]
        for start, end in spans:
            parts += (view[start:end], b",")
        parts[-1] = b"]"
        joined = b"".join(parts)
        fast = _decode_fast(joined)
        if fast is not None:
            return fast
        try:
            return self._lenient(joined)
        except ValueError:
            pass
        events = []
        for start, end in spans:  # one bad event must not cost the others
            try:
                events.append(self._lenient(view[start:end]))
            except ValueError as e:
                if not self.notes.unreadable:
                    self.notes.first_unreadable = f"byte {start}: {str(e).split(':')[0]}"
                self.notes.unreadable += 1
        return events

    def _lenient(self, raw: bytes | memoryview) -> Any:
        value, replaced = loads_lenient(raw)
        self.notes.utf8_replaced |= replaced
        return value

    def _keep_objects(self, values: list[Any]) -> list[dict[str, Any]]:
        if set(map(type, values)) <= {dict}:
            return values
        kept = [v for v in values if type(v) is dict]
        self.notes.not_objects += len(values) - len(kept)
        return kept

    def _finish(self, stop: int, how: str) -> None:
        """Read what follows the events array and turn the notes into warnings."""
        trace, notes = self.trace, self.notes
        trace.events_read = notes.events
        if how == _END:
            self._read_tail(stop + 1)
        elif not (how == _EOF_CLEAN and trace._bare):  # Chrome allows a bare array without its closing ']'
            self._truncated("inside traceEvents")
        elif trace._gzip_problem:
            trace.warnings.append(f"the gzip stream {trace._gzip_problem} after the last complete event")
        if notes.not_objects:
            trace.warnings.append(f"ignored {notes.not_objects:,} traceEvents entries that are not objects")
        if notes.unreadable:
            trace.warnings.append(
                f"skipped {notes.unreadable:,} unreadable events (first at {notes.first_unreadable})"
            )
        if notes.utf8_replaced:
            trace.warnings.append("replaced invalid UTF-8 bytes in strings (not UTF-8 text?)")
        if notes.stray_braces:
            trace.warnings.append(f"ignored {notes.stray_braces:,} unmatched '}}' in traceEvents")

    def _read_tail(self, pos: int) -> None:
        trace, data = self.trace, self.data
        if trace._bare:
            end = _WS.match(data, pos).end()
        else:
            try:
                end, how = _read_members(data, pos, trace.meta, need_comma=True, stop_at_events=False,
                                         max_string=trace._max_string, warnings=trace.warnings)
            except TraceReadError as e:
                trace.warnings.append("ignored the data after traceEvents: "
                                      f"{str(e).removeprefix('not a JSON trace: ')}")
                return
            if how == _AT_EOF:
                self._truncated("after traceEvents")
                return
            end = _WS.match(data, end).end()
        if end < len(data) and data[end:].strip(b"\0 \t\r\n"):
            trace.warnings.append(f"ignored {len(data) - end} bytes after the end of the JSON document")
        elif trace._gzip_problem:
            trace.warnings.append(f"the gzip stream {trace._gzip_problem} after the complete JSON document")

    def _truncated(self, where: str) -> None:
        trace = self.trace
        trace.truncated = True
        trace.warnings.append(
            f"{_ends_at(len(self.data), trace._gzip_problem)} {where} (truncated?): "
            f"read {self.notes.events:,} complete events"
        )


def _decode_fast(buf: bytes) -> list[Any] | None:
    try:
        return orjson.loads(buf)
    except orjson.JSONDecodeError:
        return None


def _scan(data: bytes | bytearray, pos: int, hint: int, notes: _Notes, max_string: int = 0
          ) -> tuple[list[tuple[int, int]], int, str]:
    """The slow path: walk the structure from `pos` (between events) and return the spans of the complete events,
    stopping at the first event that ends at or after `hint`, at the array's ']' or at the end of the data."""
    spans: list[tuple[int, int]] = []
    depth = 0
    start = pos
    for m in _TOKEN.finditer(data, pos):
        t = data[m.start()]
        if t == _QUOTE:
            if m.end() < len(data):  # (a string cut by the end of the data is never decoded)
                _check_string(m.end() - m.start(), m.start(), max_string)
            continue
        if t == _LBRACE or t == _LBRACKET:
            if depth == 0:
                start = m.start()
            depth += 1
            continue
        if depth == 0:
            if t == _RBRACKET:
                return spans, m.start(), _END
            notes.stray_braces += 1
            continue
        depth -= 1
        if depth == 0:
            spans.append((start, m.end()))
            if m.end() >= hint:
                return spans, m.end(), _MORE
    return spans, len(data), (_EOF_CLEAN if depth == 0 else _EOF_CUT)


# ---- parallel reading ------------------------------------------------------------------------------------------


class _SlowPart(Exception):
    """A part of a parallel read met something only the serial reader's slow path handles."""


def _map_parallel(trace: TraceFile, fn: Callable[[Iterator[list[dict[str, Any]]]], R], typed: bool = False
                  ) -> list[R] | None:
    """`fn` over one part of the events per core, the first here and the others in forked processes; None when
    the trace is small, the platform cannot fork (or threads run, which fork does not copy), or a part needs the
    slow path."""
    data = trace._data
    start, n = trace._events_start, len(data)
    parts = min(os.cpu_count() or 1, MAX_PARTS)
    if parts < 2 or n - start < PARALLEL_MIN_BYTES or not can_fork():
        return None
    # Cut at candidate boundaries near equal shares. A candidate inside a string makes the part before it end in
    # invalid JSON, which that part's last chunk reports (_SlowPart): a wrong cut costs time, never wrong events.
    starts: list[int] = [start]
    stops: list[int | None] = []
    for i in range(1, parts):
        m = _BOUNDARY.search(data, start + (n - start) * i // parts)
        if m is None or m.start() < starts[-1]:
            break
        stops.append(m.start() + 1)
        starts.append(m.end() - 1)
    stops.append(None)
    if len(starts) < 2:
        return None
    results: list[Any] = []
    with ExitStack() as children:  # leaving early (an error here): the children's results are of no use, killed
        workers = [children.enter_context(fork(partial(_forked_part, trace, fn, pos, stop, typed)))
                   for pos, stop in zip(starts[1:], stops[1:], strict=True)]
        results.append(_read_part(trace, fn, starts[0], stops[0], typed))
        for worker in workers:
            try:
                results.append(worker.result())
            except WorkerFailed:  # it raised or died: the serial read below does that part again
                results.append(None)
    if any(part is None for part in results):
        return None
    reader = _EventReader(trace)
    notes = reader.notes
    for _, part, _, _ in results:
        notes.events += part.events
        notes.not_objects += part.not_objects
        if part.unreadable and not notes.unreadable:
            notes.first_unreadable = part.first_unreadable
        notes.unreadable += part.unreadable
        notes.utf8_replaced |= part.utf8_replaced
        notes.stray_braces += part.stray_braces
    next_pos, how = results[-1][2], results[-1][3]
    if trace._progress is not None:
        trace._progress(min(next_pos, n), n)
    reader._finish(next_pos, how)
    return [part[0] for part in results]


def _forked_part(trace: TraceFile, fn: Callable[[Iterator[list[dict[str, Any]]]], R], pos: int, stop: int | None,
                 typed: bool) -> tuple[R, _Notes, int, str] | None:
    trace._progress = None  # the parent reports the progress
    return _read_part(trace, fn, pos, stop, typed)


def _read_part(trace: TraceFile, fn: Callable[[Iterator[list[dict[str, Any]]]], R], pos: int, stop: int | None,
               typed: bool = False) -> tuple[R, _Notes, int, str] | None:
    """(fn's result, the notes, where the part ended and how) of the part from `pos` to `stop`; None when it needs
    the slow path."""
    reader = _EventReader(trace, typed)
    ended: list[tuple[int, str]] = []

    def chunks() -> Iterator[list[dict[str, Any]]]:
        ended.append((yield from reader._part(pos, stop)))

    enabled = gc.isenabled()
    gc.disable()  # as in _EventReader.run
    try:
        result = fn(chunks())
    except _SlowPart:
        return None
    finally:
        if enabled:
            gc.enable()
    if not ended:
        return None
    return result, reader.notes, ended[0][0], ended[0][1]
