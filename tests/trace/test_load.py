"""The trace loader: every public trace reads as `json.load` reads it; quirks, forms, encodings and bad input."""
from __future__ import annotations

import gc
import gzip
import json
import math
import os
import random
from pathlib import Path

import pytest

from tests.shared import PUBLIC_TRACES
from tracelint.trace import load
from tracelint.trace._jsonfix import repair
from tracelint.trace.filetext import TraceReadError
from tracelint.trace.load import open_trace


def read_all(path: Path, **kwargs) -> tuple[load.TraceFile, list[dict]]:
    trace = open_trace(path, **kwargs)
    return trace, [event for chunk in trace.iter_chunks() for event in chunk]


def kineto(events: list[str], *, before: str = '"schemaVersion": 1', after: str = "") -> bytes:
    """A Kineto-shaped trace from event texts (kept as text so that tests can write non-standard JSON)."""
    body = ",\n  ".join(events)
    head = f"{{\n  {before},\n  " if before else "{\n  "
    tail = f",\n  {after}\n}}\n" if after else "\n}\n"
    return f'{head}"traceEvents": [\n  {body}\n]{tail}'.encode()


def event(i: int, **extra: object) -> str:
    fields = {"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 1000 + i, "dur": 3, **extra}
    return json.dumps(fields)


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few events, so that small inputs cross many chunk boundaries."""
    monkeypatch.setattr(load, "CHUNK_BYTES", 200)


def write(tmp_path: Path, data: bytes, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# ---- the public corpus -----------------------------------------------------------------------------------------


def _public_names() -> list[str]:
    return sorted(p.name for p in PUBLIC_TRACES.glob("*.json*")) or ["(corpus absent)"]


@pytest.mark.parametrize("name", _public_names())
def test_public_trace_reads_as_json_load_reads_it(public_traces, monkeypatch, name):
    path = public_traces / name
    gc.disable()  # the reference decode, not the code under test, dominates this test's time
    try:
        with gzip.open(path) as f:
            expected = json.load(f)
    finally:
        gc.enable()
    reference = expected.pop("traceEvents")
    # Small chunks as well on the smaller files: many more boundaries, same events.
    for chunk_bytes in [load.CHUNK_BYTES] + ([4096] if len(reference) < 20_000 else []):
        monkeypatch.setattr(load, "CHUNK_BYTES", chunk_bytes)
        trace = open_trace(path)
        done = 0
        for chunk in trace.iter_chunks():  # compared chunk by chunk so that two copies are never held
            assert chunk == reference[done : done + len(chunk)], (name, done)
            done += len(chunk)
        assert done == len(reference), name
        assert trace.meta == expected, name
        assert not trace.truncated and trace.warnings == [], name


# ---- forms -----------------------------------------------------------------------------------------------------


def test_meta_keys_before_and_after_trace_events(tmp_path, small_chunks):
    # distributedInfo after the events holds lists of objects: candidate event boundaries outside the array.
    dist = {"backend": "nccl", "rank": 3, "pg_config": [{"pg_name": "0", "ranks": [0, 1]}, {"pg_name": "1"}]}
    data = kineto(
        [event(i) for i in range(40)],
        before='"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "H100"}, {"id": 1}]',
        after=f'"distributedInfo": {json.dumps(dist)}, "traceName": "x]}}, {{y", "baseTimeNanoseconds": 17',
    )
    trace, events = read_all(write(tmp_path, data))
    assert trace.meta["deviceProperties"] == [{"id": 0, "name": "H100"}, {"id": 1}]
    assert trace.meta["distributedInfo"] == dist
    assert trace.meta["traceName"] == "x]}, {y"
    assert trace.meta["baseTimeNanoseconds"] == 17
    assert events == json.loads(data)["traceEvents"]
    assert not trace.truncated and trace.warnings == []


def test_meta_before_events_is_there_before_iterating(tmp_path):
    trace = open_trace(write(tmp_path, kineto([event(0)], before='"schemaVersion": 1, "distributedInfo": {"rank": 2}')))
    assert trace.meta == {"schemaVersion": 1, "distributedInfo": {"rank": 2}}


def test_bare_array_form(tmp_path, small_chunks):
    events = [json.loads(event(i)) for i in range(30)]
    trace, got = read_all(write(tmp_path, json.dumps(events).encode()))
    assert got == events and trace.meta == {} and not trace.truncated


def test_bare_array_without_closing_bracket_is_complete(tmp_path):
    # The Chrome trace format lets a streaming writer leave out the final ']'.
    trace, got = read_all(write(tmp_path, b'[{"name": "a"},\n{"name": "b"},\n'))
    assert [e["name"] for e in got] == ["a", "b"] and not trace.truncated


def test_empty_events_array(tmp_path):
    trace, got = read_all(write(tmp_path, b'{"traceEvents": []}'))
    assert got == [] and not trace.truncated and trace.warnings == []


def test_gzip_is_detected_by_magic_not_suffix(tmp_path):
    data = kineto([event(i) for i in range(5)])
    _, plain_named_gz = read_all(write(tmp_path, data, "plain.json.gz"))
    _, gz_named_json = read_all(write(tmp_path, gzip.compress(data), "packed.json"))
    assert plain_named_gz == gz_named_json == json.loads(data)["traceEvents"]


def test_multi_member_gzip(tmp_path):
    data = kineto([event(i) for i in range(20)])
    half = len(data) // 2
    _, got = read_all(write(tmp_path, gzip.compress(data[:half]) + gzip.compress(data[half:]), "t.json.gz"))
    assert got == json.loads(data)["traceEvents"]


def test_chunk_boundaries_inside_strings_and_nested_objects(tmp_path, small_chunks):
    tricky = [
        event(i, args={"note": '"}, {"' * (i % 3), "shapes": [{"a": [1]}, {"b": {"c": "}, {"}}]})
        for i in range(60)
    ]
    data = kineto(tricky)
    trace, got = read_all(write(tmp_path, data))
    assert got == json.loads(data)["traceEvents"] and trace.warnings == []


def test_iterating_again_starts_over_and_gc_is_restored(tmp_path, small_chunks):
    trace = open_trace(write(tmp_path, kineto([event(i) for i in range(30)])))
    first = [e for chunk in trace.iter_chunks() for e in chunk]
    assert gc.isenabled()
    chunks = trace.iter_chunks()
    next(chunks)
    del chunks  # dropped half-way
    assert gc.isenabled()
    assert [e for chunk in trace.iter_chunks() for e in chunk] == first


def test_progress_reaches_the_total(tmp_path, small_chunks):
    calls = []
    path = write(tmp_path, kineto([event(i) for i in range(30)]))
    trace, _ = read_all(path, progress=lambda done, total: calls.append((done, total)))
    assert len(calls) > 3
    assert all(total == trace.nbytes for _, total in calls)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert trace.nbytes - calls[-1][0] < 10


# ---- quirks seen in the wild -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "check"),
    [
        ('"dur": inf', lambda e: e["dur"] == math.inf),
        ('"dur": -inf', lambda e: e["dur"] == -math.inf),
        ('"dur": Infinity', lambda e: e["dur"] == math.inf),
        ('"dur": NaN', lambda e: math.isnan(e["dur"])),
        ('"dur": N/A', lambda e: e["dur"] is None),
        ('"file": "C:\\Users\\me\\proj\\x.py"', lambda e: e["file"] == "C:\\Users\\me\\proj\\x.py"),
        ('"file": "a\tb\x01c\nd"', lambda e: e["file"] == "a\tb\x01c\nd"),
        ('"ts": 1682725898236567.125', lambda e: e["ts"] == 1682725898236567.125),
        ('"id": 1, "id": 2', lambda e: e["id"] == 2),
        ('"big": 123456789012345678901234567890', lambda e: e["big"] == pytest.approx(1.2345678901234568e29)),
        ('"dur": -nan, "x": INF', lambda e: math.isnan(e["dur"]) and e["x"] == math.inf),
        ('"dur": inf, "note": "inf N/A nan true"', lambda e: e["note"] == "inf N/A nan true"),
        ('"dur": inf, "f": "ok\\\\Users\\"q"', lambda e: e["f"] == 'ok\\Users"q'),
    ],
)
def test_quirky_values_are_read_without_losing_neighbours(tmp_path, small_chunks, text, check):
    events = [event(i) for i in range(40)]
    events[17] = '{"name": "quirky", ' + text + "}"
    trace, got = read_all(write(tmp_path, kineto(events)))
    assert len(got) == 40 and trace.warnings == []
    assert check(got[17])
    assert got[16] == json.loads(events[16]) and got[18] == json.loads(events[18])


def test_quirks_in_every_event(tmp_path, small_chunks):
    texts = [f'{{"name": "C:\\proj\\m{i}.py(3): f", "dur": inf, "args": {{"v": N/A}}, "ts": {i}}}' for i in range(50)]
    trace, got = read_all(write(tmp_path, kineto(texts)))
    assert got == [{"name": f"C:\\proj\\m{i}.py(3): f", "dur": math.inf, "args": {"v": None}, "ts": i}
                   for i in range(50)]
    assert trace.warnings == []


def test_latin1_bytes_are_replaced_with_a_warning(tmp_path):
    data = kineto([event(0), '{"name": "cafX"}', event(2)]).replace(b"cafX", "café".encode("latin-1"))
    trace, got = read_all(write(tmp_path, data))
    assert got[1]["name"] == "caf\ufffd" and len(got) == 3
    assert any("UTF-8" in w for w in trace.warnings)


def test_an_unreadable_event_is_skipped_with_a_warning(tmp_path, small_chunks):
    events = [event(i) for i in range(30)]
    events[12] = '{"name": "broken" "dur": 3}'
    trace, got = read_all(write(tmp_path, kineto(events)))
    assert [e["name"] for e in got] == [f"k{i}" for i in range(30) if i != 12]
    assert len(trace.warnings) == 1 and "skipped 1 unreadable event" in trace.warnings[0]


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        (b"\xef\xbb\xbf" + kineto([event(0)]), None),
        (kineto([event(0)]).decode().encode("utf-16"), "UTF-16"),
        (kineto([event(0)]).decode().encode("utf-16-le"), "UTF-16"),
        (kineto([event(0)]).decode().encode("utf-32"), "UTF-32"),
    ],
)
def test_byte_order_marks_and_wide_encodings(tmp_path, data, encoding):
    trace, got = read_all(write(tmp_path, data))
    assert got == [json.loads(event(0))]
    assert trace.warnings == ([f"the file is {encoding} text; decoded it"] if encoding else [])


# ---- unreadable input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty file"),
        (b"  \n", "empty file (only whitespace)"),
        (b"PK\x03\x04 zip", "not a JSON trace: expected '{' or '[' at byte 0, found 'P'"),
        (bytes(range(1, 256)) * 4, "not a JSON trace: expected '{' or '[' at byte 0, found byte 0x01"),
        (b"\x1f\x8bnot gzip at all", "not a valid gzip file: "),
        (gzip.compress(b""), "empty file (the gzip stream holds no data"),
        (b'{"a": 1, "b": [1, 2]}', "not a trace: the JSON object has no traceEvents (keys: a, b)"),
        (b"{}", "not a trace: the JSON object has no traceEvents (keys: none)"),
        (b'"traceEvents"', "not a JSON trace: expected '{' or '[' at byte 0, found '\"'"),
        (b'{"traceEvents": {"a": 1}}', "not a trace: traceEvents is not an array (found '{')"),
        (b'{"schemaVersion": 1 "traceEvents": []}', "not a JSON trace: expected ',' or '}' at byte 20, found '\"'"),
        (b'{"deviceProperties": [{"id": 0', "file ends at byte 30 before traceEvents (truncated?)"),
    ],
)
def test_unreadable_input_is_one_clear_line(tmp_path, data, message):
    with pytest.raises(TraceReadError) as info:
        open_trace(write(tmp_path, data))
    text = str(info.value)
    assert text.startswith(message) and "\n" not in text


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(TraceReadError, match="^no such file$"):
        open_trace(tmp_path / "nope.json")
    with pytest.raises(TraceReadError, match="^is a directory"):
        open_trace(tmp_path)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path):
    path = write(tmp_path, kineto([event(0)]))
    path.chmod(0)
    with pytest.raises(TraceReadError, match="^permission denied$"):
        open_trace(path)


def test_garbage_after_the_document_is_ignored_with_a_warning(tmp_path):
    trace, got = read_all(write(tmp_path, kineto([event(0)]) + b"\x00junk"))
    assert len(got) == 1 and not trace.truncated
    assert trace.warnings == ["ignored 5 bytes after the end of the JSON document"]


def test_mutated_traces_never_raise_anything_but_trace_read_error(public_traces, tmp_path, small_chunks):
    base = gzip.decompress((public_traces / "hta-triton_example-triton_example.json.gz").read_bytes())
    rnd = random.Random(20240607)
    path = tmp_path / "mutant.json"
    for _ in range(300):
        data = bytearray(base)
        for _ in range(rnd.randint(1, 6)):
            at = rnd.randrange(len(data))
            roll = rnd.random()
            if roll < 0.4:
                data[at] = rnd.choice(b'{}[],:"\\\x00\xff\xe9 nN/Ia0')
            elif roll < 0.7:
                del data[at : at + rnd.randint(1, 50)]
            else:
                data[at:at] = bytes(rnd.choice(b'{}[],:"\\\x00\xff') for _ in range(rnd.randint(1, 5)))
        path.write_bytes(gzip.compress(bytes(data))[: rnd.randint(1, len(data))] if rnd.random() < 0.2 else data)
        try:
            trace, events = read_all(path)
        except TraceReadError as e:
            assert "\n" not in str(e)
        else:
            assert all(type(e) is dict for e in events)
        assert gc.isenabled()


def test_repair_of_broken_text_with_a_stray_letter_late_in_it():
    # A stray letter late in the text used to make a match attempt from every earlier offset rescan up to it
    # (15 s for these 40 kB; minutes for a chunk). That it is linear is timed in bench/check_timing.py.
    text = "[" + '{"dur": inf, "ts": 2}, ' * 2000 + "x]"
    assert repair(text) == text.replace("inf", "Infinity")
