"""How far apart two runs of the same code land, and whether a diff's change is beyond that: the timing half of
``tracelint diff``'s gate. Every figure is defined in tracelint.diff.compare's docstring (*Step time*, *GPU time
per step*, *Noise*); this module computes them from per-step series, one series per run (trace)."""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tracelint.engine.stats import t975

FEW_STEPS = 5  # under this many steps on a side, the step-spread band is not trusted (one trace a side)

# Where a measure's noise came from (the JSON report's ``noise_source``).
RUNS = "runs"  # the 95 % band of the per-run means: several traces on a side (run-to-run noise, measured)
STEPS = "steps"  # the 95 % band of the per-step times: one trace a side, enough steps, wider than the floor
FLOOR = "floor"  # noise-floor-pct: one trace a side, and its steps too few to trust or their band narrower
SOURCES = (RUNS, STEPS, FLOOR)


@dataclass(frozen=True, slots=True)
class Change:
    """One measure (step time, GPU time per step) of BASE against NEW: means in ms, the change, and the noise the
    gate holds the change against."""

    base_ms: float | None
    new_ms: float | None
    change_pct: float | None
    noise_pct: float | None  # what the gate compares with (``noise_source`` says which estimate)
    base_steps: int
    new_steps: int
    band_pct: float | None = None  # the 95 % band of the per-step spread (None: fewer than three steps in all)
    noise_source: str | None = None  # RUNS | STEPS | FLOOR; None: no change to hold against a noise
    base_runs: int = 1
    new_runs: int = 1

    @property
    def few_steps(self) -> bool:
        return min(self.base_steps, self.new_steps) < FEW_STEPS

    def as_dict(self) -> dict:
        return {"base": self.base_ms, "new": self.new_ms, "change_pct": self.change_pct, "noise_pct": self.noise_pct,
                "noise_source": self.noise_source, "band_pct": self.band_pct}


def welch_band_pct(base: Sequence[float], new: Sequence[float]) -> float | None:
    """The half-width of the 95 % confidence interval of mean(new) − mean(base), in percent of mean(base):
    Student's t at Welch's degrees of freedom (rounded down) × √(s²_b/n_b + s²_n/n_n). A side of one value takes
    the other side's variance; None with one value on both sides (no spread to measure) or a zero base."""
    b = statistics.fmean(base) if base else None
    if not b or len(base) + len(new) <= 2 or not new:
        return None
    var_b = statistics.variance(base) if len(base) > 1 else None
    var_n = statistics.variance(new) if len(new) > 1 else None
    var_b = var_n if var_b is None else var_b
    var_n = var_b if var_n is None else var_n
    se2 = var_b / len(base) + var_n / len(new)
    if se2 == 0:
        return 0.0
    parts = [(v / k) ** 2 / (k - 1) for v, k in ((var_b, len(base)), (var_n, len(new))) if k > 1]
    df = se2 ** 2 / sum(parts) if sum(parts) else 1.0
    # rounded down, but not below an integer that rounding error put a hair under (9 computed as 8.999999999)
    return 100.0 * t975(max(1, math.floor(df + 1e-9))) * math.sqrt(se2) / abs(b)


def change(base_runs: Sequence[Sequence[float]], new_runs: Sequence[Sequence[float]], floor_pct: float) -> Change:
    """A measure's Change from per-step values in µs, one sequence per run (trace) and side (module docstring of
    tracelint.diff.compare, *Noise*). Runs without a step are left out."""
    base_runs = [tuple(r) for r in base_runs if r]
    new_runs = [tuple(r) for r in new_runs if r]
    base_steps = [x for r in base_runs for x in r]
    new_steps = [x for r in new_runs for x in r]
    b = statistics.fmean(base_steps) if base_steps else None
    n = statistics.fmean(new_steps) if new_steps else None
    pct = 100.0 * (n - b) / b if b and n is not None else None
    band = welch_band_pct(base_steps, new_steps) if len(base_runs) <= 1 and len(new_runs) <= 1 else None
    if pct is None:
        noise, source = None, None
    elif len(base_runs) > 1 or len(new_runs) > 1:
        noise, source = welch_band_pct([statistics.fmean(r) for r in base_runs],
                                       [statistics.fmean(r) for r in new_runs]), RUNS
    elif band is not None and min(len(base_steps), len(new_steps)) >= FEW_STEPS and band > floor_pct:
        noise, source = band, STEPS
    else:
        noise, source = floor_pct, FLOOR
    per_run = min(map(len, base_runs), default=0), min(map(len, new_runs), default=0)
    return Change(_round(b / 1000 if b is not None else None, 3), _round(n / 1000 if n is not None else None, 3),
                  _round(pct), _round(noise), per_run[0], per_run[1], _round(band), source,
                  len(base_runs), len(new_runs))


def beyond(c: Change, limit_pct: float) -> bool:
    """The change is a slowdown over ``limit_pct`` and over its noise."""
    return (c.change_pct is not None and c.change_pct > limit_pct
            and (c.noise_pct is None or c.change_pct > c.noise_pct))


def _round(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


__all__ = ["FEW_STEPS", "FLOOR", "RUNS", "SOURCES", "STEPS", "Change", "beyond", "change", "welch_band_pct"]
