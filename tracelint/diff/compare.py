"""Two profiler traces (or two job folders) compared: did the step get slower, by how much against the noise, and why.

Both sides are analyzed as ``tracelint trace`` analyzes them (tracelint.trace.analyze.analyze_paths), at the same
time in two processes (BASE in a forked child, NEW here), each reduced to a compact ``Side`` per rank before it
crosses the process boundary. A folder's ranks are paired by rank; two single traces are paired whatever their ranks;
a folder's profiling cycles of one process are compared by their latest, and a note says so (tracelint.diff.pairing).
A side may be several runs of the same configuration (traces or folders): each rank's runs are pooled (``pool``:
metrics, kernel times and findings averaged or joined over the runs) and their spread is the noise.
Every number of a diff, defined:

**Step time** of one profiled step: the longer of its CPU-side span (``ProfilerStep#N``) and its GPU-side span (first
start to last end of the GPU work launched in that step: tracelint.trace.device_metrics). The host's span is the step
when the GPU waits for the host (input- or CPU-bound); the GPU's when the host runs ahead of it (GPU-bound: an fp32
MLP's host span is 5 ms of a 48 ms step). ``step_ms`` is the mean over the profiled steps; a trace without
``ProfilerStep`` is one step, the whole trace (and has no GPU time per step). A CPU-only trace (no GPU activity) has
its ``ProfilerStep`` spans only: it is compared by them, and the summary says that the GPU measures are absent.

**GPU time per step** of one profiled step: the summed duration of the GPU events (kernels, copies, memsets)
launched in that step (tracelint.trace.model: by their launch, not by time), NCCL and other communication kernels
left out (they spin while they wait for a peer: their time is the other ranks' lateness, not this rank's work).
Overlapping streams count twice: it is work, not a span. The host does not enter it, so it holds still where the
step time swings with the host (a GPU-bound run: the step is the GPU's work).

**change_pct** of a measure: (new − base) / base × 100 of its means (over every step of every run of a side).

**Noise** (``noise_pct``), the change a measure shows between two runs of the same code, by what is known:
- several traces on a side (runs of the same configuration: ``--base A1 --base A2 --new B1 --new B2``): the
  half-width of the 95 % confidence interval of the difference of the per-run means, Student's t at Welch's degrees
  of freedom (rounded down) × √(s²_base/k_base + s²_new/k_new), s the standard deviation of a side's run means, in
  percent of BASE's mean (a side of one run takes the other side's spread); ``noise_source`` "runs";
- one trace a side: the same band over the per-step times (``band_pct``) when both sides have at least
  ``FEW_STEPS`` (5) steps and the band is wider than the noise floor (``noise_source`` "steps"); otherwise the
  noise floor, ``noise-floor-pct`` (``noise_source`` "floor"). A band from three steps is no estimate of how far
  two runs land apart: ±49.9 % on two H200 runs that differ by 10 %, ±3.7 % on two runs 12.5-14 % apart. The default
  floor is measured per measure (tracelint.engine.config.DEFAULT_NOISE_FLOOR_PCT, bench/diff_noise_floor.py).

**MFU** (``mfu``): each side's ``mfu_pct`` (tracelint.engine.metrics: model FLOPs per step F over the step time T
and the dense peak P; pooled over a side's runs), ``change_pts`` = new − base and ``change_pct`` = (new − base) /
base × 100. It is *comparable* when both sides have one (else ``why`` says why from ``mfu_basis``), over the same
kind of step time T (``mfu_step_ms``: both the unprofiled step, from tracelint.profile or tracelint run, or both the
GPU's busy time per profiled step), against the same peak (``mfu_peak_tflops`` within 10 %: an fp32 → bf16 change
divides by another peak, and MFU falls 62 → 14 % on a step 3.4× faster), and for the same work (F within 3 %: else a
different model or batch). Its noise comes from T's measure: with F and P fixed, MFU ∝ 1/T, so MFU_new / MFU_base =
T_base / T_new = 1 / (1 + s) for a T s slower, and MFU drops by d = s / (1 + s). A T as slow as its noise n (in
percent) drops MFU by 100·n / (100 + n) (``noise_pct``), and one as slow as ``max-regression-pct`` L by 100·L /
(100 + L) (``drop_limit_pct``: 4.76 % at 5 %). MFU has *dropped* when it is lower by more than both, tested as the
slowdown it equals, MFU_base / MFU_new − 1 > L and > n. n is the noise of GPU time per step (below) where MFU
divides by the GPU's busy time (for the same work against the same peak the MFU test is then the GPU-time test, up
to busy time being a union and GPU time a sum of kernel times), else the step time's: where MFU divides by the
unprofiled step, n is the profiled step's noise, wider than the unprofiled step's spread between runs (docs/ci.md:
9.5 % against 16.8 %): there the MFU test errs toward passing.

**The gate** (``regression``), for each pair, fails when any of:
- NEW has a finding at ``fail-on`` severity or above (warning by default) that BASE lacks
  (``fail-on-new-findings``, on by default): a new host sync fails the gate whatever the timing says;
- the gate's measure (``gate.measure``: GPU time per step when both sides' verdicts are gpu-bound, else step time;
  MFU with ``gate-measure = "mfu"``) is slower by more than ``max-regression-pct`` (5 %) *and* by more than its
  noise (MFU: has dropped, above);
- NEW crosses a configured TL010 gate threshold that BASE met (``max-syncs-per-step = 0``: BASE within the limit or
  not measured, NEW beyond it).
Faster is never a failure. MFU is shown, and gated only when asked (``gate-measure = "mfu"``), because for the
same work its drop *is* a step slowdown, which the step gate already fails (failing twice for one cause says
nothing more, and where the gate measures GPU time per step, a steadier measure, MFU would bring back the host's
noise the GPU time keeps out). What the MFU gate adds is the case where the work changed: NEW runs a bigger batch or
a longer sequence, so its step is slower while each FLOP costs less. A step gate fails that change; a team that
tunes throughput wants it judged by MFU, and says so with ``gate-measure = "mfu"``: then a slower step with more
work passes when MFU held, and a faster step fails when MFU dropped with less work. Only an MFU against the same
peak over the same kind of step time is gated (``gateable``); where either side has none, the gate falls back to
its time measure and ``gate.note`` says why. The forward that activation checkpointing runs again is not in F
(``hfu_pct`` has it): turning checkpointing on keeps F and slows the step, and fails the MFU gate as it fails the
step gate.

**Metrics**: every metric of both traces' reports (tracelint.engine.metrics), with ``delta`` = new − base and
``delta_pct`` = delta / |base| × 100 (``None`` when base is 0 or either is not a number). A metric *moved* when
``|delta_pct|`` exceeds the step noise (at least 1 %), or it went from 0 to non-zero; a percentage must also move by
at least 1 point, and a time by at least 1 % of BASE's step time per step (smaller moves are no explanation).

**Kernel time per step**: the summed duration of the GPU events of one name (kernels, copies, memsets) launched in
the profiled steps, divided by the number of steps. A name's class, its kernel family
(tracelint.trace.kernels.kernel_group): ``gemm-tensor-core`` / ``gemm-cuda-core`` (matmul kernels on or off Tensor
Cores), ``convolution``, ``attention``, ``optimizer`` (foreach and fused optimizers' kernels), ``compiled`` (Triton
kernels), ``communication`` (NCCL and peer-to-peer copies), ``copy`` (memcpy and copy kernels), ``memset``,
``elementwise``, ``reduction``, ``normalization``, ``softmax``, ``other``. A kernel that ran on one side only
*appeared* or *vanished* (its other side is ``None``).

**Findings** new and fixed are matched by rule and place, never by message text (a trace finding's message carries
numbers that change from run to run; tracelint.diff.findings): rule code, the source file's name (not its folder:
two checkouts differ there) and line the trace's stack gives, and the event name. Findings of one rule, file and
event that sit on different lines are then paired in line order, so code that moved keeps its findings matched and
one more sync in the file is one new finding.

**Summary**: the new findings that fail the gate (``new finding: TL101 item-in-loop at train.py:54``), the step
change (and the GPU time change when that is the gate's measure), then up to three causes that moved in its
direction, largest time per step first: each a count that says what the code did (host syncs per step, pageable
bytes per step, kernels per step) with the time it cost (GPU idle by cause, pageable copy time, kernel time per
class); ``CAUSES`` declares them.
"""
from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tracelint.diff.findings import finding_changes, finding_key, finding_words
from tracelint.diff.mfu import MfuChange, mfu_change, unprofiled_basis
from tracelint.diff.noise import Change, beyond, change
from tracelint.diff.pairing import pair_runs
from tracelint.engine import Config, Finding, InputError, Severity, TraceLocation
from tracelint.engine import metrics as M
from tracelint.engine.config import DEFAULT_MAX_REGRESSION_PCT, DEFAULT_NOISE_FLOOR_PCT, GPU_TIME, MFU, STEP_TIME, TIME
from tracelint.engine.display import format_metric, format_seconds
from tracelint.engine.metrics import registry
from tracelint.engine.records import finding_dict
from tracelint.engine.result import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, RunResult
from tracelint.engine.workers import WorkerFailed, can_fork, fork
from tracelint.trace.kernels import KERNEL_GROUPS, kernel_group
from tracelint.trace.verdict import GPU_BOUND

