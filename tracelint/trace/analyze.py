"""The trace analyzer's front door: a trace file in, a Report (verdict, metrics, findings per rank) out.

``analyze_trace(path)`` reads one file: one TraceAnalysis (and TraceSummary) per device with GPU activity — one for
a CPU-only trace, whose verdict is ``unknown`` — then runs every discovered TraceRule on each.

``analyze_paths(paths)`` reads many: a file gives one Report; a directory one per trace in it (the rule of
tracelint.trace.files, which also names the JSON files it skipped). Reports whose files sit in one directory and
look like the ranks of one job (same world size, distinct ranks, profiled within ten minutes of each other) are
followed by one more Report for that directory, the rank summary: its verdict is the slowest rank's (largest mean
step time), and its metrics give the spread across ranks.
An unreadable file becomes an InputError, never an exception.
"""
from __future__ import annotations

import gc
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tracelint.engine import Config, Finding, InputError, TraceSummary, discover
from tracelint.engine import metrics as M
from tracelint.trace.files import Skipped, traces_in
from tracelint.trace.load import NotATrace, TraceReadError, open_trace
from tracelint.trace.metrics import TraceAnalysis, analyze_device
from tracelint.trace.model import TraceModel, build_model
from tracelint.trace.rule import TraceRule
from tracelint.trace.verdict import Verdict, decide

_SAME_JOB_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class Report:
    """What one trace file (or one multi-rank directory) gives: per-rank summaries, findings, warnings."""

    path: str
    summaries: list[TraceSummary]
    findings: list[Finding] = field(default_factory=list)
    warnings: tuple[str, ...] = ()
    analyses: list[TraceAnalysis] = field(default_factory=list, repr=False)  # empty for a rank summary

    @property
    def verdict(self) -> str:
        return self.summaries[0].verdict

    @property
    def evidence(self) -> str:
        return self.summaries[0].evidence

    @property
    def metrics(self) -> dict:
        return self.summaries[0].metrics

    @property
    def truncated(self) -> bool:
        return any(a.truncated for a in self.analyses)


def analyze_trace(path, *, config: Config | None = None, progress=None) -> Report:
    """Analyze one trace file; raises TraceReadError when it is not a readable trace.

    ``progress(done_bytes, total_bytes)``, when given, is called as the events are read."""
    config = config or Config()
    path = Path(path)
    trace = open_trace(path, progress=progress)
    # The model is a million small acyclic tuples: the cyclic garbage collector would rescan them over and over
    # while they are built (that alone doubles the analysis time), and there is nothing cyclic for it to free.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            model = build_model(trace.iter_chunks(), lambda: trace.meta)
        finally:
            trace.close()
        if trace.events_read == 0:  # nothing to report on: one line, like any other unreadable input
            raise TraceReadError(trace.warnings[0] if trace.truncated and trace.warnings
                                 else "empty trace: traceEvents holds no events")
        warnings = list(trace.warnings)
        if model.skipped_events:
            warnings.append(f"{model.skipped_events} events with unreadable fields were skipped")
        return report_from_model(str(path), model, config=config, warnings=tuple(warnings), truncated=trace.truncated)
    finally:
        if gc_was_enabled:
            _promote_all()
            gc.enable()


def _promote_all() -> None:
    """Move every object the collector tracks into its oldest generation, without scanning any of them.

    Re-enabling the collector with the model's million fresh tuples in the youngest generation would make the next
    young collection traverse all of them (0.1-0.15 s on a 250 MB trace) only to find nothing to free. Freezing and
    unfreezing moves them straight to the oldest generation, which is collected rarely; cycles there are still
    collected then, so a long-lived caller (``on_trace_ready`` in a training process) leaks nothing.
    """
    gc.freeze()
    gc.unfreeze()


def report_from_model(path: str, model: TraceModel, *, config: Config | None = None, warnings: tuple[str, ...] = (),
                      truncated: bool = False) -> Report:
    """The Report of an already built model (tests build models from event lists)."""
    config = config or Config()
    min_gap = config.threshold("min-idle-gap-us")
    devices = _devices_by_activity(model) or [None]
    analyses = [analyze_device(path, model, device, min_gap_us=min_gap, warnings=warnings, truncated=truncated)
                for device in devices]
    verdicts = [decide(a.metrics, config, cpu_only=a.device is None, truncated=truncated) for a in analyses]
    findings = _run_rules(analyses, verdicts, config)
    summaries = [TraceSummary(path, v.kind, v.evidence, a.metrics, rank=a.rank, warnings=warnings)
                 for a, v in zip(analyses, verdicts, strict=True)]
    return Report(path, summaries, findings, warnings, analyses)


def _devices_by_activity(model: TraceModel) -> list[int]:
    """Devices with GPU work, the busiest first (its summary is the Report's headline)."""
    busy: dict[int, float] = {}
    for g in model.gpu:
        busy[g.device] = busy.get(g.device, 0.0) + (g.end - g.start)
    return sorted(busy, key=lambda d: (-busy[d], d))


def _run_rules(analyses: list[TraceAnalysis], verdicts: list[Verdict], config: Config) -> list[Finding]:
    rules = [cls() for cls in discover("tracelint.trace.rules", TraceRule) if config.enabled(cls.code)]
    seen: set[tuple] = set()
    findings: list[Finding] = []

    def add(finding: Finding) -> None:
        kept = config.apply(finding)
        key = (finding.code, finding.location, finding.message)
        if kept is not None and key not in seen:  # file-level rules fire once per device: keep one
            seen.add(key)
            findings.append(kept)

    for analysis, verdict in zip(analyses, verdicts, strict=True):
        for rule in rules:
            for finding in rule.check(analysis, verdict, config):
                add(finding)
    findings.sort(key=Finding.sort_key)
    return findings


