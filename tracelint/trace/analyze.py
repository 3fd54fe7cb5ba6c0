"""The trace analyzer's front door: a trace file in, a Report (verdict, metrics, findings per rank) out.

``analyze_trace(path)`` reads one file: one TraceAnalysis (and TraceSummary) per device with GPU activity — one for
a CPU-only trace, whose verdict is ``unknown`` — then runs every discovered TraceRule on each.

``analyze_paths(paths)`` reads many: a file gives one Report; a directory one per trace in it (the rule of
tracelint.trace.files, which also names the JSON files it skipped). Files that sit in one directory and look like
the ranks of one job (same world size, distinct ranks, profiled within ten minutes of each other) are judged
together: their collectives are matched and each rank's wait for its peers measured (tracelint.trace.job.ranks), so a
rank's verdict can say whom it waits for. Their Reports are followed by one more for the
directory, the job summary: its verdict is the straggler's when the job has one (it is what to fix), else the
slowest rank's (largest mean step time); its metrics give the spread across ranks, and its findings are the job
rules' (TL602).
An unreadable file becomes an InputError, never an exception; so does a bug met while reading, measuring or
judging one file ("internal error while analyzing: ..."): the other files are still analyzed, and a job whose
summary fails keeps its ranks' Reports. A job summary names the ranks of the world size that have no Report.

**Many files, bounded memory.** Each file is read, measured and judged as if alone by ``analyze_file``, in this
process, in worker processes or on a Dask cluster (tracelint.trace.pool): one trace per worker at a time, and what
comes back is small — its Report (without the analyses) and its digest for the job
(tracelint.trace.job.rank_digest.RankDigest, no events). The parent groups the digests into jobs and judges again
only what the job changes for a rank: its headline device's ``comm_wait_us``, the evidence of its verdict (``decide``
with its wait) and the findings of the rules that define ``in_job(finding, metrics, config)`` (TL601: the wait is not
the rank's own exposed communication). Peak memory is the workers times the largest single analysis, not the job's size.
"""
from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from tracelint.engine import Config, Finding, InputError, TraceSummary
from tracelint.trace import pool
from tracelint.trace.build import build_model, problem_warnings
from tracelint.trace.device_analysis import TraceAnalysis
from tracelint.trace.device_metrics import analyze_device
from tracelint.trace.estimate import with_estimate
from tracelint.trace.files import Skipped
from tracelint.trace.filetext import TraceReadError
from tracelint.trace.job.process_groups import RankWait
from tracelint.trace.job.rank_digest import RankDigest, digest_of
from tracelint.trace.job.ranks import Job, analyze_job, rank_list
from tracelint.trace.job_summary import summarize_job
from tracelint.trace.load import NotATrace, open_trace
from tracelint.trace.model import TraceModel
from tracelint.trace.report import Report
from tracelint.trace.roofline import roofline_of
from tracelint.trace.rule import JobRule, TraceRule, enabled_rules
from tracelint.trace.timeline import timeline_of
from tracelint.trace.verdict import Verdict, decide

_SAME_JOB_SECONDS = 600.0


@dataclass(slots=True)
class _Read:
    """One trace file read and its devices measured, not yet judged."""

    path: str
    analyses: list[TraceAnalysis]
    warnings: tuple[str, ...]
    truncated: bool


def analyze_trace(path, *, config: Config | None = None, progress=None, timelines: bool = False) -> Report:
    """Analyze one trace file; raises TraceReadError when it is not a readable trace.

    ``progress(done_bytes, total_bytes)``, when given, is called as the events are read; ``timelines``: each
    summary carries its device's downsampled timeline (the HTML report's charts)."""
    config = config or Config()
    return _judge(_read(path, config, progress), config, timelines=timelines)[0]


def _read(path, config: Config, progress=None, name: str | None = None) -> _Read:
    """``name``: the path the Report gives, when ``path`` is a local copy of it (a URL's)."""
    path = Path(path)
    trace = open_trace(path, progress=progress)
    # The model is a million small acyclic tuples: the cyclic garbage collector would rescan them over and over
    # while they are built (that alone doubles the analysis time), and there is nothing cyclic for it to free.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            model = build_model(trace.iter_chunks(typed=True), lambda: trace.meta)
        finally:
            trace.close()
        if trace.events_read == 0:  # nothing to report on: one line, like any other unreadable input
            raise TraceReadError(trace.warnings[0] if trace.truncated and trace.warnings
                                 else "empty trace: traceEvents holds no events")
        warnings = list(trace.warnings) + problem_warnings(model)
        return _measure(name or str(path), model, config, tuple(warnings), trace.truncated)
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
    return _judge(_measure(path, model, config, warnings, truncated), config)[0]