KERNELS_LISTED = 30  # the kernels a diff lists (JSON); the text shows the first ten
_MIN_MOVE_PCT = 1.0  # a metric moves by at least this percent (and points, for a percentage) before it counts
UNTIMED_GROUPS = ("communication",)  # kernel classes left out of GPU time per step: NCCL kernels spin while waiting
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
    gpu_us: tuple[float, ...]  # per profiled step: GPU time (module docstring), () without profiled steps
    kernels: dict  # name -> (class, µs per step, launches per step)
    sync_sites: dict  # event -> syncs per step (tracelint.trace.rules.sync: aten::item, aten::nonzero, ...)
    findings: tuple[Finding, ...]
    cpu_only: bool = False  # no GPU activity: its steps are the host's ProfilerStep spans, it has no GPU measures
    start_us: float | None = None  # its first step (or op): orders the profiling cycles of one process


def side_of(report) -> Side:
    """The Side of a rank's Report (its busiest device); TraceReadError-like ValueError when it cannot be diffed."""
    from tracelint.trace.rules.sync import sync_sites

    analysis = report.analyses[0]
    if report.truncated:
        note = next((w for w in report.warnings if "trunc" in w or "cut short" in w), "the file ends early")
        raise ValueError(f"truncated trace, its last step is partial ({note})")
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
    gpu = [0.0] * (len(analysis.steps) if analysis.has_steps and analysis.device is not None else 0)
    for g in analysis.gpu_events:
        if g.step is not None and g.step < len(gpu) and group[g.name] not in UNTIMED_GROUPS:
            gpu[g.step] += g.end - g.start
    sites: dict[str, float] = {}
    for site in sync_sites(analysis):
        sites[site.event] = sites.get(site.event, 0.0) + site.count / n
    summary = report.summaries[0]
    model = analysis.model
    firsts = [seq[0].start for seq in (model.steps, model.ops) if seq]
    return Side(report.path, analysis.rank, summary.verdict, summary.evidence, dict(summary.metrics), steps,
                tuple(gpu), kernels, sites, tuple(report.findings), analysis.device is None,
                min(firsts) if firsts else None)


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


