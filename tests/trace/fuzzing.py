"""Structure-aware mutation of real traces: the one copy shared by the hypothesis tests
(tests/trace/test_hostile_traces.py) and the long campaign (bench/fuzz_traces.py, bench/fuzz.py).

A case is a base trace (a real one, parsed once) and a list of *ops*: plain tuples, so that hypothesis prints and
shrinks them and a campaign can save them as JSON next to the failing file. Ops that edit the document come first
in effect (applied to a copy of the events list; only the events touched are copied), then the document is written
out and the byte ops run in their order (truncation, encodings, gzip and damage to it, stray bytes).

Document ops (``sel`` picks an event: ``(category or None, fraction)``, the fraction indexing the events of that
category; a category is a ``cat``, or ``"step"`` / ``"memory"`` for ``ProfilerStep#`` and ``[memory]`` events):

- ``("set", sel, key, value)``: set a field (``key`` is dotted: ``"args.correlation"``) to a hostile value;
- ``("retype", sel, key, how)``: turn the field's own value into another type or range (``RETYPES``);
- ``("del", sel, key)``: delete the field;
- ``("dup", sel)`` / ``("drop", sel)``: duplicate (same correlation id) or remove the event;
- ``("insert", fraction, value)``: put a value that is not an event object into traceEvents;
- ``("top", key, value)``: set a top-level field (dotted, list indices as numbers), ``value`` DELETE removes it;
- ``("all", category, key, how)``: a retype (or DELETE) on every event of a category: the kineto quirks (every
  ``ts`` a string, no ``dur`` anywhere, ``ph`` "i", float-ns timestamps as ``"x1000"``, negative durations).

Byte ops: ``("truncate", fraction)``, ``("encode", name)`` (``ENCODINGS``), ``("gzip",)``,
``("gzip_cut", fraction)``, ``("gzip_flip", fraction, byte)``, ``("zeros", n)`` (zero-filled tail), ``("splice",
fraction, bytes)`` (raw bytes inserted), ``("bare",)`` (the events as a bare array; a document op in effect).

Values that JSON writers cannot write (NaN, Infinity, integers beyond 64 bits, deep nesting, raw garbage) are
``Raw(token)``: written into the text as they are.
"""
from __future__ import annotations

import copy
import gzip
import json
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson

from tests.shared import PUBLIC_TRACES, REPO

FIXTURE_TRACES = REPO / "fixtures" / "traces"

# Small real traces: two H200 fixtures and public ones of other writers (ROCm, an old Kineto, a CPU-only rank); the
# public ones lie in ../shared, absent from a fresh clone (tests/shared.py).
PUBLIC_BASES = (
    PUBLIC_TRACES / "hta-amd_trace-mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    PUBLIC_TRACES / "hta-critical_path-benchmark_result_2869224_1695835535_trace.json.gz",
    PUBLIC_TRACES / "hta-triton_example-triton_example.json.gz",
    PUBLIC_TRACES / "hta-cpu_only-rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
)
BASES = (
    FIXTURE_TRACES / "launch_bound.pt.trace.json.gz",
    FIXTURE_TRACES / "item_per_step.pt.trace.json.gz",
    *PUBLIC_BASES,
)
# The good file every case is read with: the run must still give its Report.
GOOD = PUBLIC_TRACES / "hta-triton_example-triton_example.json.gz"


@dataclass(frozen=True)
class Raw:
    """A token written into the JSON text as it is."""

    token: str


DELETE = Raw("<delete>")

CATEGORIES = (None, "kernel", "cuda_runtime", "cpu_op", "user_annotation", "gpu_memcpy", "gpu_memset",
              "python_function", "cuda_sync", "cuda_driver", "step", "memory", "ac2g", "Trace")
