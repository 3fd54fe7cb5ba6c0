"""Reading a trace's events: one streaming pass over the event chunks into plain tuples, in the field order of
model.py's records (build.py makes them records). Every field is untrusted.

Only what the metrics and the trace rules need is kept (a few small tuples per event, names interned), so a
250 MB trace of a million events fits in a few hundred MB: CPU-side ``ProfilerStep#N`` spans, CPU ops and
annotations, CUDA/HIP runtime and driver calls (launches are joined to their GPU work by ``args.correlation``),
GPU activity (kernels, copies, memsets), ``cuda_sync`` events, user-code ``python_function`` frames and ``[memory]``
samples. PyTorch <= 1.9 categories (``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``) are read the
same way. CUPTI range-profiler events are only counted: they carry counters, not a timeline.

A chunk comes as dicts or, from the loader's typed decode, as events.Event Structs; the typed reader takes the
events it expects as they come and hands any other to the dict readers, so both give the same records.
"""
from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from functools import lru_cache
from itertools import islice
from operator import itemgetter

import orjson

from tracelint.trace.events import UNSET, TypedChunk
from tracelint.trace.kernels import collective_name
from tracelint.trace.model import KERNEL, MEMCPY, MEMSET, SHAPED_OPS

COMM_OP = "record_param_comms"  # the CPU op c10d records each collective and send/recv with (model.CommOp)

_GPU_KIND = {
    "kernel": KERNEL, "Kernel": KERNEL,
    "gpu_memcpy": MEMCPY, "Memcpy": MEMCPY,
    "gpu_memset": MEMSET, "Memset": MEMSET,
}
_OP, _RUNTIME, _GPU, _PYFRAME, _SYNC, _INSTANT, _ANNOTATION, _RANGE = range(8)
_CATEGORY = {
    "cpu_op": _OP, "user_annotation": _ANNOTATION, "Operator": _OP,
    "cuda_runtime": _RUNTIME, "cuda_driver": _RUNTIME, "Runtime": _RUNTIME,
    "python_function": _PYFRAME,
    "cuda_sync": _SYNC,
    "cpu_instant_event": _INSTANT, None: _INSTANT,
    "cuda_profiler_range": _RANGE,
    **{cat: _GPU for cat in _GPU_KIND},
}
# The args of a CUPTI range-profiler event that are not counters.
_RANGE_NOT_COUNTERS = frozenset({"correlation", "External id"})
_EMPTY: dict = {}
_STEP_RE = re.compile(r"ProfilerStep#(\d+)$")
_FRAME_RE = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.*)$")
# Frames of these places are library code; a finding's source line is the innermost frame outside them. Kineto
# writes paths relative to the sys.path entry they were found under ("torch/nn/modules/module.py", "typing.py"),
# so library code is also recognised by its first path component: the standard library and common packages.
_LIBRARY_MARKERS = ("site-packages", "dist-packages", "/lib/python", "\\Lib\\", "<")
_LIBRARY_ROOTS = frozenset(sys.stdlib_module_names) | frozenset({
    "torch", "torchvision", "torchaudio", "torchtext", "functorch", "triton", "numpy", "scipy", "pandas", "PIL",
    "transformers", "accelerate", "datasets", "huggingface_hub", "lightning", "pytorch_lightning", "lightning_fabric",
    "deepspeed", "timm", "apex", "einops", "xformers", "flash_attn", "torchmetrics", "tqdm", "wandb", "tensorboard",
    "hydra", "omegaconf", "fairscale", "megatron", "_pytest", "pytest", "pluggy", "typing_extensions", "packaging",
})


@lru_cache(maxsize=65536)
def is_library_file(file: str) -> bool:
    """Whether a frame's file is library code (never a finding's source line)."""
    if not file or any(m in file for m in _LIBRARY_MARKERS):
        return True
    first = re.split(r"[/\\]", file.lstrip("./\\"), maxsplit=1)[0]
    return first.removesuffix(".py") in _LIBRARY_ROOTS


