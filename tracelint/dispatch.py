"""One run over many paths: sends each to the half that reads it and gathers a RunResult.

A bad file becomes an InputError in the result; it never stops the other files. A URL (``s3://bucket/job/``) is a
trace path (tracelint.trace.pool).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from tracelint.engine import Config, FileChecked, Finding, InputError, RunResult, find_config
from tracelint.trace.files import Skipped, is_trace_name, traces_in
from tracelint.trace.pool import is_url


def run_paths(
    paths: Iterable[Path | str],
    *,
    mode: str = "auto",
    fix: bool | str = False,
    unsafe_fixes: bool = False,
    configure: Callable[[Config | None], Config] = lambda c: c or Config(),
    progress: bool = False,
    jobs: int | None = None,
    scheduler: str | None = None,
    timelines: bool = False,
) -> RunResult:
    """Lint (mode "source"), analyze (mode "trace"), or each path by its type (mode "auto"). ``jobs``: processes
    that analyze the trace files (None: one per core; 1: this one); ``scheduler``: a Dask scheduler's address to
    analyze them on instead; ``timelines``: the traces' downsampled timelines, for the HTML report
    (tracelint.trace.analyze.analyze_paths)."""
    result = RunResult()
    source_paths: list[Path] = []
    trace_paths: list[Path | str] = []
    for raw in paths:
        if is_url(raw):  # read by the trace half, through fsspec, where it is analyzed
            if mode == "source":
                result.errors.append(InputError(raw, "a URL is read as a trace: use `tracelint trace`"))
            else:
                trace_paths.append(raw)
            continue
        path = Path(raw)
        try:
            if not path.exists():
                result.errors.append(InputError(str(path), "no such file or directory"))
            elif mode == "source":
                source_paths.append(path)
            elif mode == "trace":
                trace_paths.append(path)
            elif not path.is_dir():  # a file, or a FIFO / device file: the half its name says refuses it clearly
                (trace_paths if is_trace_name(path) else source_paths).append(path)
            else:
                source_paths.append(path)
                trace_paths.extend(traces_in(path, named_only=True, excluded=configure(None).excluded,
                                             skipped=result.skipped))
        except OSError as exc:  # a path that cannot even be looked at (a folder on the way not searchable)
            result.errors.append(InputError(str(path), f"cannot read: {exc.strerror or exc}"))

    if source_paths:
        from tracelint.source import lint_paths

        cache: dict[Path, Config] = {}

        def config_for(file: Path) -> Config:
            folder = file.resolve().parent
            if folder not in cache:
                cache[folder] = configure(find_config(folder))
            return cache[folder]

        try:
            for item in lint_paths(source_paths, config_for=config_for, fix=fix, unsafe_fixes=unsafe_fixes,
                                   progress=progress):
                _collect(result, item)
        except Exception as exc:  # a bug the source half let out: an error of its inputs, and the traces still run
            from tracelint.trace.analyze import internal_error

            result.errors.append(internal_error(", ".join(map(str, source_paths)), exc, "linting"))

    if trace_paths:
        from tracelint.trace.analyze import Report, analyze_paths, internal_error

        config = configure(find_config(Path.cwd().resolve()))
        try:
            for item in analyze_paths(trace_paths, config=config, progress=progress, jobs=jobs, scheduler=scheduler,
                                      keep_analyses=False, timelines=timelines):
                if isinstance(item, Report):
                    result.traces.extend(item.summaries)
                    result.findings.extend(item.findings)
                else:
                    _collect(result, item)
        except Exception as exc:  # analyze_paths turns each input's failure into its error; this is a last guard
            result.errors.append(internal_error(", ".join(map(str, trace_paths)), exc))

    result.findings.sort(key=Finding.sort_key)
    return result


def _collect(result: RunResult, item) -> None:
    """One item of a half's stream; findings arrive with the config already applied (once, by the half)."""
    if isinstance(item, InputError):
        result.errors.append(item)
    elif isinstance(item, Skipped):
        result.skipped.append(item)
    elif isinstance(item, Finding):
        result.findings.append(item)
    elif isinstance(item, FileChecked):
        result.files_checked += 1
        result.paths_checked.append(item.path)
        result.fixed += item.fixed
        result.resolved += item.resolved
        result.exposed += item.exposed
        result.exposed_fixed += item.exposed_fixed
        if item.diff:
            result.diffs_of_fixes.append(item.diff)