def measure_runs(paths, config: Config) -> tuple[list[list[Side]], list[InputError]]:
    """``measure`` of each path of one side (each a run of the same configuration): its Sides, path by path."""
    runs, errors = [], []
    for path in paths:
        sides, errs = measure(path, config)
        runs.append(sides)
        errors.extend(errs)
    return runs, errors


def _measure_both(base, new, config: Config):
    """Both sides' ``measure_runs``, BASE in a forked process while NEW is measured here: a diff costs about the
    longer of the two analyses, not their sum. Without fork (or with threads running, which fork does not copy), one
    after the other."""
    if not can_fork():
        return measure_runs(base, config), measure_runs(new, config)
    from tracelint.trace.analyze import internal_error

    with fork(partial(_measure_runs_safely, base, config)) as child:
        ours = measure_runs(new, config)
        try:
            outcome = child.result()
        except WorkerFailed as failed:  # BASE's one error, each of its paths a run of no Sides (as pair_runs reads)
            error = internal_error(str(base[0]), failed.error) if failed.error is not None else InputError(
                str(base[0]), f"internal error while analyzing: the analysis process died (exit code "
                              f"{failed.exitcode}; out of memory?)")
            outcome = ([[] for _ in base], [error])
    return outcome, ours


def _measure_runs_safely(paths, config: Config) -> tuple[list[list[Side]], list[InputError]]:
    from tracelint.trace.analyze import internal_error

    try:
        return measure_runs(paths, config)
    except Exception as exc:  # measure catches per file; this is the last resort
        return [[] for _ in paths], [internal_error(str(paths[0]), exc)]