def _measure(path: str, model: TraceModel, config: Config, warnings: tuple[str, ...], truncated: bool) -> _Read:
    min_gap = config.threshold("min-idle-gap-us")
    devices = _devices_by_activity(model) or [None]
    analyses = [analyze_device(path, model, device, min_gap_us=min_gap, warnings=warnings, truncated=truncated)
                for device in devices]
    return _Read(path, analyses, warnings, truncated)


def _judge(read: _Read, config: Config, wait: RankWait | None = None,
           timelines: bool = False) -> tuple[Report, tuple[int, ...]]:
    """Verdicts and findings of a measured file, and the indexes of the findings its job may change (those of its
    headline device whose rule has ``in_job``); ``wait``: its headline device's wait for its peers, when known;
    ``timelines``: add each device's downsampled timeline (tracelint.trace.timeline) for the HTML report — it costs
    about a tenth of the analysis, so only the HTML format asks for it."""
    verdicts = [decide(a.metrics, config, cpu_only=a.device is None, truncated=read.truncated,
                       wait=wait if i == 0 else None, recording=a.recording)
                for i, a in enumerate(read.analyses)]
    findings, in_job = _run_rules(read.analyses, verdicts, config)
    summaries = [TraceSummary(read.path, v.kind, v.evidence, a.metrics, rank=a.rank, warnings=read.warnings,
                              profiler=a.recording.as_dict(), timeline=timeline_of(a) if timelines else None,
                              roofline=roofline_of(a))
                 for a, v in zip(read.analyses, verdicts, strict=True)]
    return Report(read.path, summaries, findings, read.warnings, read.analyses, read.truncated), in_job


def _by_gain(finding: Finding) -> tuple:
    """The report's order (issue #38): the findings whose fix has an estimate first, the largest saving first;
    then the rest in file, rank, step and time order."""
    est = finding.estimate
    return (0, -est.saved_ms_per_step, ()) if est is not None else (1, 0.0, Finding.sort_key(finding))


def _devices_by_activity(model: TraceModel) -> list[int]:
    """Devices with GPU work, the busiest first (its summary is the Report's headline)."""
    busy: dict[int, float] = {}
    for g in model.gpu:
        busy[g.device] = busy.get(g.device, 0.0) + (g.end - g.start)
    return sorted(busy, key=lambda d: (-busy[d], d))


def _run_rules(analyses: list[TraceAnalysis], verdicts: list[Verdict],
               config: Config) -> tuple[list[Finding], tuple[int, ...]]:
    rules = [rule for rule in enabled_rules(config, TraceRule) if not isinstance(rule, JobRule)]
    seen: set[tuple] = set()
    found: list[tuple[Finding, bool]] = []  # and whether the job may change it

    def add(finding: Finding, in_job: bool) -> None:
        kept = config.apply(finding)
        key = (finding.code, finding.location, finding.message)
        if kept is not None and key not in seen:  # file-level rules fire once per device: keep one
            seen.add(key)
            found.append((kept, in_job))

    for i, (analysis, verdict) in enumerate(zip(analyses, verdicts, strict=True)):
        fired = [(rule, list(rule.check(analysis, verdict, config))) for rule in rules]
        causes = [rule for rule, out in fired if out and type(rule).explains is not TraceRule.explains]
        for rule, out in fired:
            for finding in out:
                if not any(cause is not rule and cause.explains(analysis, finding) for cause in causes):
                    add(with_estimate(finding, analysis), i == 0 and hasattr(rule, "in_job"))
    found.sort(key=lambda item: _by_gain(item[0]))
    return [f for f, _ in found], tuple(i for i, (_, in_job) in enumerate(found) if in_job)


@dataclass(frozen=True, slots=True)
class Analyzed:
    """One trace file judged as if alone, as ``analyze_file`` returns it from a worker: its Report, the digest its
    job reads, and the indexes of the Report's findings that the job may change."""

    report: Report
    digest: RankDigest
    in_job: tuple[int, ...]


def analyze_file(path: str, config: Config, searched: bool = False, keep_analyses: bool = False,
                 progress: bool = False, timelines: bool = False) -> Analyzed | InputError | Skipped:
    """The per-file work of ``analyze_paths``, run where the file is read (this process, a worker process, a Dask
    worker): never raises; ``path`` may be an fsspec URL (read through a local copy); ``searched``: found by a
    folder search (a JSON file that is not a trace is then Skipped, not an error)."""
    line = _ProgressLine(Path(path)) if progress else None
    try:
        with pool.local_copy(path) as local:
            read = _read(local, config, progress=line, name=path)
        report, in_job = _judge(read, config, timelines=timelines)
        digest = digest_of(read.analyses[0], read.truncated)
        if not keep_analyses:
            report = replace(report, analyses=[])
        return Analyzed(report, digest, in_job)
    except NotATrace as exc:
        # found by a folder search, other JSON is no error (tracelint.trace.files); named by the user, it is
        return Skipped(path, str(exc)) if searched else InputError(path, str(exc))
    except TraceReadError as exc:
        return InputError(path, str(exc))
    except OSError as exc:
        return InputError(path, exc.strerror or str(exc))
    except MemoryError:
        return InputError(path, "out of memory while analyzing (see TRACELINT_MAX_TRACE_BYTES)")
    except Exception as exc:  # a bug: this file's error, never the whole run's
        return internal_error(path, exc)
    finally:
        if line is not None:
            line.finish()


