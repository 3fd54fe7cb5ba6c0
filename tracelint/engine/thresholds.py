"""The trace thresholds (``[tool.tracelint.trace]``, ``--threshold KEY=VALUE``): every key declared once, with its
default, so that a misspelt key is an error instead of a silently ignored gate.

Three kinds, each declared in one place:
- the verdict's limits and the idle-gap length, below (``VERDICT``);
- the TL010 gates, one per metric of the registry that names a ``gate`` key (tracelint.engine.metrics); off
  (default None) until the user sets them;
- a rule's tuning thresholds, with their defaults, in the ``thresholds:`` line of its rules/ file. Several rules
  may share a key (``sync-min-steps-pct``); they must then give it the same default.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True, slots=True)
class Threshold:
    key: str
    default: float | None  # None: not checked until set (the TL010 gates)
    owners: tuple[str, ...]  # "verdict", or the rule codes that read it
    help: str = ""


VERDICT = (
    Threshold("gpu-bound-busy-pct", 80.0, ("verdict",),
              "gpu-bound when gpu_busy_pct is at least this (tracelint.trace.verdict)"),
    Threshold("input-bound-data-wait-pct", 50.0, ("verdict",),
              "input-bound when idle_data_wait_pct is at least this (below the gpu-bound limit)"),
    Threshold("min-idle-gap-us", 5.0, ("verdict",),
              "idle gaps shorter than this count as idle_short_gap, not charged to a host cause"),
    Threshold("comm-bound-exposed-pct", 25.0, ("verdict",),
              "comm-bound when exposed_comm_pct (communication with no compute beside it, waiting for other ranks "
              "included) is at least this"),
    Threshold("profiler-inflation-limit", 1.2, ("verdict",),
              "above this profiler_inflation (profiled step / unprofiled step, from tracelint.profile) the verdict "
              "follows the unprofiled run and TL003 reports the distortion"),
    Threshold("straggler-min-wait-pct", 10.0, ("verdict",),
              "a job has a straggler when the other ranks wait for one rank at least this percent of the step "
              "(straggler_wait_us against the mean step time; tracelint.trace.job.ranks)"),
)


class ThresholdError(Exception):
    pass


@lru_cache(maxsize=1)
def thresholds() -> dict[str, Threshold]:
    """Every threshold key, sorted: the verdict's, the TL010 gates, and the rules' (from their rules/ files)."""
    from tracelint.engine.catalog import catalog
    from tracelint.engine.metrics import gates

    found: dict[str, Threshold] = {t.key: t for t in VERDICT}
    for metric in gates():
        found[metric.gate] = Threshold(metric.gate, None, ("TL010",), f"TL010 gate on {metric.name}")
    for code, doc in catalog().items():
        for key, default in doc.thresholds.items():
            known = found.get(key)
            if known is None:
                found[key] = Threshold(key, default, (code,), f"{code} {doc.name}")
            elif known.default != default or "verdict" in known.owners or "TL010" in known.owners:
                raise ThresholdError(f"{doc.path}: threshold {key!r} is declared elsewhere with default "
                                     f"{known.default} ({', '.join(known.owners)})")
            else:
                found[key] = Threshold(key, default, (*known.owners, code), f"{known.help}, {code} {doc.name}")
    return dict(sorted(found.items()))


def default(key: str) -> float | None:
    """The default of a declared key; KeyError for an undeclared one (a bug in the caller, not user input)."""
    return thresholds()[key].default


def unknown_key_message(key: str) -> str | None:
    """None for a declared key, else the error to show: the key and the closest declared one."""
    known = thresholds()
    if key in known:
        return None
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else "; `tracelint thresholds` lists them"
    return f"unknown threshold {key!r}{hint}"
