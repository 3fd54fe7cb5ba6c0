"""A Report: what one trace file (or one job directory) gives — per-rank summaries, findings, warnings."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tracelint.engine import Finding, TraceSummary
from tracelint.trace.device_analysis import TraceAnalysis
from tracelint.trace.timeline import timeline_of


@dataclass(frozen=True, slots=True)
class Report:
    """What one trace file (or one multi-rank directory) gives: per-rank summaries, findings, warnings."""

    path: str
    summaries: list[TraceSummary]
    findings: list[Finding] = field(default_factory=list)
    warnings: tuple[str, ...] = ()
    # Empty for a job summary, and for a rank analyzed in a worker process (or with keep_analyses=False).
    analyses: list[TraceAnalysis] = field(default_factory=list, repr=False)
    truncated: bool = False  # the file ends early (a killed run): its last step is partial
    # How the report shows itself in Jupyter, (summaries, findings) -> HTML: the output layer's, handed down by the
    # caller above it (the trace half does not know how a report looks).
    html: Callable[[list[TraceSummary], list[Finding]], str] | None = field(default=None, repr=False, compare=False)

    @property
    def verdict(self) -> str:
        return self.summaries[0].verdict

    @property
    def evidence(self) -> str:
        return self.summaries[0].evidence

    @property
    def metrics(self) -> dict:
        return self.summaries[0].metrics

    def _repr_html_(self) -> str | None:
        """Jupyter shows a Report through ``html`` (the public ``tracelint.analyze_trace`` hands it the HTML report's
        notebook frame); without one, Jupyter falls back to the repr."""
        if self.html is None:
            return None
        # a summary and its device's analysis share their index (a job summary has no analyses)
        summaries = [s if s.timeline is not None or i >= len(self.analyses) else
                     replace(s, timeline=timeline_of(self.analyses[i])) for i, s in enumerate(self.summaries)]
        return self.html(summaries, self.findings)