def _in_job(done: Analyzed, job: Job, config: Config, job_aware: dict) -> Report:
    """A rank's Report as its job sees it. The job changes only its headline device: the wait for its peers is set
    in its metrics (``comm_wait_us``), names whom it waits for in a comm-bound verdict, and is no longer counted as
    its own exposed communication by the rules with ``in_job`` (``job_aware``: those rules by code)."""
    d, report = done.digest, done.report
    wait = job.waits.get(d.rank)
    if wait is None:  # its collectives were not matched: what it was alone
        return report
    head = report.summaries[0]
    if head.metrics is not d.metrics:  # the job set the rank's waits and stage in the digest's
        head.metrics.update(d.metrics)
    stage = job.pipeline.stage_of(d.rank) if job.pipeline is not None else None
    verdict = decide(head.metrics, config, cpu_only=d.cpu_only, truncated=d.truncated, wait=wait,
                     recording=d.recording, stage=stage)
    summaries = [replace(head, verdict=verdict.kind, evidence=verdict.evidence), *report.summaries[1:]]
    findings: list[Finding] = []
    for i, finding in enumerate(report.findings):
        if i in done.in_job:
            finding = job_aware[finding.code].in_job(finding, head.metrics, config)
        if finding is not None:
            findings.append(finding)
    findings.sort(key=_by_gain)
    return replace(report, summaries=summaries, findings=findings)


# ---------------------------------------------------------------------------------------------------------------


class _ProgressLine:
    """``tracelint: reading big.json 41% (102/248 MB)`` on stderr, rewritten in place, for traces over 20 MB."""

    MIN_BYTES = 20 << 20

    def __init__(self, path: Path) -> None:
        from tracelint.engine.escape import log_line

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


# Below this many bytes in all, files are analyzed in this process: starting worker processes costs more than
# the second core saves (measured: bench/bench_job.py; forking a pool and collecting results ~0.05 s).
POOL_MIN_BYTES = 16 << 20


def analyze_paths(paths: Iterable, *, config: Config | None = None, progress: bool = False, jobs: int | None = 1,
                  scheduler: str | None = None, keep_analyses: bool = True,
                  timelines: bool = False) -> Iterator[Report | InputError | Skipped]:
    """A Report per trace file, then the job summaries; a directory gives its traces by the rule of
    tracelint.trace.files, and a Skipped record for each JSON file in it that is not a trace (or not a regular
    file). A path may be an fsspec URL (``s3://``, ``gs://``, ``file://``: a file or a folder of traces). Items come
    once every file is analyzed (a rank is judged with its peers): per input, its notes and errors, then the
    Reports in input order, then the job summaries. Nothing raises for one bad input: an unexpected error is that
    input's InputError.

    ``jobs``: processes that analyze the files, one file each at a time (None: one per core; 1: this process; a
    few small files are analyzed here anyway). ``scheduler``: the address of a running Dask distributed scheduler
    whose workers analyze the files instead (they read them by path or URL). ``keep_analyses``: a Report analyzed in
    this process keeps its TraceAnalysis objects (False keeps memory bounded by the largest file); a Report from
    another process never has them."""
    config = config or Config()
    stream: list = []  # the notes and errors of the inputs, and the index of each file to analyze, in input order
    files: list[tuple[str, bool, int]] = []  # path, found by a folder search, size in bytes
    for raw in paths:
        try:
            found = pool.find_traces(raw, config, stream)
        except OSError as exc:
            stream.append(InputError(str(raw), f"cannot read: {exc.strerror or exc}"))
            continue
        for file, searched, size in found:
            stream.append(len(files))
            files.append((file, searched, size))
    sizes = [size for _, _, size in files]
    workers = pool.workers(jobs, len(files), sum(sizes), POOL_MIN_BYTES) if scheduler is None else 0
    keep = keep_analyses and workers == 1
    calls = [(file, config, searched, keep, progress and len(files) == 1 and workers == 1, timelines)
             for file, searched, _ in files]
    try:
        results = pool.run(analyze_file, calls, workers=workers, scheduler=scheduler, sizes=sizes,
                           progress=progress and len(files) > 1)
    except pool.SchedulerError as exc:  # no file was analyzed: the one error of the run
        yield from (item for item in stream if not isinstance(item, int))
        yield InputError(str(scheduler), str(exc))
        return
    done: dict[int, Analyzed] = {}
    failed: dict[str, list[str]] = {}  # directory -> names of its files that gave no Report
    for item in stream:
        if not isinstance(item, int):
            yield item
            continue
        result, path = results[item], files[item][0]
        if isinstance(result, pool.Lost):
            result = InputError(path, result.message)
        if isinstance(result, Analyzed):
            done[item] = result
            continue
        if isinstance(result, InputError):
            folder, _, name = _split_path(path)
            failed.setdefault(folder, []).append(name)
        yield result
    yield from _judge_jobs([done[i] for i in sorted(done)], failed, config)


