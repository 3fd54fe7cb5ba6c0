"""Lenient JSON for the trace loader's slow path: reads the non-standard JSON that profilers write.

Only pieces that strict decoding rejected come here, so valid traces never pay for it. Repairs: bare
`inf`/`-inf`/`infinity`/`nan` (read as floats), bare `N/A` (read as null), invalid backslash escapes such as
Windows paths (`"C:\\Users"` keeps its backslash), raw control characters inside strings, invalid UTF-8 (replaced
with U+FFFD) and integers beyond 64 bits. Nesting too deep for the interpreter is a ValueError like any other
invalid text.
"""
from __future__ import annotations

import json
import re
from typing import Any

# Each pattern is a possessive run of text that needs no repair followed by one spot that does, by the end of the
# text or (for broken text) by any one character, so that every match attempt succeeds where the last one ended:
# re.sub then goes back to back from the start, in linear time, and never loses track of where strings and escape
# pairs begin (a match tried from a later offset could start inside a string or inside `\\`).
_BAD_ESCAPE = re.compile(r'((?:[^\\]++|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+)(\\|\Z)')
_BARE_TOKEN = re.compile(
    r'((?:"(?:[^"\\]++|\\.)*+"|[^"a-zA-Z]++|true|false|null|Infinity|NaN|[eE])*+)'
    r"([Ii]nf(?:inity)?\b|INF\b|[Nn]a[Nn]\b|NAN\b|N/A|\Z|.)",
    re.S,
)
_TOKEN_VALUE = {"inf": "Infinity", "infinity": "Infinity", "n/a": "null", "nan": "NaN"}


def _double_backslash(m: re.Match[str]) -> str:
    return m.group(1) + "\\\\" if m.group(2) else m.group(1)


def _standard_token(m: re.Match[str]) -> str:
    before, token = m.group(1), m.group(2)
    value = _TOKEN_VALUE.get(token.lower())
    if value is None:  # the end of the text, or a character that no repair applies to
        return before + token
    if value == "NaN" and before.endswith("-"):  # C's printf writes "-nan"; JSON has no negative NaN
        before = before[:-1]
    return before + value


def repair(text: str) -> str:
    """The same JSON text with invalid escapes and bare non-JSON values rewritten into what `json.loads`
    accepts (control characters need no rewrite: `loads_lenient` reads with strict=False)."""
    if "\\" in text:
        text = _BAD_ESCAPE.sub(_double_backslash, text)
    return _BARE_TOKEN.sub(_standard_token, text)


def decode_utf8(raw: bytes | bytearray | memoryview) -> tuple[str, bool]:
    """Text of `raw`, and whether invalid UTF-8 (e.g. Latin-1 bytes in a name) had to be replaced."""
    try:
        return str(raw, "utf-8"), False
    except UnicodeDecodeError:
        return str(raw, "utf-8", "replace"), True


def loads_lenient(raw: bytes | bytearray | memoryview) -> tuple[Any, bool]:
    """Decode one JSON value with the repairs above; returns (value, invalid UTF-8 was replaced).

    Raises ValueError when the text is not JSON even after repair.
    """
    text, replaced = decode_utf8(raw)
    try:
        return json.loads(repair(text), strict=False), replaced
    except RecursionError:  # nesting deeper than the interpreter's stack allows (orjson refuses it too)
        raise ValueError("nesting too deep") from None
