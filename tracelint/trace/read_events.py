"""Reading a trace's events: one streaming pass over the event chunks into the records of each kind (readers.py),
in the field order of model.py's records (build.py makes them records). Every field is untrusted.

Only what the metrics and the trace rules need is kept (a few small tuples per event, names interned), so a
250 MB trace of a million events fits in a few hundred MB: CPU-side ``ProfilerStep#N`` spans, CPU ops and
annotations, CUDA/HIP runtime and driver calls (launches are joined to their GPU work by ``args.correlation``),
GPU activity (kernels, copies, memsets), ``cuda_sync`` events, user-code ``python_function`` frames and ``[memory]``
samples. PyTorch <= 1.9 categories (``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``) are read the
same way. CUPTI range-profiler events are only counted: they carry counters, not a timeline.

A chunk comes as dicts or, from the loader's typed decode, as events.Event Structs. This module only takes each
event's fields out of the one or the other and hands them to its kind's reader, one call per event (a call costs
less than building a tuple of the fields to hand over a chunk's events of a kind at once): the typed pass hands
an event its strict reader does not take to the dict pass, from that event's dict alone, and the dict pass gives
any event its strict reader does not take to the tolerant reader.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import islice
from operator import itemgetter

from tracelint.trace.events import UNSET, TypedChunk
from tracelint.trace.fields import Slow, by_start
from tracelint.trace.readers import (
    ANNOTATION,
    GPU,
    INSTANT,
    OP,
    PYFRAME,
    RUNTIME,
    SYNC,
    EventRecords,
    Readers,
    shapes_of,
)


def read_events(chunks: Iterable[list]) -> EventRecords:
    """The records of a stream of event chunks, each list sorted as build.py sorts it (so that in a parallel read the
    workers do the sorting and build's stable sorts only merge the parts' sorted runs), with the count of events
    read and (events, index of the first event) of each reason an event was dropped or partly ignored."""
    readers = Readers()
    for current in chunks:
        if current.__class__ is TypedChunk:
            _read_typed_chunk(current, readers)
        else:
            readers.chunk = current
            _read_dicts(current, readers)
        readers.seen += len(current)  # (``seen``: the events of the chunks before, what problems are numbered by)
    out = readers.out
    out.events = readers.seen
    out.problems = {key: tuple(v) for key, v in out.problems.items()}
    out.ops.sort(key=by_start)
    out.runtime.sort(key=by_start)
    out.gpu.sort(key=itemgetter(4))
    out.frames.sort(key=itemgetter(1))
    out.memory.sort(key=itemgetter(0))
    out.shaped.sort(key=by_start)
    out.comm_ops.sort(key=itemgetter(1))
    out.empty_cache.sort(key=itemgetter(1))
    return out


def _read_typed_chunk(chunk: TypedChunk, readers: Readers) -> None:
    """A typed chunk: its events by the typed pass, and each event that pass leaves by the dict pass from the chunk's
    dicts (in turn with the others, so that records are appended in event order); ``readers.chunk`` is the dicts,
    decoded once, for the problems the tolerant reader notes."""
    n, start, dicts = len(chunk), 0, None
    while (i := _read_typed(chunk, start, readers)) < n:
        if dicts is None:
            dicts = readers.chunk = chunk.dicts()
        _read_dicts((dicts[i],), readers)
        start = i + 1


def _read_typed(chunk: TypedChunk, start: int, readers: Readers) -> int:
    """The events of a typed chunk (events.Event) from ``start``, up to the first that its kind's strict reader does
    not take (its index is returned: that event and the rest go to the dict pass)."""
    kinds, known = readers.kinds, readers.frames_seen
    frame, op, runtime, gpu, memory, sync = (readers.frame, readers.op, readers.runtime, readers.gpu, readers.memory,
                                             readers.sync)
    shapes = readers.typed_shapes
    try:
        for e in islice(chunk, start, None) if start else chunk:
            cat = e.cat
            try:
                kind = kinds[cat]
            except KeyError:  # a category not read, once per part
                kind = kinds[cat] = None
            if kind is None:
                continue
            if kind == PYFRAME:
                name = e.name
                try:
                    user = known[name]
                except KeyError:
                    user = readers.frame_user(name)
                if user is not None:
                    frame(user, e.ts, e.dur, e.tid)
            elif kind == OP or kind == ANNOTATION:
                args = e.args
                op(kind == ANNOTATION, e.name, e.ts, e.dur, e.tid, args.call_stack, args, shapes)
            elif kind == RUNTIME:
                runtime(e.name, e.ts, e.dur, e.tid, e.args.correlation)
            elif kind == GPU:
                a = e.args
                gpu(cat, e.name, e.ts, e.dur, a.device, a.stream, a.correlation, a.bytes, a.collective, a)
            elif kind == INSTANT:
                if e.name == "[memory]":
                    a = e.args
                    memory(cat, e.ts, e.tid, a.device_type, a.device_id, a.alloc_bytes, a.total_allocated,
                           a.total_reserved, a.addr)
            elif kind == SYNC:
                a = e.args
                sync(e.name, e.ts, e.dur, a.device, a.correlation)
            else:  # a CUPTI range: its counters are the names of all its args
                break
        else:
            return len(chunk)
    except (Slow, TypeError, AttributeError):  # (a field None: absent, or args without a field the reader needs)
        pass
    # the event left: found by identity once per chunk rather than counted in the loop
    return next(i for i in range(start, len(chunk)) if chunk[i] is e)


def _read_dicts(events: Sequence, readers: Readers) -> None:
    """Events as dicts: each by its kind's strict reader, else (a field missing, of another type or out of range) by
    the tolerant one."""
    kinds, known = readers.kinds, readers.frames_seen
    frame, op, runtime, gpu, memory, sync = (readers.frame, readers.op, readers.runtime, readers.gpu, readers.memory,
                                             readers.sync)
    tolerant, dict_ = readers.tolerant, dict
    for e in events:
        try:
            cat = e.get("cat")
            kind = kinds[cat]
        except KeyError:  # a category not read, once per part
            kind = kinds[cat] = None
        except (TypeError, AttributeError):  # an unhashable cat (a list), or an item that is not an object
            kind = -1
        if kind is None:
            continue
        try:
            if kind == PYFRAME:
                name = e["name"]
                try:
                    user = known[name]
                except KeyError:
                    user = readers.frame_user(name)
                if user is not None:
                    frame(user, e["ts"], e["dur"], e["tid"])
                continue
            if kind == OP or kind == ANNOTATION:
                args = e["args"]
                if args.__class__ is not dict_:
                    raise Slow
                op(kind == ANNOTATION, e["name"], e["ts"], e["dur"], e["tid"], args.get("Call stack", UNSET), args,
                   shapes_of)
                continue
            if kind == RUNTIME:
                runtime(e["name"], e["ts"], e["dur"], e["tid"], e["args"]["correlation"])
                continue
            if kind == GPU:
                args = e["args"]
                gpu(cat, e["name"], e["ts"], e["dur"], args["device"], args["stream"], args["correlation"],
                    args.get("bytes"), args.get("Collective name", UNSET), args)
                continue
            if kind == INSTANT and cat is not None:  # (an instant without a category: the tolerant reader, as ever)
                if e["name"] == "[memory]":
                    args = e["args"]
                    memory(cat, e["ts"], e.get("tid"), args.get("Device Type", UNSET), args.get("Device Id", UNSET),
                           args.get("Bytes", UNSET), args.get("Total Allocated"), args.get("Total Reserved"),
                           args.get("Addr"))
                continue
            if kind == SYNC:
                args = e["args"]
                sync(e.get("name"), e["ts"], e.get("dur"), args["device"], args.get("correlation"))
                continue
        except (Slow, TypeError, KeyError, AttributeError):
            pass
        tolerant(e, kind)