def pool(runs: Sequence[Side]) -> Side:
    """One Side for several runs of the same configuration (one rank): the first run's path and rank, the verdict
    most runs reached, the mean of each numeric metric, kernel and sync site over the runs (a kernel or site absent
    from a run counts 0 there), every run's steps, and the findings of any run (one per ``finding_key``)."""
    if len(runs) == 1:
        return runs[0]
    k = len(runs)
    verdicts = [r.verdict for r in runs]
    verdict = max(dict.fromkeys(verdicts), key=verdicts.count)
    metrics = dict(runs[0].metrics)
    for name, value in metrics.items():
        values = [r.metrics.get(name) for r in runs]
        if all(M.is_number(v) for v in values):
            metrics[name] = statistics.fmean(values) if isinstance(value, float) or len(set(values)) > 1 else value
    kernels = {}
    for name in dict.fromkeys(n for r in runs for n in r.kernels):
        group = next(r.kernels[name][0] for r in runs if name in r.kernels)
        kernels[name] = (group, sum(r.kernels[name][1] for r in runs if name in r.kernels) / k,
                         sum(r.kernels[name][2] for r in runs if name in r.kernels) / k)
    sites = {e: sum(r.sync_sites.get(e, 0.0) for r in runs) / k for r in runs for e in r.sync_sites}
    findings = {}
    for r in runs:
        for f in r.findings:
            findings.setdefault(finding_key(f), f)
    first = runs[0]
    evidence = next(r.evidence for r in runs if r.verdict == verdict)
    return Side(first.path, first.rank, verdict, evidence, metrics, tuple(x for r in runs for x in r.step_us),
                tuple(x for r in runs for x in r.gpu_us), kernels, sites, tuple(findings.values()),
                any(r.cpu_only for r in runs), first.start_us)


# --- the comparison ----------------------------------------------------------------------------------------------

StepChange = Change  # the name the API had before GPU time per step joined step time


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
class Gate:
    """Why a pair passed or failed the gate (the JSON report's ``gate``)."""

    max_regression_pct: float = DEFAULT_MAX_REGRESSION_PCT
    measure: str = STEP_TIME  # STEP_TIME | GPU_TIME | MFU: the measure the timing gate compares
    slower: bool = False  # that measure is over the limit and over its noise
    crossed: tuple[str, ...] = ()  # the gate thresholds NEW crossed, as "max-syncs-per-step = 0: 0 → 1"
    fail_on_new_findings: bool = True
    fail_on: Severity = Severity.WARNING  # the lowest severity of a new finding that fails the gate
    blocking: tuple[Finding, ...] = ()  # NEW's new findings at fail_on or above (they fail it when enabled)
    note: str | None = None  # why the gate did not compare the measure gate-measure asked for (MFU: none on a side)

    @property
    def failed(self) -> bool:
        return bool(self.slower or self.crossed or (self.fail_on_new_findings and self.blocking))

    def as_dict(self) -> dict:
        return {"max_regression_pct": self.max_regression_pct, "thresholds_crossed": list(self.crossed),
                "measure": self.measure, "slower": self.slower, "fail_on_new_findings": self.fail_on_new_findings,
                "fail_on": str(self.fail_on), "new_findings": [finding_words(f) for f in self.blocking],
                "note": self.note}


