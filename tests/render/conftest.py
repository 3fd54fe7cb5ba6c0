"""RunResults built by hand from engine types: what every renderer test feeds its format."""
from __future__ import annotations

import json

import pytest

from tracelint.engine import (
    Edit,
    Finding,
    Fix,
    InputError,
    RunResult,
    Severity,
    SourceLocation,
    TraceLocation,
    TraceSummary,
)

EVIDENCE = "GPU idle 81% of the step; 74% of that idle time the main thread waits in DataLoader.__next__"


def source_finding(path="train.py", line=42, column=9, code="TL101", message="`.item()` syncs the GPU every step",
                   fix_safe: bool | None = True, severity=Severity.WARNING) -> Finding:
    fix = None if fix_safe is None else Fix("Move it out of the loop", (Edit(line, column, line, column + 11, ""),),
                                           safe=fix_safe)
    return Finding(code, severity, message, SourceLocation(path, line, column, line, column + 11), fix=fix)


def notebook_finding() -> Finding:
    return Finding("TL104", Severity.WARNING, "print of a device tensor syncs",
                   SourceLocation("nb.ipynb", 4, 3, 4, 13, cell=3))


def trace_finding(source: bool = True, rank: int | None = 0, step: int | None = 12, path="trace.json.gz") -> Finding:
    src = SourceLocation("train.py", 30) if source else None
    loc = TraceLocation(path, rank=rank, step=step, start_us=1500.0, end_us=float("nan"),
                        event="Memcpy HtoD (Pageable -> Device)", source=src)
    return Finding("TL202", Severity.WARNING, "pageable HtoD copies: 1.2 GiB per step", loc,
                   details=(("pageable_bytes", 1.3e9), ("copies", 300), ("ratio", float("inf"))))


def metrics(busy: float = 18.6) -> dict:
    return {
        "mean_kernel_us": 12.5,
        "peak_memory_bytes": 3 * 2**30,
        "gpu_busy_pct": busy,
        "h2d_pct_of_gpu_busy": 4.2,
        "idle_by_cause": {"host_wait_pct": 74.0, "kernel_wait_pct": float("nan")},
        "matmul_tensor_core_pct": float("inf"),
        "step_time_us": 14200.0,
        "kernels": 12345,
    }


def summary(rank: int | None = 0, verdict="input-bound", evidence=EVIDENCE, busy=18.6, path="trace.json.gz"):
    return TraceSummary(path, verdict, evidence, metrics(busy), rank=rank, warnings=("trace ends early",))


@pytest.fixture
def full_result() -> RunResult:
    """Source, notebook and trace findings (with and without a source line), one trace, one error."""
    return RunResult(
        findings=[notebook_finding(), source_finding(), trace_finding(source=True),
                  trace_finding(source=False, step=None)],
        traces=[summary()],
        errors=[InputError("broken.json", "not a trace: unexpected end of data", 3)],
        files_checked=2,
    )


def strict_json(text: str):
    """``text`` parsed as strict parsers do: a NaN or Infinity token fails (json.loads accepts them; a rule's
    documentation may say "NaN" in a string, which is fine)."""
    def refuse(token: str):
        raise AssertionError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)