def _judge_jobs(analyzed: list[Analyzed], failed: dict[str, list[str]],
                config: Config) -> Iterator[Report | InputError]:
    """The Reports of the analyzed files, judged again with their job where they are the ranks of one, then the
    job summaries."""
    by_dir: dict[str, list[Analyzed]] = {}
    for one in analyzed:
        by_dir.setdefault(_split_path(one.report.path)[0], []).append(one)
    jobs: list[tuple[str, list[Analyzed], Job]] = []
    job_of: dict[int, Job] = {}
    for directory, members in by_dir.items():
        try:
            ranks = job_members(members)
            if ranks:
                job = analyze_job({r.digest.rank: r.digest for r in ranks}, config)
                job.path = directory
                jobs.append((directory, ranks, job))
                job_of.update((id(r), job) for r in ranks)
        except Exception as exc:  # the ranks are still judged, each on its own
            yield internal_error(directory, exc, "matching the ranks of a job")
    reports: dict[int, Report] = {}
    job_aware = ({rule.code: rule for rule in enabled_rules(config, TraceRule) if hasattr(rule, "in_job")}
                 if jobs else {})
    for one in analyzed:
        job = job_of.get(id(one))
        try:
            reports[id(one)] = report = one.report if job is None else _in_job(one, job, config, job_aware)
        except Exception as exc:
            yield internal_error(one.report.path, exc)
            continue
        yield report
    for directory, ranks, job in jobs:
        if not all(id(r) in reports for r in ranks):
            continue
        try:
            summary = summarize_job(directory, [reports[id(r)] for r in ranks], job, config,
                                     _missing(job, failed.get(directory, [])))
        except Exception as exc:  # the ranks' Reports are out already
            yield internal_error(directory, exc, "summarizing the job")
            continue
        yield summary


def _split_path(path: str) -> tuple[str, str, str]:
    """(folder, separator, file name) of a path or URL: the folder is what groups the ranks of a job."""
    if pool.is_url(path):
        return path.rpartition("/")
    p = Path(path)
    return str(p.parent), os.sep, p.name


def _missing(job: Job, failed: list[str]) -> str | None:
    """The job summary's note on the ranks of its world size that gave no Report, and the files here that failed."""
    world = next(iter(job.ranks.values())).world_size or 0
    missing = [r for r in range(world) if r not in job.ranks]
    if not missing:
        return None
    why = "no trace of them in this folder"
    if failed:
        names = ", ".join(sorted(failed)[:5]) + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
        why = f"{len(failed)} file{'s' if len(failed) != 1 else ''} here could not be analyzed: {names}"
    return f"{rank_list(missing)} of {world} missing ({why})"


def internal_error(path: str, exc: BaseException, doing: str = "analyzing") -> InputError:
    """A bug met on an input, as that input's one-line error (the run goes on, and exits 2)."""
    text = " ".join(str(exc).split())
    if len(text) > 300:
        text = text[:297] + "..."
    return InputError(path, f"internal error while {doing}: {type(exc).__name__}" + (f": {text}" if text else ""))


def job_members(reads: list[Analyzed]) -> list[Analyzed]:
    """The files of one directory that are the ranks of one job (same world size, distinct ranks, profiled within
    ten minutes of each other), or [] when they are not such ranks."""
    groups: dict[tuple, list[Analyzed]] = {}
    for read in reads:
        d = read.digest
        if d.rank is not None and d.world_size is not None:
            groups.setdefault((d.world_size,), []).append(read)
    for members in groups.values():
        ranks = [m.digest.rank for m in members]
        starts = [m.digest.start for m in members if m.digest.start is not None]
        # Trace clocks are µs since the epoch (or since boot) on every rank of one job: ranks profiled at the
        # same time start within minutes of each other; unrelated files in one folder do not.
        if len(members) < 2 or len(set(ranks)) != len(ranks) or len(starts) != len(members):
            continue
        if max(starts) - min(starts) > _SAME_JOB_SECONDS * 1e6:
            continue
        return members
    return []
