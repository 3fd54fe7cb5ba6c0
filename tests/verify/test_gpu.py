"""Real-GPU checks of `tracelint verify` on the fixture scenarios (fixtures/scenarios/*.py): the fixes that pay
there are confirmed, and the .item() that costs nothing on a loader-bound step is reported as no-effect.

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
    assert got == "no-effect", v


CHECKS = [check_pinned_memory_fix_confirmed_on_pageable_copies, check_precision_variants_confirmed_on_matmul_fp32,
          check_item_fix_confirmed_on_item_per_step, check_item_fix_no_effect_on_item_no_effect]

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
