"""The trace analyzer's front door: a trace file in, a Report (verdict, metrics, findings per rank) out.

``analyze_trace(path)`` reads one file: one TraceAnalysis (and TraceSummary) per device with GPU activity — one for
a CPU-only trace, whose verdict is ``unknown`` — then runs every discovered TraceRule on each.

``analyze_paths(paths)`` reads many: a file gives one Report; a directory one per trace in it (the rule of
tracelint.trace.files, which also names the JSON files it skipped). Files that sit in one directory and look like
the ranks of one job (same world size, distinct ranks, profiled within ten minutes of each other) are read together
before they are judged: their collectives are matched and each rank's wait for its peers measured
(tracelint.trace.job), so a rank's verdict can say whom it waits for. Their Reports are followed by one more for the
directory, the job summary: its verdict is the straggler's when the job has one (it is what to fix), else the
slowest rank's (largest mean step time); its metrics give the spread across ranks, and its findings are the job
rules' (TL602).
An unreadable file becomes an InputError, never an exception; so does a bug met while reading, measuring or
judging one file ("internal error while analyzing: ..."): the other files are still analyzed, and a job whose
summary fails keeps its ranks' Reports.
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
from tracelint.trace.job import Job, analyze_job
from tracelint.trace.load import NotATrace, TraceReadError, open_trace
from tracelint.trace.metrics import TraceAnalysis, analyze_device
from tracelint.trace.model import TraceModel, build_model, problem_warnings
from tracelint.trace.rule import JobRule, TraceRule
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


@dataclass(slots=True)
class _Read:
    """One trace file read and its devices measured, not yet judged (verdicts and rules wait for the job)."""

    path: str
    analyses: list[TraceAnalysis]
    warnings: tuple[str, ...]
    truncated: bool


def analyze_trace(path, *, config: Config | None = None, progress=None) -> Report:
    """Analyze one trace file; raises TraceReadError when it is not a readable trace.

    ``progress(done_bytes, total_bytes)``, when given, is called as the events are read."""
    config = config or Config()
    return _judge(_read(path, config, progress), config)


def _read(path, config: Config, progress=None) -> _Read:
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
        warnings = list(trace.warnings) + problem_warnings(model)
        return _measure(str(path), model, config, tuple(warnings), trace.truncated)
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
    return _judge(_measure(path, model, config, warnings, truncated), config)


def _measure(path: str, model: TraceModel, config: Config, warnings: tuple[str, ...], truncated: bool) -> _Read:
    min_gap = config.threshold("min-idle-gap-us")
    devices = _devices_by_activity(model) or [None]
    analyses = [analyze_device(path, model, device, min_gap_us=min_gap, warnings=warnings, truncated=truncated)
                for device in devices]
    return _Read(path, analyses, warnings, truncated)


def _judge(read: _Read, config: Config, job: Job | None = None) -> Report:
    """Verdicts and findings of a measured file; ``job``: the job its rank belongs to, when its peers were read."""
    waits = job.waits if job is not None else {}
    verdicts = [decide(a.metrics, config, cpu_only=a.device is None, truncated=read.truncated,
                       wait=waits.get(a.rank) if job is not None and job.analyses.get(a.rank) is a else None,
                       recording=a.recording)
                for a in read.analyses]
    findings = _run_rules(read.analyses, verdicts, config)
    summaries = [TraceSummary(read.path, v.kind, v.evidence, a.metrics, rank=a.rank, warnings=read.warnings,
                              profiler=a.recording.as_dict())
                 for a, v in zip(read.analyses, verdicts, strict=True)]
    return Report(read.path, summaries, findings, read.warnings, read.analyses)


def _devices_by_activity(model: TraceModel) -> list[int]:
    """Devices with GPU work, the busiest first (its summary is the Report's headline)."""
    busy: dict[int, float] = {}
    for g in model.gpu:
        busy[g.device] = busy.get(g.device, 0.0) + (g.end - g.start)
    return sorted(busy, key=lambda d: (-busy[d], d))


def _rules(config: Config, base: type) -> list:
    return [cls() for cls in discover("tracelint.trace.rules", base) if config.enabled(cls.code)]


def _run_rules(analyses: list[TraceAnalysis], verdicts: list[Verdict], config: Config) -> list[Finding]:
    rules = [rule for rule in _rules(config, TraceRule) if not isinstance(rule, JobRule)]
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
        from tracelint.render._escape import log_line

        self.path, self.shown = path, -1
        self.name = log_line(path.name)  # a file name cannot move the cursor or forge a CI annotation

    def __call__(self, done: int, total: int) -> None:
        if total < self.MIN_BYTES:
            return
        pct = 100 * done // max(total, 1)
        if pct // 5 != self.shown // 5:
            self.shown = pct
            print(f"\rtracelint: reading {self.name} {pct}% ({done >> 20}/{total >> 20} MB)", end="",
                  file=sys.stderr, flush=True)

    def finish(self) -> None:
        if self.shown >= 0:
            print(f"\rtracelint: read {self.name}" + " " * 30, file=sys.stderr, flush=True)


def analyze_paths(paths: Iterable, *, config: Config | None = None,
                  progress: bool = False) -> Iterator[Report | InputError | Skipped]:
    """A Report per trace file, then the job summaries; a directory gives its traces by the rule of
    tracelint.trace.files, and a Skipped record for each JSON file in it that is not a trace (or not a regular
    file). Unreadable inputs come as they are met; the Reports once every file is read, since a rank is judged with
    its peers. Nothing raises for one bad input: an unexpected error is that input's InputError."""
    config = config or Config()
    reads: list[_Read] = []
    for raw in paths:
        path = Path(raw)
        try:
            searched = path.is_dir()
            if searched:
                notes: list[Skipped] = []
                files = traces_in(path, named_only=False, excluded=config.excluded, skipped=notes)
                yield from notes
                if not files:
                    yield InputError(str(path), "no trace (*.json, *.json.gz) in this directory")
            elif path.exists():
                files = [path]
            else:
                yield InputError(str(path), "no such file or directory")
                continue
        except OSError as exc:
            yield InputError(str(path), f"cannot read: {exc.strerror or exc}")
            continue
        for file in files:
            line = _ProgressLine(file) if progress else None
            try:
                reads.append(_read(file, config, progress=line))
            except NotATrace as exc:
                # found by a folder search, other JSON is no error (tracelint.trace.files); named by the user, it is
                yield Skipped(str(file), str(exc)) if searched else InputError(str(file), str(exc))
            except TraceReadError as exc:
                yield InputError(str(file), str(exc))
            except OSError as exc:
                yield InputError(str(file), exc.strerror or str(exc))
            except MemoryError:
                yield InputError(str(file), "out of memory while analyzing (see TRACELINT_MAX_TRACE_BYTES)")
            except Exception as exc:  # a bug: this file's error, never the whole run's
                yield internal_error(str(file), exc)
            finally:
                if line is not None:
                    line.finish()
    by_dir: dict[Path, list[_Read]] = {}
    for read in reads:
        by_dir.setdefault(Path(read.path).parent, []).append(read)
    jobs: list[tuple[Path, list[_Read], Job]] = []
    job_of: dict[int, Job] = {}
    for directory, members in by_dir.items():
        try:
            ranks = job_members(members)
            if ranks:
                job = analyze_job({r.analyses[0].rank: r.analyses[0] for r in ranks}, config)
                job.path = str(directory)
                jobs.append((directory, ranks, job))
                job_of.update((id(r), job) for r in ranks)
        except Exception as exc:  # the ranks are still judged, each on its own
            yield internal_error(str(directory), exc, "matching the ranks of a job")
    reports: dict[int, Report] = {}
    for read in reads:
        try:
            reports[id(read)] = report = _judge(read, config, job_of.get(id(read)))
        except Exception as exc:
            yield internal_error(read.path, exc)
            continue
        yield report
    for directory, ranks, job in jobs:
        if not all(id(r) in reports for r in ranks):
            continue
        try:
            summary = _summarize_job(directory, [reports[id(r)] for r in ranks], job, config)
        except Exception as exc:  # the ranks' Reports are out already
            yield internal_error(str(directory), exc, "summarizing the job")
            continue
        yield summary


def internal_error(path: str, exc: BaseException, doing: str = "analyzing") -> InputError:
    """A bug met on an input, as that input's one-line error (the run goes on, and exits 2)."""
    text = " ".join(str(exc).split())
    if len(text) > 300:
        text = text[:297] + "..."
    return InputError(path, f"internal error while {doing}: {type(exc).__name__}" + (f": {text}" if text else ""))


def _job_key(read: _Read) -> tuple | None:
    a = read.analyses[0] if read.analyses else None
    if a is None or a.rank is None or a.model.world_size is None:
        return None
    return (a.model.world_size,)


def _start(read: _Read) -> float | None:
    model = read.analyses[0].model
    firsts = [seq[0].start for seq in (model.steps, model.ops, model.gpu) if seq]
    return min(firsts) if firsts else None


def job_members(reads: list) -> list:
    """The files of one directory that are the ranks of one job (same world size, distinct ranks, profiled within
    ten minutes of each other), or [] when they are not such ranks."""
    groups: dict[tuple, list] = {}
    for read in reads:
        key = _job_key(read)
        if key is not None:
            groups.setdefault(key, []).append(read)
    for members in groups.values():
        ranks = [m.analyses[0].rank for m in members]
        starts = [s for s in map(_start, members) if s is not None]
        # Trace clocks are µs since the epoch (or since boot) on every rank of one job: ranks profiled at the
        # same time start within minutes of each other; unrelated files in one folder do not.
        if len(members) < 2 or len(set(ranks)) != len(ranks) or len(starts) != len(members):
            continue
        if max(starts) - min(starts) > _SAME_JOB_SECONDS * 1e6:
            continue
        return members
    return []


def _summarize_job(directory: Path, members: list[Report], job: Job, config: Config) -> Report:
    """The job summary: spread of the ranks, the straggler, and the job rules' findings."""
    def step_time(report: Report) -> float:
        m = report.metrics
        return M.STEP_CPU_US_MEAN.of(m) or M.STEP_GPU_SPAN_US_MEAN.of(m) or 0.0

    ordered = sorted(members, key=step_time)
    fastest, slowest = ordered[0], ordered[-1]
    slow_t, fast_t = step_time(slowest), step_time(fastest)
    spread = round(100.0 * (slow_t - fast_t) / fast_t, 1) if fast_t else None
    busy = [M.GPU_BUSY_PCT.of(r.metrics) for r in members if M.GPU_BUSY_PCT.of(r.metrics) is not None]
    waits = [w.wait_us for w in job.waits.values()]
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
        "straggler_rank": job.straggler,
        "straggler_wait_us": job.straggler_wait_us,
        "comm_wait_us_max": max(waits) if waits else None,
        "collectives_matched": job.matched,
        "collectives_unmatched": job.unmatched,
        "clock_offset_us_max": job.offset_max,
    }
    by_rank = {r.analyses[0].rank: r for r in members}
    verdicts = {rank: Verdict(r.verdict, r.evidence) for rank, r in by_rank.items()}
    if job.straggler is not None:
        straggler = by_rank[job.straggler]
        others = [r for r in by_rank if r != job.straggler]
        whom = f"rank {others[0]}" if len(others) == 1 else f"the other {len(others)} ranks"
        verb = "waits" if len(others) == 1 else "wait"
        where = {w.collective for w in job.waits.values() if w.waits_for == job.straggler and w.collective}
        verdict = straggler.verdict
        evidence = (f"{verdict}: rank {job.straggler} is the straggler: {whom} {verb} for it "
                    f"{job.straggler_wait_us / 1000:.1f} ms per step{' in ' + '/'.join(sorted(where)) if where else ''}"
                    f"; rank {job.straggler}: {straggler.evidence.partition(': ')[2]}")
    else:
        verdict = slowest.verdict
        evidence = (f"{verdict}: slowest of {len(members)} ranks is rank {metrics['slowest_rank']} "
                    f"({slow_t / 1000:.1f} ms per step, {spread if spread is not None else '?'}% over the fastest); "
                    f"{slowest.evidence.partition(': ')[2]}")
    notes = ()
    if job.aligned:
        notes = (f"the ranks' clocks disagree by up to {job.offset_max / 1000:.2f} ms (several hosts): starts were "
                 "aligned on the ends of the matched collectives",)
    findings: list[Finding] = []
    for rule in _rules(config, JobRule):
        for finding in rule.check_job(job, verdicts, config):
            kept = config.apply(finding)
            if kept is not None:
                findings.append(kept)
    findings.sort(key=Finding.sort_key)
    summary = TraceSummary(str(directory), verdict, evidence, metrics, rank=None, warnings=notes)
    return Report(str(directory), [summary], findings, notes)
