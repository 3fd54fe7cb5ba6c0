"""Real-GPU checks of `tracelint verify` on the fixture scenarios (fixtures/scenarios/*.py): the fixes that pay
there are confirmed, and the .item() that costs nothing on a loader-bound step is reported as no-effect; and the
calibration of issue #26 (bench/verify_calibration.py, $TRACELINT_CALIBRATION): every class agrees with its
fresh-process A/B, the loader-bound `.item()` is never confirmed, the append form is within 3 % of its A/B.

Results come from the JSON reports in $TRACELINT_VERIFY_RESULTS (tests/verify/gpu_run.sh writes them with the
command itself, so the GPU time is spent once), or from running the verification here when that is unset.
Runs without pytest too (`python3 tests/verify/test_gpu.py`), for machines that have torch but no pytest.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

try:
    import pytest
except ImportError:  # the plain-python fallback of gpu_run.sh
    pytest = None

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "fixtures" / "scenarios"
# Precision variants are measured where they are asserted; elsewhere they would only cost GPU time.
PRECISION = {"matmul_fp32": "tf32,bf16"}


def scenario_result(name: str) -> dict:
    """The `verify` entry of the JSON report for one scenario."""
    folder = os.environ.get("TRACELINT_VERIFY_RESULTS")
    if folder:
        return json.loads((Path(folder) / f"{name}.json").read_text())["verify"][0]
    from tracelint.verify import RunSettings, verify_script
    from tracelint.verify.measure import target_dict

    modes = PRECISION.get(name, "")
    v = verify_script(SCENARIOS / f"{name}.py", (), RunSettings(timeout_s=240),
                      precision=[m for m in modes.split(",") if m])
    return target_dict(v)


def status(result: dict, rule: str) -> tuple[str, dict]:
    matches = [e["verification"] for e in result["variants"] if e["rule"] == rule]
    assert matches, f"no {rule} variant in {result['target']}: {[e['rule'] for e in result['variants']]}"
    return matches[0]["status"], matches[0]


def check_pinned_memory_fix_confirmed_on_pageable_copies():
    got, v = status(scenario_result("pageable_copies"), "TL202")
    assert got == "confirmed", v


def check_precision_variants_confirmed_on_matmul_fp32():
    result = scenario_result("matmul_fp32")
    for rule in ("TF32", "bf16"):
        got, v = status(result, rule)
        assert got == "confirmed" and v["speedup"] > 1.5, (rule, v)


def check_item_fix_confirmed_on_item_per_step():
    got, v = status(scenario_result("item_per_step"), "TL101")
    assert got == "confirmed", v


def check_item_fix_no_effect_on_item_no_effect():
    got, v = status(scenario_result("item_no_effect"), "TL101")
    assert got in ("no-effect", "small"), v  # never confirmed (issue #26)


_CALIBRATION: dict = {}


def calibration() -> dict:
    """bench/verify_calibration.py's calibration.json: from $TRACELINT_CALIBRATION (a folder of an earlier run),
    else from a run here (about 9 minutes)."""
    if not _CALIBRATION:
        folder = os.environ.get("TRACELINT_CALIBRATION")
        if not folder:
            import subprocess
            import tempfile

            folder = tempfile.mkdtemp(prefix="tracelint-calibration-")
            subprocess.run([sys.executable, str(REPO / "bench" / "verify_calibration.py"), "--out", folder],
                           check=True, cwd=REPO)
        _CALIBRATION.update(json.loads((Path(folder) / "calibration.json").read_text()))
    return _CALIBRATION


def calibration_row(prefix: str) -> dict:
    rows = [r for r in calibration()["rows"] if r["class"].startswith(prefix)]
    assert rows, f"no calibration row {prefix!r}"
    return rows[0]


def check_calibration_every_class_agrees_with_its_fresh_process_ab():
    rows = calibration()["rows"]
    assert len(rows) >= 10
    assert all(r["agree"] for r in rows), [(r["class"], r["agreement"]) for r in rows if not r["agree"]]


def check_calibration_loader_bound_item_is_never_confirmed():
    row = calibration_row("TL101 `total += loss.item()`")
    assert row["verify"]["status"] in ("no-effect", "small"), row["verify"]


def check_calibration_append_within_3_percent_of_its_ab():
    row = calibration_row("TL101 `losses.append(loss.item())`")
    assert abs(row["verify"]["speedup"] / row["ab"]["speedup"] - 1) <= 0.03, (row["verify"], row["ab"])


CHECKS = [check_pinned_memory_fix_confirmed_on_pageable_copies, check_precision_variants_confirmed_on_matmul_fp32,
          check_item_fix_confirmed_on_item_per_step, check_item_fix_no_effect_on_item_no_effect,
          check_calibration_every_class_agrees_with_its_fresh_process_ab,
          check_calibration_loader_bound_item_is_never_confirmed, check_calibration_append_within_3_percent_of_its_ab]

if pytest is not None:
    for _check in CHECKS:
        globals()["test_" + _check.__name__[len("check_"):]] = pytest.mark.gpu(_check)

if __name__ == "__main__":
    failed = 0
    for check in CHECKS:
        try:
            check()
            print(f"PASS {check.__name__}")
        except Exception as exc:  # report every check, not only the first failure
            failed += 1
            print(f"FAIL {check.__name__}: {type(exc).__name__}: {exc}")
    sys.exit(1 if failed else 0)
