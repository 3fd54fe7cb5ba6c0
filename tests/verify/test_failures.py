"""A variant that raises, hangs or diverges is `failed`, with the reason and the tail of its stderr, not timed."""
from __future__ import annotations

import pytest

from tests.verify.conftest import CPU, SCRIPTS
from tracelint.engine.stats import t975
from tracelint.verify.harness_control import RunOutcome, RunSettings, run_once
from tracelint.verify.stats import CONFIRMED, FAILED, NO_EFFECT, SLOWER, SMALL, judge, paired_interval, percent
from tracelint.verify.variants import plan

BASELINE = (10.0, 10.2, 10.1)  # the baseline blocks a variant's blocks are paired with, round for round


def pinned_variant(tmp_path):
    """The train_cpu.py variant with pin_memory=True: the switch its VERIFY_TEST_MODE failures hang on."""
    (variant,) = [v for v in plan(SCRIPTS / "train_cpu.py", tmp_path / "lint", precision=[]).variants
                  if v.key.startswith("TL202")]
    code = tmp_path / "code" / "train_cpu.py"
    code.parent.mkdir()
    code.write_text(variant.text)
    return code


@pytest.mark.slow
@pytest.mark.parametrize("mode, reason", [
    ("raise", "exit code 1"),
    ("nan", "diverged: the loss became nan"),
])
def test_failing_variant_is_failed_with_its_stderr(tmp_path, monkeypatch, mode, reason):
    monkeypatch.setenv("VERIFY_TEST_MODE", mode)
    code = pinned_variant(tmp_path)
    outcome = run_once(code, SCRIPTS / "train_cpu.py", [], CPU, tmp_path / "run")
    verdict = judge(BASELINE, outcome, baseline_loss_finite=True)
    assert verdict.status == FAILED and reason in verdict.reason
    assert verdict.fixed is None and verdict.speedup is None
    if mode == "raise":
        assert "RuntimeError: the fixed loader broke this script" in outcome.stderr_tail
        assert str(code) in outcome.stderr_tail  # tracebacks name the patched copy that ran


@pytest.mark.slow
def test_hanging_variant_is_failed_by_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv("VERIFY_TEST_MODE", "hang")
    code = pinned_variant(tmp_path)
    settings = RunSettings(warmup=2, steps=3, blocks=3, device="cpu", timeout_s=25)
    outcome = run_once(code, SCRIPTS / "train_cpu.py", [], settings, tmp_path / "run")
    verdict = judge(BASELINE, outcome, baseline_loss_finite=True)
    assert verdict.status == FAILED and "timed out after 25 s" in verdict.reason  # how soon: bench/check_timing.py


@pytest.mark.slow
def test_script_arguments_reach_the_script_and_cwd_is_its_folder(tmp_path):
    # train_cpu.py reads its step limit from argv[1]: 4 steps end the run early, so the argument arrived.
    outcome = run_once(SCRIPTS / "train_cpu.py", SCRIPTS / "train_cpu.py", ["4"], CPU, tmp_path)
    assert not outcome.ok and "ended after 4 steps" in outcome.reason


def ok(*blocks: float) -> RunOutcome:
    return RunOutcome(True, blocks, (1.0,))


def test_status_follows_the_interval_of_the_paired_ratios():
    assert judge(BASELINE, ok(5.0, 5.1, 5.05), True).status == CONFIRMED
    assert judge(BASELINE, ok(10.05, 10.1, 10.0), True).status == NO_EFFECT
    assert judge(BASELINE, ok(12.0, 12.1, 12.2), True).status == SLOWER
    # Rounds that disagree widely cannot confirm a 5 % gain: the interval holds 1.
    wide = judge(BASELINE, ok(8.0, 11.4, 9.5), True)
    assert wide.status == NO_EFFECT and wide.interval.low < 1 < wide.interval.high
    # The same gain, measured consistently, is confirmed.
    assert judge(BASELINE, ok(9.6, 9.7, 9.65), True).status == CONFIRMED
    # A consistent gain below the minimum effect (2 %) is not worth a claim: small (tests/verify/test_decision.py).
    assert judge((10.0,) * 5, ok(9.95, 9.96, 9.95, 9.96, 9.95), True).status == SMALL
    assert judge(BASELINE, RunOutcome(True, (5.0, 5.0, 5.0), (float("inf"),)), True).status == FAILED
    assert judge(BASELINE, RunOutcome(True, (5.0, 5.0, 5.0), (float("inf"),)), False).status == CONFIRMED
    assert judge(BASELINE, ok(5.0), True).status == FAILED  # one round: no interval


def test_the_pairing_cancels_drift_that_unpaired_blocks_would_call_noise():
    # The machine slows down 20 % over the session; the variant is 5 % faster in every round.
    drift = [10.0 * (1 + 0.2 * i / 9) for i in range(10)]
    fixed = [b / 1.05 for b in drift]
    verdict = judge(drift, ok(*fixed), True)
    assert verdict.status == CONFIRMED
    assert verdict.speedup == pytest.approx(1.05) and verdict.interval.half_width < 1e-9
    assert verdict.baseline.rel_spread > 0.15  # what the old range-based noise rule would have called the noise


def test_interval_matches_a_hand_computed_t_interval():
    import math
    import statistics

    base, fixed = [10.0, 10.4, 9.8, 10.1, 10.3], [9.0, 9.5, 9.0, 9.1, 9.2]
    logs = [math.log(b / f) for b, f in zip(base, fixed, strict=True)]
    half = 2.776 * statistics.stdev(logs) / math.sqrt(5)
    iv = paired_interval(base, fixed)
    assert iv.rounds == 5
    assert iv.estimate == pytest.approx(math.exp(statistics.fmean(logs)))
    assert (iv.low, iv.high) == pytest.approx((math.exp(statistics.fmean(logs) - half),
                                               math.exp(statistics.fmean(logs) + half)))
    assert paired_interval([10.0], [9.0]) is None


def test_t_quantiles_and_the_no_effect_phrase():
    assert t975(1) == 12.706 and t975(30) == 2.042 and t975(10**6) == pytest.approx(1.96, abs=1e-3)
    assert 2.021 > t975(50) > 2.000
    verdict = judge(BASELINE, ok(10.1, 10.0, 10.3), True)
    assert verdict.status == NO_EFFECT
    bound = max(verdict.interval.high - 1, 1 - verdict.interval.low)
    assert verdict.summary() == f"no effect larger than ±{percent(bound)} %"
    assert float(percent(bound)) >= bound * 100  # rounded up, never understated
    assert percent(0.0301) == "3.1" and percent(0.03) == "3.0"
