"""Notes about the trace itself rather than the run: no ProfilerStep spans (TL001), a truncated file (TL002)."""
from __future__ import annotations

from collections.abc import Iterable

from tracelint.engine import Config, Finding, TraceLocation
from tracelint.trace.metrics import TraceAnalysis
from tracelint.trace.rule import TraceRule
from tracelint.trace.rules._common import finding


class TraceWithoutSteps(TraceRule):
    code = "TL001"

    def check(self, analysis: TraceAnalysis, config: Config) -> Iterable[Finding]:
        model = analysis.model
        if analysis.has_steps or not (model.ops or model.gpu):
            return
        yield finding(self, "the trace has no ProfilerStep#N spans (profiled without schedule= / prof.step()): the "
                      "whole trace, setup and warm-up included, is analysed as one step",
                      TraceLocation(analysis.path, rank=analysis.rank))


class TraceTruncated(TraceRule):
    code = "TL002"

    def check(self, analysis: TraceAnalysis, config: Config) -> Iterable[Finding]:
        if not analysis.truncated:
            return
        note = next((w for w in analysis.warnings if "trunc" in w or "end" in w), None)
        steps = len(analysis.model.steps)
        kept = f"{steps} complete step{'s' if steps != 1 else ''} read" if steps else "no complete step read"
        yield finding(self, f"the trace file ends early{f' ({note})' if note else ''}; {kept}, the report covers the "
                      "events before the cut", TraceLocation(analysis.path, rank=analysis.rank))
