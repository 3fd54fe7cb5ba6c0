"""A variant that raises, hangs or diverges is `failed`, with the reason and the tail of its stderr, not timed."""
from __future__ import annotations

import pytest

from tests.verify.conftest import CPU, SCRIPTS
from tracelint.verify.run import RunOutcome, RunSettings, run_once
from tracelint.verify.stats import CONFIRMED, FAILED, NO_EFFECT, SLOWER, Baseline, Timing, judge
from tracelint.verify.variants import plan

BASELINE = Baseline((Timing((10.0, 10.2, 10.1)), Timing((10.1, 10.0, 10.2))))


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
    assert verdict.status == FAILED and "timed out after 25 s" in verdict.reason
    assert outcome.wall_s < 60


@pytest.mark.slow
def test_script_arguments_reach_the_script_and_cwd_is_its_folder(tmp_path):
    # train_cpu.py reads its step limit from argv[1]: 4 steps end the run early, so the argument arrived.
    outcome = run_once(SCRIPTS / "train_cpu.py", SCRIPTS / "train_cpu.py", ["4"], CPU, tmp_path)
    assert not outcome.ok and "ended after 4 steps" in outcome.reason


def ok(*blocks: float) -> RunOutcome:
    return RunOutcome(True, blocks, (1.0,))


def test_status_rule_against_the_noise():
    assert judge(BASELINE, ok(5.0, 5.1, 5.05), True).status == CONFIRMED
    assert judge(BASELINE, ok(10.05, 10.1, 10.0), True).status == NO_EFFECT
    assert judge(BASELINE, ok(12.0, 12.1, 12.2), True).status == SLOWER
    # A variant whose own blocks spread widely cannot confirm a small gain.
    assert judge(BASELINE, ok(8.0, 9.5, 11.0), True).status == NO_EFFECT
    # Two baseline runs that disagree widen the noise for everyone.
    drifting = Baseline((Timing((10.0, 10.0, 10.0)), Timing((12.0, 12.0, 12.0))))
    assert drifting.noise == pytest.approx(2 / 11)
    assert judge(drifting, ok(10.0, 10.0, 10.0), True).status == NO_EFFECT
    assert judge(BASELINE, RunOutcome(True, (5.0, 5.0), (float("inf"),)), True).status == FAILED
    assert judge(BASELINE, RunOutcome(True, (5.0, 5.0), (float("inf"),)), False).status == CONFIRMED
