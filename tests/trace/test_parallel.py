"""The parallel read (load.ChunkStream.map_parts, forked workers) gives exactly what the serial read gives: same
model records, metrics, findings, warnings and truncation, on real public traces cut into many small parts, also
when a file is truncated, holds quirks the repair path reads, or has a candidate boundary inside a string."""
from __future__ import annotations

import gzip
import os
import signal
from pathlib import Path

import pytest

from tracelint.trace import load
from tracelint.trace.analyze import report_from_model
from tracelint.trace.build import build_model

TRACES = [
    "hta-critical_path-benchmark_result_2869224_1695835535_trace.json.gz",
    "hta-ns_resolution_trace-rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta-triton_example-triton_example.json.gz",
]

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the parallel read needs fork")


def _outcome(path: Path, typed: bool = False):
    # analyze_trace's steps, with the loader's stream handed to build_model as it is (so that it can split it)
    trace = load.open_trace(path)
    model = build_model(trace.iter_chunks(typed=typed), lambda: trace.meta)
    trace.close()
    report = report_from_model(str(path), model, warnings=tuple(trace.warnings), truncated=trace.truncated)
    model = report.analyses[0].model if report.analyses else None
    records = None if model is None else (model.steps, model.ops, model.runtime, model.gpu, model.syncs,
                                          model.frames, model.memory, model.skipped_events)
    return (trace.events_read, [s.metrics for s in report.summaries],
            [(f.code, f.message, str(f.location)) for f in report.findings],
            report.warnings, report.truncated, records)


def _both(path: Path, monkeypatch, typed: bool = False) -> tuple:
    monkeypatch.setattr(load, "PARALLEL_MIN_BYTES", 1 << 62)
    serial = _outcome(path)  # the serial dict read: the reference for the typed read too
    used: list[bool] = []
    real = load._map_parallel

    def spy(trace, fn, *typed_read):
        result = real(trace, fn, *typed_read)
        used.append(result is not None)
        return result

    monkeypatch.setattr(load, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(load, "CHUNK_BYTES", 16 << 10)
    monkeypatch.setattr(load, "MAX_PARTS", 4)
    monkeypatch.setattr(load.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(load, "_map_parallel", spy)
    parallel = _outcome(path, typed)
    return serial, parallel, used


@pytest.mark.parametrize("typed", [False, True], ids=["dicts", "typed"])
@pytest.mark.parametrize("name", TRACES)
def test_parallel_read_equals_serial(name, typed, public_traces, tmp_path, monkeypatch):
    path = tmp_path / name.removesuffix(".gz")
    path.write_bytes(gzip.decompress((public_traces / name).read_bytes()))
    serial, parallel, used = _both(path, monkeypatch, typed)
    assert used == [True]
    assert parallel == serial


@pytest.mark.parametrize("typed", [False, True], ids=["dicts", "typed"])
def test_parallel_read_of_a_truncated_trace(typed, public_traces, tmp_path, monkeypatch):
    data = gzip.decompress((public_traces / TRACES[1]).read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(data[: len(data) * 2 // 3])
    serial, parallel, used = _both(path, monkeypatch, typed)
    assert used == [True]
    assert serial[4] is True
    assert parallel == serial


@pytest.mark.parametrize("typed", [False, True], ids=["dicts", "typed"])
def test_parallel_read_falls_back_for_odd_parts(typed, public_traces, tmp_path, monkeypatch):
    # A NaN (repair path) and, at every quarter, a name holding a candidate boundary `},{` inside a string.
    data = gzip.decompress((public_traces / TRACES[1]).read_bytes())
    data = data.replace(b'"dur": 1,', b'"dur": NaN,', 1)
    for q in (1, 2, 3):
        at = data.index(b'"name": "', len(data) * q // 4) + len(b'"name": "')
        data = data[:at] + b"x}, {y" + data[at:]
    path = tmp_path / "odd.json"
    path.write_bytes(data)
    serial, parallel, _ = _both(path, monkeypatch, typed)
    assert parallel == serial


def test_a_dead_part_worker_costs_time_only(public_traces, tmp_path, monkeypatch):
    # The worker reading a part is killed (the OOM killer's SIGKILL): the whole stream is read here instead.
    path = tmp_path / "trace.json"
    path.write_bytes(gzip.decompress((public_traces / TRACES[1]).read_bytes()))
    parent = os.getpid()
    real = load._read_part

    def read_part(trace, fn, pos, *args):
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(trace, fn, pos, *args)

    monkeypatch.setattr(load, "_read_part", read_part)
    serial, parallel, used = _both(path, monkeypatch)
    assert used == [False]
    assert parallel == serial
