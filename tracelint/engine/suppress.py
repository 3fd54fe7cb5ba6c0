"""Line suppressions: ``# noqa``, ``# noqa: TL101,TL202`` and ``# tracelint: ignore[TL101]``."""
from __future__ import annotations

import re

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.I)
_IGNORE = re.compile(r"#\s*tracelint:\s*ignore(?:\[(?P<codes>[^\]]*)\])?", re.I)

ALL = frozenset({"*"})


def suppressed_codes(line: str) -> frozenset[str]:
    """Codes a source line suppresses; ``ALL`` for a bare ``# noqa`` or ``# tracelint: ignore``."""
    if "#" not in line:
        return frozenset()
    codes: set[str] = set()
    for pattern in (_NOQA, _IGNORE):
        for match in pattern.finditer(line):
            listed = match.group("codes")
            if listed is None:
                return ALL
            codes.update(c.upper() for c in re.split(r"[\s,]+", listed.strip()) if c)
    return frozenset(codes)


def is_suppressed(line: str, code: str) -> bool:
    codes = suppressed_codes(line)
    return codes is ALL or code in codes or any(code.startswith(c) for c in codes if len(c) < len(code))
