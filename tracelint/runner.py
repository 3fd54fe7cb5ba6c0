"""One run over many paths: sends each to the half that reads it and gathers a RunResult.

A bad file becomes an InputError in the result; it never stops the other files.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from tracelint.engine import Config, FileChecked, Finding, InputError, RunResult, find_config

TRACE_SUFFIXES = (".json", ".json.gz")
# In a directory of code, only files named as traces are traces (`<worker>.<ns>.pt.trace.json.gz` included).
TRACE_DIR_PATTERNS = ("*.trace.json", "*.trace.json.gz")


def is_trace_file(path: Path) -> bool:
    return path.name.endswith(TRACE_SUFFIXES)


def _traces_in(directory: Path) -> list[Path]:
    found = {p for pattern in TRACE_DIR_PATTERNS for p in directory.rglob(pattern)}
    return sorted(found)


def run_paths(
    paths: Iterable[Path],
    *,
    mode: str = "auto",
    fix: bool = False,
    unsafe_fixes: bool = False,
    configure: Callable[[Config | None], Config] = lambda c: c or Config(),
    progress: bool = False,
) -> RunResult:
    """Lint (mode "source"), analyze (mode "trace"), or each path by its type (mode "auto")."""
    result = RunResult()
    source_paths: list[Path] = []
    trace_paths: list[Path] = []
    for path in paths:
        if not path.exists():
            result.errors.append(InputError(str(path), "no such file or directory"))
        elif mode == "source":
            source_paths.append(path)
        elif mode == "trace":
            trace_paths.append(path)
        elif path.is_file():
            (trace_paths if is_trace_file(path) else source_paths).append(path)
        else:
            source_paths.append(path)
            trace_paths.extend(_traces_in(path))

    if source_paths:
        from tracelint.source import lint_paths

        cache: dict[Path, Config] = {}

        def config_for(file: Path) -> Config:
            folder = file.resolve().parent
            if folder not in cache:
                cache[folder] = configure(find_config(folder))
            return cache[folder]

        for item in lint_paths(source_paths, config_for=config_for, fix=fix, unsafe_fixes=unsafe_fixes,
                               progress=progress):
            _collect(result, item, config_for)

    if trace_paths:
        from tracelint.trace import analyze_paths

        config = configure(find_config(Path.cwd().resolve()))
        for report in analyze_paths(trace_paths, config=config, progress=progress):
            if isinstance(report, InputError):
                result.errors.append(report)
                continue
            result.reports.append(report)
            result.traces.extend(report.summaries)
            for finding in report.findings:
                _collect(result, finding, lambda _p: config)

    result.findings.sort(key=Finding.sort_key)
    return result


def _collect(result: RunResult, item, config_for: Callable[[Path], Config]) -> None:
    if isinstance(item, InputError):
        result.errors.append(item)
    elif isinstance(item, Finding):
        kept = config_for(Path(item.path)).apply(item)
        if kept is not None:
            result.findings.append(kept)
    elif isinstance(item, FileChecked):
        result.files_checked += 1
        result.fixed += item.fixed
