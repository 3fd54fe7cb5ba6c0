"""A trace file's JSON text, read within limits: the bytes of a regular file (a big plain one memory-mapped),
inflated when gzip'd, as UTF-8. load.py decodes the events from it.

Every byte is untrusted, so resources are bounded (`Limits`, from environment variables): the decompressed size
(TRACELINT_MAX_TRACE_BYTES, default 16 GiB), one string (TRACELINT_MAX_STRING_BYTES, default 64 MiB) and, past 256
MiB of output, the gzip expansion ratio (TRACELINT_MAX_GZIP_RATIO, default 200x; real traces compress 7-25x). Gzip is
inflated in pieces of at most 1 MiB of output with the limits checked after each, so a decompression bomb stops at
the limit with its memory bounded by it. Only regular files are read: a FIFO, socket or device file is refused
before a byte is read (opened non-blocking, so that a FIFO without a writer cannot hang the run).
"""
from __future__ import annotations

import mmap
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from tracelint.trace.files import not_a_regular_file

_GZIP_MAGIC = b"\x1f\x8b"
_JSON_START = (b"{", b"[", b" ", b"\t", b"\r", b"\n")


class TraceReadError(Exception):
    """The file is not a readable trace. str() is one line for the user, without the path."""


# ---- limits ----------------------------------------------------------------------------------------------------

# Defaults that real traces pass with room: the largest Kineto traces met in practice are a few GB of JSON (the
# Chrome and Perfetto viewers give up near 2 GB), and the loader holds the decompressed text in memory, so a trace
# over 16 GiB would need more memory than most machines that would read it have. Real strings are names, stacks and
# shapes of at most some KB; 64 MiB is thousands of times that, and bounds what one string can cost. Gzip'd traces
# inflate 7-25x; a stream that inflates over 200x is a bomb (deflate's ceiling is ~1032x).
DEFAULT_MAX_TRACE_BYTES = 16 << 30
DEFAULT_MAX_STRING_BYTES = 64 << 20
DEFAULT_MAX_GZIP_RATIO = 200
_RATIO_FROM = 256 << 20  # the ratio is only judged past this much output: a small file is harmless whatever its ratio
_INFLATE_STEP = 1 << 20  # most bytes one decompress call may return
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_RE = re.compile(r"\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*", re.I)


@dataclass(frozen=True)
class Limits:
    """What one trace may cost; 0 turns a limit off. `from_env()` reads the environment variables."""

    trace_bytes: int = DEFAULT_MAX_TRACE_BYTES
    string_bytes: int = DEFAULT_MAX_STRING_BYTES
    gzip_ratio: int = DEFAULT_MAX_GZIP_RATIO

    @classmethod
    def from_env(cls) -> Limits:
        return cls(_env_size("TRACELINT_MAX_TRACE_BYTES", DEFAULT_MAX_TRACE_BYTES),
                   _env_size("TRACELINT_MAX_STRING_BYTES", DEFAULT_MAX_STRING_BYTES),
                   _env_size("TRACELINT_MAX_GZIP_RATIO", DEFAULT_MAX_GZIP_RATIO, unit=False))