# ---------------------------------------------------------------------------------------------------------------


class _ProgressLine:
    """``tracelint: reading big.json 41% (102/248 MB)`` on stderr, rewritten in place, for traces over 20 MB."""

    MIN_BYTES = 20 << 20

    def __init__(self, path: Path) -> None:
        self.path, self.shown = path, -1

    def __call__(self, done: int, total: int) -> None:
        if total < self.MIN_BYTES:
            return
        pct = 100 * done // max(total, 1)
        if pct // 5 != self.shown // 5:
            self.shown = pct
            print(f"\rtracelint: reading {self.path.name} {pct}% ({done >> 20}/{total >> 20} MB)", end="",
                  file=sys.stderr, flush=True)

    def finish(self) -> None:
        if self.shown >= 0:
            print(f"\rtracelint: read {self.path.name}" + " " * 30, file=sys.stderr, flush=True)


def analyze_paths(paths: Iterable, *, config: Config | None = None,
                  progress: bool = False) -> Iterator[Report | InputError | Skipped]:
    """A Report per trace file, then the rank summaries; a directory gives its traces by the rule of
    tracelint.trace.files, and a Skipped record for each JSON file in it that is not a trace."""
    config = config or Config()
    by_dir: dict[Path, list[Report]] = {}
    for raw in paths:
        path = Path(raw)
        searched = path.is_dir()
        if searched:
            files = traces_in(path, named_only=False, excluded=config.excluded)
            if not files:
                yield InputError(str(path), "no trace (*.json, *.json.gz) in this directory")
        elif path.exists():
            files = [path]
        else:
            yield InputError(str(path), "no such file or directory")
            continue
        for file in files:
            line = _ProgressLine(file) if progress else None
            try:
                report = analyze_trace(file, config=config, progress=line)
            except NotATrace as exc:
                # found by a folder search, other JSON is no error (tracelint.trace.files); named by the user, it is
                yield Skipped(str(file), str(exc)) if searched else InputError(str(file), str(exc))
                continue
            except TraceReadError as exc:
                yield InputError(str(file), str(exc))
                continue
            except OSError as exc:
                yield InputError(str(file), exc.strerror or str(exc))
                continue
            finally:
                if line is not None:
                    line.finish()
            by_dir.setdefault(file.parent, []).append(report)
            yield report
    for directory, reports in by_dir.items():
        summary = rank_summary(directory, reports)
        if summary is not None:
            yield summary


def _job_key(report: Report) -> tuple | None:
    a = report.analyses[0] if report.analyses else None
    if a is None or a.rank is None or a.model.world_size is None:
        return None
    return (a.model.world_size,)


def _start(report: Report) -> float | None:
    model = report.analyses[0].model
    firsts = [seq[0].start for seq in (model.steps, model.ops, model.gpu) if seq]
    return min(firsts) if firsts else None


def rank_summary(directory: Path, reports: list[Report]) -> Report | None:
    """One Report over the ranks of one job in ``directory``, or None when the reports are not such ranks."""
    groups: dict[tuple, list[Report]] = {}
    for report in reports:
        key = _job_key(report)
        if key is not None:
            groups.setdefault(key, []).append(report)
    for members in groups.values():
        ranks = [m.analyses[0].rank for m in members]
        starts = [s for s in map(_start, members) if s is not None]
        # Trace clocks are µs since the epoch (or since boot) on every rank of one job: ranks profiled at the
        # same time start within minutes of each other; unrelated files in one folder do not.
        if len(members) < 2 or len(set(ranks)) != len(ranks) or len(starts) != len(members):
            continue
        if max(starts) - min(starts) > _SAME_JOB_SECONDS * 1e6:
            continue
        return _summarize_ranks(directory, members)
    return None


def _summarize_ranks(directory: Path, members: list[Report]) -> Report:
    def step_time(report: Report) -> float:
        m = report.metrics
        return M.STEP_CPU_US_MEAN.of(m) or M.STEP_GPU_SPAN_US_MEAN.of(m) or 0.0

    ordered = sorted(members, key=step_time)
    fastest, slowest = ordered[0], ordered[-1]
    slow_t, fast_t = step_time(slowest), step_time(fastest)
    spread = round(100.0 * (slow_t - fast_t) / fast_t, 1) if fast_t else None
    busy = [M.GPU_BUSY_PCT.of(r.metrics) for r in members if M.GPU_BUSY_PCT.of(r.metrics) is not None]
    metrics = {
        "ranks": len(members),
        "world_size": slowest.analyses[0].model.world_size,
        "slowest_rank": slowest.analyses[0].rank,
        "fastest_rank": fastest.analyses[0].rank,
        "step_cpu_us_max": slow_t,
        "step_cpu_us_min": fast_t,
        "step_spread_pct": spread,
        "gpu_busy_pct_min": min(busy) if busy else None,
        "gpu_busy_pct_max": max(busy) if busy else None,
        "verdicts": {r.analyses[0].rank: r.verdict for r in members},
    }
    evidence = (f"{slowest.verdict}: slowest of {len(members)} ranks is rank {metrics['slowest_rank']} "
                f"({slow_t / 1000:.1f} ms per step, {spread if spread is not None else '?'}% over the fastest); "
                f"{slowest.evidence.partition(': ')[2]}")
    summary = TraceSummary(str(directory), slowest.verdict, evidence, metrics, rank=None)
    return Report(str(directory), [summary])
