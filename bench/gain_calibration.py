#!/usr/bin/env python3
"""Issue #38's calibration: each trace finding's estimate of what its fix buys (tracelint.trace.estimate) against
the fix measured on the project's GPU fixtures. Not a timed benchmark, and no GPU needed: the measurements are the
fixtures' ground truth (fixtures/traces/manifest.json: the anti-pattern and its fixed twin, each timed without the
profiler in blocks of steps on one H200); the estimate is read from the anti-pattern's trace.

    python bench/gain_calibration.py [--json OUT]

Then the reports of ``tracelint run --verify`` the project recorded (fixtures/run/verified/*.json, made by
fixtures/gpu_issue38_verify.sh): each finding's estimate recomputed from its trace evidence (the trace finding's
details and its trace's metrics, tracelint.trace.estimate.estimate_of) beside the speedup verify measured of its fix
(fresh processes, with its 95 % interval), and whether ordering by estimate is ordering by measured gain.

Per pair: the rule, the measured speedup (median bad / median fixed, and the range the blocks' min/max allow), the
estimate, and whether the estimated gain (speedup - 1) is within ±25 % of the measured one (issue #38's bar), or
both within the measurement's own spread (a fix worth less than the run-to-run noise). The misses are listed with
why.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TRACES = ROOT / "fixtures" / "traces"

# (anti-pattern trace, its fixed twin whose ground truth is the step after the fix, the rule whose fix the twin is)
PAIRS = (
    ("dataloader_main_process", "dataloader_main_process_fixed", "TL201"),
    ("pageable_copies", "pageable_copies_fixed", "TL202"),
    ("item_per_step", "item_per_step_fixed", "TL101"),
    ("item_no_effect", "item_no_effect_fixed", "TL101"),
    ("scalar_test_per_step", "scalar_test_per_step_fixed", "TL103"),
    ("zero_grad_keep", "zero_grad_keep_fixed", "TL301"),
    ("matmul_fp32", "matmul_tf32", "TL401"),
    ("conv_nchw_bf16", "conv_nchw_bf16_fixed", "TL405"),
    ("gpt_eager_bf16_tlprofile", "gpt_compiled", "TL505"),
    ("item_per_step_tlprofile", "item_per_step_fixed", "TL101"),
    ("scalar_test_per_step_tlprofile", "scalar_test_per_step_fixed", "TL103"),
    ("anomaly_mode", "anomaly_mode_fixed", "TL701"),
    ("anomaly_mode_tlprofile", "anomaly_mode_fixed", "TL701"),
    ("launch_blocking", "launch_blocking_fixed", "TL702"),
    ("launch_blocking_tlprofile", "launch_blocking_fixed", "TL702"),
    ("compiled_graph_break", "compiled_graph_break_fixed", "TL503"),
    ("compiled_recompile", "compiled_recompile_fixed", "TL504"),
    ("empty_cache_per_step", "empty_cache_per_step_fixed", "TL305"),
    ("empty_cache_per_step_tlprofile", "empty_cache_per_step_fixed", "TL305"),
)
BAR = 0.25  # the estimated gain within this share of the measured gain
# 2-GPU jobs (fixtures/traces/ddp36 and ddp38, recorded on 2 x H200 with rank 0's ground truth in their
# manifest.json); ddp38's straggler (rank 1 sleeps 30 ms per step) against its balanced twin recorded beside it
JOBS = (
    ("ddp36", "dataparallel", "ddp_default", "TL605"),
    ("ddp36", "ddp_accum", "ddp_accum_no_sync", "TL606"),
    ("ddp36", "fsdp2_accum", "fsdp2_accum_no_sync", "TL606"),
    ("ddp38", "ddp_straggler", "ddp_default", "TL602"),
)


def truth(manifest: dict, name: str) -> dict:
    entry = manifest[name]
    return manifest[entry["ground_truth_from"]]["ground_truth"] if "ground_truth_from" in entry else \
        entry["ground_truth"]


def calibrate() -> list[dict]:
    from tracelint.trace import analyze_trace

    manifest = json.loads((TRACES / "manifest.json").read_text())["traces"]
    return [_row(f"{bad} → {fixed}", code, truth(manifest, bad), truth(manifest, fixed),
                 [f for f in analyze_trace(TRACES / f"{bad}.pt.trace.json.gz").findings if f.code == code])
            for bad, fixed, code in PAIRS]


def jobs() -> list[dict]:
    """The 2-GPU jobs' findings: the largest estimate of the rule's findings (over the ranks) against the job's
    measured step before and after (rank 0's ground truth)."""
    from tracelint.trace.analyze import analyze_paths
    from tracelint.trace.report import Report

    rows = []
    for job, bad, fixed, code in JOBS:
        folder = TRACES / job
        manifest = json.loads((folder / "manifest.json").read_text())["jobs"]
        rows.append(_row(f"{job}/{bad} → {fixed}", code,
                         *(manifest[n]["ranks"]["0"]["ground_truth"] for n in (bad, fixed)),
                         [f for r in analyze_paths([folder / bad]) if isinstance(r, Report) for f in r.findings
                          if f.code == code]))
    return rows


def _row(pair: str, code: str, before: dict, after: dict, found: list) -> dict:
    """One pair's row: the measured speedup (median over median; the range from the blocks' min and max), the
    largest estimate of the rule's findings, and whether it is within the bar."""
    measured = before["median_ms"] / after["median_ms"]
    low, high = before["min_ms"] / after["max_ms"], before["max_ms"] / after["min_ms"]
    est = max((f.estimate for f in found if f.estimate is not None), key=lambda e: e.saved_ms_per_step,
              default=None)
    row = {"pair": pair, "rule": code, "measured": round(measured, 3),
           "measured_range": [round(low, 3), round(high, 3)], "fired": bool(found),
           "estimate": est.as_dict() if est is not None else None}
    if est is None:
        row["verdict"] = "no estimate" if found else "rule silent"
        return row
    gain, want = est.speedup - 1.0, measured - 1.0
    within_noise = low <= 1.0 <= high and low <= est.speedup <= high
    row["gain_error_pct"] = round(100.0 * (gain - want) / want, 1) if want else None
    row["verdict"] = "hit" if (want > 0 and abs(gain - want) <= BAR * want) or within_noise else "miss"
    return row


def verified() -> list[dict]:
    """The ``tracelint run --verify`` reports' findings: estimate (recomputed) against verify's measurement."""
    from tracelint.trace.estimate import estimate_of

    rows = []
    for path in sorted((ROOT / "fixtures" / "run" / "verified").glob("*.json")):
        doc = json.loads(path.read_text())
        metrics = {t["path"]: t["metrics"] for t in doc["traces"]}
        for f in doc["findings"]:
            trace = (f.get("evidence") or {}).get("trace")
            measured = (f.get("details") or {}).get("verification")
            if not trace or not isinstance(measured, dict) or measured.get("speedup") is None:
                continue
            est = estimate_of(trace["code"], trace["details"], metrics.get(trace["path"]) or {})
            low, high = measured["ci95"]
            gain, want = (est.speedup - 1.0 if est else None), measured["speedup"] - 1.0
            hit = est is not None and (abs(gain - want) <= BAR * want or low <= est.speedup <= high)
            rows.append({"report": path.name, "rule": f["code"], "line": f["line"], "measured": measured["speedup"],
                         "ci95": [low, high], "estimate": est.as_dict() if est else None,
                         "verdict": "hit" if hit else "miss" if est else "no estimate"})
    return rows


# `tracelint verify SCRIPT --against FIXED` (pairs of processes) beside the estimate on the `tracelint run` trace of
# the same script (fixtures/traces/run_memory, fixtures/gpu_issue40_run.sh)
AGAINST = (("run_memory/empty_cache_per_step.pt.trace.json.gz", "run_memory/verify_empty_cache.json", "TL305"),)


def against() -> list[dict]:
    from tracelint.trace import analyze_trace

    rows = []
    for trace, report, code in AGAINST:
        (target,) = json.loads((TRACES / report).read_text())["verify"]
        measured = target["variants"][0]["verification"]
        est = max((f.estimate for f in analyze_trace(TRACES / trace).findings if f.code == code and f.estimate),
                  key=lambda e: e.saved_ms_per_step, default=None)
        low, high = measured["ci95"]
        gain, want = (est.speedup - 1.0 if est else None), measured["speedup"] - 1.0
        hit = est is not None and (abs(gain - want) <= BAR * want or low <= est.speedup <= high)
        rows.append({"report": report, "rule": code, "line": None, "measured": measured["speedup"],
                     "ci95": [low, high], "estimate": est.as_dict() if est else None,
                     "verdict": "hit" if hit else "miss" if est else "no estimate"})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the rows as JSON here")
    args = ap.parse_args()
    rows = calibrate() + jobs()
    print(f"{'rule':6} {'pair':58} {'measured':>17} {'estimate':>9} {'gain err':>9}  verdict")
    for r in rows:
        est = r["estimate"]
        speed = f"{est['speedup']:.3f}x" if est and est["speedup"] is not None else "-"
        err = f"{r['gain_error_pct']:+.0f}%" if r.get("gain_error_pct") is not None else "-"
        span = f"{r['measured']:.3f}x [{r['measured_range'][0]:.2f}-{r['measured_range'][1]:.2f}]"
        print(f"{r['rule']:6} {r['pair']:58} {span:>17} {speed:>9} {err:>9}  {r['verdict']}")
    hits = sum(r["verdict"] == "hit" for r in rows)
    judged = sum(r["verdict"] in ("hit", "miss") for r in rows)
    print(f"\n{hits} of {judged} estimates within ±{BAR:.0%} of the measured gain (or both within its noise)")
    runs = verified() + against()
    if runs:
        head = f"{'rule':6} {'verify report':40} {'verify measured (95% CI)':>26}"
        print(f"\n{head} {'estimate':>9}  verdict")
    for r in runs:
        est = f"{r['estimate']['speedup']:.3f}x" if r["estimate"] else "-"
        ci = f"{r['measured']:.3f}x ({r['ci95'][0]:.2f}-{r['ci95'][1]:.2f})"
        where = r["report"] + (f":{r['line']}" if r["line"] is not None else "")
        print(f"{r['rule']:6} {where:40} {ci:>26} {est:>9}  {r['verdict']}")
    for report in sorted({r["report"] for r in runs if r["line"] is not None}):
        mine = [r for r in runs if r["report"] == report and r["estimate"]]
        by_estimate = [r["rule"] for r in sorted(mine, key=lambda r: -r["estimate"]["speedup"])]
        by_measured = [r["rule"] for r in sorted(mine, key=lambda r: -r["measured"])]
        same = "the same" if by_estimate == by_measured else "NOT the same"
        print(f"{report}: order by estimate {by_estimate}, by measured gain {by_measured}: {same}")
    if args.json:
        Path(args.json).write_text(json.dumps({"pairs": rows, "verified": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