def _env_size(name: str, default: int, *, unit: bool = True) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    m = _SIZE_RE.fullmatch(raw)
    if m is None or (m.group(2) and not unit):
        what = "a size in bytes (e.g. 8G, 512M)" if unit else "a whole number"
        raise TraceReadError(f"{name}={raw.strip()[:40]!r} is not {what}")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def format_size(n: int) -> str:
    """A number of bytes for a message: ``16 GiB``, ``1.5 MiB``, ``512 bytes``."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"


class _StringGuard:
    """While gzip is inflated: stops at a run of text without a '"' longer than the string limit (a string that
    long, or garbage) before the run is complete (a bomb's one string never ends). Fed piece by piece (of at most 1
    MiB): a run that crosses a piece's end is measured exactly, so a limit of 1 MiB or more is exact. (A plain file
    is not scanned: it is memory-mapped, and the chunk reader never hands the decoder a chunk longer than the
    limit allows; its slow path checks each string it walks over.)"""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.last = -1  # offset of the last '"' seen

    def feed(self, data: bytes | bytearray | mmap.mmap, start: int, end: int) -> None:
        if not self.limit:
            return
        last = data.rfind(b'"', start, end)
        if last < 0:
            if end - self.last - 1 > self.limit:
                self._fail(max(self.last, 0))
            return
        first = data.find(b'"', start, end)
        if first - self.last - 1 > self.limit:
            self._fail(max(self.last, 0))
        self.last = last

    def _fail(self, at: int) -> None:
        raise TraceReadError(f"a string (or text without a '\"') over the {format_size(self.limit)} limit "
                             f"at byte {at:,} (TRACELINT_MAX_STRING_BYTES)")


# ---- reading bytes ---------------------------------------------------------------------------------------------


def read_text(path: Path, limits: Limits, warnings: list[str], *, map_from: int
              ) -> tuple[bytes | bytearray | mmap.mmap, int, str | None]:
    """The file's JSON text (inflated when gzip'd, as UTF-8), the offset where it starts (after a UTF-8 byte-order
    mark) and, for a gzip stream cut short, what went wrong; what was repaired or ignored goes to `warnings`. A
    plain file of `map_from` bytes or more is memory-mapped. Raises TraceReadError for unreadable or empty input and
    for input over `limits`."""
    raw = _read_file(path, limits, map_from)
    if not raw:
        raise TraceReadError("empty file")
    gzip_problem = None
    if raw[:2] == _GZIP_MAGIC:
        raw, gzip_problem = _gunzip(raw, warnings, limits)
        if not raw:
            raise TraceReadError(f"empty file (the gzip stream {gzip_problem or 'holds no data'})")
    data, start = _as_utf8(raw, warnings)
    return data, start, gzip_problem


def _read_file(path: Path, limits: Limits, map_from: int) -> bytes | mmap.mmap:
    """The file's bytes; a big uncompressed trace is memory-mapped instead of read: no 250 MB copy before the first
    event is decoded, and in a parallel read each process pages in only its own part. (Like ripgrep's mmap reads,
    this trusts the file not to be truncated by another process while it is being read.) Only a regular file is
    read: it is opened non-blocking (a FIFO would wait for a writer) and its type checked on the open descriptor."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise TraceReadError("no such file") from None
    except IsADirectoryError:
        raise TraceReadError("is a directory, not a trace file") from None
    except PermissionError:
        raise TraceReadError("permission denied") from None
    except OSError as e:
        raise TraceReadError(f"cannot read file: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        problem = not_a_regular_file(st.st_mode)
        if problem:
            raise TraceReadError(problem)
        if limits.trace_bytes and st.st_size > limits.trace_bytes:
            raise TraceReadError(f"file size {format_size(st.st_size)} over the {format_size(limits.trace_bytes)} "
                                 "limit (TRACELINT_MAX_TRACE_BYTES)")
        if st.st_size >= map_from:
            mapped = _map_file(fd)
            if mapped is not None:
                return mapped
        with open(fd, "rb", closefd=False) as f:
            data = f.read()
        if limits.trace_bytes and len(data) > limits.trace_bytes:  # it grew while being read
            raise TraceReadError(f"file size over the {format_size(limits.trace_bytes)} limit "
                                 "(TRACELINT_MAX_TRACE_BYTES)")
        return data
    except IsADirectoryError:
        raise TraceReadError("is a directory, not a trace file") from None
    except PermissionError:
        raise TraceReadError("permission denied") from None
    except OSError as e:
        raise TraceReadError(f"cannot read file: {e.strerror or e}") from None
    finally:
        os.close(fd)


def _map_file(fd: int) -> mmap.mmap | None:
    try:
        mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None  # not mappable: read it
    if mapped[:2] == _GZIP_MAGIC:  # inflated into memory anyway
        mapped.close()
        return None
    return mapped


def _gunzip(raw: bytes, warnings: list[str], limits: Limits) -> tuple[bytearray, str | None]:
    """Decompress all gzip members; returns the data and, for a stream cut short, what went wrong."""
    out, problem = _inflate(raw, warnings, limits)
    if problem and raw.endswith(b"\0"):
        # A crash can leave zero-filled blocks at the end, which inflate into garbage copies of earlier text:
        # cut them off, and the data before them reads as an honest truncation.
        kept = raw.rstrip(b"\0")
        warnings.append(f"ignored {len(raw) - len(kept)} zero bytes at the end of the file")
        del out
        out, problem = _inflate(kept, warnings, limits)
    return out, problem


def _inflate(raw: bytes, warnings: list[str], limits: Limits) -> tuple[bytearray, str | None]:
    # Piecewise into one bytearray: the peak stays near the output size, and the data before a cut is kept. Each
    # call returns at most _INFLATE_STEP bytes (deflate expands up to ~1032x: 1 MiB of input could be a GiB of
    # output), and the limits are checked after each.
    out = bytearray()
    view = memoryview(raw)
    member = 0
    guard = _StringGuard(limits.string_bytes)
    max_out = limits.trace_bytes
    while True:
        d = zlib.decompressobj(wbits=31)
        pos = member
        try:
            while not d.eof:
                if d.unconsumed_tail:
                    piece = d.decompress(d.unconsumed_tail, _INFLATE_STEP)
                elif pos < len(raw):
                    piece = d.decompress(view[pos : pos + (1 << 20)], _INFLATE_STEP)
                    pos += 1 << 20
                else:
                    break
                if not piece:
                    continue
                start = len(out)
                out += piece
                guard.feed(out, start, len(out))
                _check_size(len(out), min(pos, len(raw)), max_out, limits.gzip_ratio)
            out += d.flush()
        except zlib.error as e:
            # Not kept as a truncation: the output just before damage is already garbage.
            where = f" after {len(out)} decompressed bytes" if out else ""
            raise TraceReadError(f"not a valid gzip file: {e}{where}") from None
        if not d.eof:
            return out, "is cut short"
        member = min(pos, len(raw)) - len(d.unused_data)
        rest = view[member:]
        if not rest or not bytes(rest).strip(b"\0"):
            return out, None
        if bytes(rest[:2]) != _GZIP_MAGIC:
            warnings.append(f"ignored {len(rest)} bytes after the end of the gzip stream")
            return out, None


def _check_size(produced: int, consumed: int, max_out: int, max_ratio: int) -> None:
    if max_out and produced > max_out:
        raise TraceReadError(f"decompressed size over the {format_size(max_out)} limit (TRACELINT_MAX_TRACE_BYTES)")
    if max_ratio and produced > _RATIO_FROM and produced > consumed * max_ratio:
        raise TraceReadError(f"the gzip stream inflates over {max_ratio}x its size (a decompression bomb?): stopped "
                             f"at {format_size(produced)} (TRACELINT_MAX_GZIP_RATIO)")


def _as_utf8(raw: bytes | bytearray, warnings: list[str]) -> tuple[bytes | bytearray, int]:
    """The data as UTF-8 and where the JSON text starts (after a UTF-8 byte-order mark)."""
    if raw[:3] == b"\xef\xbb\xbf":
        return raw, 3
    head = bytes(raw[:4])
    encoding = None
    if head.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        encoding = "utf-32"
    elif head.startswith((b"\xff\xfe", b"\xfe\xff")):
        encoding = "utf-16"
    elif head[:1] == b"\0" and head[1:2] in _JSON_START:  # UTF-16 without a byte-order mark
        encoding = "utf-16-be"
    elif head[1:2] == b"\0" and head[:1] in _JSON_START:
        encoding = "utf-16-le"
    if encoding is None:
        return raw, 0
    warnings.append(f"the file is {encoding.upper()[:6]} text; decoded it")
    return bytes(raw).decode(encoding, "replace").lstrip("\ufeff").encode("utf-8"), 0
