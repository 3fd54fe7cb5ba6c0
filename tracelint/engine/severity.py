"""Severity of a finding: info < warning < error (``--fail-on`` compares them)."""
from __future__ import annotations

from enum import IntEnum


class Severity(IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown severity {text!r} (expected info, warning or error)") from None

    def __str__(self) -> str:
        return self.name.lower()