EVENT_KEYS = (
    "ts", "dur", "name", "cat", "ph", "pid", "tid", "args", "id",
    "args.correlation", "args.device", "args.stream", "args.bytes", "args.External id", "args.Device Type",
    "args.Device Id", "args.Bytes", "args.Total Allocated", "args.Collective name", "args.Process Group Name",
    "args.In msg nelems", "args.Out msg nelems", "args.Group size", "args.dtype", "args.Call stack",
)
TOP_KEYS = (
    "deviceProperties", "deviceProperties.0", "deviceProperties.0.id", "deviceProperties.0.name",
    "deviceProperties.0.totalGlobalMem", "deviceProperties.0.computeMajor", "deviceProperties.0.numSms",
    "distributedInfo", "distributedInfo.rank", "distributedInfo.world_size", "baseTimeNanoseconds", "tracelint",
    "tracelint.settings", "tracelint.settings.with_stack", "tracelint.unprofiled", "tracelint.unprofiled.step_ms",
    "tracelint.unprofiled.steps", "tracelint.source", "with_stack", "record_shapes", "profile_memory",
    "traceEvents", "displayTimeUnit", "schemaVersion",
)
RETYPES = ("str", "list", "dict", "null", "neg", "zero", "huge", "bigint", "nan", "inf", "x1000", "bool", "float",
           "int", "empty")
ENCODINGS = ("utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1")
NESTED = Raw("[" * 3000 + "]" * 3000)
HOSTILE: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 1.5, -0.5, 1e300, -1e300, 2**63, -(2**63) - 1, 2**64, 10**30, "", "x", "0",
    "123.5", "-7", "ProfilerStep#1", "ProfilerStep#99999999999999999999999", "ProfilerStep#x", "a\x00b", "\u202e",
    "\x1b[31mred\x1b[0m", "::error::forged%0A", "line\nbreak\r", "x" * 5000, [], [1, 2], [[]], {}, {"a": 1},
    {"correlation": [1]}, Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("nan"), Raw("inf"), Raw("-nan"),
    Raw("N/A"), Raw("1e999"), Raw("-1e999"), Raw("1e-999"), Raw("-0"), Raw(str(2**80)), Raw(str(-(2**200))),
    NESTED,
)
SPLICES = (b"{", b"}", b"[", b"]", b",", b'"', b"\\", b"\x00", b"\xff\xfe", b"\xe9", b"}{", b"]]", b",,", b"\\u",
           b"\\ud800", b'"\\', b"NaN", b"{}", b"[{}]", b":", b"\r\n")


# ---- bases ------------------------------------------------------------------------------------------------------


def available_bases() -> list[Path]:
    return [p for p in BASES if p.is_file()]


@lru_cache(maxsize=16)
def load_base(path: Path) -> tuple[dict, dict[object, list[int]]]:
    """The parsed trace (an object with traceEvents) and, per category, the indexes of its events."""
    doc = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    index: dict[object, list[int]] = {None: list(range(len(doc["traceEvents"])))}
    for i, e in enumerate(doc["traceEvents"]):
        name = e.get("name")
        cat = e.get("cat")
        if isinstance(cat, str):
            index.setdefault(cat, []).append(i)
        if isinstance(name, str) and name.startswith("ProfilerStep#") and cat in ("user_annotation", "cpu_op"):
            index.setdefault("step", []).append(i)
        if name == "[memory]":
            index.setdefault("memory", []).append(i)
    return doc, index


# ---- applying ops -------------------------------------------------------------------------------------------------


def _pick(index: dict[object, list[int]], sel: tuple) -> int | None:
    cat, frac = sel
    members = index.get(cat) or index[None]
    return members[min(int(frac * len(members)), len(members) - 1)] if members else None


def _retype(value: Any, how: str) -> Any:
    if how == "str":
        if value is None or isinstance(value, str):
            return value or ""
        return dumps(value).decode("utf-8", "replace") if isinstance(value, (dict, list, Raw)) else str(value)
    if how == "list":
        return [value]
    if how == "dict":
        return {"value": value}
    if how == "null":
        return None
    if how == "bool":
        return True
    if how == "empty":
        return type(value)() if isinstance(value, (str, list, dict)) else ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return {"neg": -1, "zero": 0, "huge": 1e300, "bigint": Raw(str(2**70)), "nan": Raw("NaN"),
                "inf": Raw("Infinity"), "x1000": 1000, "float": 0.5, "int": 1}.get(how, value)
    return {"neg": -abs(value) - 1, "zero": 0, "huge": value * 1e290 if value else 1e300,
            "bigint": Raw(str(int(value) * 2**70 + 1)), "nan": Raw("NaN"), "inf": Raw("-Infinity"),
            "x1000": value * 1000, "float": value + 0.123456, "int": int(value)}.get(how, value)


