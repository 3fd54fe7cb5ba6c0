"""Line suppressions: ``# noqa``, ``# noqa: TL101,TL202`` and ``# tracelint: ignore[TL101]``."""
from __future__ import annotations

import re

NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.I)
_IGNORE = re.compile(r"#\s*tracelint:\s*ignore(?:\[(?P<codes>[^\]]*)\])?", re.I)

ALL = frozenset({"*"})


def suppressed_codes(line: str) -> frozenset[str]:
    """Codes a source line suppresses; ``ALL`` for a bare ``# noqa`` or ``# tracelint: ignore``."""
    if "#" not in line:
        return frozenset()
    codes: set[str] = set()
    for pattern in (NOQA, _IGNORE):
        for match in pattern.finditer(line):
            listed = match.group("codes")
            if listed is None:
                return ALL
            codes.update(c.upper() for c in noqa_codes(listed))
    return frozenset(codes)


def noqa_codes(listed: str) -> list[str]:
    """The codes of a suppression's list (``TL101, TL202`` or ``TL101 TL202``), as written."""
    return [c for c in re.split(r"[\s,]+", listed.strip()) if c]


def is_suppressed(line: str, code: str) -> bool:
    codes = suppressed_codes(line)
    return codes is ALL or code in codes or any(code.startswith(c) for c in codes if len(c) < len(code))


def without_suppressions(line: str) -> str:
    """``line`` without its ``# noqa`` and ``# tracelint: ignore`` comments (what a baseline compares)."""
    if "#" not in line:
        return line
    return _IGNORE.sub("", NOQA.sub("", line))
