"""``tracelint run``: profile an unmodified training script and report one list of findings, each with its source
line, its measured cost and (with ``--verify``) its measured fix.

``execute(target, options)`` runs the script (a file, a ``-m`` module, or under torchrun) in a child process whose
bootstrap (bootstrap.py) counts optimizer steps and drives ``tracelint.profile``'s schedule from them: traces land
in ``options.out``, one per process. ``report(execution)`` lints the script and the project files it imported,
analyzes the traces (a job under torchrun) and merges the two (merge.py) into the engine's RunResult, whose ``run``
record says what ran and how; ``verify_measured`` (measured.py) adds what ``tracelint verify`` measured of the
costliest findings. Only the child imports torch.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tracelint.engine import Config, RunResult
from tracelint.run.launch import (
    SETTINGS,
    SETTINGS_WORDS,
    EnvironmentProblem,
    Execution,
    RunOptions,
    Target,
    UsageProblem,
    execute,
    parse_command,
)
from tracelint.run.merge import merge
from tracelint.runner import run_paths

__all__ = ["SETTINGS", "EnvironmentProblem", "Execution", "RunOptions", "Target", "UsageProblem", "execute",
           "parse_command", "record", "report"]


def report(execution: Execution, *, configure: Callable[[Config | None], Config] = lambda c: c or Config(),
           timelines: bool = False, cwd: Path | None = None) -> RunResult:
    """The run's RunResult: the lint of the project files the script imported and the analysis of its traces,
    merged (tracelint.run.merge), with the run's record."""
    cwd = (cwd or Path.cwd()).resolve()
    files = [_shown(f, cwd) for f in execution.files]
    # Several processes (torchrun): their folder, read as one job; else the one trace.
    traces = [execution.out] if len(execution.traces) > 1 else execution.traces
    traces = [_shown(t, cwd) for t in traces]
    result = run_paths([*files, *traces], mode="auto", configure=configure, timelines=timelines)
    result.findings = merge(result.findings, result.traces, cwd)
    result.run = record(execution, cwd, files_linted=len(files))
    return result


def record(execution: Execution, cwd: Path, files_linted: int = 0) -> dict:
    """The plain record of a run (the JSON report's ``run`` object, tracelint.render.json), with ``summary``: the
    lines a report shows about it."""
    target, options = execution.target, execution.options
    statuses = execution.statuses
    steps = max((s["steps"] for s in statuses), default=0)
    ended = {s.get("ended") for s in statuses}
    failure = execution.failure
    notes = list(dict.fromkeys(s["note"] for s in statuses if s.get("note")))
    doc = {
        "target": target.words(), "kind": target.kind, "argv": list(target.argv),
        "out": _shown(execution.out, cwd), "traces": [_shown(t, cwd) for t in execution.traces],
        "settings": options.settings,
        "schedule": {"wait": options.wait, "warmup": options.warmup, "active": options.active},
        "max_steps": options.max_steps, "step_function": options.step_function,
        "steps": execution.steps, "clock": next((s["clock"] for s in statuses if s.get("clock")), None),
        "window": execution.window, "ended": sorted(e for e in ended if e), "failure": failure,
        "exit_code": execution.exit_code, "files_linted": files_linted, "notes": notes, "verify": None,
    }
    doc["summary"] = _summary(doc, execution, steps)
    return doc


def _summary(doc: dict, execution: Execution, steps: int) -> list[str]:
    options = execution.options
    processes = len(execution.statuses)
    who = f" in each of {processes} processes" if processes > 1 else ""
    if execution.window:
        how = (f"no optimizer step within {options.no_step_timeout:g} s: profiled a time window of "
               f"{options.window_s:g} s instead (the whole window is one step)")
    elif doc["clock"] == "function":
        how = f"steps are the calls of {options.step_function}"
    else:
        how = "a step is an optimizer step"
    line = (f"tracelint run: {doc['target']}: {how}" if execution.window
            else f"tracelint run: {doc['target']}: {_plural(steps, 'step')}{who} ({how})")
    if "max-steps" in doc["ended"]:
        line += f", stopped at --max-steps {options.max_steps}"
    lines = [line]
    # numbered as the trace's ProfilerStep#N: step N ends with optimizer step N + 2 (the first starts the profiler)
    first = options.wait + options.warmup
    recorded = f"steps {first}-{first + options.active - 1}"
    if not execution.traces:
        lines.append(f"  nothing recorded: the schedule records {recorded} and needs {options.steps_needed} optimizer "
                     f"steps for them (--wait {options.wait}, --warmup {options.warmup}, --active {options.active})")
    elif not execution.window:
        lines.append(f"  recorded {recorded} with --settings {options.settings} ({SETTINGS_WORDS[options.settings]})"
                     f"; the {_plural(options.wait - 1, 'wait step')} before them timed without the profiler")
    if execution.traces:
        shown = doc["traces"] if len(doc["traces"]) == 1 else [f"{doc['out']}/ ({len(doc['traces'])} traces)"]
        lines.append(f"  traces: {shown[0]}")
    if doc["failure"]:
        lines.append(f"  the script failed: {doc['failure']}")
    lines.extend(f"  note: {note}" for note in doc["notes"])
    return lines


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _shown(path: Path, cwd: Path) -> str:
    """A path relative to the working directory when it is under it (as reports name files), else absolute."""
    try:
        return str(Path(path).resolve().relative_to(cwd))
    except ValueError:
        return str(path)