def _walk(obj: Any, parts: list[str], create: bool) -> tuple[Any, Any] | None:
    """(container, key) of a dotted path's last part, copying nothing (callers copy first)."""
    for part in parts[:-1]:
        key: Any = int(part) if part.isdigit() and isinstance(obj, list) else part
        try:
            nxt = obj[key]
        except (KeyError, IndexError, TypeError):
            if not create or not isinstance(obj, dict):
                return None
            nxt = obj[key] = {}
        if not isinstance(nxt, (dict, list)):
            if not create or not isinstance(obj, dict):
                return None
            nxt = obj[key] = {}
        obj = nxt
    last: Any = parts[-1]
    if isinstance(obj, list):
        if not last.isdigit():
            return None
        last = int(last)
        if last >= len(obj):
            return None
    elif not isinstance(obj, dict):
        return None
    return obj, last


def _edit(obj: Any, key: str, value: Any = DELETE, how: str | None = None) -> None:
    found = _walk(obj, key.split("."), create=how is None and value is not DELETE)
    if found is None:
        return
    container, last = found
    if how is not None:
        if isinstance(container, dict) and last not in container:
            return
        if how == "delete":
            del container[last]
            return
        container[last] = _retype(container[last], how)
    elif value is DELETE:
        if isinstance(container, dict):
            container.pop(last, None)
        else:
            del container[last]
    else:
        container[last] = value


