"""``tracelint diff BASE NEW``: two profiler traces (or two job folders) compared, step time against its noise,
metrics, kernels and findings, with a CI gate. The numbers are defined in tracelint.diff.compare."""
from __future__ import annotations

from tracelint.diff.compare import (
    Change,
    DiffReport,
    Gate,
    KernelChange,
    MetricChange,
    StepChange,
    TraceDiff,
    compare,
    diff_traces,
    finding_key,
)

__all__ = ["Change", "DiffReport", "Gate", "KernelChange", "MetricChange", "StepChange", "TraceDiff", "compare",
           "diff_traces", "finding_key"]