@dataclass(frozen=True, slots=True)
class TraceDiff:
    """One pair of traces (or one rank of two job folders; or of several runs a side) compared."""

    base: str
    new: str
    rank: int | None
    step: Change
    verdict: tuple[str, str]
    metrics: tuple[MetricChange, ...]
    kernels: tuple[KernelChange, ...]  # by |change| per step, the largest first (KERNELS_LISTED of them)
    classes: tuple[KernelChange, ...]  # time per step by class
    kernel_names: tuple[int, int, int]  # kernel names on both sides, appeared, vanished
    new_findings: tuple[Finding, ...]
    fixed_findings: tuple[Finding, ...]
    summary: str
    gate: Gate = Gate()
    gpu: Change | None = None  # GPU time per step (None: a side without profiled steps)
    base_runs: tuple[str, ...] = ()  # every trace of BASE's side (one per run), when there are several
    new_runs: tuple[str, ...] = ()
    mfu: MfuChange | None = None

    @property
    def regression(self) -> bool:
        return self.gate.failed

    @property
    def crossed(self) -> tuple[str, ...]:
        return self.gate.crossed

    @property
    def max_regression_pct(self) -> float:
        return self.gate.max_regression_pct

    def as_dict(self) -> dict:
        """The JSON report's ``diffs`` entry (tracelint.render.json documents it)."""
        return {
            "base": self.base, "new": self.new, "rank": self.rank,
            "runs": {"base": list(self.base_runs or [self.base]), "new": list(self.new_runs or [self.new])},
            "step_ms": self.step.as_dict(),
            "gpu_ms": self.gpu.as_dict() if self.gpu is not None else None,
            "mfu": self.mfu.as_dict() if self.mfu is not None else None,
            "steps": {"base": self.step.base_steps, "new": self.step.new_steps, "few": self.step.few_steps},
            "verdict": {"base": self.verdict[0], "new": self.verdict[1]},
            "metrics": [m.as_dict() for m in self.metrics],
            "kernels": [k.as_dict() for k in self.kernels],
            "kernel_classes": [k.as_dict() for k in self.classes],
            "kernel_names": dict(zip(("both", "appeared", "vanished"), self.kernel_names, strict=True)),
            "findings": {"new": [finding_dict(f) for f in self.new_findings],
                         "fixed": [finding_dict(f) for f in self.fixed_findings]},
            "regression": self.regression,
            "gate": self.gate.as_dict(),
            "summary": self.summary,
        }


@dataclass(frozen=True, slots=True)
class DiffReport:
    diffs: tuple[TraceDiff, ...]
    errors: tuple[InputError, ...] = ()
    notes: tuple[str, ...] = ()  # how the traces were paired where a choice was made (tracelint.diff.pairing)

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
                thresholds: Iterable[tuple[str, float]] | None = None, noise_floor_pct: float | None = None,
                fail_on_new_findings: bool | None = None, gate_measure: str | None = None) -> DiffReport:
    """Compare trace (or job folder) ``new`` with ``base``; either may be a list of paths, runs of the same
    configuration, whose spread is the noise. ``max_regression_pct``, ``thresholds`` (TL010 gate keys),
    ``noise_floor_pct``, ``fail_on_new_findings`` and ``gate_measure`` ("time" or "mfu") default to the config's
    ``[tool.tracelint.diff]``.
    Unreadable inputs are the report's errors, never exceptions."""
    config = config or Config()
    base_paths = [base] if isinstance(base, (str, os.PathLike)) else list(base)
    new_paths = [new] if isinstance(new, (str, os.PathLike)) else list(new)
    if not base_paths or not new_paths:
        raise ValueError("each side needs at least one trace")
    settings = dict(
        max_regression_pct=config.diff_max_regression_pct if max_regression_pct is None else max_regression_pct,
        thresholds=dict(config.diff_thresholds if thresholds is None else thresholds),
        noise_floor_pct=config.diff_noise_floor_pct if noise_floor_pct is None else noise_floor_pct,
        fail_on_new_findings=(config.diff_fail_on_new_findings if fail_on_new_findings is None
                              else fail_on_new_findings),
        fail_on=config.fail_on, gate_measure=config.diff_gate_measure if gate_measure is None else gate_measure)
    (base_runs, base_errors), (new_runs, new_errors) = _measure_both(base_paths, new_paths, config)
    pairs, unmatched, notes = pair_runs(base_runs, new_runs, base_paths, new_paths)
    return DiffReport(tuple(compare(b, n, **settings) for b, n in pairs), (*base_errors, *new_errors, *unmatched),
                      tuple(notes))


