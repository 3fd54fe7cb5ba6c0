"""One reader per event kind (readers.py) over both decode paths: a well-formed event of each kind is taken by its
strict reader whether it comes as a dict or as a typed Struct (the tolerant reader never sees it), and a malformed
one is left to the tolerant reader, which drops or notes it the same way whichever path it came by."""
from __future__ import annotations

import json

import pytest

from tracelint.trace import events
from tracelint.trace.read_events import read_events
from tracelint.trace.readers import Readers


def _ev(**fields) -> dict:
    return {"ph": "X", "pid": 0, "tid": 7, "ts": 100, "dur": 5, **fields}


def _memory(**args) -> dict:
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 0, "tid": 7, "ts": 110, "args": args}


# one well-formed event of each kind that has a strict reader
GOOD = {
    "frame": _ev(cat="python_function", name="train.py(12): step"),
    "empty_cache": _ev(cat="python_function", name="torch/cuda/memory.py(212): empty_cache"),
    "library frame": _ev(cat="python_function", name="torch/nn/modules/module.py(1527): _call_impl"),
    "op": _ev(cat="cpu_op", name="aten::add", args={"External id": 3}),
    "op with a stack": _ev(cat="cpu_op", name="aten::add", args={"Call stack": "train.py(3): main;torch/x.py(1): f"}),
    "annotation": _ev(cat="user_annotation", name="Optimizer.step#AdamW.step", args={}),
    "shaped op": _ev(cat="cpu_op", name="aten::mm", args={"Input Dims": [[2, 3], [3, 4]],
                                                          "Input type": ["float", "float"]}),
    "step": _ev(cat="cpu_op", name="ProfilerStep#3", args={}),
    "step without dur": _ev(cat="cpu_op", name="ProfilerStep#4", dur=None, args={}),
    "runtime": _ev(cat="cuda_runtime", name="cudaLaunchKernel", args={"correlation": 9}),
    "driver": _ev(cat="cuda_driver", name="cuLaunchKernel", args={"correlation": 10}),
    "kernel": _ev(cat="kernel", name="k", args={"device": 0, "stream": 7, "correlation": 9}),
    "copy": _ev(cat="gpu_memcpy", name="Memcpy HtoD (Pinned -> Device)", args={"device": 0, "stream": 7,
                                                                             "correlation": 11, "bytes": 64}),
    "memset": _ev(cat="gpu_memset", name="Memset (Device)", args={"device": 0, "stream": "7", "correlation": 12}),
    "sync": _ev(cat="cuda_sync", name="Stream Sync", args={"device": 0, "stream": 7, "correlation": 6}),
    "sync without dur": _ev(cat="cuda_sync", name="Event Sync", dur=None, args={"device": 0}),
    "memory": _memory(**{"Device Type": 1, "Device Id": 0, "Bytes": 512, "Total Allocated": 1024,
                         "Total Reserved": 2048, "Addr": 140089753600000}),
    "cpu memory": _memory(**{"Device Type": 0, "Device Id": -1, "Bytes": 64}),
    "other instant": {"ph": "i", "cat": "cpu_instant_event", "name": "x", "ts": 5},
}

