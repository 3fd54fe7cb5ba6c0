"""The base class of trace rules: one subclass per rule code in tracelint/trace/rules/, discovered, never listed."""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from tracelint.engine import Config, Finding, Rule

if TYPE_CHECKING:
    from tracelint.trace.metrics import TraceAnalysis


class TraceRule(Rule):
    """Reads one device's analysis of a trace (model + metrics + gaps + steps) and yields findings."""

    def check(self, analysis: TraceAnalysis, config: Config) -> Iterable[Finding]:
        raise NotImplementedError
