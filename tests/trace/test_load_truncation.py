"""Truncated traces (a killed run): cut real public traces at many offsets, plain and gzip'd, and check that every
complete event before the cut is read, nothing else, and that the loader says the file is truncated."""
from __future__ import annotations

import bisect
import gzip
import json
import re
import zlib
from pathlib import Path

import pytest

from tracelint.trace import load
from tracelint.trace.filetext import TraceReadError
from tracelint.trace.load import open_trace

# Compact one-line events, Kineto-formatted events with keys after traceEvents, and a PyTorch 1.9 trace.
TRACES = [
    "hta-timeline_analysis-sampled_rank-0.json.gz",
    "hta-critical_path-benchmark_result_2869224_1695835535_trace.json.gz",
    "hta-triton_example-triton_example.json.gz",
]
_SEP = re.compile(r"[\s,]*")


def event_ends(data: bytes) -> tuple[int, list[int]]:
    """Independently of the loader: the offset after traceEvents' '[' and the end offset of each event.

    Decoding as Latin-1 keeps one character per byte, so the stdlib decoder's offsets are byte offsets.
    """
    text = data.decode("latin-1")
    decoder = json.JSONDecoder()
    pos = start = text.index("[", text.index('"traceEvents"')) + 1
    ends = []
    while True:
        pos = _SEP.match(text, pos).end()
        if text[pos] == "]":
            return start, ends
        pos = decoder.raw_decode(text, pos)[1]
        ends.append(pos)


def cut_offsets(size: int, specials: list[int], count: int = 60) -> list[int]:
    spread = [size * i // count + (i * 7919) % 97 for i in range(count)]
    return sorted({c for c in spread + specials if 0 <= c <= size})


@pytest.fixture(scope="module", params=TRACES)
def reference(request, public_traces):
    path = public_traces / request.param
    packed = path.read_bytes()
    data = gzip.decompress(packed)
    start, ends = event_ends(data)
    events = json.loads(data)["traceEvents"]
    assert len(events) == len(ends)
    return packed, data, start, ends, events


def check_cut(path: Path, available: int, data: bytes, start: int, ends: list[int], events: list[dict]) -> list[str]:
    """Read a trace whose first `available` bytes of JSON survive and compare with the independent reference;
    returns the loader's warnings."""
    if available < start:
        with pytest.raises(TraceReadError):
            open_trace(path)
        return []
    trace = open_trace(path)
    got = [event for chunk in trace.iter_chunks() for event in chunk]
    complete = bisect.bisect_right(ends, available)
    assert len(got) == complete, available
    assert got == events[:complete], available
    whole = available >= len(data.rstrip())
    assert trace.truncated == (not whole), available
    if not whole:
        assert f"read {complete:,} complete events" in trace.warnings[-1]
        assert f"ends at byte {available} " in trace.warnings[-1]
    return trace.warnings


@pytest.mark.parametrize("chunk_bytes", [load.CHUNK_BYTES, 8192])
def test_plain_trace_cut_anywhere(reference, tmp_path, monkeypatch, chunk_bytes):
    monkeypatch.setattr(load, "CHUNK_BYTES", chunk_bytes)
    _, data, start, ends, events = reference
    if chunk_bytes != 8192 and len(data) > 1 << 20:
        pytest.skip("the small-chunk run covers this larger trace")
    specials = [start - 1, start, start + 1, ends[0] - 1, ends[0], ends[0] + 1, ends[-1] - 1, ends[-1], ends[-1] + 1]
    specials += [len(data) - 2, len(data) - 1, len(data)]
    path = tmp_path / "cut.json"
    for cut in cut_offsets(len(data), specials):
        path.write_bytes(data[:cut])
        check_cut(path, cut, data, start, ends, events)


def test_gzip_trace_cut_anywhere(reference, tmp_path, monkeypatch):
    monkeypatch.setattr(load, "CHUNK_BYTES", 8192)
    packed, data, start, ends, events = reference
    path = tmp_path / "cut.json.gz"
    for cut in cut_offsets(len(packed), [1, 2, 10, 11, len(packed) - 9, len(packed) - 1]):
        path.write_bytes(packed[:cut])
        available = len(zlib.decompressobj(wbits=31).decompress(packed[:cut]))
        warnings = check_cut(path, available, data, start, ends, events)
        if 0 < cut < len(packed) and available >= start:
            assert any("the gzip stream is cut short" in w for w in warnings), cut


def test_zero_filled_gzip_tail_reads_as_a_truncation(tmp_path):
    # A crash can leave the end of a file zero-filled; inflated, zeros become garbage copies of earlier text.
    events = [{"name": f"e{i}", "ph": "X", "ts": i, "dur": 1, "args": {"pad": "x" * (i % 50)}} for i in range(3000)]
    packed = bytearray(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    packed[len(packed) // 2 :] = bytes(len(packed) - len(packed) // 2)
    path = tmp_path / "t.json.gz"
    path.write_bytes(bytes(packed))
    trace = open_trace(path)
    got = [event for chunk in trace.iter_chunks() for event in chunk]
    assert 0 < len(got) < len(events) and got == events[: len(got)]
    assert trace.truncated and "the gzip stream is cut short" in trace.warnings[-1]


def test_corrupt_gzip_is_unreadable(tmp_path):
    packed = bytearray(gzip.compress(
        json.dumps({"traceEvents": [{"name": "e", "i": i} for i in range(3000)]}).encode()))
    packed[len(packed) // 2] ^= 0xFF
    path = tmp_path / "t.json.gz"
    path.write_bytes(bytes(packed))
    with pytest.raises(TraceReadError, match="^not a valid gzip file: "):
        open_trace(path)
