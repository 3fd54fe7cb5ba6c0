"""From block timings to a verdict: paired rounds, the 95 % confidence interval of the speedup, and the status.

The design (what "measured" means):
    The baseline and a variant alternate single timed blocks in rounds of the order B V, V B, B V, ... (each
    round's order reversed, so that a steady drift of the machine over a round cancels). A round gives one ratio
    ``baseline block / variant block``: the two blocks were taken seconds apart, so what changes slowly over the
    session (clocks, temperature, a neighbour on the machine) is in both. The speedup is the geometric mean of the
    rounds' ratios, and its 95 % confidence interval the Student-t interval of their logarithms. Rounds go on until
    the interval is within ±``target`` (3 %) of the estimate, or the time budget is spent, with at least ``blocks``
    rounds. How the two sides run between their blocks (two persistent processes, the waiting one paused, or a
    fresh process per block) is run.py's business.

Pairs of processes (``--pairs``, default 3):
    A process's step time is set when it starts and stays there: on an H100 the SD of log(block ms) within one
    process was 0.03-0.16, the SD of the per-process means between processes of the same script 0.08-0.22. One
    persistent pair of processes therefore carries its own offset, which no number of rounds averages away and which
    the round-level interval leaves out. So the rounds are spread over several pairs (both sides restarted between
    them, measure.py's ``compare``), each round labelled with its pair. With two pairs or more the speedup is the
    geometric mean over the pairs of each pair's geometric-mean ratio (each pair weighs the same, however many
    rounds it ran), and the 95 % interval is centred on it with the half-width (in logarithms) of the wider of: the
    Student-t interval over the pairs' mean log-ratios (df = pairs - 1), and the round-level interval above (so a
    set of pairs that happen to agree never makes it narrower than the rounds allow). With one pair (or fresh
    processes, where every round has processes of its own) it is the round-level interval.

The status, against a stated minimum effect ``min_effect`` (default 2 %, ``--min-effect``):
    **confirmed** when the interval's lower bound clears it (low >= 1 + min_effect); **slower** when the upper
    bound clears it the other way (high <= 1 / (1 + min_effect)); **small** when the interval lies wholly on one
    side of 1 without clearing it (an effect, not shown to be worth the minimum: the interval says how large);
    **no-effect** when the interval holds 1: "no effect larger than ±X %", X the farther end of the interval (a
    useful answer: the fix does not pay on this script, to within X). A run that crashed, timed out, found no
    steps, or diverged (a non-finite loss where the baseline's was finite) is **failed** and not timed; a finding
    for which no variant could be built is **not-measured**, with the reason.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tracelint.engine.stats import t975
from tracelint.verify.harness_control import RunOutcome

MIN_EFFECT = 0.02  # the default of --min-effect: the smallest speedup worth a claim
CONFIDENCE = 0.95

CONFIRMED, SMALL, NO_EFFECT, SLOWER = "confirmed", "small", "no-effect", "slower"
FAILED, NOT_MEASURED = "failed", "not-measured"


def _pct(fraction: float) -> str:
    return f"{fraction * 100:g}"


def legend(min_effect: float = MIN_EFFECT) -> str:
    """What the statuses and the interval mean, in one paragraph under every text report."""
    m = _pct(min_effect)
    return (
        f"Baseline and variant alternate single blocks (B V, V B, ...); speedup: the geometric mean of the rounds' "
        f"baseline/variant ratios, with its {CONFIDENCE:.0%} interval; with several pairs of processes, the "
        f"geometric mean of the pairs' speedups, its interval the wider of the Student-t interval over the pairs and "
        f"the one over the rounds. {CONFIRMED}: the interval's lower bound "
        f"clears the minimum effect ({m} %) · {SMALL}: the interval lies on one side of 1 but does not clear "
        f"{m} % (an effect, not shown to be worth the minimum) · {NO_EFFECT}: the interval holds 1: no effect "
        f"larger than the ±X % shown (a useful answer: the fix does not pay on this script) · {SLOWER}: the "
        f"interval's upper bound is at least {m} % below 1 · {FAILED}: crashed, timed out, found no steps or "
        f"diverged (not timed) · {NOT_MEASURED}: no variant could be built for the finding (the reason is given)."
    )


LEGEND = legend()


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

    @property
    def cv(self) -> float:
        """Block-to-block coefficient of variation (0 for fewer than two blocks)."""
        if len(self.block_ms) < 2 or self.median <= 0:
            return 0.0
        return statistics.stdev(self.block_ms) / statistics.mean(self.block_ms)


@dataclass(frozen=True, slots=True)
class Baseline:
    """The baseline's runs (usually one process alternating with every variant)."""

    runs: tuple[Timing, ...]

    @property
    def pooled(self) -> Timing:
        return Timing(tuple(b for run in self.runs for b in run.block_ms))

    @property
    def noise(self) -> float:
        """The block-to-block coefficient of variation of the pooled blocks: how much one block tells."""
        return self.pooled.cv


def baseline_of(outcomes: Sequence[RunOutcome]) -> Baseline | None:
    runs = tuple(Timing(o.block_ms) for o in outcomes if o.ok and o.block_ms)
    return Baseline(runs) if runs else None


