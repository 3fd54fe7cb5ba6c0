"""The decision rules of issue #26: `confirmed` only when the interval's lower bound clears the minimum effect
(default 2 %, --min-effect); below it `small` (the interval excludes 1) or `no-effect` (it holds 1); `slower`
when the upper bound clears it the other way. Plain arithmetic on intervals: no run, no GPU."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.verify.conftest import SCRIPTS, report, synthetic
from tracelint.cli.verify import verify_cmd
from tracelint.render._common import measured_message
from tracelint.verify.harness_control import RunOutcome, RunSettings
from tracelint.verify.stats import (
    CONFIRMED,
    MIN_EFFECT,
    NO_EFFECT,
    SLOWER,
    SMALL,
    Interval,
    judge,
    legend,
    status_of,
)


def interval(low: float, high: float, estimate: float | None = None) -> Interval:
    return Interval(estimate or (low * high) ** 0.5, low, high, 10)


@pytest.mark.parametrize("low, high, status", [
    (1.10, 1.20, CONFIRMED),   # the lower bound clears 2 %
    (1.02, 1.05, CONFIRMED),   # exactly at the minimum: clears it
    (1.019, 1.05, SMALL),      # an effect (the interval excludes 1), not shown to be worth 2 %
    (1.001, 1.30, SMALL),      # a wide interval above 1: small, and the interval says how large it may be
    (1.005, 1.015, SMALL),     # a real effect below the minimum
    (0.99, 1.01, NO_EFFECT),   # holds 1
    (0.95, 1.06, NO_EFFECT),   # holds 1: "no effect larger than ±6 %"
    (1.0, 1.03, NO_EFFECT),    # touching 1 is holding it
    (0.985, 0.995, SMALL),     # a small slowdown
    (0.90, 0.97, SLOWER),      # the upper bound clears 2 % the other way (1/1.02 = 0.980)
    (0.95, 0.981, SMALL),      # not quite
])
def test_the_status_of_an_interval(low, high, status):
    assert status_of(interval(low, high)) == status


def test_the_minimum_effect_is_a_setting():
    assert MIN_EFFECT == 0.02
    iv = interval(1.03, 1.08)
    assert status_of(iv, 0.02) == CONFIRMED
    assert status_of(iv, 0.05) == SMALL
    assert status_of(interval(1.005, 1.01), 0.0) == CONFIRMED  # --min-effect 0: any effect that excludes 1
    assert status_of(interval(0.999, 1.01), 0.0) == NO_EFFECT
    with pytest.raises(ValueError):
        RunSettings(min_effect=1.5)


def test_judge_applies_the_minimum_and_the_summary_says_small_with_the_interval():
    base = (10.0, 10.1, 10.0, 10.1, 10.0, 10.1)
    fixed = RunOutcome(True, tuple(b / 1.01 for b in base), (1.0,))  # a steady 1 % gain
    verdict = judge(base, fixed, True)
    assert verdict.status == SMALL
    assert verdict.summary() == "small: 1.01× (1.01–1.01)"
    assert judge(base, fixed, True, min_effect=0.005).status == CONFIRMED


def test_a_loader_bound_item_is_never_confirmed_by_noise_around_one():
    """The issue's case: `total += loss.item()` where the loader sets the pace. Rounds scattered around 1 give
    no-effect; a 0.5 % steady tilt gives small, not confirmed."""
    base = [20.0, 20.4, 19.8, 20.6, 20.1, 19.9, 20.3, 20.2]
    noisy = RunOutcome(True, (20.1, 20.2, 19.9, 20.5, 20.0, 20.1, 20.2, 20.3), (1.0,))
    assert judge(base, noisy, True).status == NO_EFFECT
    tilted = RunOutcome(True, tuple(b / 1.005 for b in base), (1.0,))
    assert judge(base, tilted, True).status == SMALL


def test_the_legend_states_the_minimum_and_every_status():
    text = legend(0.03)
    for word in (CONFIRMED, SMALL, NO_EFFECT, SLOWER, "3 %"):
        assert word in text
    assert "2 %" in legend()


def test_reports_state_the_method_the_minimum_and_small():
    text = report([synthetic()])
    assert "method: 3 pairs of persistent processes, one after the other (both sides restarted and warmed up 2 " \
           "steps, untimed, for each pair; the budget shared between them) alternating B V, V B, ...; the waiting " \
           "one paused (SIGSTOP of its whole process group" in text
    assert "minimum effect 2%" in text
    doc = json.loads(report([synthetic()], "json"))
    settings = doc["verify"][0]["settings"]
    assert settings["min_effect_pct"] == 2 and settings["pause"] == "group" and settings["processes"] == "persistent"
    assert doc["verify"][0]["legend"] == legend(0.02)


def test_a_small_result_reads_small_in_the_annotations():
    from dataclasses import replace

    from tests.verify.conftest import FINDING

    measured = {"status": SMALL, "speedup": 1.012, "ci95": [1.004, 1.02], "baseline_ms": 10.0, "fixed_ms": 9.88}
    finding = replace(FINDING, details=(("verification", measured),))
    assert measured_message(finding, "").endswith("; verify: small, 1.01× (CI 1.00–1.02; 10.00 → 9.88 ms/step)")


def test_the_command_passes_min_effect_select_and_the_method(monkeypatch):
    import tracelint.verify

    seen = {}

    def fake(path, argv, settings, **kwargs):
        seen.update(settings=settings, **kwargs)
        return synthetic()

    monkeypatch.setattr(tracelint.verify, "verify_script", fake)
    args = [str(SCRIPTS / "one_fix.py"), "--min-effect", "5", "--select", "tl101,TL2", "--processes", "fresh",
            "--pause", "workers", "--resume-warmup", "4", "--no-progress", "--format", "json"]
    result = CliRunner().invoke(verify_cmd, args)
    assert result.exit_code == 0, result.output
    s = seen["settings"]
    assert (s.min_effect, s.processes, s.pause, s.resume_warmup) == (0.05, "fresh", "workers", 4)
    assert seen["select"] == ["TL101", "TL2"]
    bad = CliRunner().invoke(verify_cmd, [str(SCRIPTS / "one_fix.py"), "--select", "TL9"])
    assert bad.exit_code == 2 and "matches no rule" in bad.output
