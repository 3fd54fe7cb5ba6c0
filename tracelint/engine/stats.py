"""Statistics the commands share: the Student-t quantile of the 95 % intervals that ``tracelint verify`` puts on a
speedup and ``tracelint diff`` on a change of step time."""
from __future__ import annotations

import math

# Two-sided 97.5 % quantiles of Student's t for 1..30 degrees of freedom; beyond, interpolated in 1/df.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045,
         2.042)
_T975_TAIL = ((30, 2.042), (40, 2.021), (60, 2.000), (120, 1.980), (math.inf, 1.960))


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        return math.inf
    if df <= 30:
        return _T975[df - 1]
    for (lo_df, lo), (hi_df, hi) in zip(_T975_TAIL, _T975_TAIL[1:], strict=False):
        if df <= hi_df:
            x, x0, x1 = 1 / df, 1 / lo_df, (0.0 if hi_df == math.inf else 1 / hi_df)
            return hi + (lo - hi) * (x - x1) / (x0 - x1)
    return 1.960