def _copy(value: Any) -> Any:
    """A copy of JSON-like data (Raw tokens and scalars shared: they are never changed in place)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def build_document(base: Path, ops: list[tuple]) -> tuple[Any, bool]:
    """The mutated document (its events list and touched events copied) and whether it is the bare-array form."""
    doc, index = load_base(base)
    top = dict(doc)
    events = list(doc["traceEvents"])
    top["traceEvents"] = events
    copied: set[int] = set()
    bare = False
    removed: set[int] = set()
    extra: list[tuple[int, Any]] = []

    def own(i: int) -> dict:
        if i not in copied:
            events[i] = _copy(events[i])
            copied.add(i)
        return events[i]

    for op in ops:
        kind = op[0]
        if kind in ("set", "retype", "del", "dup", "drop"):
            i = _pick(index, op[1]) if top.get("traceEvents") is events else None
            if i is None:
                continue
            if kind == "set":
                _edit(own(i), op[2], op[3])
            elif kind == "retype":
                _edit(own(i), op[2], how=op[3])
            elif kind == "del":
                _edit(own(i), op[2])
            elif kind == "dup":
                extra.append((i, _copy(events[i])))
            else:
                removed.add(i)
        elif kind == "insert" and events:
            extra.append((min(int(op[1] * len(events)), max(len(events) - 1, 0)), op[2]))
        elif kind == "all" and top.get("traceEvents") is events:
            _, cat, key, how = op
            for i in index.get(cat) or index[None]:
                _edit(own(i), key, how="delete" if how is DELETE or how == "delete" else how)
        elif kind == "top":
            _, key, value = op
            if key == "traceEvents" and value is not DELETE:
                top["traceEvents"] = value
            else:
                top = copy.copy(top)
                head = key.split(".")[0]
                if head != key and head in top:
                    top[head] = _copy(top[head])
                _edit(top, key, value)
        elif kind == "bare":
            bare = True
    if (removed or extra) and isinstance(top.get("traceEvents"), list) and top.get("traceEvents") is events:
        after: dict[int, list[Any]] = {}
        for i, value in extra:
            after.setdefault(i, []).append(value)
        merged = []
        for i, e in enumerate(events):
            if i not in removed:
                merged.append(e)
            merged += after.get(i, [])
        top["traceEvents"] = merged
    return (top.get("traceEvents", []) if bare else top), bare


def dumps(doc: Any) -> bytes:
    """JSON text of a document that may hold Raw tokens and values orjson cannot write (big ints)."""
    raws: list[str] = []

    def default(obj: Any) -> str:
        if isinstance(obj, Raw):
            raws.append(obj.token)
        elif isinstance(obj, int):
            raws.append(str(obj))
        else:
            raise TypeError
        return f"\x00RAW{len(raws) - 1}\x00"

    try:
        text = orjson.dumps(doc, default=default,
                            option=orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS)
    except orjson.JSONEncodeError:  # nesting orjson refuses: the slow writer
        return _dumps_slow(doc)
    return _put_raws(text, raws)


_PLACEHOLDER = re.compile(rb'"\\u0000RAW(\d+)\\u0000"')


def _put_raws(text: bytes, raws: list[str]) -> bytes:
    if not raws:
        return text
    tokens = [token.encode() for token in raws]
    return _PLACEHOLDER.sub(lambda m: tokens[int(m.group(1))], text)


def _dumps_slow(doc: Any) -> bytes:
    raws: list[str] = []

    def swap(obj: Any) -> Any:
        if isinstance(obj, Raw):
            raws.append(obj.token)
            return f"\x00RAW{len(raws) - 1}\x00"
        if isinstance(obj, dict):
            return {k: swap(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [swap(v) for v in obj]
        return obj

    return _put_raws(json.dumps(swap(doc), separators=(",", ":")).encode(), raws)


def render(base: Path, ops: list[tuple]) -> bytes:
    """The bytes of the mutated file."""
    doc, _ = build_document(base, ops)
    data = dumps(doc)
    for op in ops:
        kind = op[0]
        if kind == "truncate":
            data = data[: int(op[1] * len(data))]
        elif kind == "encode":
            data = _encode(data, op[1])
        elif kind == "gzip":
            data = gzip.compress(data, compresslevel=1, mtime=0)
        elif kind == "gzip_cut":
            data = _gz(data)[: max(1, int(op[1] * len(_gz(data))))]
        elif kind == "gzip_flip":
            packed = bytearray(_gz(data))
            at = 10 + int(op[1] * (len(packed) - 10)) if len(packed) > 10 else 0
            packed[min(at, len(packed) - 1)] ^= op[2] or 1
            data = bytes(packed)
        elif kind == "zeros":
            data = _gz(data) + b"\0" * op[1]
        elif kind == "splice":
            at = int(op[1] * len(data))
            data = data[:at] + op[2] + data[at:]
    return data


def _gz(data: bytes) -> bytes:
    return data if data[:2] == b"\x1f\x8b" else gzip.compress(data, compresslevel=1, mtime=0)


def _encode(data: bytes, encoding: str) -> bytes:
    if data[:2] == b"\x1f\x8b":
        return data
    if encoding == "latin-1":  # non-ASCII as Latin-1 bytes: invalid UTF-8 in strings
        return data.decode("utf-8", "replace").encode("latin-1", "replace")
    return data.decode("utf-8", "replace").encode(encoding, "surrogatepass")


# ---- drawing ops at random (the campaign; the tests draw the same vocabulary with hypothesis) ---------------------


def _sel(rng: random.Random) -> tuple:
    return (rng.choice(CATEGORIES), rng.random())


def _value(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.6:
        return rng.choice(HOSTILE)
    if roll < 0.75:
        return rng.choice((rng.randint(-(2**70), 2**70), rng.randint(-10, 10), rng.randint(0, 2**40)))
    if roll < 0.85:
        return rng.choice((rng.uniform(-1e6, 1e18), rng.random(), -rng.random() * 1e9))
    if roll < 0.95:
        return "".join(chr(rng.choice((rng.randint(0, 0x7F), rng.randint(0x80, 0x10FFFF) & 0xD7FF)))
                       for _ in range(rng.randint(0, 12)))
    return [rng.choice(HOSTILE) for _ in range(rng.randint(0, 3))]


def random_op(rng: random.Random) -> tuple:
    roll = rng.random()
    if roll < 0.30:
        return ("set", _sel(rng), rng.choice(EVENT_KEYS), _value(rng))
    if roll < 0.50:
        return ("retype", _sel(rng), rng.choice(EVENT_KEYS), rng.choice(RETYPES))
    if roll < 0.58:
        return ("del", _sel(rng), rng.choice(EVENT_KEYS))
    if roll < 0.63:
        return (rng.choice(("dup", "drop")), _sel(rng))
    if roll < 0.67:
        return ("insert", rng.random(), _value(rng))
    if roll < 0.79:
        return ("top", rng.choice(TOP_KEYS), DELETE if rng.random() < 0.1 else _value(rng))
    if roll < 0.86:
        return ("all", rng.choice(CATEGORIES), rng.choice(("ts", "dur", "ph", "name", "args", "args.correlation",
                                                          "tid", "args.device")),
                rng.choice((*RETYPES, "delete")))
    return random_byte_op(rng)


def random_byte_op(rng: random.Random) -> tuple:
    roll = rng.random()
    if roll < 0.3:
        return ("truncate", rng.random())
    if roll < 0.45:
        return ("encode", rng.choice(ENCODINGS))
    if roll < 0.55:
        return ("gzip",)
    if roll < 0.65:
        return ("gzip_cut", rng.random())
    if roll < 0.75:
        return ("gzip_flip", rng.random(), rng.randrange(256))
    if roll < 0.8:
        return ("zeros", rng.randint(1, 5000))
    if roll < 0.95:
        return ("splice", rng.random(), rng.choice(SPLICES))
    return ("bare",)


def random_case(rng: random.Random, bases: list[Path]) -> tuple[Path, list[tuple]]:
    ops = [random_op(rng) for _ in range(rng.choice((1, 1, 2, 3, 5, 8)))]
    # byte ops last, as a writer would damage a file; document ops may come in any order
    ops.sort(key=lambda op: op[0] in ("truncate", "encode", "gzip", "gzip_cut", "gzip_flip", "zeros", "splice"))
    return rng.choice(bases), ops


def strategies():
    """Hypothesis strategies drawing the same vocabulary: ``(base, ops)``."""
    from hypothesis import strategies as st

    frac = st.floats(0, 1, exclude_max=True)
    sel = st.tuples(st.sampled_from(CATEGORIES), frac)
    value = st.one_of(st.sampled_from(HOSTILE), st.integers(), st.floats(), st.text(max_size=12),
                      st.lists(st.sampled_from(HOSTILE[:20]), max_size=3))
    doc_op = st.one_of(
        st.tuples(st.just("set"), sel, st.sampled_from(EVENT_KEYS), value),
        st.tuples(st.just("retype"), sel, st.sampled_from(EVENT_KEYS), st.sampled_from(RETYPES)),
        st.tuples(st.just("del"), sel, st.sampled_from(EVENT_KEYS)),
        st.tuples(st.sampled_from(("dup", "drop")), sel),
        st.tuples(st.just("insert"), frac, value),
        st.tuples(st.just("top"), st.sampled_from(TOP_KEYS), st.one_of(st.just(DELETE), value)),
        st.tuples(st.just("all"), st.sampled_from(CATEGORIES), st.sampled_from(("ts", "dur", "ph", "name", "args",
                                                                                 "args.correlation", "tid")),
                  st.sampled_from((*RETYPES, "delete"))),
        st.just(("bare",)),
    )
    byte_op = st.one_of(
        st.tuples(st.just("truncate"), frac),
        st.tuples(st.just("encode"), st.sampled_from(ENCODINGS)),
        st.just(("gzip",)),
        st.tuples(st.just("gzip_cut"), frac),
        st.tuples(st.just("gzip_flip"), frac, st.integers(1, 255)),
        st.tuples(st.just("zeros"), st.integers(1, 3000)),
        st.tuples(st.just("splice"), frac, st.sampled_from(SPLICES)),
    )
    ops = st.tuples(st.lists(doc_op, min_size=1, max_size=6), st.lists(byte_op, max_size=2)).map(
        lambda pair: pair[0] + pair[1])
    return st.sampled_from(available_bases()), ops


# ---- running one case -------------------------------------------------------------------------------------------


def _suffix(data: bytes) -> str:
    return ".json.gz" if data[:2] == b"\x1f\x8b" else ".json"


def write_case(data: bytes, directory: Path, stem: str = "mutant") -> Path:
    path = directory / (stem + _suffix(data))
    path.write_bytes(data)
    return path


def check_api(bad: Path, good: Path = GOOD) -> str | None:
    """Run analyze_paths on ``[bad, good]``; the problem found, or None when the run behaved.

    Behaving: no exception escapes; the good file gives its Report; the bad one a Report or one InputError that
    names it, in one line; every metric a JSON value (finite floats, integers within 64 bits)."""
    from tracelint.engine import InputError
    from tracelint.trace.analyze import Report, analyze_paths

    try:
        items = list(analyze_paths([bad, good]))
    except (Exception, SystemExit) as exc:  # what escapes is the finding (a campaign's alarm is let through)
        return f"escaped: {type(exc).__name__}: {exc}"[:500]
    by_path: dict[str, list] = {}
    for item in items:
        by_path.setdefault(str(getattr(item, "path", "")), []).append(item)
    good_items = by_path.get(str(good), [])
    if not any(isinstance(i, Report) for i in good_items):
        return f"the good file gave {good_items!r}"[:500]
    bad_items = by_path.get(str(bad), [])
    if len(bad_items) != 1:
        return f"the mutated file gave {len(bad_items)} items: {bad_items!r}"[:500]
    item = bad_items[0]
    if isinstance(item, InputError):
        if "\n" in item.message or "\r" in item.message:
            return f"multi-line error: {item.message!r}"[:500]
        if "internal error" in item.message:
            return f"internal error: {item.message}"[:500]
        return None
    if not isinstance(item, Report):
        return f"unexpected item {item!r}"[:500]
    for summary in item.summaries:
        bad_value = _non_json(summary.metrics)
        if bad_value is not None:
            return f"metric not a JSON value: {bad_value}"[:500]
    for warning in item.warnings:
        if "\n" in warning:
            return f"multi-line warning: {warning!r}"[:500]
    return None


def _non_json(value: Any, where: str = "metrics") -> str | None:
    if isinstance(value, float):
        return None if value == value and abs(value) != float("inf") else f"{where} = {value}"
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return None
    if isinstance(value, int):
        return None if -(2**63) <= value < 2**64 else f"{where} = {value} (beyond 64 bits)"
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                return f"{where} has key {k!r}"
            if isinstance(k, int) and not -(2**63) <= k < 2**64:
                return f"{where} has key {k} (beyond 64 bits)"
            found = _non_json(v, f"{where}.{k}")
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _non_json(v, f"{where}[{i}]")
            if found:
                return found
        return None
    return f"{where} is a {type(value).__name__}"


def minimize(base: Path, ops: list[tuple], fails) -> list[tuple]:
    """Fewer ops that still fail (``fails(ops) -> bool``): drop one op at a time while the failure stays."""
    ops = list(ops)
    changed = True
    while changed and len(ops) > 1:
        changed = False
        for i in range(len(ops)):
            trial = ops[:i] + ops[i + 1:]
            if fails(trial):
                ops, changed = trial, True
                break
    return ops


def describe(ops: list[tuple]) -> str:
    """The ops as JSON (Raw tokens shortened), to save beside a failing input."""
    def plain(v: Any) -> Any:
        if isinstance(v, Raw):
            return {"raw": v.token if len(v.token) < 60 else v.token[:30] + f"...({len(v.token)} chars)"}
        if isinstance(v, bytes):
            return {"bytes": v.decode("latin-1")}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, str) and len(v) > 60:
            return v[:30] + f"...({len(v)} chars)"
        if isinstance(v, int) and not -(2**63) <= v < 2**63:
            return {"int": str(v)}
        return v
    return json.dumps(plain(ops), ensure_ascii=True)

