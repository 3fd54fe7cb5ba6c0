"""Output safety: text that comes from a trace or a source file (paths, event and kernel names, trace keys, metric
names) is data, never markup. One function per concern, shared by every format and by the CLI's stderr lines:

- ``terminal``: for a terminal or a CI log (the text format, every stderr line). Control characters (C0 with TAB,
  CR and LF, DEL, C1), the bidi controls that can disguise text (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F,
  U+061C) and the line separators U+2028/U+2029 are shown as Python-style escapes (``\\x1b``, ``\\n``,
  ``\\u202e``); a byte that is not UTF-8 in a file name (a surrogate from ``os.fsdecode``) is shown as the byte,
  ``\\xff``. So no escape sequence reaches the terminal and no data starts a line of its own.
- ``no_commands``: for every line of a terminal or CI report as a whole. GitHub Actions reads any line of stdout or
  stderr that starts, after blanks, with ``::`` as a workflow command, and ``##[command]`` anywhere in a line as
  the legacy form; such a line's first colon is written ``\\x3a``, and ``##[`` as ``##\\x5b``.
- ``valid_unicode``: lone surrogates (a file name's undecodable bytes) as U+FFFD, so UTF-8 encoders accept it.
- ``json_safe`` and ``json_text``: a JSON document (json, sarif, gitlab) stays valid and portable: strings as valid
  Unicode, integers beyond ±(2**53 − 1) (the range every JSON parser reads exactly, RFC 7493) as decimal strings,
  and, in the encoded text, DEL, C1, bidi controls and ``##[`` as ``\\uXXXX`` escapes (the same data, but
  nothing a terminal or a CI log acts on when the report is printed).
- ``utf8_bytes``: the bytes a file name stands for, for a percent-encoded URI.
- ``map_strings``: applies one of these to every string in a value (a trace summary, a finding's location), for
  the text format, which escapes the data before it lays the report out.

The GitHub format's own escaping (the Actions toolkit's ``%25``, ``%0D``, ``%0A``, ``%3A``, ``%2C``) is in
tracelint.render.github, on top of ``terminal``.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from enum import Enum
from functools import lru_cache

MAX_SAFE_INT = 2**53 - 1

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{_BIDI}\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_SURROGATE = re.compile("[\ud800-\udfff]")


def _shown(char: str) -> str:
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's stand-in for the undecodable byte code - 0xDC00
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal(text: str, *, keep: str = "") -> str:
    """``text`` with every character a terminal or log viewer would act on (or that disguises what follows) shown
    as an escape; the characters in ``keep`` (say ``"\\n"``) are left as they are."""
    if text.isprintable() or not _UNSAFE.search(text):  # isprintable: none of them (they are Cc, Cf, Zl, Zp, Cs)
        return text
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _shown(m.group()), text)


# Blanks, and color codes a terminal report may start a line with, then "::".
_COMMAND_LINE = re.compile(r"^((?:\s|\x1b\[[0-9;]*m)*):(?=:)", re.MULTILINE)
_LEGACY_COMMAND = "##["


def no_commands(text: str) -> str:
    """``text`` (one or many lines) with no line that GitHub Actions would run as a workflow command: a line that
    starts with ``::`` (after blanks) gets ``\\x3a`` for its first colon, and ``##[`` becomes ``##\\x5b``."""
    if "::" in text:
        text = _COMMAND_LINE.sub(lambda m: m.group(1) + "\\x3a", text)
    if _LEGACY_COMMAND in text:
        text = text.replace(_LEGACY_COMMAND, "##\\x5b")
    return text


def log_line(text: str) -> str:
    """One line for stderr or a log: ``terminal`` (so data cannot break it) and then ``no_commands``."""
    return no_commands(terminal(text))


def valid_unicode(text: str) -> str:
    """``text`` with each lone surrogate (an undecodable byte of a file name, or a bad ``\\ud800`` escape in a
    trace) replaced by U+FFFD, so that UTF-8 encoders accept it."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def utf8_bytes(text: str) -> bytes:
    """The bytes ``text`` stands for: a file name's undecodable bytes (``os.fsdecode``'s surrogates) restored, any
    other lone surrogate as U+FFFD."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return valid_unicode(text).encode("utf-8")