def compare(base: Side | Sequence[Side], new: Side | Sequence[Side], *,
            max_regression_pct: float = DEFAULT_MAX_REGRESSION_PCT, thresholds: dict | None = None,
            noise_floor_pct: float | None = None, fail_on_new_findings: bool = True,
            fail_on: Severity = Severity.WARNING, gate_measure: str = TIME) -> TraceDiff:
    """The diff of two measured sides, each one Side or the Sides of several runs (pure: no file is read).
    ``noise_floor_pct`` None: the measured default of the gate's measure (DEFAULT_NOISE_FLOOR_PCT);
    ``gate_measure`` MFU: the timing gate compares MFU where both sides have a gateable one (module docstring)."""
    base_runs = [base] if isinstance(base, Side) else list(base)
    new_runs = [new] if isinstance(new, Side) else list(new)
    pooled_base, pooled_new = pool(base_runs), pool(new_runs)

    def floor(measure: str) -> float:
        return DEFAULT_NOISE_FLOOR_PCT[measure] if noise_floor_pct is None else noise_floor_pct

    step = change([r.step_us for r in base_runs], [r.step_us for r in new_runs], floor(STEP_TIME))
    gpu = None
    if all(r.gpu_us for r in (*base_runs, *new_runs)):
        gpu = change([r.gpu_us for r in base_runs], [r.gpu_us for r in new_runs], floor(GPU_TIME))
    measure = GPU_TIME if gpu is not None and _gpu_bound(pooled_base) and _gpu_bound(pooled_new) else STEP_TIME
    timed = gpu if measure == GPU_TIME else step
    # MFU's noise is that of the time it divides by: the GPU's busy time per profiled step, unless a side has its
    # unprofiled step (module docstring)
    busy = gpu is not None and not any(map(unprofiled_basis, (pooled_base.metrics, pooled_new.metrics)))
    mfu = mfu_change(pooled_base.metrics, pooled_new.metrics, gpu if busy else step, max_regression_pct,
                     cpu_only=(pooled_base.cpu_only, pooled_new.cpu_only), noise_from="gpu_ms" if busy else "step_ms")
    note = None
    if gate_measure == MFU and mfu.gateable:
        measure = MFU
    elif gate_measure == MFU:
        timed_words = "GPU time per step" if measure == GPU_TIME else "step time"
        note = f'gate-measure = "mfu", but {mfu.why}: gated on {timed_words}'
    steps = (_steps(pooled_base), _steps(pooled_new))
    metrics = tuple(_metric_changes(pooled_base.metrics, pooled_new.metrics, timed,
                                    base_step_us=_mean(pooled_base.step_us), steps=steps))
    kernels, classes, names = _kernel_changes(pooled_base.kernels, pooled_new.kernels)
    new_findings, fixed = finding_changes(pooled_base.findings, pooled_new.findings)
    gate = Gate(max_regression_pct, measure, mfu.dropped if measure == MFU else beyond(timed, max_regression_pct),
                tuple(_crossed(pooled_base.metrics, pooled_new.metrics, thresholds or {})), fail_on_new_findings,
                fail_on, tuple(f for f in new_findings if f.severity >= fail_on), note)
    summary = summarize(pooled_base, pooled_new, step, classes, new_findings, fixed, gate=gate, gpu=gpu, mfu=mfu)
    many = len(base_runs) > 1 or len(new_runs) > 1
    return TraceDiff(pooled_base.path, pooled_new.path,
                     pooled_new.rank if pooled_new.rank is not None else pooled_base.rank, step,
                     (pooled_base.verdict, pooled_new.verdict), metrics, kernels, classes, names, new_findings, fixed,
                     summary, gate, gpu, tuple(r.path for r in base_runs) if many else (),
                     tuple(r.path for r in new_runs) if many else (), mfu)


def _gpu_bound(side: Side) -> bool:
    return side.verdict == GPU_BOUND


def _steps(side: Side) -> int:
    return max(1, int(M.STEPS.of(side.metrics) or 1))


def _mean(values) -> float | None:
    return statistics.fmean(values) if values else None


