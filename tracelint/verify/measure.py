"""One verification: run the baseline (first and last), then each variant, each in its own subprocess under the
same harness settings, and judge every variant against the baseline; and its result as the engine's RunResult
(what every format of tracelint.render shows). Never imports torch in this process."""
from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tracelint.engine import Finding, InputError, RunResult
from tracelint.render._common import report_path
from tracelint.verify.run import RunOutcome, RunSettings, run_once
from tracelint.verify.stats import FAILED, Baseline, Timing, Verdict, baseline_of, judge
from tracelint.verify.tracing import TraceResult, analyze
from tracelint.verify.variants import Variant

Progress = Callable[[str], None]


class EnvironmentProblem(Exception):
    """torch or the device is missing: one line for the user, exit code 2."""


@dataclass(frozen=True, slots=True)
class Row:
    variant: Variant
    verdict: Verdict
    outcome: RunOutcome | None  # None when it was not run (the baseline failed)


@dataclass(frozen=True, slots=True)
class Verification:
    """Everything one ``tracelint verify`` target produced: the baseline runs, one row per variant, and the lint
    findings the variants came from."""

    target: str
    settings: RunSettings
    device: str
    torch: str
    baseline_runs: tuple[RunOutcome, ...]
    rows: tuple[Row, ...]
    findings: tuple[Finding, ...] = ()
    errors: tuple[InputError, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def baseline(self) -> Baseline | None:
        return baseline_of(self.baseline_runs)

    @property
    def baseline_trace(self) -> TraceResult | None:
        """--trace: the profiled steps of the first baseline run."""
        return self.baseline_runs[0].trace if self.baseline_runs else None

    @property
    def baseline_failed(self) -> RunOutcome | None:
        """The failed first baseline run, when the baseline could not be measured at all."""
        return None if self.baseline else (self.baseline_runs[0] if self.baseline_runs else None)


def probe(device: str) -> tuple[str, str]:
    """(device name, torch version) of the interpreter the runs will use; EnvironmentProblem when it cannot run
    them. Probed in a subprocess: the parent never imports torch nor holds a CUDA context while the runs work."""
    if importlib.util.find_spec("torch") is None:
        raise EnvironmentProblem("tracelint verify: needs torch with a CUDA device (torch not installed)")
    code = (
        "import json, platform, torch\n"
        "cuda = torch.cuda.is_available()\n"
        "name = (torch.cuda.get_device_name() if cuda\n"
        "        else 'CPU (' + (platform.processor() or platform.machine()) + ')')\n"
        "print(json.dumps({'torch': torch.__version__, 'cuda': cuda, 'device': name}))\n"
    )
    if device == "cpu":
        code = code.replace("torch.cuda.is_available()", "False")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
        facts = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        raise EnvironmentProblem("tracelint verify: needs torch with a CUDA device (importing torch failed)") from None
    if device == "cuda" and not facts["cuda"]:
        raise EnvironmentProblem(
            f"tracelint verify: needs torch with a CUDA device (torch {facts['torch']} sees no CUDA device; "
            "--device cpu runs on the CPU for testing)")
    return facts["device"], facts["torch"]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:40]


def measure(original: Path, variants: Sequence[Variant], argv: Sequence[str], settings: RunSettings, workdir: Path,
            *, baseline_code: Path | None = None, progress: Progress | None = None) -> tuple[tuple[RunOutcome, ...],
                                                                                          tuple[Row, ...]]:
    """Baseline (``baseline_code``, default the original file itself), the variants, the baseline again.
    Variants with the same text and precision run once. Returns (baseline runs, rows)."""
    say = progress or (lambda _m: None)
    baseline_code = baseline_code or original
    total = len(variants) + 2

    def run(label: str, code: Path, precision: str | None, index: int, name: str, trace: bool) -> RunOutcome:
        started = time.perf_counter()
        say(f"[{index}/{total}] {label} ...")
        outcome = run_once(code, original, list(argv), settings, workdir / name, precision=precision, trace=trace)
        result = statistics_line(outcome) if outcome.ok else f"failed: {outcome.reason}"
        if outcome.trace is not None:
            outcome = replace(outcome, trace=analyze(outcome.trace))
            result += f"; trace: {outcome.trace.summary()}"
        say(f"[{index}/{total}] {label}: {result} ({time.perf_counter() - started:.1f} s)")
        return outcome

    first = run("baseline", baseline_code, None, 1, "baseline-1", settings.trace)
    if not first.ok:
        rows = tuple(Row(v, Verdict(FAILED, f"not run: the baseline failed ({first.reason})"), None) for v in variants)
        return (first,), rows
    outcomes: dict[tuple[str, str | None], RunOutcome] = {}
    ran: list[tuple[Variant, RunOutcome]] = []
    for i, variant in enumerate(variants, start=2):
        key = (variant.text, variant.precision)
        if key not in outcomes:
            name = f"{i:02d}-{_slug(variant.key)}"
            code = baseline_code
            if variant.text != _read(baseline_code):
                code = workdir / name / "code" / original.name
                code.parent.mkdir(parents=True, exist_ok=True)
                code.write_text(variant.text, encoding="utf-8")
            outcomes[key] = run(variant.key, code, variant.precision, i, name, settings.trace)
        else:
            say(f"[{i}/{total}] {variant.key}: same code as an earlier variant, not run again")
        ran.append((variant, outcomes[key]))
    last = run("baseline (again)", baseline_code, None, total, "baseline-2", False)
    baseline_runs = (first, last)
    baseline = baseline_of(baseline_runs)
    assert baseline is not None
    loss_finite = first.final_loss_finite
    rows = tuple(Row(v, judge(baseline, o, loss_finite), o) for v, o in ran)
    return baseline_runs, rows


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def statistics_line(outcome: RunOutcome) -> str:
    t = Timing(outcome.block_ms)
    return f"{t.median:.2f} ms/step ({t.low:.2f}-{t.high:.2f})"


# --- the result as data: RunResult findings carry ``details.verification``; ``verifications`` the whole targets ---

def run_result(verifications: Sequence[Verification]) -> RunResult:
    """The lint findings, each measured one carrying ``details.verification``, and one ``target_dict`` record per
    target in ``verifications``: what ``tracelint.render.render(result, fmt)`` turns into any report format."""
    result = RunResult(files_checked=sum(1 for v in verifications if v.findings or v.rows),
                       verifications=[target_dict(v) for v in verifications])
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


def target_dict(v: Verification) -> dict:
    """One target as plain data: its settings, the baseline runs and one entry per measured variant."""
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


def _rule(row: Row) -> str:
    """What a row measures, as its report's ``rule`` column: the finding's code, TF32 / bf16, or the variant key."""
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


def _ms(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 4)


def _range(t: Timing | None) -> list[float | None] | None:
    return [_ms(t.low), _ms(t.high)] if t else None


def _trace_dict(trace: TraceResult | None, ran: bool) -> dict:
    if trace is None:
        return {"status": "failed", "reason": "not profiled: the run did not complete" if ran else "not run"}
    return trace.to_dict()