@dataclass(frozen=True, slots=True)
class Interval:
    """The speedup of paired rounds: geometric mean of the ratios and its confidence interval."""

    estimate: float
    low: float
    high: float
    rounds: int
    pairs: int = 1  # the pairs of processes the rounds came from
    pair_estimates: tuple[float, ...] = ()  # each pair's geometric-mean ratio, in the order they ran

    @property
    def half_width(self) -> float:
        """The interval's larger distance from the estimate, relative to it (0.03 = ±3 %)."""
        return max(self.high / self.estimate - 1.0, 1.0 - self.low / self.estimate)

    @property
    def bound(self) -> float:
        """The larger effect the interval allows, either way, relative to 1: "no effect larger than ±bound"."""
        return max(self.high - 1.0, 1.0 - self.low, 0.0)


def paired_interval(baseline: Sequence[float], fixed: Sequence[float],
                    pair_of: Sequence[int] | None = None) -> Interval | None:
    """The speedup baseline/fixed from paired blocks (round i: ``baseline[i]`` beside ``fixed[i]``, from the pair
    of processes ``pair_of[i]``, default all one pair); None for fewer than two rounds. With two pairs or more:
    the pairs' geometric mean and the wider interval (module docstring)."""
    labels = [0] * len(baseline) if pair_of is None else pair_of
    rounds = [(p, math.log(b / f)) for p, b, f in zip(labels, baseline, fixed, strict=False) if b > 0 and f > 0]
    logs = [log for _, log in rounds]
    n = len(logs)
    if n < 2:
        return None
    centre = statistics.fmean(logs)
    half = _t_half(logs)
    by_pair: dict[int, list[float]] = {}
    for pair, log in rounds:
        by_pair.setdefault(pair, []).append(log)
    means = [statistics.fmean(group) for group in by_pair.values()]
    if len(means) >= 2:
        centre = statistics.fmean(means)
        half = max(half, _t_half(means))
    return Interval(math.exp(centre), math.exp(centre - half), math.exp(centre + half), n, len(means),
                    tuple(math.exp(m) for m in means))


def _t_half(values: Sequence[float]) -> float:
    """The half-width of the 95 % Student-t interval of the mean of ``values`` (at least two)."""
    return t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


@dataclass(frozen=True, slots=True)
class Verdict:
    status: str
    reason: str = ""
    baseline: Timing | None = None  # the baseline blocks paired with the variant's
    fixed: Timing | None = None
    interval: Interval | None = None
    stopped: str = ""  # why the rounds stopped: "target", "budget", "max-rounds" (or "" when not measured)

    @property
    def speedup(self) -> float | None:
        if self.interval is not None:
            return self.interval.estimate
        if self.baseline is None or self.fixed is None or self.fixed.median <= 0:
            return None
        return self.baseline.median / self.fixed.median

    @property
    def noise(self) -> float | None:
        """The interval's half-width (relative): what the measurement can resolve."""
        return self.interval.half_width if self.interval is not None else None

    def summary(self) -> str:
        """``1.25× (1.22–1.28)``, ``small: 1.01× (1.00–1.02)``, ``no effect larger than ±2.1 %`` or the status
        and reason."""
        iv = self.interval
        if iv is None:
            return f"{self.status}" + (f": {self.reason}" if self.reason else "")
        if self.status == NO_EFFECT:
            return f"no effect larger than ±{percent(iv.bound)} %"
        text = f"{iv.estimate:.2f}× ({iv.low:.2f}–{iv.high:.2f})"
        return f"{SMALL}: {text}" if self.status == SMALL else text


def percent(fraction: float) -> str:
    """A relative bound as a percentage, rounded up to 0.1 (a bound is never understated)."""
    return f"{math.ceil(fraction * 1000 - 1e-9) / 10:.1f}"


def status_of(interval: Interval, min_effect: float = MIN_EFFECT) -> str:
    """confirmed / slower when the interval clears ``min_effect`` one way or the other, small when it only
    excludes 1, no-effect when it holds 1 (see the module docstring)."""
    if interval.low >= 1.0 + min_effect:
        return CONFIRMED
    if interval.high <= 1.0 / (1.0 + min_effect):
        return SLOWER
    if interval.low > 1.0 or interval.high < 1.0:
        return SMALL
    return NO_EFFECT


def judge(baseline_blocks: Sequence[float], outcome: RunOutcome, baseline_loss_finite: bool | None, *,
          fixed_blocks: Sequence[float] | None = None, stopped: str = "", min_effect: float = MIN_EFFECT,
          pair_of: Sequence[int] | None = None) -> Verdict:
    """The status of one variant against the baseline blocks it was paired with (see the module docstring).
    ``fixed_blocks`` default to the outcome's blocks, round for round with ``baseline_blocks``; ``pair_of`` the
    pair of processes of each round (default: one pair)."""
    base = Timing(tuple(baseline_blocks)) if baseline_blocks else None
    if not outcome.ok:
        return Verdict(FAILED, outcome.reason, base)
    if outcome.final_loss_finite is False and baseline_loss_finite is not False:
        return Verdict(FAILED, "diverged: non-finite loss where the baseline's is finite", base)
    fixed_blocks = tuple(outcome.block_ms if fixed_blocks is None else fixed_blocks)
    fixed = Timing(fixed_blocks)
    interval = paired_interval(baseline_blocks, fixed_blocks, pair_of)
    if interval is None:
        return Verdict(FAILED, "fewer than two rounds were timed", base, fixed)
    return Verdict(status_of(interval, min_effect), "", base, fixed, interval, stopped)


def not_measured(reason: str) -> Verdict:
    return Verdict(NOT_MEASURED, reason)
