"""``tracelint run --verify``: measure the fixes of the merged findings that cost at least ``min_pct`` percent of
the step, with ``tracelint verify``'s harness and statistics, and add each measurement to its finding (its
``verification`` detail, the same object ``tracelint verify`` writes): source line, measured cost, measured fix.

Only a script run directly can be verified (verify runs it alone, from its folder, with its arguments), and only
its own findings (the fixes are applied to patched copies of it).
"""
from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tracelint.engine import Finding, RunResult
from tracelint.engine.finding import VERIFICATION
from tracelint.run.launch import Execution
from tracelint.verify import RunSettings, Verification
from tracelint.verify.measure import measure, probe, unmeasured_dict, verification_dict
from tracelint.verify.variants import plan


def candidates(findings: list[Finding], script: Path, min_pct: float, cwd: Path) -> list[Finding]:
    """The merged findings (a lint and a trace evidence) of ``script`` whose measured cost is at least ``min_pct``
    percent of the step."""
    target = script.resolve()
    out = []
    for f in findings:
        evidence = f.evidence
        if evidence is None or evidence.source is None or evidence.trace is None or evidence.cost_pct is None:
            continue
        path = Path(f.path)
        if evidence.cost_pct >= min_pct and (path if path.is_absolute() else cwd / path).resolve() == target:
            out.append(f)
    return out


def verify_measured(result: RunResult, execution: Execution, settings: RunSettings, min_pct: float, *,
                    progress: Callable[[str], None] | None = None, cwd: Path | None = None) -> None:
    """Verify the candidates of ``result`` in place: their ``verification`` detail, and ``result.run["verify"]``
    (what was selected and why, the baseline, or why nothing was measured). Raises tracelint.verify's
    EnvironmentProblem when the device is missing."""
    cwd = (cwd or Path.cwd()).resolve()
    script = execution.target.script
    record: dict = {"min_pct": min_pct, "device_type": settings.device, "selected": [], "note": None}
    result.run["verify"] = record

    def note(text: str) -> None:
        record["note"] = text
        result.run["summary"].append(f"  verify: {text}")

    if execution.target.kind != "script" or script is None:
        return note("--verify measures a script run directly (tracelint run train.py), not -m or torchrun")
    chosen = candidates(result.findings, script, min_pct, cwd)
    record["selected"] = [f"{f.code}:{f.location.line}" for f in chosen]
    if not chosen:
        return note(f"nothing to measure: no finding of {script} costs {min_pct:g} % of the step or more in the "
                    "trace")
    device, torch_version = probe(settings.device)
    wanted = {(f.code, f.location.line) for f in chosen}
    work = Path(tempfile.mkdtemp(prefix="tracelint-run-verify-"))
    try:
        planned = plan(script.resolve(), work / "lint", precision=[])
        variants = [v for v in planned.variants if v.finding is not None and _key(v.finding) in wanted]
        unmeasured = [u for u in planned.unmeasured if _key(u.finding) in wanted]
        baseline_runs, rows = measure(script.resolve(), variants, list(execution.target.argv), settings,
                                      work / "runs", progress=progress) if variants else ((), ())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    verification = Verification(str(script), settings, device, torch_version, baseline_runs, rows,
                                tuple(v.finding for v in variants), planned.errors, (), tuple(unmeasured))
    measured = {_key(row.variant.finding): verification_dict(verification, row) for row in rows}
    measured.update({_key(u.finding): unmeasured_dict(verification, u) for u in unmeasured})
    baseline = verification.baseline
    record.update(device=device, torch=torch_version,
                  baseline_ms=round(baseline.pooled.median, 4) if baseline else None,
                  measured=len(rows), not_measured=len(unmeasured))
    base = f", baseline {record['baseline_ms']:.2f} ms/step" if baseline else ""
    note(f"{len(rows)} of {len(chosen)} finding(s) costing {min_pct:g} % of the step or more measured on {device}"
         f"{base}" + (f"; {len(unmeasured)} without a fix or rewrite to measure" if unmeasured else ""))
    result.findings = [replace(f, details=(*f.details, (VERIFICATION, measured[_key(f)])))
                       if f in chosen and _key(f) in measured else f for f in result.findings]


def _key(finding: Finding) -> tuple[str, int]:
    return finding.code, finding.location.line
