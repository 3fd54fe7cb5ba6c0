"""One reader per event kind: what each kind of trace event gives the model, checked and converted in one place for
both decode paths (read_events.py hands each reader the fields of a dict or of a typed events.Event alike).

Each kind has a strict reader, which takes its fields only when they have the exact types and ranges the model
relies on (else it raises ``Slow``: a dict event then goes to the tolerant reader, a typed chunk to its dicts), and
a tolerant one (``tolerant``), which reads any dict, converting what can be converted and noting the rest. For any
event both accept they give the same record, so a trace reads the same whichever path took its events.

Records are plain tuples in the field order of model.py's records (cheap to build and to pickle between
processes; build.py makes them records); ``EventRecords`` holds them by kind.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import orjson

from tracelint.trace.events import UNSET
from tracelint.trace.fields import (
    I64,
    MAX_DUR,
    MAX_TS,
    Bad,
    Slow,
    duration_of,
    int64,
    int_str,
    tid_of,
    time_of,
)
from tracelint.trace.frames import EMPTY_CACHE, PIPELINING, frame_of, innermost_user_frame
from tracelint.trace.kernels import collective_name
from tracelint.trace.model import KERNEL, MEMCPY, MEMSET, SHAPED_OPS

COMM_OP = "record_param_comms"  # the CPU op c10d records each collective and send/recv with (model.CommOp)
WATCHED_OPS = SHAPED_OPS | {COMM_OP}  # the ops whose args are read further than their call stack

GPU_KIND = {
    "kernel": KERNEL, "Kernel": KERNEL,
    "gpu_memcpy": MEMCPY, "Memcpy": MEMCPY,
    "gpu_memset": MEMSET, "Memset": MEMSET,
}
# The kinds of event read, by category (PyTorch <= 1.9 categories read as their 2.x twins).
OP, RUNTIME, GPU, PYFRAME, SYNC, INSTANT, ANNOTATION, RANGE = range(8)
CATEGORY = {
    "cpu_op": OP, "user_annotation": ANNOTATION, "Operator": OP,
    "cuda_runtime": RUNTIME, "cuda_driver": RUNTIME, "Runtime": RUNTIME,
    "python_function": PYFRAME,
    "cuda_sync": SYNC,
    "cpu_instant_event": INSTANT, None: INSTANT,
    "cuda_profiler_range": RANGE,
    **{cat: GPU for cat in GPU_KIND},
}
# The args of a CUPTI range-profiler event that are not counters.
_RANGE_NOT_COUNTERS = frozenset({"correlation", "External id"})
_EMPTY: dict = {}
_STEP_RE = re.compile(r"ProfilerStep#(\d+)$")
_SHAPE_ARGS = ("Input Dims", "Input type", "Concrete Inputs")
_LO, _HI = -MAX_TS, MAX_TS
_NEG_I64 = -I64  # (a constant: `-I64` in a check would build a big int each time)


@dataclass(slots=True)
class EventRecords:
    """The records of a stream of event chunks (a whole trace, or one part of a parallel read), each a plain tuple in
    the field order of its model record."""

    steps: list = field(default_factory=list)  # Step
    ops: list = field(default_factory=list)  # Op: CPU ops and annotations
    runtime: list = field(default_factory=list)  # RuntimeCall
    gpu: list = field(default_factory=list)  # the first 8 fields of a GpuEvent (its launch and step come later)
    syncs: list = field(default_factory=list)  # SyncEvent
    frames: list = field(default_factory=list)  # Frame: python_function frames of user code
    memory: list = field(default_factory=list)  # MemorySample
    collectives: list = field(default_factory=list)  # (correlation, *CollectiveArgs) of communication kernels
    annotations: set = field(default_factory=set)  # the names of user_annotation ops
    ranges: list = field(default_factory=list)  # the counter names of each CUPTI range-profiler event
    shaped: list = field(default_factory=list)  # ShapedOp: GEMM, conv and attention ops with their input shapes
    comm_ops: list = field(default_factory=list)  # CommOp: record_param_comms ops
    empty_cache: list = field(default_factory=list)  # (tid, start) of the torch.cuda.empty_cache() frames
    pipelining: int = 0  # frames of torch.distributed.pipelining
    events: int = 0  # the events of the chunks read
    # (reason, whether the event was dropped) -> [events, index of the first]
    problems: dict[tuple[str, bool], list[int]] = field(default_factory=dict)


class Readers:
    """The readers of one stream of chunks, appending to ``out``. ``chunk`` and ``seen`` (the events of the chunks
    before it) say where an event is, for the problems the tolerant reader notes."""

    __slots__ = ("out", "chunk", "seen", "_intern", "_stacks", "_shapes_by_text", "_add_op", "_add_call", "_add_gpu",
                 "_add_memory", "_add_frame", "frames_seen", "kinds", "_plain_ops")

    def __init__(self) -> None:
        out = self.out = EventRecords()
        self.chunk: list = []
        self.seen = 0
        self._intern = {}.setdefault  # str -> str (and a range's counter names -> themselves)
        self._stacks: dict[str, str | None] = {}  # "Call stack" arg -> its innermost user frame
        self._shapes_by_text: dict[tuple, object] = {}  # a typed op's raw shape args -> shapes_of them
        self.kinds = dict(CATEGORY)  # CATEGORY, and the categories met that are not read (-> None)
        self.frames_seen: dict = {}  # a python_function name -> what frame_of gives (None too): read_events skips
        self._plain_ops: dict[str, str] = {}  # an op's name -> itself interned, for a name that is neither a step
        # nor one of WATCHED_OPS (what most ops are: one lookup where the name would be tested thrice)
        self._add_op, self._add_call, self._add_gpu = out.ops.append, out.runtime.append, out.gpu.append
        self._add_memory, self._add_frame = out.memory.append, out.frames.append

    # ---- python_function frames ---------------------------------------------------------------------------------
    def frame_user(self, name):
        """What ``frame_of`` gives for a frame's name, remembered in ``frames_seen`` (read_events looks there first:
        most frames are library code, dropped on their name)."""
        user = self.frames_seen[name] = frame_of(name) if "): " in name else None
        return user

    def frame(self, user, ts, dur, tid) -> None:
        """A frame that is not library code: ``user`` is what ``frame_user`` gave."""
        if user is PIPELINING:
            self.out.pipelining += 1
            return
        ts += 0.0
        if not (_LO <= ts <= _HI and 0 <= dur <= MAX_DUR and (tid.__class__ is int or tid.__class__ is str)):
            raise Slow
        if user is EMPTY_CACHE:
            self.out.empty_cache.append((tid, ts))
        else:
            self._add_frame((tid, ts, ts + dur, *user))

    def _tolerant_frame(self, name: str, tid, ts, end) -> None:
        user = frame_of(name) if "): " in name else None
        if user is PIPELINING:
            self.out.pipelining += 1
        elif user is EMPTY_CACHE:
            self.out.empty_cache.append((tid, ts + 0.0))
        elif user is not None:
            self._add_frame((tid, ts, end, *user))

    # ---- CPU ops and annotations (profiler steps among them) ------------------------------------------------------
    def op(self, annotation: bool, name, ts, dur, tid, stack, args, shapes_of) -> None:
        """An op: ``stack`` is its ``Call stack`` arg (UNSET: none), ``shapes_of(args)`` the input shapes of an op of
        SHAPED_OPS (its decode path's way to them)."""
        plain = self._plain_ops.get(name)  # (a name that is not hashable raises TypeError: the tolerant reader)
        if plain is None:
            if name.startswith("ProfilerStep#"):
                self.step(name, ts, dur, tid)
                return
            if name not in WATCHED_OPS:
                plain = self._plain_ops[name] = self._intern(name, name)
        if not (_LO <= ts <= _HI and 0 <= dur <= MAX_DUR and (tid.__class__ is int or tid.__class__ is str)):
            raise Slow
        if stack is UNSET:
            stack = None
        elif stack.__class__ is str:
            ts += 0.0
            stack = self._stack_of(stack)
        else:
            raise Slow
        if plain is None:  # one of WATCHED_OPS, read further
            plain = self._intern(name, name)
            if name == COMM_OP:  # (a typed Args has no `get`: such an op is read from its dict)
                self.out.comm_ops.append(_comm_op(tid, ts, args))
            elif (found := shapes_of(args)) is not None:
                self.out.shaped.append((plain, tid, ts + 0.0, ts + dur, *found))
        self._add_op((plain, tid, ts, ts + dur, stack))
        if annotation:
            self.out.annotations.add(name)

    def step(self, name: str, ts, dur, tid) -> None:
        """A ``ProfilerStep#N`` span (any other name that starts so is an op: the tolerant reader reads it)."""
        m = _STEP_RE.match(name)
        if (m is None or len(m.group(1)) >= 19 or not (ts.__class__ is int or ts.__class__ is float)
                or not _LO <= ts <= _HI
                or not (dur is None or ((dur.__class__ is int or dur.__class__ is float) and 0 <= dur <= MAX_DUR))
                or not (tid.__class__ is str or (tid.__class__ is int and _NEG_I64 <= tid < I64))):
            raise Slow
        self.out.steps.append((int(m.group(1)), tid, ts, ts + (0.0 if dur is None else dur)))

    def typed_shapes(self, args) -> tuple | None:
        """``shapes_of`` for a typed op: its shape args are kept undecoded (events.Args), and a step repeats its ops'
        shapes, so each distinct text is decoded once per part."""
        raw = tuple(None if r is None else memoryview(r).tobytes()
                    for r in (args.input_dims, args.input_types, args.concrete_inputs))
        found = self._shapes_by_text.get(raw, UNSET)
        if found is UNSET:
            try:
                shape_args = {key: orjson.loads(text) for key, text in zip(_SHAPE_ARGS, raw, strict=True)
                              if text is not None}
            except ValueError:  # (orjson's error) a value the loader's repairs read
                raise Slow from None
            found = self._shapes_by_text[raw] = shapes_of(shape_args)
        return found

    def _tolerant_op(self, annotation: bool, name: str, tid, ts, end, args: dict, e: dict) -> None:
        m = _STEP_RE.match(name) if name.startswith("ProfilerStep#") else None
        if m:
            number = int(m.group(1)) if len(m.group(1)) < 19 else -1
            if number < 0:
                raise Bad("step number beyond 64 bits")
            self.out.steps.append((number, tid, ts, end))
            return
        stack = args.get("Call stack")
        if stack is not None and stack.__class__ is not str:
            self.note("`args.Call stack` not a string", e)
            stack = None
        intern = self._intern
        self._add_op((intern(name, name), tid, ts, end, None if stack is None else self._stack_of(stack)))
        if name in SHAPED_OPS and (found := shapes_of(args)) is not None:
            self.out.shaped.append((intern(name, name), tid, ts, end, *found))
        elif name == COMM_OP:
            self.out.comm_ops.append(_comm_op(tid, ts, args))
        if annotation:
            self.out.annotations.add(name)

    def _stack_of(self, call_stack: str) -> str | None:
        stack = self._stacks.get(call_stack, False)
        if stack is False:
            stack = self._stacks[call_stack] = innermost_user_frame(call_stack)
        return stack

    # ---- CUDA/HIP runtime and driver calls ----------------------------------------------------------------------
    def runtime(self, name, ts, dur, tid, corr) -> None:
        if not (_LO <= ts <= _HI and 0 <= dur <= MAX_DUR and name.__class__ is str
                and (tid.__class__ is int or tid.__class__ is str) and corr.__class__ is int):
            raise Slow
        self._add_call((self._intern(name, name), tid, ts, ts + dur, corr))

    # ---- GPU activity: kernels, copies, memsets -------------------------------------------------------------------
    def gpu(self, cat: str, name, ts, dur, device, stream, corr, nbytes, collective, args) -> None:
        """``collective``: the ``Collective name`` arg (UNSET: none), read with the rest of a communication kernel's
        args (a typed Args has no `get`: such a kernel is read from its dict)."""
        if not (_LO <= ts <= _HI and 0 <= dur <= MAX_DUR and name.__class__ is str
                and device.__class__ is int and _NEG_I64 <= device < I64
                and (stream.__class__ is int or stream.__class__ is str) and corr.__class__ is int
                and (nbytes is None or (nbytes.__class__ is int and 0 <= nbytes < I64))):
            raise Slow
        if collective is not UNSET:
            self.out.collectives.append(_collective_args(args, corr))
        self._add_gpu((GPU_KIND[cat], self._intern(name, name), device, stream, ts, ts + dur, corr, nbytes))

    def _tolerant_gpu(self, cat: str, name: str, ts, end, args: dict, e: dict) -> None:
        device = args.get("device")
        device = int64(e.get("pid") if device is None else device) or 0
        stream = args.get("stream", e.get("tid"))
        if stream is not None and stream.__class__ is not int and stream.__class__ is not str:
            self.note("`args.stream` not an integer or string", e)
            stream = None
        corr = self._correlation(args, e)
        nbytes = args.get("bytes")
        self._add_gpu((GPU_KIND[cat], self._intern(name, name), device, stream, ts, end, corr,
                       None if nbytes is None else int64(nbytes)))
        if "Collective name" in args:
            self.out.collectives.append(_collective_args(args, corr))

    # ---- cuda_sync: the device side of a host synchronization -----------------------------------------------------
    def sync(self, name, ts, dur, device, corr) -> None:
        if name is None:
            name = ""
        if not (name.__class__ is str and (ts.__class__ is int or ts.__class__ is float) and _LO <= ts <= _HI
                and device.__class__ is int and _NEG_I64 <= device < I64
                and (dur is None or ((dur.__class__ is int or dur.__class__ is float) and 0 <= dur <= MAX_DUR))
                and (corr is None or corr.__class__ is int)):
            raise Slow
        self.out.syncs.append((self._intern(name, name), device or 0, ts, ts + (0.0 if dur is None else dur), corr))

    def _tolerant_sync(self, name: str, ts, end, args: dict, e: dict) -> None:
        device = args.get("device")
        self.out.syncs.append((self._intern(name, name), int64(e.get("pid") if device is None else device) or 0, ts,
                               end, self._correlation(args, e)))

    # ---- [memory] instants of a device allocator ------------------------------------------------------------------
    def memory(self, cat, ts, tid, device_type, device, nbytes, total, reserved, addr) -> None:
        """A ``[memory]`` instant: a sample of a device allocator is kept (Device Type 0 is the CPU allocator; CUDA, and
        ROCm, which PyTorch reports as CUDA, is 1); the args are UNSET where absent (only read past Device Type 0)."""
        if cat is None or device_type is UNSET:
            raise Slow
        if device_type == 0:
            return
        if total is UNSET:
            total = None
        ts += 0
        if not (_LO <= ts <= _HI and device.__class__ is int and _NEG_I64 <= device < I64
                and nbytes.__class__ is int and _NEG_I64 <= nbytes < I64
                and (total is None or (total.__class__ is int and _NEG_I64 <= total < I64))
                and (reserved is None or (reserved.__class__ is int and _NEG_I64 <= reserved < I64))
                and (addr is None or (addr.__class__ is int and _NEG_I64 <= addr < I64))
                and (tid is None or tid.__class__ is int or tid.__class__ is str)):
            raise Slow
        self._add_memory((ts, device, nbytes, total, reserved, addr, tid))

    def _tolerant_memory(self, ts, args: dict, e: dict) -> None:
        if args.get("Device Type", 0) == 0:
            return
        try:
            tid = tid_of(e.get("tid"))
        except Bad:  # a sample is kept without its thread
            tid = None
        self._add_memory((ts, int64(args.get("Device Id")) or 0, int64(args.get("Bytes")) or 0,
                          int64(args.get("Total Allocated")), int64(args.get("Total Reserved")),
                          int64(args.get("Addr")), tid))

    # ---- CUPTI range-profiler events: counters, no timeline -------------------------------------------------------
    def _tolerant_range(self, args) -> None:
        counters = tuple(k for k in args if k not in _RANGE_NOT_COUNTERS) if args.__class__ is dict else ()
        self.out.ranges.append(self._intern(counters, counters))

    # ---- the tolerant reader ------------------------------------------------------------------------------------
    def tolerant(self, e, kind: int) -> None:
        """Any event, missing or odd fields included, of a known ``kind`` (-1: its category is not a string); drops
        it (noting why) when a field it needs cannot be used."""
        try:
            if e.__class__ is not dict:
                raise Bad("not an object")
            if kind == -1:
                raise Bad("`cat` not a string")
            name = e.get("name")
            if name is None:
                name = ""
            elif name.__class__ is not str:
                raise Bad("`name` not a string")
            if kind == RANGE:
                self._tolerant_range(e.get("args"))
                return
            if kind == INSTANT and name != "[memory]":
                return  # instants other than memory samples are not read
            ts = e.get("ts")
            if ts is None:
                if kind == INSTANT:
                    return
                raise Bad("`ts` missing")
            ts = time_of(ts, "ts")
            args = e.get("args")
            if args is None:
                args = _EMPTY
            elif args.__class__ is not dict:
                self.note("`args` not an object", e)
                args = _EMPTY
            if kind == INSTANT:
                self._tolerant_memory(ts, args, e)
                return
            end = ts + duration_of(e.get("dur"))
            if kind == GPU:
                self._tolerant_gpu(e["cat"], name, ts, end, args, e)
            elif kind == SYNC:
                self._tolerant_sync(name, ts, end, args, e)
            elif kind == RUNTIME:
                self._add_call((self._intern(name, name), tid_of(e.get("tid")), ts, end, self._correlation(args, e)))
            elif kind == PYFRAME:
                self._tolerant_frame(name, tid_of(e.get("tid")), ts, end)
            else:
                self._tolerant_op(kind == ANNOTATION, name, tid_of(e.get("tid")), ts, end, args, e)
        except Bad as bad:
            self.note(bad.args[0], e, dropped=True)

    def _correlation(self, args: dict, e: dict) -> int | None:
        corr = args.get("correlation")
        if corr is None or corr.__class__ is int:
            return corr
        value = int64(corr) if corr.__class__ is float and corr.is_integer() else None
        if value is None:
            self.note("`args.correlation` not an integer", e)
        return value

    def note(self, reason: str, e: dict, dropped: bool = False) -> None:
        """Count a problem of event ``e`` of the current chunk."""
        key = (reason, dropped)
        found = self.out.problems.get(key)
        if found is not None:
            found[0] += 1
            return
        at = next((i for i, x in enumerate(self.chunk) if x is e), 0)  # once per reason: no index kept in the loops
        self.out.problems[key] = [1, self.seen + at]


# ---- args read further (the dict path's: a typed Args has none of these) ------------------------------------------

def shapes_of(args: dict) -> tuple[tuple[tuple[int, ...], ...], tuple[str, ...], tuple[str, ...]] | None:
    """(dims, types, concrete values) of an op's ``Input Dims`` / ``Input type`` / ``Concrete Inputs`` args (the
    first 16 arguments); None when the trace has no usable shapes."""
    dims, types, concrete = args.get("Input Dims"), args.get("Input type"), args.get("Concrete Inputs")
    if dims.__class__ is not list or types.__class__ is not list:
        return None
    shapes = tuple(tuple(d) if d.__class__ is list and all(x.__class__ is int and 0 <= x < I64 for x in d) else ()
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
    return group if isinstance(group, str) else int_str(group)


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
