"""Two profiler traces (or two job folders) compared: did the step get slower, by how much against the noise, and why.

Both sides are analyzed as ``tracelint trace`` analyzes them (tracelint.trace.analyze.analyze_paths), at the same
time in two processes (BASE in a forked child, NEW here), each reduced to a compact ``Side`` per rank before it
crosses the process boundary. A folder's ranks are paired by rank; two single traces are paired whatever their ranks.
Every number of a diff, defined:

**Step time** of one profiled step: the longer of its CPU-side span (``ProfilerStep#N``) and its GPU-side span (first
start to last end of the GPU work launched in that step: tracelint.trace.metrics). The host's span is the step when
the GPU waits for the host (input- or CPU-bound); the GPU's when the host runs ahead of it (GPU-bound: an fp32 MLP's
host span is 5 ms of a 48 ms step). ``step_ms`` is the mean over the profiled steps; a trace without
``ProfilerStep`` is one step, the whole trace.

**change_pct**: (new − base) / base × 100 of the mean step times.

**noise_pct**: the half-width of the 95 % confidence interval of that difference of means, in percent of base:
Student's t (Welch's degrees of freedom, rounded down) × √(s²_base/n_base + s²_new/n_new), s the standard deviation
of the per-step times of each trace. Few profiled steps give a wide band (t is 12.7 for one degree of freedom). With
one step on a side its spread is taken to be the other side's; with one step on both sides the noise is unknown
(``None``) and the report says so.

**The gate** (``regression``): NEW's step is slower than BASE's by more than ``max-regression-pct`` (5 %) *and* by
more than the noise (when the noise is unknown, by the percent alone); or NEW crosses a configured TL010 gate
threshold that BASE met (``max-syncs-per-step = 0``: BASE within the limit or not measured, NEW beyond it). Faster
is never a failure.

**Metrics**: every metric of both traces' reports (tracelint.engine.metrics), with ``delta`` = new − base and
``delta_pct`` = delta / |base| × 100 (``None`` when base is 0 or either is not a number). A metric *moved* when
``|delta_pct|`` exceeds the step noise (at least 1 %), or it went from 0 to non-zero; a percentage must also move by
at least 1 point, and a time by at least 1 % of BASE's step time per step (smaller moves are no explanation).

**Kernel time per step**: the summed duration of the GPU events of one name (kernels, copies, memsets) launched in
the profiled steps, divided by the number of steps. A name's class: ``gemm-tensor-core`` / ``gemm-cuda-core``
(matmul and convolution kernels on or off Tensor Cores: tracelint.trace.kernels.kernel_group), ``attention``,
``communication`` (NCCL and peer-to-peer copies), ``copy`` (memcpy, memset and copy kernels), ``elementwise``,
``reduction``, ``normalization``, ``softmax``, ``other``. A kernel that ran on one side only *appeared* or
*vanished* (its other side is ``None``).

**Findings** new and fixed are matched by a key that does not hold the trace's path (``Finding.fingerprint`` does):
rule code, the source file's name and line the trace's stack gives (not its folder: two checkouts differ there), and
the event name.

**Summary**: the step change, then up to three causes that moved in its direction, largest time per step first:
each a count that says what the code did (host syncs per step, pageable bytes per step, kernels per step) with the
time it cost (GPU idle by cause, pageable copy time, kernel time per class); ``CAUSES`` declares them.
"""
from __future__ import annotations

import math
import multiprocessing
import os
import pickle
import statistics
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tracelint.engine import Config, Finding, InputError, TraceLocation
from tracelint.engine import metrics as M
from tracelint.engine.config import DEFAULT_MAX_REGRESSION_PCT
from tracelint.engine.display import format_metric, format_seconds
from tracelint.engine.metrics import registry
from tracelint.engine.records import finding_dict
from tracelint.engine.result import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, RunResult
from tracelint.engine.stats import t975
from tracelint.trace.kernels import KERNEL_GROUPS, kernel_group

