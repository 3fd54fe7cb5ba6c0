"""MFU, BASE against NEW: its change in points and percent, whether the two figures are comparable (one work, one kind
of step, one peak), and the noise and drop limit the gate holds it against, derived from the step time's. Every
figure is defined in tracelint.diff.compare's docstring (*MFU*)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from tracelint.diff.noise import Change
from tracelint.engine import metrics as M

# Model FLOPs per step within this many percent of BASE's are the same work: two traces of one model and batch count
# the same ops' shapes (to the FLOP, eager against compiled on the fixtures), a batch or model change moves them by far
# more, and up to flops.UNATTRIBUTED_MAX_PCT (5 %) of the kernel time may carry no shapes (compiled code).
SAME_WORK_PCT = 3.0
# The dense peaks two MFUs divide by (implied: FLOPs / step / MFU) within this many percent are one peak. The table's
# peaks of one device differ by 2× or more between dtypes, and by 27 % or more between devices (H100 SXM against
# PCIe); mfu_pct's rounding to 0.01 moves an implied peak by under 10 % from an MFU of 0.05 % up.
SAME_PEAK_PCT = 10.0


@dataclass(frozen=True, slots=True)
class MfuChange:
    """``mfu_pct`` of each side (pooled over its runs), its change, and why it is not comparable when it is not."""

    base: float | None
    new: float | None
    base_basis: str | None  # mfu_basis: what the MFU divides by, or why there is none
    new_basis: str | None
    change_pts: float | None
    change_pct: float | None
    base_flop: float | None  # model_flop_per_step
    new_flop: float | None
    flop_change_pct: float | None
    noise_pct: float | None  # the MFU drop the noise n of the time MFU divides by makes: 100·n / (100 + n)
    drop_limit_pct: float  # the MFU drop a time max-regression-pct slower makes: 100·L / (100 + L)
    dropped: bool  # lower by more than drop_limit_pct and noise_pct (it fails the gate when the gate's measure)
    gateable: bool  # both sides have an MFU over the same kind of step time, against the same peak
    why: str | None  # why not comparable (no MFU on a side, another step time or peak, other work); None: it is
    noise_from: str = "step_ms"  # the diff's block whose noise n is: "gpu_ms" (GPU busy basis) or "step_ms"

    @property
    def comparable(self) -> bool:
        return self.why is None

    def as_dict(self) -> dict:
        return {"base": self.base, "new": self.new, "change_pts": self.change_pts, "change_pct": self.change_pct,
                "basis": {"base": self.base_basis, "new": self.new_basis},
                "model_flop_per_step": {"base": self.base_flop, "new": self.new_flop,
                                        "change_pct": self.flop_change_pct},
                "noise_pct": self.noise_pct, "noise_from": self.noise_from, "drop_limit_pct": self.drop_limit_pct,
                "dropped": self.dropped,
                "comparable": self.comparable, "gateable": self.gateable, "why": self.why}


def mfu_change(base: dict, new: dict, step: Change, limit_pct: float, *,
               cpu_only: tuple[bool, bool] = (False, False), noise_from: str = "step_ms") -> MfuChange:
    """The MFU change of two sides' metrics, its noise from ``step``, the Change of the time it divides by (the
    diff's block ``noise_from``: GPU time per step or step time), and the gate's limit ``limit_pct``
    (max-regression-pct): both translated from a slowdown of that time into the MFU drop it makes."""
    b, n = _value(M.MFU_PCT.of(base)), _value(M.MFU_PCT.of(new))
    fb, fn = _value(M.MODEL_FLOP_PER_STEP.of(base)), _value(M.MODEL_FLOP_PER_STEP.of(new))
    flop_pct = 100.0 * (fn - fb) / fb if fb and fn is not None else None
    noise = None if step.noise_pct is None else _as_drop(step.noise_pct)
    why = _not_gateable(base, new, b, n, cpu_only)
    gateable = why is None
    if gateable and flop_pct is not None and abs(flop_pct) > SAME_WORK_PCT:
        why = f"model FLOPs per step {_tflop(fb)} → {_tflop(fn)} TFLOP ({flop_pct:+.1f}%: a different model or batch)"
    both = b is not None and n is not None
    return MfuChange(b, n, _label(M.MFU_BASIS.of(base)), _label(M.MFU_BASIS.of(new)),
                     _round(n - b) if both else None, _round(100.0 * (n - b) / b) if both and b else None,
                     fb, fn, _round(flop_pct), _round(noise), round(_as_drop(limit_pct), 2),
                     gateable and _dropped(b, n, limit_pct, step.noise_pct), gateable, why, noise_from)


def _as_drop(slower_pct: float) -> float:
    """The MFU drop, in percent, that a step ``slower_pct`` percent slower makes with the same FLOPs and peak:
    MFU ∝ 1 / T, so MFU_new / MFU_base = 1 / (1 + s) and the drop is s / (1 + s)."""
    return 100.0 * slower_pct / (100.0 + slower_pct)


def _dropped(base: float, new: float, limit_pct: float, noise_pct: float | None) -> bool:
    """MFU lower by more than the drop of a step ``limit_pct`` slower and of one ``noise_pct`` slower: compared as
    the step slowdown MFU_base / MFU_new − 1, the step gate's own test (tracelint.diff.noise.beyond)."""
    if new <= 0:
        slower = math.inf if base > 0 else 0.0
    else:
        slower = round(100.0 * (base / new - 1), 2)  # to change_pct's precision: a step exactly at L passes both
    return slower > limit_pct and (noise_pct is None or slower > noise_pct)


