"""From block timings to a verdict: medians, spreads, the run-to-run noise, and the status of a variant.

The noise rule (what "outside the noise" means):
    The baseline runs twice, first and last, so that drift over the session (clocks, temperature, a neighbour on
    the machine) shows up as a difference between its two runs. The noise is the largest of
      - the relative spread (max - min) / median of the block means of each baseline run and of the variant's run,
      - the relative difference between the two baseline runs' medians,
      - a floor of ``MIN_EFFECT`` (1 %): below that a speedup is not worth a claim.
    A variant is **confirmed** when its median step is faster than the baseline's by more than the noise
    (speedup - 1 > noise), **slower** when slower by more than the noise, and **no-effect** otherwise: within the
    noise, a useful answer (the fix does not pay on this script). A run that crashed, timed out, found no steps,
    or diverged (a non-finite loss where the baseline's was finite) is **failed** and not timed.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tracelint.verify.run import RunOutcome

MIN_EFFECT = 0.01

CONFIRMED, NO_EFFECT, SLOWER, FAILED = "confirmed", "no-effect", "slower", "failed"
# What the statuses and the noise mean, in one paragraph under every text report.
LEGEND = (
    f"{CONFIRMED}: faster by more than the noise · {NO_EFFECT}: within the noise, the fix does not pay on this "
    f"script (a useful answer) · {SLOWER}: slower by more than the noise · {FAILED}: crashed, timed out, found no "
    f"steps or diverged (not timed). Noise: the largest block spread of the baseline runs and the variant, the gap "
    f"between the two baseline runs (first and last), and at least {MIN_EFFECT:.0%}."
)


@dataclass(frozen=True, slots=True)
class Timing:
    """Block means (ms per step) of one run, or of several runs pooled."""

    block_ms: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.block_ms)

    @property
    def low(self) -> float:
        return min(self.block_ms)

    @property
    def high(self) -> float:
        return max(self.block_ms)

    @property
    def rel_spread(self) -> float:
        return (self.high - self.low) / self.median if self.median > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Baseline:
    """The baseline's runs (one or two usable) and the noise they show."""

    runs: tuple[Timing, ...]

    @property
    def pooled(self) -> Timing:
        return Timing(tuple(b for run in self.runs for b in run.block_ms))

    @property
    def noise(self) -> float:
        parts = [MIN_EFFECT, *(run.rel_spread for run in self.runs)]
        if len(self.runs) >= 2:
            medians = [run.median for run in self.runs]
            parts.append((max(medians) - min(medians)) / statistics.mean(medians))
        return max(parts)


def baseline_of(outcomes: Sequence[RunOutcome]) -> Baseline | None:
    runs = tuple(Timing(o.block_ms) for o in outcomes if o.ok)
    return Baseline(runs) if runs else None


@dataclass(frozen=True, slots=True)
class Verdict:
    status: str
    reason: str = ""
    baseline: Timing | None = None
    fixed: Timing | None = None
    noise: float | None = None

    @property
    def speedup(self) -> float | None:
        if self.baseline is None or self.fixed is None or self.fixed.median <= 0:
            return None
        return self.baseline.median / self.fixed.median


def judge(baseline: Baseline, outcome: RunOutcome, baseline_loss_finite: bool | None) -> Verdict:
    """The status of one variant's run against the baseline (see the module docstring)."""
    base = baseline.pooled
    if not outcome.ok:
        return Verdict(FAILED, outcome.reason, base)
    if outcome.final_loss_finite is False and baseline_loss_finite is not False:
        return Verdict(FAILED, "diverged: non-finite loss where the baseline's is finite", base)
    fixed = Timing(outcome.block_ms)
    noise = max(baseline.noise, fixed.rel_spread)
    speedup = base.median / fixed.median if fixed.median > 0 else float("inf")
    if speedup - 1.0 > noise:
        status = CONFIRMED
    elif 1.0 / speedup - 1.0 > noise:
        status = SLOWER
    else:
        status = NO_EFFECT
    return Verdict(status, "", base, fixed, noise)