@lru_cache(maxsize=65536)
def parse_user_frame(name: str) -> tuple[str, int, str] | None:
    """(file, line, function) of a ``path(line): function`` frame name of user code; None for library code."""
    m = _FRAME_RE.match(name)
    if m is None or is_library_file(m.group("file")):
        return None
    return m.group("file"), int(m.group("line")), m.group("func")


PIPELINING = "pipelining"  # what _frame gives for a frame of torch.distributed.pipelining
EMPTY_CACHE = "empty_cache"  # ... and for torch.cuda.empty_cache() (torch/cuda/memory.py(212): empty_cache)


@lru_cache(maxsize=65536)
def _frame(name: str) -> tuple[str, int, str] | str | None:
    """A python_function frame's user-code (file, line, function), PIPELINING for a frame of torch's pipelining
    schedules and stages (counted: the trace of a pipeline stage), EMPTY_CACHE for a call of
    torch.cuda.empty_cache() (kept: where the allocator hands its cache back), else None."""
    path = name.replace("\\", "/")
    if path.endswith("): empty_cache") and "torch/cuda/memory.py(" in path:
        return EMPTY_CACHE
    user = parse_user_frame(name)
    if user is None and "torch/distributed/pipelining/" in path:
        return PIPELINING
    return user


# ---- reading events: every field is untrusted ---------------------------------------------------------------------
#
# What survives has the types the rest relies on: str names, finite float times (int where the trace wrote ints)
# within range, durations >= 0, hashable thread ids (int or str), int-or-None correlation ids and byte counts, int
# device ids, all integers within 64 bits. An event that cannot be used is dropped and counted by reason; a field
# that is optional and wrong (a correlation id that is a list, args that are not an object) is ignored and counted.

_I64 = 1 << 63
_MAX_TS = 1e18  # µs: ~31,700 years; anything beyond is no clock (and would overflow sums of times)
_MAX_DUR = 1e12  # µs: 11.6 days; a profiler records seconds to hours (CUPTI's wrapped 2^64 ns durations are 1.8e13)


def int64(value) -> int | None:
    """An integer within 64 bits (a number, or a string holding one), else None."""
    if value.__class__ is not int:
        if value is None or isinstance(value, (bool, dict, list)):
            return None
        try:
            value = int(value)
        except (TypeError, ValueError, OverflowError):
            return None
    return value if -_I64 <= value < _I64 else None


def _int_str(value) -> str | None:
    value = int64(value)
    return None if value is None else str(value)


class _Bad(Exception):
    """An event the slow reader drops; ``args[0]`` says why (one warning per reason)."""


def _time(value, field: str) -> float | int:
    if value.__class__ is not float and value.__class__ is not int:
        if value.__class__ is not str:
            raise _Bad(f"`{field}` not a number")
        try:
            value = float(value)  # "ts" as a string: some converters write it so
        except ValueError:
            raise _Bad(f"`{field}` not a number") from None
    if not -_MAX_TS <= value <= _MAX_TS:
        raise _Bad(f"`{field}` out of range (NaN, infinite or beyond 1e18 µs)")
    return value


def _duration(value) -> float | int:
    if value is None:
        return 0.0
    value = _time(value, "dur")
    if not 0 <= value <= _MAX_DUR:
        raise _Bad("`dur` negative" if value < 0 else "`dur` over 1e12 µs (11.6 days)")
    return value


def _tid(value) -> int | str | None:
    if value is None:  # no thread: one "thread" of its own
        return None
    if value.__class__ is int or value.__class__ is str:
        return value if value.__class__ is str or -_I64 <= value < _I64 else str(value)
    if value.__class__ is float and value.is_integer():
        return int(value)
    raise _Bad("`tid` not an integer or string")