def _not_gateable(base: dict, new: dict, b: float | None, n: float | None, cpu_only: tuple[bool, bool]) -> str | None:
    for side, metrics, value, cpu in (("BASE", base, b, cpu_only[0]), ("NEW", new, n, cpu_only[1])):
        if value is None:
            return f"no MFU in {side}: {_no_mfu(metrics, cpu)}"
    unprofiled = [unprofiled_basis(m) for m in (base, new)]
    if unprofiled[0] != unprofiled[1]:
        which = ("BASE", "NEW") if unprofiled[0] else ("NEW", "BASE")
        return (f"{which[0]}'s MFU divides by the unprofiled step (tracelint.profile), {which[1]}'s by the GPU's busy "
                "time per profiled step")
    peaks = _peak(base), _peak(new)
    if None not in peaks and abs(peaks[1] - peaks[0]) > SAME_PEAK_PCT / 100 * peaks[0]:
        return f"against different peaks, {peaks[0]:.0f} → {peaks[1]:.0f} TFLOP/s (a different dtype or device)"
    return None


def _no_mfu(metrics: dict, cpu_only: bool) -> str:
    """Why a side has no MFU: its mfu_basis, else what the trace lacks."""
    basis = _label(M.MFU_BASIS.of(metrics))
    if basis:
        return basis.removeprefix("no MFU: ")
    if cpu_only:
        return "no GPU activity (CPU-only)"
    if M.FLOP_UNATTRIBUTED_PCT.of(metrics) is None:
        return "no op shapes (recorded without record_shapes=True)"
    return "no GEMM, convolution or attention op with shapes in the profiled steps"


def _peak(metrics: dict) -> float | None:
    """The dense peak, in TFLOP/s, an MFU divided by (mfu_peak_tflops); None where it is missing."""
    return _value(M.MFU_PEAK_TFLOPS.of(metrics))


def unprofiled_basis(metrics: dict) -> bool:
    """Whether a side's MFU divides by the unprofiled step (else by the GPU's busy time per profiled step)."""
    return bool(M.UNPROFILED_STEP_MS.of(metrics))


def _value(x) -> float | None:
    return x if M.is_number(x) else None


def _label(x) -> str | None:
    return x if isinstance(x, str) and x else None


def _tflop(flop: float | None) -> str:
    return "n/a" if flop is None else f"{flop / 1e12:.3g}"


def _round(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


__all__ = ["SAME_PEAK_PCT", "SAME_WORK_PCT", "MfuChange", "mfu_change"]
