"""The base class of trace rules: one subclass per rule code in tracelint/trace/rules/, discovered, never listed."""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from tracelint.engine import Config, Finding, Rule, discover

if TYPE_CHECKING:
    from tracelint.trace.device_analysis import TraceAnalysis
    from tracelint.trace.job.ranks import Job
    from tracelint.trace.verdict import Verdict


class TraceRule(Rule):
    """Reads one device's analysis of a trace (model + metrics + gaps + steps) and its verdict, and yields findings.

    Thresholds: ``config.threshold(KEY)`` for a key declared in the rule's rules/ file (``thresholds:``)."""

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        raise NotImplementedError

    def explains(self, analysis: TraceAnalysis, finding: Finding) -> bool:
        """Whether another rule's finding on the same device is a symptom of what this rule reported there (asked
        only when this rule fired on it): the report then names the cause alone. Anomaly detection's readbacks are
        not a user's ``.item()`` (TL701 explains those TL101s)."""
        return False


class JobRule(TraceRule):
    """Reads the ranks of one job together (tracelint.trace.job.ranks: matched collectives, waits, the straggler) and
    the verdict of each rank, and yields findings on the job; it reads no single device."""

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        return ()

    def check_job(self, job: Job, verdicts: dict[int, Verdict], config: Config) -> Iterable[Finding]:
        raise NotImplementedError


def enabled_rules(config: Config, base: type) -> list:
    """An instance of every discovered rule of ``base`` (a TraceRule or JobRule subclass) the config enables."""
    return [cls() for cls in discover("tracelint.trace.rules", base) if config.enabled(cls.code)]
