"""``tracelint verify --trace``: what the profiled steps of one run say, before and after a fix.

The harness profiles a few steps after the timed blocks and leaves a Chrome trace in the run's folder (run.py turns
what it recorded into a TraceResult with a ``file`` or an ``error``); ``analyze`` runs the trace analyzer on the file
and keeps its verdict, evidence and the metrics worth comparing. A failure at any stage is a TraceResult with an
``error``, never an exception: profiling is extra information and must not fail the timing.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

# The metrics shown and exported: the GPU's occupancy and step time, and the one each kind of fix should move.
KEY_METRICS = (
    "gpu_busy_pct", "step_cpu_us_mean", "step_gpu_span_us_mean", "host_syncs_per_step", "dtoh_per_step",
    "idle_data_wait_pct", "h2d_pct_of_gpu_busy", "kernels_per_step", "peak_memory_pct", "fp32_matmul_off_tc_pct",
)
# The metric a rule's fix is expected to move, shown next to GPU busy in the text report.
RULE_METRIC = {
    "TL101": "host_syncs_per_step", "TL102": "dtoh_per_step", "TL103": "host_syncs_per_step",
    "TL104": "host_syncs_per_step", "TL105": "host_syncs_per_step", "TL106": "host_syncs_per_step",
    "TL201": "idle_data_wait_pct", "TL202": "h2d_pct_of_gpu_busy", "TL203": "h2d_pct_of_gpu_busy",
    "TL301": "kernels_per_step", "TL302": "peak_memory_pct", "TL401": "fp32_matmul_off_tc_pct",
    "TL501": "kernels_per_step", "tf32": "fp32_matmul_off_tc_pct", "bf16": "fp32_matmul_off_tc_pct",
}
_LABELS = {
    "gpu_busy_pct": ("GPU busy", "%"), "host_syncs_per_step": ("host syncs/step", ""),
    "dtoh_per_step": ("DtoH copies/step", ""), "idle_data_wait_pct": ("idle waiting for data", "%"),
    "h2d_pct_of_gpu_busy": ("HtoD copies", "% of busy"), "kernels_per_step": ("kernels/step", ""),
    "peak_memory_pct": ("peak memory", "%"), "fp32_matmul_off_tc_pct": ("fp32 matmul off Tensor Cores", "%"),
}


@dataclass(frozen=True, slots=True)
class TraceResult:
    """One run's profiled steps: the trace ``file`` and, once analyzed, its verdict; or the ``error``."""

    file: str | None = None
    verdict: str | None = None  # the analyzer's kind: input-bound | cpu-bound | gpu-bound | unknown
    evidence: str = ""  # the analyzer's one-line verdict ("unknown: no GPU activity ...")
    metrics: dict = field(default_factory=dict, hash=False, compare=False)
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict is not None and not self.error

    def summary(self, metric: str | None = None) -> str:
        """``input-bound (GPU busy 45%)``, ``unknown: no GPU activity ...`` or ``failed (reason)``."""
        return summary_of(self.to_dict(), metric)

    def to_dict(self) -> dict:
        if not self.ok:
            return {"status": "failed", "reason": self.error or "not analyzed", "file": self.file}
        return {"status": "ok", "verdict": self.verdict, "evidence": self.evidence, "file": self.file,
                "metrics": {k: self.metrics.get(k) for k in KEY_METRICS}}


def summary_of(doc: dict, metric: str | None = None) -> str:
    """``TraceResult.summary`` from its ``to_dict()`` form (what a report record holds); ``metric``, shown beside
    GPU busy, is one of KEY_METRICS."""
    if doc["status"] != "ok":
        return f"failed ({doc['reason']})"
    if doc["verdict"] == "unknown":  # its metrics are empty or meaningless; the evidence says why
        return doc["evidence"] or doc["verdict"]
    shown = [_show(k, doc["metrics"].get(k)) for k in dict.fromkeys(("gpu_busy_pct", metric)) if k]
    shown = [s for s in shown if s]
    return f"{doc['verdict']} ({'; '.join(shown)})" if shown else doc["verdict"]


def _show(key: str, value) -> str:
    if value is None:
        return ""
    name, unit = _LABELS.get(key, (key, ""))
    if isinstance(value, float):
        number = f"{value:.0f}" if abs(value) >= 10 else f"{value:.3g}"
    else:
        number = str(value)
    return f"{name} {number}{unit if unit.startswith('%') else (' ' + unit if unit else '')}"


def analyze(result: TraceResult | None) -> TraceResult | None:
    """Run the trace analyzer on ``result.file``; the verdict and metrics on success, an ``error`` otherwise."""
    if result is None or result.error or not result.file:
        return result
    from tracelint.trace import analyze_trace  # imported here: verify without --trace never loads the analyzer

    try:
        report = analyze_trace(result.file)
        kind = report.verdict.split(":", 1)[0].strip()
        return replace(result, verdict=kind, evidence=report.evidence, metrics=dict(report.metrics))
    except Exception as exc:  # a trace the analyzer cannot read is one line in the report, not a crash
        text = str(exc).strip().splitlines()
        return replace(result, error=f"analyzing the trace: {text[0] if text else type(exc).__name__}")


def metric_for(rule: str | None) -> str | None:
    return RULE_METRIC.get(rule or "")
