"""The typed read (events.py: msgspec Structs, read_events.py's typed pass) gives exactly the records, problems and
loader warnings of the dict read, on every fixture and public trace and on events made to leave its fast path: the
typed path is a faster route to the same model, never a different reading. Compared by repr, so that an int where
the dict read has a float (or the reverse) counts as a difference."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("msgspec", reason="the typed read is the optional speed-up of tracelint[fast]")

from tests.shared import MULTI_GPU_TRACES, PUBLIC_TRACES  # noqa: E402
from tracelint.trace import load  # noqa: E402
from tracelint.trace.events import TypedChunk  # noqa: E402
from tracelint.trace.read_events import read_events  # noqa: E402

FIXTURES = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "traces").glob("*.json.gz"))
# every trace of the corpus, the ranks of its jobs too (their collectives are read from dicts: the typed decode
# backs off there)
SHARED = sorted(p for root in (PUBLIC_TRACES, MULTI_GPU_TRACES) if root.is_dir() for p in root.rglob("*.json*")
                if not p.name.startswith(("manifest", "truth.")))  # (a job's notes, not traces)


def _read(path: Path, typed: bool) -> tuple[str, list[str], bool, int, int]:
    trace = load.open_trace(path)
    chunks = list(trace.iter_chunks(typed=typed))
    records = read_events(iter(chunks))
    return (repr(records), list(trace.warnings), trace.truncated, trace.events_read,
            sum(chunk.__class__ is TypedChunk for chunk in chunks))


def _same(path: Path) -> int:
    typed, plain = _read(path, True), _read(path, False)
    assert typed[:4] == plain[:4]
    assert plain[4] == 0
    return typed[4]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_fixture_traces_read_the_same_typed(path):
    assert _same(path) > 0  # and the typed path did read them


@pytest.mark.shared("public", "multi-gpu")
@pytest.mark.parametrize("path", SHARED, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_shared_traces_read_the_same_typed(path):
    _same(path)


def _trace(tmp_path: Path, events: list[str], name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_bytes(('{"schemaVersion": 1, "traceEvents": [\n' + ",\n".join(events) + "\n]}").encode("utf-8"))
    return path


def _ev(**fields) -> str:
    base = {"ph": "X", "pid": 0, "tid": 7, "ts": 100, "dur": 5}
    return json.dumps({**base, **fields})


# Events each of which the typed reader hands to the dict readers, or reads by a path of its own, among plain ones.
ODD = [
    _ev(cat="cpu_op", name="ProfilerStep#3", args={}),
    _ev(cat="cpu_op", name="aten::mm", args={"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}),
    _ev(cat="cpu_op", name="record_param_comms", args={"Collective name": "allreduce", "Process Group Name": "0"}),
    _ev(cat="kernel", name="ncclKernel", args={"device": 0, "stream": 7, "correlation": 9, "Collective name": "x"}),
    _ev(cat="cpu_op", name="aten::add", args={"Call stack": None}),
    _ev(cat="cpu_op", name="aten::add", args={"Call stack": "train.py(3): main;torch/x.py(1): f"}),
    _ev(cat="cpu_op", name="aten::add"),
    _ev(cat="cpu_op", name="aten::add", args={}, tid=2**64 + 1),
    _ev(cat="cuda_runtime", name="cudaLaunchKernel", args={"correlation": 2**63}),
    _ev(cat="cuda_runtime", name="cudaLaunchKernel", args={"correlation": 5.0}),
    _ev(cat="cuda_runtime", name="cudaLaunchKernel", args={}),
    _ev(cat="kernel", name="k", args={"device": 0, "correlation": 4}),
    _ev(cat="kernel", name="k", args={"device": 0, "stream": 7, "correlation": 4, "bytes": -1}),
    _ev(cat="kernel", name="k", args={"device": 0, "stream": "s", "correlation": 4, "bytes": 12}),
    _ev(cat="gpu_memcpy", name="Memcpy HtoD (Pageable -> Device)", ts=100.5, args={"device": 0, "stream": 7,
                                                                                  "correlation": 5, "bytes": 8}),
    _ev(cat="cuda_sync", name="Stream Sync", args={"device": 0, "stream": 7, "correlation": 6}),
    _ev(cat="cuda_sync", name="Event Sync", args={"stream": 7}),
    _ev(cat="cuda_sync", name="Event Sync", dur=None, args={"device": 0}),
    json.dumps({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 0, "tid": 7, "ts": 110,
                "args": {"Device Type": 1, "Device Id": 0, "Bytes": 512, "Total Allocated": 1024}}),
    json.dumps({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 0, "tid": 7, "ts": 111,
                "args": {"Device Type": 1, "Device Id": 0, "Bytes": -512}}),
    json.dumps({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 0, "tid": 7, "ts": 112,
                "args": {"Device Type": 0, "Device Id": -1, "Bytes": 64}}),
    json.dumps({"ph": "i", "name": "[memory]", "pid": 0, "tid": 7, "ts": 113,
                "args": {"Device Type": 1, "Device Id": 0, "Bytes": 1}}),
    json.dumps({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 0, "tid": 8, "ts": 114,
                "args": {"Device Type": 1, "Device Id": 0, "Bytes": 512, "Total Allocated": 1024,
                         "Total Reserved": 2048, "Addr": 140089753600000}}),
    json.dumps({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 0, "tid": "8", "ts": 115,
                "args": {"Device Type": 1, "Device Id": 0, "Bytes": -512, "Total Allocated": 512,
                         "Total Reserved": 2048.0, "Addr": "140089753600000"}}),
    json.dumps({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 0, "ts": 116,
                "args": {"Device Type": 1, "Device Id": 0, "Bytes": 8, "Total Reserved": None, "Addr": [1]}}),
    json.dumps({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 0, "tid": [7], "ts": 117,
                "args": {"Device Type": 1, "Device Id": 0, "Bytes": 8, "Total Reserved": 2**64, "Addr": 16}}),
    _ev(cat="python_function", name="torch/cuda/memory.py(212): empty_cache", args={"Python id": 4}),
    _ev(cat="python_function", name="/usr/lib/python3/site-packages/torch/cuda/memory.py(212): empty_cache",
        dur=-1),
    _ev(cat="python_function", name="C:\\py\\torch\\cuda\\memory.py(212): empty_cache", ts=100.25, tid="w"),
    _ev(cat="python_function", name="train.py(12): step", args={"Python id": 3}),
    _ev(cat="python_function", name="torch/nn/modules/module.py(1527): _call_impl"),
    _ev(cat="python_function", name="train.py(12): step", ts="100"),
    _ev(cat="cuda_profiler_range", name="range", args={"smsp__inst_executed.sum": 4, "correlation": 1}),
    _ev(cat="cpu_op", name="aten::add", ts=10**19, args={}),
    _ev(cat="cpu_op", name="aten::add", dur=-1, args={}),
    _ev(cat="user_annotation", name="Optimizer.step#AdamW.step", args={}),
    _ev(cat="ac2g", name="flow"),
]


@pytest.mark.parametrize("odd", range(len(ODD)))
def test_each_odd_event_reads_the_same_typed(odd, tmp_path):
    plain = [_ev(cat="cpu_op", name=f"aten::op{i}", ts=100 + i, args={"External id": i}) for i in range(6)]
    _same(_trace(tmp_path, [*plain[:3], ODD[odd], *plain[3:]]))


@pytest.mark.parametrize("skipped", ["1e400", '"caf\\u00e9"', "123456789012345678901234567890"])
def test_values_msgspec_skips_read_the_same_typed(skipped, tmp_path):
    event = _ev(cat="kernel", name="k", args={"device": 0, "stream": 7, "correlation": 4, "odd": 0})
    _same(_trace(tmp_path, [event, event.replace('"odd": 0', f'"odd": {skipped}'), event]))


def test_invalid_utf8_in_a_skipped_value_reads_the_same_typed(tmp_path):
    event = _ev(cat="kernel", name="k", args={"device": 0, "stream": 7, "correlation": 4, "odd": "x"})
    path = tmp_path / "latin1.json"
    text = '{"traceEvents": [' + ",".join([event, event.replace('"odd": "x"', '"odd": "caf\xe9"'), event]) + "]}"
    path.write_bytes(text.encode("latin-1"))
    _same(path)
    assert any("invalid UTF-8" in w for w in _read(path, True)[1])