KERNELS_LISTED = 30  # the kernels a diff lists (JSON); the text shows the first ten
_MIN_MOVE_PCT = 1.0  # a metric moves by at least this percent (and points, for a percentage) before it counts
FEW_STEPS = 5  # under this many steps on a side, a report says the noise band is wide
_MIN_SHARE = 0.1  # a cause the summary names explains at least this share of the step change
_EVENT_WIDTH = 48  # kernel and event names in the summary line are cut to this many characters


# --- one side, measured ----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Side:
    """What a diff needs of one rank of one trace (compact: it is pickled from the worker process)."""

    path: str
    rank: int | None
    verdict: str
    evidence: str
    metrics: dict
    step_us: tuple[float, ...]  # per profiled step: the longer of its CPU and GPU spans
    kernels: dict  # name -> (class, µs per step, launches per step)
    sync_sites: dict  # event -> syncs per step (tracelint.trace.rules.sync: aten::item, aten::nonzero, ...)
    findings: tuple[Finding, ...]


def side_of(report) -> Side:
    """The Side of a rank's Report (its busiest device); TraceReadError-like ValueError when it cannot be diffed."""
    from tracelint.trace.rules.sync import sync_sites

    analysis = report.analyses[0]
    if report.truncated:
        note = next((w for w in report.warnings if "trunc" in w or "cut short" in w), "the file ends early")
        raise ValueError(f"truncated trace, its last step is partial ({note})")
    if analysis.device is None:
        raise ValueError("no GPU activity (a CPU-only trace): it has no GPU step time to compare")
    steps = tuple(max(s.cpu_us, s.gpu_span_us or 0.0) for s in analysis.steps)
    n = len(analysis.steps) or 1
    time: dict[str, float] = {}
    count: dict[str, int] = {}
    group: dict[str, str] = {}
    for g in analysis.gpu_events:
        if g.step is None:
            continue
        time[g.name] = time.get(g.name, 0.0) + (g.end - g.start)
        count[g.name] = count.get(g.name, 0) + 1
        if g.name not in group:
            group[g.name] = kernel_group(g.kind, g.name, analysis)
    kernels = {name: (group[name], time[name] / n, count[name] / n) for name in time}
    sites: dict[str, float] = {}
    for site in sync_sites(analysis):
        sites[site.event] = sites.get(site.event, 0.0) + site.count / n
    summary = report.summaries[0]
    return Side(report.path, analysis.rank, summary.verdict, summary.evidence, dict(summary.metrics), steps, kernels,
                sites, tuple(report.findings))


def measure(path, config: Config) -> tuple[list[Side], list[InputError]]:
    """The Sides of a trace file or a job folder (one per rank; the job summary is left out), and its errors."""
    from tracelint.trace.analyze import Report, analyze_paths, internal_error

    sides: list[Side] = []
    errors: list[InputError] = []
    for item in analyze_paths([Path(path)], config=config):
        if isinstance(item, InputError):
            errors.append(item)
        elif isinstance(item, Report) and item.analyses:
            try:
                sides.append(side_of(item))
            except ValueError as exc:
                errors.append(InputError(item.path, str(exc)))
            except Exception as exc:  # a bug: this file's error, never the run's
                errors.append(internal_error(item.path, exc, "comparing"))
    if not sides and not errors:
        errors.append(InputError(str(path), "no trace to compare"))
    return sides, errors


def _measure_both(base, new, config: Config):
    """Both sides' ``measure``, BASE in a forked process while NEW is measured here: a diff costs about the longer
    of the two analyses, not their sum. Without fork (or with threads running, which fork does not copy), one after
    the other."""
    if "fork" not in multiprocessing.get_all_start_methods() or threading.active_count() > 1:
        return measure(base, config), measure(new, config)
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(send, base, config), daemon=True)
    child.start()
    send.close()
    try:
        ours = measure(new, config)
        try:
            payload = receive.recv_bytes()
            outcome = pickle.loads(payload)
        except (EOFError, OSError):
            outcome = ([], [InputError(str(base), "internal error while analyzing: the analysis process died "
                                                  f"(exit code {child.exitcode}; out of memory?)")])
    finally:
        receive.close()
        child.join()
    return outcome, ours