def json_safe(value: object, default: Callable[[object], object] = str) -> object:
    """``value`` as plain JSON data that any parser reads back exactly: strings (and keys) valid Unicode, integers
    outside ±(2**53 − 1) as decimal strings, dataclasses as dicts, tuples as lists, anything else through
    ``default`` (whose result is made safe in turn). Floats are left to the encoder (NaN and ±inf: null)."""
    if value is None or isinstance(value, (bool, float)):
        return value
    if isinstance(value, int):
        return value if -MAX_SAFE_INT <= value <= MAX_SAFE_INT else str(int(value))
    if isinstance(value, str):
        return valid_unicode(value)
    if isinstance(value, dict):
        return {_json_key(k, default): json_safe(v, default) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, default) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: json_safe(getattr(value, f.name), default) for f in dataclasses.fields(value)}
    replaced = default(value)
    if type(replaced) is type(value):  # a default that gives the object back: its text, at least
        replaced = str(value)
    return json_safe(replaced, default)


def _json_key(key: object, default: Callable[[object], object]) -> object:
    if isinstance(key, str):
        return valid_unicode(key)
    if key is None or isinstance(key, (bool, int, float)):
        return json_safe(key, default)
    return valid_unicode(str(key))


_JSON_UNSAFE = re.compile(f"[\x7f-\x9f\u2028\u2029{_BIDI}]")
_ASCII = bytes(range(128))


def json_text(data: bytes) -> str:
    """Encoded JSON (UTF-8 bytes) as text with the characters a terminal or log acts on written as ``\\uXXXX``
    escapes: DEL, C1, bidi controls, U+2028/U+2029, and the ``[`` of ``##[`` (GitHub's legacy workflow command).
    Outside strings JSON has none of them, so the document decodes to the same data. (The encoder escapes C0.)"""
    text = data.decode("utf-8")
    # Only the non-ASCII characters can be C1 or bidi controls: look at them alone (a large report is mostly ASCII).
    if not data.isascii() and _JSON_UNSAFE.search(data.translate(None, _ASCII).decode("utf-8")):
        text = _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    if "\x7f" in text:
        text = text.replace("\x7f", "\\u007f")
    if _LEGACY_COMMAND in text:
        text = text.replace(_LEGACY_COMMAND, "##\\u005b")
    return text


def map_strings(value, fn: Callable[[str], str]):
    """``value`` with ``fn`` applied to every string in it: dataclass fields, dict keys and values, list and tuple
    items (named tuples stay named tuples). Enums are left alone; what does not change is not copied."""
    kind = type(value)
    if kind is str:
        return fn(value)
    if kind in _ATOMS:
        return value
    if isinstance(value, dict):
        pairs = [(_mapped(k, fn), _mapped(v, fn)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    if isinstance(value, (list, tuple)):
        items = [_mapped(v, fn) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        if isinstance(value, list):
            return items
        return kind(*items) if hasattr(value, "_fields") else kind(items)
    if isinstance(value, str):  # a str subclass: an enum stays itself
        return value if isinstance(value, Enum) else fn(value)
    changes = {}
    for name in _init_fields(kind):  # none for a type that is not a dataclass
        old = getattr(value, name)
        new = _mapped(old, fn)
        if new is not old:
            changes[name] = new
    return dataclasses.replace(value, **changes) if changes else value


def _mapped(value, fn: Callable[[str], str]):
    """``map_strings`` without a call for the usual leaves (the walk of a large report is mostly these)."""
    kind = type(value)
    if kind is str:
        return fn(value)
    return value if kind in _ATOMS else map_strings(value, fn)


_ATOMS = frozenset({int, float, bool, type(None), bytes, complex})


@lru_cache(maxsize=256)
def _init_fields(kind: type) -> tuple[str, ...]:
    """The fields of a dataclass that its constructor takes (none for other types)."""
    if not dataclasses.is_dataclass(kind):
        return ()
    return tuple(f.name for f in dataclasses.fields(kind) if f.init)
