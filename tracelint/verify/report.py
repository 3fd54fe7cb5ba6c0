"""The verify report: a table per target for people, and the same data in the JSON and SARIF reports (each
measured finding carries ``details.verification``; the whole measurement rides along under ``verify``)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from tabulate import tabulate

from tracelint.engine import Finding, RunResult
from tracelint.render._common import dumps, report_path
from tracelint.verify.measure import Row, Verification
from tracelint.verify.stats import CONFIRMED, FAILED, MIN_EFFECT, NO_EFFECT, SLOWER, Timing
from tracelint.verify.tracing import TraceResult, metric_for

TITLE_WIDTH = 60
LEGEND = (
    f"{CONFIRMED}: faster by more than the noise · {NO_EFFECT}: within the noise, the fix does not pay on this "
    f"script (a useful answer) · {SLOWER}: slower by more than the noise · {FAILED}: crashed, timed out, found no "
    f"steps or diverged (not timed). Noise: the largest block spread of the baseline runs and the variant, the gap "
    f"between the two baseline runs (first and last), and at least {MIN_EFFECT:.0%}."
)


# --- plain data (the JSON and SARIF payload) ----------------------------------------------------------------------

def _ms(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 4)


def _range(t: Timing | None) -> list[float | None] | None:
    return [_ms(t.low), _ms(t.high)] if t else None


def _trace_dict(trace: TraceResult | None, ran: bool) -> dict:
    if trace is None:
        return {"status": "failed", "reason": "not profiled: the run did not complete" if ran else "not run"}
    return trace.to_dict()


def verification_dict(v: Verification, row: Row) -> dict:
    """The ``verification`` object of one measured variant (with ``trace`` under --trace)."""
    verdict, s = row.verdict, v.settings
    speedup = verdict.speedup
    doc = {
        "status": verdict.status,
        "baseline_ms": _ms(verdict.baseline.median) if verdict.baseline else None,
        "fixed_ms": _ms(verdict.fixed.median) if verdict.fixed else None,
        "speedup": round(speedup, 4) if speedup is not None and math.isfinite(speedup) else None,
        "spread": {"baseline": _range(verdict.baseline), "fixed": _range(verdict.fixed)},
        "noise_pct": round(verdict.noise * 100, 2) if verdict.noise is not None else None,
        "fixed_blocks_ms": [_ms(b) for b in verdict.fixed.block_ms] if verdict.fixed else [],
        "blocks": s.blocks, "steps": s.steps, "warmup": s.warmup,
        "device": v.device, "torch": v.torch, "device_type": s.device,
        "fix": row.variant.title, "safe": row.variant.safe, "precision": row.variant.precision,
        "follow_ups": list(row.variant.follow_ups),
        "reason": verdict.reason or None,
        "stderr_tail": row.outcome.stderr_tail if row.outcome and verdict.status == FAILED else None,
    }
    if s.trace:
        doc["trace"] = _trace_dict(row.outcome.trace if row.outcome else None, row.outcome is not None)
    return doc


def target_dict(v: Verification) -> dict:
    baseline = v.baseline
    failed = v.baseline_failed
    doc = {
        "target": v.target, "device": v.device, "torch": v.torch, "device_type": v.settings.device,
        "timing_claims": v.settings.device == "cuda",
        "settings": {"warmup": v.settings.warmup, "steps": v.settings.steps, "blocks": v.settings.blocks,
                     "timeout_s": v.settings.timeout_s},
        "baseline": {
            "status": "ok" if baseline else (FAILED if failed else "not-run"),
            "median_ms": _ms(baseline.pooled.median) if baseline else None,
            "spread": _range(baseline.pooled) if baseline else None,
            "runs_ms": [[_ms(b) for b in o.block_ms] for o in v.baseline_runs],
            "noise_pct": round(baseline.noise * 100, 2) if baseline else None,
            "reason": failed.reason if failed else None,
            "stderr_tail": failed.stderr_tail if failed else None,
        },
        "variants": [{"key": row.variant.key, "rule": _rule(row), "location": _location(row),
                      "verification": verification_dict(v, row)} for row in v.rows],
        "notes": list(v.notes),
    }
    if v.settings.trace:
        doc["baseline"]["trace"] = _trace_dict(v.baseline_trace, bool(v.baseline_runs))
    return doc


def run_result(verifications: Sequence[Verification]) -> RunResult:
    """The lint findings with each measured one carrying ``details.verification`` (for the engine renderers)."""
    result = RunResult(files_checked=sum(1 for v in verifications if v.findings or v.rows))
    for v in verifications:
        by_finding = {id(row.variant.finding): row for row in v.rows if row.variant.finding is not None}
        for finding in v.findings:
            row = by_finding.get(id(finding))
            if row is not None:
                finding = replace(finding, details=(*finding.details, ("verification", verification_dict(v, row))))
            result.findings.append(finding)
        result.errors.extend(v.errors)
    result.findings.sort(key=Finding.sort_key)
    return result


def render_json(verifications: Sequence[Verification]) -> str:
    from tracelint.render import json as json_format

    doc = json_format.document(run_result(verifications))
    doc["verify"] = [target_dict(v) for v in verifications]
    return dumps(doc) + "\n"


def render_sarif(verifications: Sequence[Verification]) -> str:
    from tracelint.render import sarif

    result = run_result(verifications)
    doc = sarif.document(result)
    run = doc["runs"][0]
    run.setdefault("properties", {})["verify"] = [target_dict(v) for v in verifications]
    return dumps(doc) + "\n"


# --- text ---------------------------------------------------------------------------------------------------------

def _rule(row: Row) -> str:
    variant = row.variant
    if variant.finding is not None:
        return variant.finding.code
    if variant.precision:
        return variant.precision.upper() if variant.precision == "tf32" else variant.precision
    return variant.key


def _location(row: Row) -> str | None:
    finding = row.variant.finding
    if finding is None or finding.source is None:
        return None
    return f"{report_path(finding.path)}:{finding.source.line}"


def _cell(t: Timing | None) -> str:
    return f"{t.median:.2f} ({t.low:.2f}–{t.high:.2f})" if t else "—"


def _short(text: str, width: int = TITLE_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render_text(verifications: Sequence[Verification]) -> str:
    return "\n\n".join(_text_one(v) for v in verifications) + "\n"


def _text_one(v: Verification) -> str:
    s = v.settings
    lines = [f"tracelint verify {v.target}",
             f"{v.device} · torch {v.torch} · per run: {s.warmup} warm-up steps, then {s.blocks} blocks × "
             f"{s.steps} steps, one device synchronize per block"]
    if s.device != "cuda":
        lines.append("note: timings on the CPU are not claims about a GPU (--device cpu is for testing the harness)")
    baseline, failed = v.baseline, v.baseline_failed
    if baseline:
        runs = " / ".join(f"{r.median:.2f}" for r in baseline.runs)
        lines.append(f"baseline: {_cell(baseline.pooled)} ms/step; runs (first / last): {runs} ms; "
                     f"noise ±{baseline.noise:.1%}")
    elif failed:
        lines.append(f"baseline failed: {failed.reason}")
        lines.extend(_indented(failed.stderr_tail))
    lines.extend(f"note: {n}" for n in v.notes)
    if v.rows:
        table = []
        for row in v.rows:
            verdict = row.verdict
            speedup = verdict.speedup
            table.append((
                _location(row) or "—", _rule(row), _short(row.variant.label), _cell(verdict.baseline),
                _cell(verdict.fixed), f"{speedup:.2f}×" if speedup else "—", verdict.status,
            ))
        lines += ["", tabulate(table, headers=["location", "rule", "fix", "baseline ms", "fixed ms", "speedup",
                                               "status"], tablefmt="simple", disable_numparse=True)]
        extra = [row for row in v.rows if row.variant.follow_ups]
        for row in extra:
            lines.append(f"  {row.variant.key} also applies the fixes it exposes: {', '.join(row.variant.follow_ups)}")
        failures = [row for row in v.rows if row.verdict.status == FAILED and row.outcome is not None]
        for row in failures:
            lines += ["", f"{row.variant.key} failed: {row.verdict.reason}", *_indented(row.outcome.stderr_tail)]
        if s.trace:
            lines += ["", *_trace_lines(v)]
        lines += ["", LEGEND]
    return "\n".join(lines)


def _trace_lines(v: Verification) -> list[str]:
    """--trace: the analyzer's verdict on the profiled steps, baseline → each variant."""
    lines = ["trace analysis (a few steps profiled after the timed blocks):"]
    before = v.baseline_trace
    for row in v.rows:
        metric = metric_for(_rule(row))
        after = row.outcome.trace if row.outcome else None
        left = before.summary(metric) if before else "failed (not profiled)"
        right = after.summary(metric) if after else "failed (not profiled)"
        lines.append(f"  {row.variant.key}: trace: {left} → {right}")
    return lines


def _indented(text: str) -> list[str]:
    return [f"  | {line}" for line in text.splitlines()] if text else []