def _child(send, path, config: Config) -> None:
    from tracelint.trace.analyze import internal_error

    try:
        try:
            payload = pickle.dumps(measure(path, config), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # measure catches per file; this is the last resort (or a record that won't pickle)
            payload = pickle.dumps(([], [internal_error(str(path), exc)]), protocol=pickle.HIGHEST_PROTOCOL)
        send.send_bytes(payload)
        send.close()
    finally:
        os._exit(0)  # no cleanup of the parent's state in the fork: its atexit handlers are the parent's


# --- the comparison ----------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class StepChange:
    base_ms: float | None
    new_ms: float | None
    change_pct: float | None
    noise_pct: float | None
    base_steps: int
    new_steps: int

    def as_dict(self) -> dict:
        return {"base": self.base_ms, "new": self.new_ms, "change_pct": self.change_pct, "noise_pct": self.noise_pct}


@dataclass(frozen=True, slots=True)
class MetricChange:
    name: str
    base: object
    new: object
    delta: float | None
    delta_pct: float | None
    moved: bool  # beyond the noise (module docstring)

    def as_dict(self) -> dict:
        return {"name": self.name, "base": self.base, "new": self.new, "delta": self.delta,
                "delta_pct": self.delta_pct, "moved": self.moved}


@dataclass(frozen=True, slots=True)
class KernelChange:
    name: str  # a kernel's name, or a class's name in TraceDiff.classes
    group: str
    base_us: float | None  # per step; None: it did not run on that side
    new_us: float | None

    @property
    def delta_us(self) -> float:
        return (self.new_us or 0.0) - (self.base_us or 0.0)

    def as_dict(self) -> dict:
        return {"name": self.name, "class": self.group, "base_us_per_step": _round(self.base_us, 1),
                "new_us_per_step": _round(self.new_us, 1), "delta_us_per_step": _round(self.delta_us, 1)}


@dataclass(frozen=True, slots=True)
class TraceDiff:
    """One pair of traces (or one rank of two job folders) compared."""

    base: str
    new: str
    rank: int | None
    step: StepChange
    verdict: tuple[str, str]
    metrics: tuple[MetricChange, ...]
    kernels: tuple[KernelChange, ...]  # by |change| per step, the largest first (KERNELS_LISTED of them)
    classes: tuple[KernelChange, ...]  # time per step by class
    kernel_names: tuple[int, int, int]  # kernel names on both sides, appeared, vanished
    new_findings: tuple[Finding, ...]
    fixed_findings: tuple[Finding, ...]
    crossed: tuple[str, ...]  # the gate thresholds NEW crossed, as "max-syncs-per-step = 0: 0 → 1"
    regression: bool
    summary: str
    max_regression_pct: float = DEFAULT_MAX_REGRESSION_PCT

    def as_dict(self) -> dict:
        """The JSON report's ``diffs`` entry (tracelint.render.json documents it)."""
        return {
            "base": self.base, "new": self.new, "rank": self.rank,
            "step_ms": self.step.as_dict(),
            "steps": {"base": self.step.base_steps, "new": self.step.new_steps,
                      "few": min(self.step.base_steps, self.step.new_steps) < FEW_STEPS},
            "verdict": {"base": self.verdict[0], "new": self.verdict[1]},
            "metrics": [m.as_dict() for m in self.metrics],
            "kernels": [k.as_dict() for k in self.kernels],
            "kernel_classes": [k.as_dict() for k in self.classes],
            "kernel_names": dict(zip(("both", "appeared", "vanished"), self.kernel_names, strict=True)),
            "findings": {"new": [finding_dict(f) for f in self.new_findings],
                         "fixed": [finding_dict(f) for f in self.fixed_findings]},
            "regression": self.regression,
            "gate": {"max_regression_pct": self.max_regression_pct, "thresholds_crossed": list(self.crossed)},
            "summary": self.summary,
        }


@dataclass(frozen=True, slots=True)
class DiffReport:
    diffs: tuple[TraceDiff, ...]
    errors: tuple[InputError, ...] = ()

    @property
    def regression(self) -> bool:
        return any(d.regression for d in self.diffs)

    def exit_code(self) -> int:
        """2 when an input could not be read or compared, 1 on a regression, else 0."""
        if self.errors:
            return EXIT_ERROR
        return EXIT_FINDINGS if self.regression else EXIT_CLEAN

    def run_result(self) -> RunResult:
        """The RunResult every format renders: the diffs as plain records, NEW's new findings as its findings (what
        the github, gitlab and sarif formats annotate), the errors."""
        findings = sorted((f for d in self.diffs for f in d.new_findings), key=Finding.sort_key)
        return RunResult(findings=findings, errors=list(self.errors), diffs=[d.as_dict() for d in self.diffs])


def diff_traces(base, new, *, config: Config | None = None, max_regression_pct: float | None = None,
                thresholds: Iterable[tuple[str, float]] | None = None) -> DiffReport:
    """Compare trace (or job folder) ``new`` with ``base``. ``max_regression_pct`` and ``thresholds`` (TL010 gate
    keys) default to the config's ``[tool.tracelint.diff]``. Unreadable inputs are the report's errors, never
    exceptions."""
    config = config or Config()
    limit = config.diff_max_regression_pct if max_regression_pct is None else max_regression_pct
    gates = dict(config.diff_thresholds if thresholds is None else thresholds)
    (base_sides, base_errors), (new_sides, new_errors) = _measure_both(base, new, config)
    errors = [*base_errors, *new_errors]
    pairs, unmatched = _pairs(base_sides, new_sides, str(base), str(new))
    errors.extend(unmatched)
    diffs = tuple(compare(b, n, max_regression_pct=limit, thresholds=gates) for b, n in pairs)
    return DiffReport(diffs, tuple(errors))


def _pairs(base: list[Side], new: list[Side], base_path: str, new_path: str):
    if len(base) == 1 and len(new) == 1:
        return [(base[0], new[0])], []
    if not base or not new:
        return [], []  # the empty side's error is already there
    by_rank_base = {s.rank: s for s in base}
    by_rank_new = {s.rank: s for s in new}
    if None in by_rank_base or None in by_rank_new or len(by_rank_base) < len(base) or len(by_rank_new) < len(new):
        return [], [InputError(new_path, f"cannot pair the traces with {base_path}'s by rank: "
                                         "not every trace names a distinct rank (distributedInfo)")]
    errors = []
    only_base = sorted(set(by_rank_base) - set(by_rank_new))
    only_new = sorted(set(by_rank_new) - set(by_rank_base))
    if only_base:
        errors.append(InputError(new_path, f"no trace of rank {', '.join(map(str, only_base))} (BASE has one)"))
    if only_new:
        errors.append(InputError(base_path, f"no trace of rank {', '.join(map(str, only_new))} (NEW has one)"))
    common = sorted(set(by_rank_base) & set(by_rank_new))
    return [(by_rank_base[r], by_rank_new[r]) for r in common], errors


def compare(base: Side, new: Side, *, max_regression_pct: float = DEFAULT_MAX_REGRESSION_PCT,
            thresholds: dict | None = None) -> TraceDiff:
    """The diff of two measured sides (pure: no file is read)."""
    step = step_change(base.step_us, new.step_us)
    steps = (_steps(base), _steps(new))
    metrics = tuple(_metric_changes(base.metrics, new.metrics, step, base_step_us=_mean(base.step_us),
                                    steps=steps))
    kernels, classes, names = _kernel_changes(base.kernels, new.kernels)
    new_findings, fixed = _finding_changes(base.findings, new.findings)
    crossed = tuple(_crossed(base.metrics, new.metrics, thresholds or {}))
    slower = (step.change_pct is not None and step.change_pct > max_regression_pct
              and (step.noise_pct is None or step.change_pct > step.noise_pct))
    summary = summarize(base, new, step, classes, new_findings, fixed)
    return TraceDiff(base.path, new.path, new.rank if new.rank is not None else base.rank, step,
                     (base.verdict, new.verdict), metrics, kernels, classes, names, new_findings, fixed, crossed,
                     bool(slower or crossed), summary, max_regression_pct)


def _steps(side: Side) -> int:
    return max(1, int(M.STEPS.of(side.metrics) or 1))


def _mean(values) -> float | None:
    return statistics.fmean(values) if values else None


def _round(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


def step_change(base_us: tuple[float, ...], new_us: tuple[float, ...]) -> StepChange:
    """Means, change and noise band of two series of per-step times in µs (module docstring)."""
    b, n = _mean(base_us), _mean(new_us)
    change = 100.0 * (n - b) / b if b and n is not None else None
    noise = None
    if b and len(base_us) + len(new_us) > 2:
        var_b = statistics.variance(base_us) if len(base_us) > 1 else None
        var_n = statistics.variance(new_us) if len(new_us) > 1 else None
        var_b = var_n if var_b is None else var_b
        var_n = var_b if var_n is None else var_n
        se2 = var_b / len(base_us) + var_n / len(new_us)
        if se2 == 0:
            noise = 0.0
        else:
            parts = [(v / k) ** 2 / (k - 1) for v, k in ((var_b, len(base_us)), (var_n, len(new_us))) if k > 1]
            df = se2 ** 2 / sum(parts) if sum(parts) else 1.0
            noise = 100.0 * t975(max(1, math.floor(df))) * math.sqrt(se2) / b
    return StepChange(_round(b / 1000 if b is not None else None, 3), _round(n / 1000 if n is not None else None, 3),
                      _round(change), _round(noise), len(base_us), len(new_us))


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _metric_changes(base: dict, new: dict, step: StepChange, *, base_step_us: float | None, steps: tuple[int, int]):
    order = {name: i for i, name in enumerate(registry())}
    names = sorted({*base, *new}, key=lambda k: (order.get(k, len(order)), k))
    band = max(step.noise_pct or 0.0, _MIN_MOVE_PCT)
    for name in names:
        b, n = base.get(name), new.get(name)
        if not (_number(b) and _number(n)):
            yield MetricChange(name, b, n, None, None, False)
            continue
        delta = n - b
        delta_pct = 100.0 * delta / abs(b) if b else None
        moved = delta != 0 and (b == 0 or abs(delta_pct) > band)
        unit = M.unit(name)
        if moved and unit == "pct":
            moved = abs(delta) >= _MIN_MOVE_PCT
        elif moved and unit == "us" and base_step_us:
            # the registry's µs metrics are totals over the steps except these means (per step or per kernel)
            per_step = name.startswith(("step_", "breakdown_", "comm_wait", "launch_delay", "mean_kernel"))
            moved = abs(delta) / (1 if per_step else max(steps)) >= base_step_us * _MIN_MOVE_PCT / 100
        yield MetricChange(name, b, n, _round(delta, 3), _round(delta_pct), bool(moved))


def _kernel_changes(base: dict, new: dict):
    rows = []
    for name in {*base, *new}:
        b, n = base.get(name), new.get(name)
        rows.append(KernelChange(name, (n or b)[0], b[1] if b else None, n[1] if n else None))
    rows.sort(key=lambda k: (-abs(k.delta_us), k.name))
    by_class: dict[str, list[float]] = {}
    for k in rows:
        total = by_class.setdefault(k.group, [0.0, 0.0, 0, 0])
        total[0] += k.base_us or 0.0
        total[1] += k.new_us or 0.0
        total[2] += k.base_us is not None
        total[3] += k.new_us is not None
    classes = [KernelChange(group, group, t[0] if t[2] else None, t[1] if t[3] else None)
               for group, t in by_class.items()]
    classes.sort(key=lambda k: (-abs(k.delta_us), k.name))
    names = (sum(1 for k in rows if k.base_us is not None and k.new_us is not None),
             sum(1 for k in rows if k.base_us is None), sum(1 for k in rows if k.new_us is None))
    return tuple(rows[:KERNELS_LISTED]), tuple(classes), names


def finding_key(finding: Finding) -> tuple:
    """What matches a finding of BASE with one of NEW (module docstring)."""
    loc = finding.location
    if isinstance(loc, TraceLocation):
        src = loc.source
        where = (Path(src.path).name, src.line) if src is not None else None
        return (finding.code, where, loc.event)
    return (finding.code, Path(finding.path).name, finding.message)


def _finding_changes(base: tuple[Finding, ...], new: tuple[Finding, ...]):
    base_keys = {finding_key(f) for f in base}
    new_keys = {finding_key(f) for f in new}
    return (tuple(f for f in new if finding_key(f) not in base_keys),
            tuple(f for f in base if finding_key(f) not in new_keys))


def _crossed(base: dict, new: dict, thresholds: dict) -> Iterable[str]:
    """The TL010 gate keys NEW crosses and BASE met (``min-…`` a lower limit, ``max-…`` an upper one)."""
    for metric in M.gates():
        limit = thresholds.get(metric.gate)
        if limit is None:
            continue
        b, n = _gate_value(metric, base), _gate_value(metric, new)
        lower = metric.gate.startswith("min-")
        if _fails(n, limit, lower) and not _fails(b, limit, lower):
            yield (f"{metric.gate} = {limit:g}: {metric.name} {format_metric(metric.name, b)} → "
                   f"{format_metric(metric.name, n)}")


def _fails(value: float | None, limit: float, lower: bool) -> bool:
    return value is not None and (value < limit if lower else value > limit)


def _gate_value(metric: M.Metric, metrics: dict) -> float | None:
    """A gated metric's value: stored in the report, or derived as TL010 derives it (gpu_idle_pct, step_ms)."""
    value = metric.of(metrics)
    if _number(value):
        return float(value)
    if metric is M.GPU_IDLE_PCT and _number(M.GPU_BUSY_PCT.of(metrics)):
        return 100.0 - M.GPU_BUSY_PCT.of(metrics)
    if metric is M.STEP_MS:
        spans = [v for v in (M.STEP_CPU_US_MEAN.of(metrics), M.STEP_GPU_SPAN_US_MEAN.of(metrics)) if _number(v)]
        return max(spans) / 1000 if spans else None
    return None


# --- the summary line --------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Cause:
    """A reason a step gets slower or faster: what the code did (``count``, per step) and what it cost (``time``,
    a total over the steps unless ``per_step``, or a kernel class), in the summary's words."""

    words: str  # what the time is, e.g. "GPU idle on host sync"
    time: M.Metric | str  # a metric of µs, or a kernel class of the diff
    count: M.Metric | None = None
    count_words: str = ""
    count_total: bool = False  # the count metric is a total over the steps: divided by the steps
    covers: tuple[str, ...] = ()  # kernel classes this cause already explains
    sites: bool = False  # name the sync sites (aten::item) beside the count


CAUSES = (
    Cause("GPU idle on host sync", M.IDLE_US["host_sync"], M.HOST_SYNCS_PER_STEP, "host syncs per step",
          sites=True),
    Cause("pageable copy time", M.H2D_PAGEABLE_TIME_US, M.H2D_PAGEABLE_BYTES, "pageable H2D bytes per step",
          count_total=True, covers=("copy",)),
    Cause("GPU idle on DataLoader wait", M.IDLE_US["data_wait"]),
    Cause("GPU idle on allocator frees", M.IDLE_US["allocator"]),
    Cause("GPU idle on algorithm search", M.IDLE_US["autotune"]),
    Cause("GPU idle on launch overhead", M.IDLE_US["launch_overhead"], M.KERNELS_PER_STEP, "kernels per step"),
    Cause("GPU idle with the host outside profiled ops", M.IDLE_US["other"]),
    Cause("exposed communication", M.EXPOSED_COMM_US),
    *(Cause(words, group, M.FP32_MATMUL_OFF_TC_PCT if group == "gemm-cuda-core" else None,
            "fp32 share of matmul time" if group == "gemm-cuda-core" else "")
      for group, words in KERNEL_GROUPS.items()),
)


def summarize(base: Side, new: Side, step: StepChange, classes: tuple[KernelChange, ...],
              new_findings: tuple[Finding, ...], fixed: tuple[Finding, ...]) -> str:
    """One line: the step change, then what explains it (module docstring)."""
    if step.change_pct is None:
        return f"step time {_ms(step.base_ms)} → {_ms(step.new_ms)}: no change can be measured"
    head = f"{step.change_pct:+.1f}% step time ({_ms(step.base_ms)} → {_ms(step.new_ms)}"
    if base.verdict != new.verdict:
        head += f"; {base.verdict} → {new.verdict}"
    head += ")"
    noise = step.noise_pct
    if step.change_pct == 0 and base.step_us == new.step_us:
        return f"no change: step time {_ms(step.base_ms)} in both"
    if noise is not None and abs(step.change_pct) <= max(noise, _MIN_MOVE_PCT):
        return f"{head}: within the noise (±{noise:.1f}%)"
    sign = 1 if step.change_pct > 0 else -1
    delta_step_us = abs(step.new_ms - step.base_ms) * 1000
    steps = (_steps(base), _steps(new))
    by_class = {k.group: k for k in classes}
    found: list[tuple[float, str, Cause]] = []
    for cause in CAUSES:
        if isinstance(cause.time, str):
            k = by_class.get(cause.time)
            if k is None:
                continue
            impact = k.delta_us
        else:
            b, n = cause.time.of(base.metrics), cause.time.of(new.metrics)
            if not (_number(b) or _number(n)):
                continue
            impact = (n or 0.0) / steps[1] - (b or 0.0) / steps[0]
        if impact * sign <= 0 or abs(impact) < _MIN_SHARE * delta_step_us:
            continue
        found.append((abs(impact), _clause(cause, impact, base, new, steps, by_class), cause))
    found.sort(key=lambda t: -t[0])
    covered = {c for _, _, cause in found for c in cause.covers}
    clauses = [text for _, text, cause in found if not (isinstance(cause.time, str) and cause.time in covered)][:3]
    codes = ([f"new {f.code}" + (f" ({_cut(f.location.event)})" if isinstance(f.location, TraceLocation)
                                 and f.location.event else "") for f in new_findings[:2]]
             + [f"fixed {f.code}" for f in fixed[:2]])
    tail = "; ".join(filter(None, [", ".join(clauses), ", ".join(codes)]))
    if noise is None:
        head += " (noise unknown: one step per trace)"
    return f"{head}: {tail}" if tail else f"{head}: no single cause stands out (see the metrics)"


def _clause(cause: Cause, impact_us: float, base: Side, new: Side, steps, by_class) -> str:
    parts = []
    if cause.count is not None:
        b, n = cause.count.of(base.metrics), cause.count.of(new.metrics)
        if _number(b) and _number(n) and (b == 0 or abs(n - b) / abs(b) * 100 > _MIN_MOVE_PCT):
            if cause.count_total:
                b, n = b / steps[0], n / steps[1]
            text = (f"{cause.count_words} {format_metric(cause.count.name, _tidy(b))} → "
                    f"{format_metric(cause.count.name, _tidy(n))}")
            if cause.sites:
                moved = [e for e in sorted({*base.sync_sites, *new.sync_sites})
                         if (new.sync_sites.get(e, 0) - base.sync_sites.get(e, 0)) * (n - b) > 0]
                if moved:
                    text += f" ({', '.join(_cut(e) for e in moved[:3])})"
            parts.append(text)
    words = cause.words
    if isinstance(cause.time, str):
        top = _top_kernel(base, new, cause.time, impact_us)
        if top:
            words += f" ({top})"
    parts.append(f"{words} {'+' if impact_us > 0 else '-'}{format_metric('_us', abs(impact_us))} per step")
    return ", ".join(parts)


def _tidy(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(x, 2)


def _cut(name: str, width: int = _EVENT_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _top_kernel(base: Side, new: Side, group: str, impact_us: float) -> str | None:
    """The kernel of a class whose time per step moved most in the class's direction."""
    sign = 1 if impact_us > 0 else -1
    best, name = 0.0, None
    for kernel in {*base.kernels, *new.kernels}:
        b, n = base.kernels.get(kernel), new.kernels.get(kernel)
        if (n or b)[0] != group:
            continue
        delta = sign * ((n[1] if n else 0.0) - (b[1] if b else 0.0))
        if delta > best or (delta == best and name is not None and kernel < name):
            best, name = delta, kernel
    return None if name is None else _cut(name)


def _ms(value: float | None) -> str:
    return "n/a" if value is None else format_seconds(value / 1e3)


__all__ = ["CAUSES", "DiffReport", "KernelChange", "MetricChange", "Side", "StepChange", "TraceDiff", "compare",
           "diff_traces", "finding_key", "measure", "side_of", "step_change", "summarize"]