def _innermost_user_frame(call_stack: str) -> str | None:
    # PyTorch <= 1.9 "Call stack": frames joined by ';', innermost first.
    for frame in call_stack.split(";"):
        if frame and parse_user_frame(frame.strip()) is not None:
            return frame.strip()
    return None


class _Slow(Exception):
    """An event the fast path leaves to the tolerant reader."""


_SHAPE_ARGS = ("Input Dims", "Input type", "Concrete Inputs")


def _shapes(args: dict) -> tuple[tuple[tuple[int, ...], ...], tuple[str, ...], tuple[str, ...]] | None:
    """(dims, types, concrete values) of an op's ``Input Dims`` / ``Input type`` / ``Concrete Inputs`` args (the
    first 16 arguments); None when the trace has no usable shapes."""
    dims, types, concrete = args.get("Input Dims"), args.get("Input type"), args.get("Concrete Inputs")
    if dims.__class__ is not list or types.__class__ is not list:
        return None
    shapes = tuple(tuple(d) if d.__class__ is list and all(x.__class__ is int and 0 <= x < _I64 for x in d) else ()
                   for d in dims[:16])
    values = tuple(c if c.__class__ is str else "" for c in concrete[:16]) if concrete.__class__ is list else ()
    return shapes, tuple(t if t.__class__ is str else "" for t in types[:16]), values


def _collective_args(args: dict, correlation: int | None) -> tuple:
    """(correlation, *CollectiveArgs) of a kernel's args, tolerant of any value."""
    dtype = args.get("dtype")
    return (correlation, _collective(args.get("Collective name")), _group(args.get("Process Group Name")),
            int64(args.get("In msg nelems")), int64(args.get("Out msg nelems")),
            dtype if isinstance(dtype, str) else None, int64(args.get("Group size")),
            _text(args.get("Process Group Description")), _rank_list(args.get("Process Group Ranks")))


_P2P_WORDS = frozenset({"send", "recv", "wait"})  # record_param_comms names no collective spelling covers


def _comm_op(tid, ts, args: dict) -> tuple:
    """The plain tuple of a ``record_param_comms`` op (model.CommOp), tolerant of any value."""
    what = _collective(args.get("Collective name"))
    peer = args.get("Dst Rank") if what == "send" else args.get("Src Rank") if what == "recv" else None
    return (tid, ts + 0.0, what, _group(args.get("Process Group Name")), int64(peer),
            int64(args.get("In msg nelems")), _text(args.get("Process Group Description")),
            _rank_list(args.get("Process Group Ranks")))


def _collective(name) -> str | None:
    if not isinstance(name, str):
        return None
    return name if name in _P2P_WORDS else collective_name(name)


def _group(group) -> str | None:
    return group if isinstance(group, str) else _int_str(group)


def _text(value) -> str | None:
    return value if isinstance(value, str) else None


@lru_cache(maxsize=1024)
def _ranks_of(text: str) -> tuple[int, ...] | None:
    """``"[0, 1, 2, 3]"`` as a tuple; None for anything else (or an empty list: c10d writes ``[]`` on a wait)."""
    parts = text.strip().removeprefix("[").removesuffix("]").split(",")
    ranks = tuple(int64(p) for p in parts if p.strip())
    return ranks if ranks and None not in ranks and len(ranks) <= 1 << 20 else None


def _rank_list(value) -> tuple[int, ...] | None:
    if isinstance(value, list):
        value = str(value)
    return _ranks_of(value) if isinstance(value, str) and len(value) < 1 << 16 else None


by_start = itemgetter(2)  # the start of an Op, RuntimeCall or SyncEvent (or of their plain tuples)