def _round(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


def step_change(base_us: Sequence[float], new_us: Sequence[float],
                floor_pct: float | None = None) -> Change:
    """The step-time Change of one trace a side from its per-step times in µs (tracelint.diff.noise.change)."""
    return change([base_us], [new_us], DEFAULT_NOISE_FLOOR_PCT[STEP_TIME] if floor_pct is None else floor_pct)


def _metric_changes(base: dict, new: dict, step: StepChange, *, base_step_us: float | None, steps: tuple[int, int]):
    order = {name: i for i, name in enumerate(registry())}
    names = sorted({*base, *new}, key=lambda k: (order.get(k, len(order)), k))
    band = max(step.noise_pct or 0.0, _MIN_MOVE_PCT)
    for name in names:
        b, n = base.get(name), new.get(name)
        if not (M.is_number(b) and M.is_number(n)):
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
    if M.is_number(value):
        return float(value)
    if metric is M.GPU_IDLE_PCT and M.is_number(M.GPU_BUSY_PCT.of(metrics)):
        return 100.0 - M.GPU_BUSY_PCT.of(metrics)
    if metric is M.STEP_MS:
        spans = [v for v in (M.STEP_CPU_US_MEAN.of(metrics), M.STEP_GPU_SPAN_US_MEAN.of(metrics)) if M.is_number(v)]
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


def summarize(base: Side, new: Side, step: Change, classes: tuple[KernelChange, ...],
              new_findings: tuple[Finding, ...], fixed: tuple[Finding, ...], *, gate: Gate | None = None,
              gpu: Change | None = None, mfu: MfuChange | None = None) -> str:
    """One line: the new findings that fail the gate, the change of the gate's measure, then what explains it
    (module docstring)."""
    gate = gate or Gate()
    blocking = gate.blocking if gate.fail_on_new_findings else ()
    lead = ""
    if blocking:
        more = f" (+{len(blocking) - 2} more)" if len(blocking) > 2 else ""
        lead = (f"new finding{'s' if len(blocking) > 1 else ''}: "
                f"{', '.join(finding_words(f) for f in blocking[:2])}{more}; ")
    timing = _timing(base, new, step, classes, [f for f in new_findings if f not in blocking], fixed, gate, gpu, mfu)
    return lead + timing + _gpu_absent(base, new)


def _gpu_absent(base: Side, new: Side) -> str:
    """The clause that says a side had no GPU (its step time is the host's; GPU time, kernels and idle are not)."""
    which = {(True, True): "either trace", (True, False): "BASE", (False, True): "NEW"}.get((base.cpu_only,
                                                                                            new.cpu_only))
    if which is None:
        return ""
    return (f"; no GPU activity in {which} (CPU-only): step time is the host's ProfilerStep span, and the GPU "
            "measures (GPU time per step, kernels, GPU idle) are absent")


def _timing(base: Side, new: Side, step: Change, classes, new_findings, fixed, gate: Gate, gpu: Change | None,
            mfu: MfuChange | None = None) -> str:
    if step.change_pct is None:
        return f"step time {_ms(step.base_ms)} → {_ms(step.new_ms)}: no change can be measured"
    if step.change_pct == 0 and base.step_us == new.step_us:
        return f"no change: step time {_ms(step.base_ms)} in both"
    head = f"{step.change_pct:+.1f}% step time ({_ms(step.base_ms)} → {_ms(step.new_ms)}"
    timed = step
    if gate.measure == GPU_TIME and gpu is not None and gpu.change_pct is not None:
        timed = gpu
        head += f"; GPU time per step {gpu.change_pct:+.1f}%"
    if gate.measure == MFU and mfu is not None:
        head += f"; MFU {format_metric(M.MFU_PCT.name, mfu.base)} → {format_metric(M.MFU_PCT.name, mfu.new)}"
    if base.verdict != new.verdict:
        head += f"; {base.verdict} → {new.verdict}"
    head += ")"
    noise = timed.noise_pct
    if noise is not None and abs(timed.change_pct) <= noise:
        return f"{head}: within the noise (±{noise:.1f}%)"
    if abs(timed.change_pct) < _MIN_MOVE_PCT:
        return f"{head}: under {_MIN_MOVE_PCT:g}%, no change worth a cause"
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
            if not (M.is_number(b) or M.is_number(n)):
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
    return f"{head}: {tail}" if tail else f"{head}: no single cause stands out (see the metrics)"


def _clause(cause: Cause, impact_us: float, base: Side, new: Side, steps, by_class) -> str:
    parts = []
    if cause.count is not None:
        b, n = cause.count.of(base.metrics), cause.count.of(new.metrics)
        if M.is_number(b) and M.is_number(n) and (b == 0 or abs(n - b) / abs(b) * 100 > _MIN_MOVE_PCT):
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


__all__ = ["CAUSES", "Change", "DiffReport", "Gate", "KernelChange", "MetricChange", "Side", "StepChange", "TraceDiff",
           "compare", "diff_traces", "finding_key", "measure", "measure_runs", "pool", "side_of", "step_change",
           "summarize"]