# malformed events of each kind, with what the tolerant reader says of each (None: read without a problem)
BAD = {
    "frame, tid a list": (_ev(cat="python_function", name="train.py(3): f", tid=[1]),
                          "`tid` not an integer or string"),
    "frame, ts a string": (_ev(cat="python_function", name="train.py(3): f", ts="100"), None),
    "frame, dur negative": (_ev(cat="python_function", name="train.py(3): f", dur=-1), "`dur` negative"),
    "op, ts beyond 1e18": (_ev(cat="cpu_op", name="aten::add", ts=10**19, args={}), "`ts` out of range"),
    "op, no args": (_ev(cat="cpu_op", name="aten::add"), None),
    "op, args a list": (_ev(cat="cpu_op", name="aten::add", args=[1]), "`args` not an object"),
    "op, stack not a string": (_ev(cat="cpu_op", name="aten::add", args={"Call stack": 4}),
                               "`args.Call stack` not a string"),
    "op, name a number": (_ev(cat="cpu_op", name=5, args={}), "`name` not a string"),
    "step, number beyond 64 bits": (_ev(cat="cpu_op", name="ProfilerStep#12345678901234567890", args={}),
                                    "step number beyond 64 bits"),
    "step, not a number": (_ev(cat="cpu_op", name="ProfilerStep#x", args={}), None),
    "step, args a list": (_ev(cat="cpu_op", name="ProfilerStep#7", args=[1]), "`args` not an object"),
    "step, no thread": (_ev(cat="cpu_op", name="ProfilerStep#7", tid=None, args={}), None),
    "runtime, correlation a float": (_ev(cat="cuda_runtime", name="cudaLaunchKernel", args={"correlation": 5.5}),
                                     "`args.correlation` not an integer"),
    "runtime, no ts": (_ev(cat="cuda_runtime", name="cudaLaunchKernel", ts=None, args={"correlation": 5}),
                       "`ts` missing"),
    "kernel, stream a list": (_ev(cat="kernel", name="k", args={"device": 0, "stream": [7], "correlation": 4}),
                              "`args.stream` not an integer or string"),
    "kernel, no device": (_ev(cat="kernel", name="k", args={"stream": 7, "correlation": 4}), None),
    "kernel, dur over 1e12": (_ev(cat="kernel", name="k", dur=2e13, args={"device": 0, "stream": 7,
                                                                         "correlation": 4}), "`dur` over 1e12"),
    "sync, device a boolean": (_ev(cat="cuda_sync", name="s", args={"device": True}), None),
    "sync, correlation a float": (_ev(cat="cuda_sync", name="s", args={"device": 0, "correlation": 1.5}),
                                  "`args.correlation` not an integer"),
    "sync, args a list": (_ev(cat="cuda_sync", name="s", args=[1]), "`args` not an object"),
    "memory, no Device Type": (_memory(**{"Device Id": 0, "Bytes": 4}), None),
    "memory, Addr a list": (_memory(**{"Device Type": 1, "Device Id": 0, "Bytes": 8, "Addr": [1]}), None),
    "memory, ts a string": (_memory(**{"Device Type": 1, "Device Id": 0, "Bytes": 8}) | {"ts": "x"},
                            "`ts` not a number"),
    "range": (_ev(cat="cuda_profiler_range", name="r", args={"smsp__inst_executed.sum": 4}), None),
}


def _plain(event: dict) -> list:
    return [json.loads(json.dumps(event))]


def _typed(event: dict) -> list:
    buf = json.dumps([event]).encode()
    decoded = events.decode_typed(buf)
    assert decoded is not None, "the typed decode takes the event"
    return events.TypedChunk(decoded, lambda: json.loads(buf))


def _read(chunk: list, monkeypatch) -> tuple:
    tolerant = []
    original = Readers.tolerant
    monkeypatch.setattr(Readers, "tolerant", lambda self, e, kind: (tolerant.append(e), original(self, e, kind)))
    return repr(read_events(iter([chunk]))), tolerant


@pytest.mark.parametrize("name", GOOD)
def test_a_well_formed_event_is_read_by_its_strict_reader_on_both_paths(name, monkeypatch):
    plain, plain_tolerant = _read(_plain(GOOD[name]), monkeypatch)
    assert plain_tolerant == []
    if events.AVAILABLE:
        typed, typed_tolerant = _read(_typed(GOOD[name]), monkeypatch)
        assert typed_tolerant == [] and typed == plain


@pytest.mark.parametrize("name", BAD)
def test_a_malformed_event_is_read_the_same_on_both_paths(name, monkeypatch):
    event, problem = BAD[name]
    plain, plain_tolerant = _read(_plain(event), monkeypatch)
    assert len(plain_tolerant) == 1  # the strict reader left it
    reasons = [reason for reason, _ in read_events(iter([_plain(event)])).problems]
    assert reasons == [] if problem is None else len(reasons) == 1 and reasons[0].startswith(problem)
    if events.AVAILABLE and (chunk := events.decode_typed(json.dumps([event]).encode())) is not None:
        typed, _ = _read(events.TypedChunk(chunk, lambda: [json.loads(json.dumps(event))]), monkeypatch)
        assert typed == plain