def collect(chunks: Iterable[list[dict]]) -> tuple[list, ...]:
    """The records of a stream of event chunks, as plain tuples in the field order of the record types (cheap to
    build and to pickle between processes; build.py makes them records): steps, ops, runtime calls, raw GPU
    events, syncs, frames, memory samples, the collective args of communication kernels (``_collective_args``), the
    names of annotation ops, the counter names of each CUPTI range-profiler event, the GEMM ops with their input
    shapes (ShapedOp), the ``record_param_comms`` ops (CommOp), the count of torch.distributed.pipelining frames, the
    (tid, start) of the torch.cuda.empty_cache() frames, and (events seen, {reason:
    [count, index of the first event]}) of the events dropped or partly ignored."""
    names: dict = {}  # str -> str (and a range's counter names -> themselves)
    intern = names.setdefault
    ops, runtime, gpu_raw, syncs, frames, memory, steps, comms, ranges, shaped, comm_ops, empty_cache = (
        [] for _ in range(12))
    pipelining = [0]  # frames of torch.distributed.pipelining (one count per part of a parallel read)
    watched = SHAPED_OPS | {COMM_OP}
    annotations: set[str] = set()
    stacks: dict[str, str | None] = {}  # "Call stack" arg -> its innermost user frame
    shaped_by_text: dict[tuple, object] = {}  # a shaped op's raw (dims, types, concrete) args -> _shapes of them
    frames_seen: dict[str, object] = {}  # a python_function name -> what _frame gives (None too), in the typed reader
    problems: dict[tuple[str, bool], list[int]] = {}
    seen = 0  # events of the chunks before the current one
    chunk: list = []

    def note(reason: str, e: dict, dropped: bool = False) -> None:
        key = (reason, dropped)
        found = problems.get(key)
        if found is not None:
            found[0] += 1
            return
        at = next((i for i, x in enumerate(chunk) if x is e), 0)  # once per reason: no index kept in the hot loop
        problems[key] = [1, seen + at]

    def stack_of(call_stack: str) -> str | None:
        stack = stacks.get(call_stack, False)
        if stack is False:
            stack = stacks[call_stack] = _innermost_user_frame(call_stack)
        return stack

    def read(e, kind: int) -> None:
        """The tolerant reader: any event, missing or odd fields included; drops it (noting why) when a field it
        needs cannot be used."""
        try:
            if e.__class__ is not dict:
                raise _Bad("not an object")
            if kind == -1:
                raise _Bad("`cat` not a string")
            name = e.get("name")
            if name is None:
                name = ""
            elif name.__class__ is not str:
                raise _Bad("`name` not a string")
            if kind == _RANGE:
                args = e.get("args")
                counters = tuple(k for k in args if k not in _RANGE_NOT_COUNTERS) if args.__class__ is dict else ()
                ranges.append(intern(counters, counters))
                return
            if kind == _INSTANT and name != "[memory]":
                return  # instants other than memory samples are not read
            ts = e.get("ts")
            if ts is None:
                if kind == _INSTANT:
                    return
                raise _Bad("`ts` missing")
            ts = _time(ts, "ts")
            args = e.get("args")
            if args is None:
                args = _EMPTY
            elif args.__class__ is not dict:
                note("`args` not an object", e)
                args = _EMPTY
            if kind == _INSTANT:
                # Device Type 0 is the CPU allocator; CUDA (and ROCm, which PyTorch reports as CUDA) is 1.
                if args.get("Device Type", 0) != 0:
                    try:
                        tid = _tid(e.get("tid"))
                    except _Bad:  # a sample is kept without its thread
                        tid = None
                    memory.append((ts, int64(args.get("Device Id")) or 0, int64(args.get("Bytes")) or 0,
                                   int64(args.get("Total Allocated")), int64(args.get("Total Reserved")),
                                   int64(args.get("Addr")), tid))
                return
            end = ts + _duration(e.get("dur"))
            if kind == _GPU:
                device = args.get("device")
                device = int64(e.get("pid") if device is None else device) or 0
                stream = args.get("stream", e.get("tid"))
                if stream is not None and stream.__class__ is not int and stream.__class__ is not str:
                    note("`args.stream` not an integer or string", e)
                    stream = None
                corr = _correlation(args, e)
                nbytes = args.get("bytes")
                gpu_raw.append((_GPU_KIND[e["cat"]], intern(name, name), device, stream, ts, end, corr,
                                None if nbytes is None else int64(nbytes)))
                if "Collective name" in args:
                    comms.append(_collective_args(args, corr))
                return
            if kind == _SYNC:
                device = args.get("device")
                syncs.append((intern(name, name), int64(e.get("pid") if device is None else device) or 0, ts, end,
                              _correlation(args, e)))
                return
            tid = _tid(e.get("tid"))
            if kind == _OP or kind == _ANNOTATION:
                m = _STEP_RE.match(name) if name.startswith("ProfilerStep#") else None
                if m:
                    number = int(m.group(1)) if len(m.group(1)) < 19 else -1
                    if number < 0:
                        raise _Bad("step number beyond 64 bits")
                    steps.append((number, tid, ts, end))
                    return
                stack = args.get("Call stack")
                if stack is not None and stack.__class__ is not str:
                    note("`args.Call stack` not a string", e)
                    stack = None
                ops.append((intern(name, name), tid, ts, end, None if stack is None else stack_of(stack)))
                if name in SHAPED_OPS and (found := _shapes(args)) is not None:
                    shaped.append((intern(name, name), tid, ts, end, *found))
                elif name == COMM_OP:
                    comm_ops.append(_comm_op(tid, ts, args))
                if kind == _ANNOTATION:
                    annotations.add(name)
            elif kind == _RUNTIME:
                runtime.append((intern(name, name), tid, ts, end, _correlation(args, e)))
            elif kind == _PYFRAME:
                user = _frame(name) if "): " in name else None
                if user is PIPELINING:
                    pipelining[0] += 1
                elif user is EMPTY_CACHE:
                    empty_cache.append((tid, ts + 0.0))
                elif user is not None:
                    frames.append((tid, ts, end, *user))
        except _Bad as bad:
            note(bad.args[0], e, dropped=True)

    def _correlation(args: dict, e: dict) -> int | None:
        corr = args.get("correlation")
        if corr is None or corr.__class__ is int:
            return corr
        value = int64(corr) if corr.__class__ is float and corr.is_integer() else None
        if value is None:
            note("`args.correlation` not an integer", e)
        return value

    # The fast path reads the categories that make up most of a trace by plain subscripts and exact type checks;
    # anything it does not expect (a missing field, a string timestamp, a value out of range, a step) raises and
    # goes to read(). A chained comparison both range-checks a number and raises TypeError for a non-number (NaN
    # and infinities fail it). Where read() turns times into floats (frames, ops with a call stack), the fast path
    # adds 0.0, which gives the same float for any number.
    category = _CATEGORY.get
    add_op, add_call, add_gpu, add_memory = ops.append, runtime.append, gpu_raw.append, memory.append
    add_frame = frames.append
    str_, int_, dict_ = str, int, dict
    lo, hi, max_dur, i64 = -_MAX_TS, _MAX_TS, _MAX_DUR, _I64
    def typed(chunk: TypedChunk, start: int) -> int:
        """The events of a typed chunk (events.Event) read as the fast path below reads their dicts, up to the first
        it does not take as it comes (its index is returned: that event and the rest go to the dict readers)."""
        kinds, gpu_kind, intern_, watched_ = _CATEGORY, _GPU_KIND, intern, watched
        add_op_, add_call_, add_gpu_, add_memory_, add_frame_ = add_op, add_call, add_gpu, add_memory, add_frame
        add_sync, add_annotation, frame_of, stack_of_ = syncs.append, annotations.add, _frame, stack_of
        add_step, add_shaped, loads, add_empty_cache = steps.append, shaped.append, orjson.loads, empty_cache.append
        int__ = int
        lo_, hi_, max_dur_, i64_ = lo, hi, max_dur, i64
        unset = UNSET
        known_frames, frame_get, missing = frames_seen, frames_seen.get, _Bad  # (_Bad: a value no name maps to)
        i = start - 1
        for e in islice(chunk, start, None) if start else chunk:
            i += 1
            cat = e.cat
            kind = kinds.get(cat)
            if kind is None:
                continue
            if kind == _PYFRAME:
                name = e.name
                user = frame_get(name, missing)
                if user is missing:
                    if name is None:
                        return i
                    user = known_frames[name] = frame_of(name) if "): " in name else None
                if user is None:
                    continue
                if user is PIPELINING:
                    pipelining[0] += 1
                    continue
                ts, dur, tid = e.ts, e.dur, e.tid
                if ts is None or dur is None or tid is None:
                    return i
                ts += 0.0
                if not (lo_ <= ts <= hi_ and 0 <= dur <= max_dur_):
                    return i
                if user is EMPTY_CACHE:
                    add_empty_cache((tid, ts))
                    continue
                add_frame_((tid, ts, ts + dur, *user))
                continue
            if kind == _OP or kind == _ANNOTATION:
                name, args, ts, dur, tid = e.name, e.args, e.ts, e.dur, e.tid
                if name is None or ts is None or tid is None:
                    return i
                if name.startswith("ProfilerStep#"):  # as read() takes a step
                    m = _STEP_RE.match(name)
                    if (m is None or len(m.group(1)) >= 19 or not lo_ <= ts <= hi_
                            or not (dur is None or 0 <= dur <= max_dur_)):
                        return i
                    add_step((int(m.group(1)), tid, ts, ts + (0.0 if dur is None else dur)))
                    continue
                if args is None or dur is None or not (lo_ <= ts <= hi_ and 0 <= dur <= max_dur_):
                    return i
                stack = args.call_stack
                if name in watched_:
                    if name == COMM_OP or stack is None:
                        return i
                    # a step repeats its ops' shapes: each distinct text is decoded once per part
                    raw = tuple(None if r is None else memoryview(r).tobytes()
                                for r in (args.input_dims, args.input_types, args.concrete_inputs))
                    found = shaped_by_text.get(raw, unset)
                    if found is unset:
                        shape_args = {}
                        try:
                            for key, text in zip(_SHAPE_ARGS, raw, strict=True):
                                if text is not None:
                                    shape_args[key] = loads(text)
                        except ValueError:  # (orjson's error) a value the loader's repairs read
                            return i
                        found = shaped_by_text[raw] = _shapes(shape_args)
                else:
                    found = None
                if stack is unset:
                    add_op_((intern_(name, name), tid, ts, ts + dur, None))
                elif stack is None:
                    return i
                else:
                    ts += 0.0
                    add_op_((intern_(name, name), tid, ts, ts + dur, stack_of_(stack)))
                if found is not None:
                    add_shaped((intern_(name, name), tid, ts + 0.0, ts + dur, *found))
                if kind == _ANNOTATION:
                    add_annotation(name)
                continue
            if kind == _RUNTIME:
                name, args, ts, dur, tid = e.name, e.args, e.ts, e.dur, e.tid
                if name is None or args is None or ts is None or dur is None or tid is None:
                    return i
                corr = args.correlation
                if corr is None or not (lo_ <= ts <= hi_ and 0 <= dur <= max_dur_):
                    return i
                add_call_((intern_(name, name), tid, ts, ts + dur, corr))
                continue
            if kind == _GPU:
                name, args, ts, dur = e.name, e.args, e.ts, e.dur
                if name is None or args is None or ts is None or dur is None:
                    return i
                device, stream, corr, nbytes = args.device, args.stream, args.correlation, args.bytes
                if (device is None or stream is None or corr is None or args.collective is not unset
                        or not (lo_ <= ts <= hi_ and 0 <= dur <= max_dur_ and -i64_ <= device < i64_
                                and (nbytes is None or 0 <= nbytes < i64_))):
                    return i
                add_gpu_((gpu_kind[cat], intern_(name, name), device, stream, ts, ts + dur, corr, nbytes))
                continue
            if kind == _INSTANT:
                if e.name != "[memory]":
                    continue
                args, ts = e.args, e.ts
                if cat is None or args is None or ts is None:
                    return i
                device_type = args.device_type
                if device_type is unset:
                    return i
                if device_type != 0:
                    device, nbytes, total = args.device_id, args.alloc_bytes, args.total_allocated
                    if total is unset:
                        total = None
                    if not (device.__class__ is int__ and -i64_ <= device < i64_
                            and nbytes.__class__ is int__ and -i64_ <= nbytes < i64_
                            and (total is None or (total.__class__ is int__ and -i64_ <= total < i64_))
                            and lo_ <= ts <= hi_):
                        return i
                    # (Total Reserved and Addr are typed: the decode checked them)
                    add_memory_((ts + 0, device, nbytes, total, args.total_reserved, args.addr, e.tid))
                continue
            if kind == _SYNC:
                name, args, ts, dur = e.name, e.args, e.ts, e.dur
                if args is None or ts is None:
                    return i
                device, corr = args.device, args.correlation
                if device is None or not (lo_ <= ts <= hi_ and -i64_ <= device < i64_
                                          and (dur is None or 0 <= dur <= max_dur_)):
                    return i
                name = "" if name is None else name
                add_sync((intern_(name, name), device or 0, ts, ts + (0.0 if dur is None else dur), corr))
                continue
            return i  # a CUPTI range: its counters are the names of all its args
        return i + 1

    def dict_events():
        """The events to read from dicts: every event of a plain chunk, and those of a typed chunk that its typed
        reading leaves (each read from the chunk's dicts, in turn with the typed reading of the others, so that
        records are appended in event order); ``chunk`` is the dicts of the current chunk, ``seen`` counts the
        events of the chunks before it (what ``note`` numbers events by)."""
        nonlocal chunk, seen
        for current in chunks:
            if current.__class__ is TypedChunk:
                n, start, dicts = len(current), 0, None
                while (i := typed(current, start)) < n:
                    if dicts is None:
                        dicts = current.dicts()
                    chunk = dicts
                    yield dicts[i]
                    start = i + 1
            else:
                chunk = current
                yield from current
            seen += len(current)

    for e in dict_events():
        try:
            kind = category(e.get("cat"))
        except (TypeError, AttributeError):  # an unhashable cat (a list), or an item that is not an object
            kind = -1
        if kind is None:
            continue
        try:
            if kind == _PYFRAME:
                # Most frames are library code, dropped on their name: only user frames have their fields read.
                name = e["name"]
                if "): " not in name or (user := _frame(name)) is None:
                    continue
                if user is PIPELINING:
                    pipelining[0] += 1
                    continue
                ts = e["ts"] + 0.0
                dur = e["dur"]
                tid = e["tid"]
                if not (lo <= ts <= hi and 0 <= dur <= max_dur and name.__class__ is str_
                        and (tid.__class__ is int_ or tid.__class__ is str_)):
                    raise _Slow
                if user is EMPTY_CACHE:
                    empty_cache.append((tid, ts))
                    continue
                add_frame((tid, ts, ts + dur, *user))
                continue
            if kind == _OP or kind == _ANNOTATION:
                name = e["name"]
                if name.startswith("ProfilerStep#"):  # also raises for a name that is not a string
                    raise _Slow
                args = e["args"]
                ts = e["ts"]
                dur = e["dur"]
                tid = e["tid"]
                if not (lo <= ts <= hi and 0 <= dur <= max_dur and args.__class__ is dict_
                        and (tid.__class__ is int_ or tid.__class__ is str_)):
                    raise _Slow
                if "Call stack" in args:
                    stack = args["Call stack"]
                    if stack.__class__ is not str_:
                        raise _Slow
                    ts += 0.0
                    add_op((intern(name, name), tid, ts, ts + dur, stack_of(stack)))
                else:
                    add_op((intern(name, name), tid, ts, ts + dur, None))
                if name in watched:  # one set lookup per op for the few names read further
                    if name == COMM_OP:
                        comm_ops.append(_comm_op(tid, ts, args))
                    elif (found := _shapes(args)) is not None:
                        shaped.append((intern(name, name), tid, ts + 0.0, ts + dur, *found))
                if kind == _ANNOTATION:
                    annotations.add(name)
                continue
            if kind == _RUNTIME:
                ts = e["ts"]
                dur = e["dur"]
                name = e["name"]
                tid = e["tid"]
                corr = e["args"]["correlation"]
                if not (lo <= ts <= hi and 0 <= dur <= max_dur and name.__class__ is str_
                        and (tid.__class__ is int_ or tid.__class__ is str_) and corr.__class__ is int_):
                    raise _Slow
                add_call((intern(name, name), tid, ts, ts + dur, corr))
                continue
            if kind == _GPU:
                ts = e["ts"]
                dur = e["dur"]
                name = e["name"]
                args = e["args"]
                device = args["device"]
                stream = args["stream"]
                corr = args["correlation"]
                nbytes = args.get("bytes")
                if not (lo <= ts <= hi and 0 <= dur <= max_dur and name.__class__ is str_
                        and device.__class__ is int_ and -i64 <= device < i64
                        and (stream.__class__ is int_ or stream.__class__ is str_) and corr.__class__ is int_
                        and (nbytes is None or (nbytes.__class__ is int_ and 0 <= nbytes < i64))):
                    raise _Slow
                add_gpu((_GPU_KIND[e["cat"]], intern(name, name), device, stream, ts, ts + dur, corr, nbytes))
                if "Collective name" in args:
                    comms.append(_collective_args(args, corr))
                continue
            if kind == _INSTANT and e["cat"] is not None:
                if e["name"] == "[memory]":
                    args = e["args"]
                    if args["Device Type"] != 0:
                        ts = e["ts"] + 0
                        device = args["Device Id"]
                        nbytes = args["Bytes"]
                        total = args.get("Total Allocated")
                        reserved = args.get("Total Reserved")
                        addr = args.get("Addr")
                        tid = e["tid"]
                        if not (lo <= ts <= hi and device.__class__ is int_ and -i64 <= device < i64
                                and nbytes.__class__ is int_ and -i64 <= nbytes < i64
                                and (total is None or (total.__class__ is int_ and -i64 <= total < i64))
                                and (reserved is None or (reserved.__class__ is int_ and -i64 <= reserved < i64))
                                and (addr is None or (addr.__class__ is int_ and -i64 <= addr < i64))
                                and (tid.__class__ is int_ or tid.__class__ is str_)):
                            raise _Slow
                        add_memory((ts, device, nbytes, total, reserved, addr, tid))
                continue
        except (_Slow, TypeError, KeyError, AttributeError):
            pass
        read(e, kind)
    # Sorted here, by the same keys as in build.py's _finish, so that in a parallel read the workers do the sorting
    # and _finish's stable sorts only merge the parts' sorted runs (same order as sorting the whole at once).
    ops.sort(key=by_start)
    runtime.sort(key=by_start)
    gpu_raw.sort(key=itemgetter(4))
    frames.sort(key=itemgetter(1))
    memory.sort(key=itemgetter(0))
    shaped.sort(key=by_start)
    comm_ops.sort(key=itemgetter(1))
    empty_cache.sort(key=itemgetter(1))
    return (steps, ops, runtime, gpu_raw, syncs, frames, memory, comms, sorted(annotations), ranges, shaped,
            comm_ops, pipelining, empty_cache, (seen, {key: tuple(v) for key, v in problems.items()}))

