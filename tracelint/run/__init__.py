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
from statistics import median

from tracelint.dispatch import run_paths
from tracelint.engine import Config, RunResult
from tracelint.profile.settle import WINDOW
from tracelint.run.launch import (
    SETTINGS,
    SETTINGS_WORDS,
    EnvironmentProblem,
    Execution,
    NotStarted,
    RunOptions,
    Target,
    UsageProblem,
    execute,
    parse_command,
)
from tracelint.run.merge import could_see, merge

__all__ = ["SETTINGS", "EnvironmentProblem", "Execution", "NotStarted", "RunOptions", "Target", "UsageProblem",
           "execute", "parse_command", "record", "report"]


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
    unmeasured = (bool(result.traces) and not could_see(result.traces)
                  and any(f.origin == "source" for f in result.findings))
    result.run = record(execution, cwd, files_linted=len(files), lint_unmeasured=unmeasured)
    return result


def record(execution: Execution, cwd: Path, files_linted: int = 0, lint_unmeasured: bool = False) -> dict:
    """The plain record of a run (the JSON report's ``run`` object, tracelint.render.json), with ``summary``: the
    lines a report shows about it. ``unprofiled`` and ``recorded`` are the steps the first process (rank 0) timed
    without the profiler and those its trace holds, counted as the script's steps (the first is 1).
    ``lint_unmeasured``: the traces hold no GPU work, so no lint finding could be measured in them (say so once).
    ``aside``: the script ran its own profiler, so the run stepped aside (bootstrap.py says how): where the script
    made it, and the steps timed after."""
    target, options = execution.target, execution.options
    statuses = execution.statuses
    steps = max((s["steps"] for s in statuses), default=0)
    ended = {s.get("ended") for s in statuses}
    failure = execution.failure
    notes = list(dict.fromkeys(s["note"] for s in statuses if s.get("note")))
    plan = options.plan
    lead = min(statuses, key=lambda s: (s.get("rank") is None, s.get("rank") or 0), default={})
    held = [t for t in lead.get("traces") or () if t.get("kind") == "steps" and t.get("profiler_steps")]
    doc = {
        "target": target.words(), "kind": target.kind, "argv": list(target.argv),
        "out": _shown(execution.out, cwd), "traces": [_shown(t, cwd) for t in execution.traces],
        "settings": options.settings,
        "schedule": {"wait": options.wait, "warmup": options.warmup, "active": options.active},
        "plan": {**plan.as_dict(), "note": plan.note},
        "max_steps": options.max_steps, "step_function": options.step_function,
        "steps": execution.steps, "clock": next((s["clock"] for s in statuses if s.get("clock")), None),
        "unprofiled": lead.get("unprofiled"),
        "recorded": {k: held[0][k] for k in ("first_step", "last_step", "complete", "profiler_steps")} if held
        else None,
        "aside": lead.get("aside") or next((s["aside"] for s in statuses if s.get("aside")), None),
        "window": execution.window, "ended": sorted(e for e in ended if e), "failure": failure,
        "exit_code": execution.exit_code, "files_linted": files_linted, "notes": notes, "verify": None,
    }
    doc["summary"] = _summary(doc, execution, steps, lint_unmeasured)
    return doc


def _summary(doc: dict, execution: Execution, steps: int, lint_unmeasured: bool) -> list[str]:
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
    if doc["plan"]["note"]:
        lines.append(f"  note: {doc['plan']['note']}")
    if not execution.window:
        lines.extend(_steps_lines(doc, options, steps))
    if doc["aside"]:
        lines.append(f"  {_aside_line(doc['aside'], bool(doc['traces']))}")
    if lint_unmeasured:
        lines.append("  no GPU work in the profiled steps: the lint findings cannot be measured there (a sync or a "
                     "copy costs nothing on the CPU)")
    if execution.traces:
        shown = doc["traces"] if len(doc["traces"]) == 1 else [f"{doc['out']}/ ({len(doc['traces'])} traces)"]
        lines.append(f"  traces: {shown[0]}")
    if doc["failure"]:
        lines.append(f"  the script failed: {doc['failure']}")
    lines.extend(f"  note: {note}" for note in doc["notes"])
    return lines


def _steps_lines(doc: dict, options: RunOptions, steps: int) -> list[str]:
    """The warm-up, the steps timed without the profiler and the steps recorded, as they ran."""
    lines = []
    unprofiled = doc["unprofiled"] or {}
    warmup = unprofiled.get("warmup")
    started = unprofiled.get("profiler_started_after")
    if warmup and warmup["steps_ms"] and started is not None:
        last = ", ".join(f"{ms:.1f}" for ms in warmup["steps_ms"][-3:])
        head = (f"  warm-up over after step {started} (its last steps: {last} ms)" if warmup["settled"] else
                f"  warm-up not seen to settle in {_plural(len(warmup['steps_ms']), 'step')} (its last: {last} ms)")
        if unprofiled.get("first_step"):
            first, count = unprofiled["first_step"], unprofiled["steps"]
            timed = (f"{_span(first, first + count - 1)} timed without the profiler (step {first - 1} started it)"
                     + ("" if warmup["settled"] else ": they may hold start-up costs"))
        else:
            timed = "no step timed without the profiler"
        lines.append(f"{head}; {timed}")
    recorded = doc["recorded"]
    settings = f"with --settings {options.settings} ({SETTINGS_WORDS[options.settings]})"
    if recorded:
        (a, b), first, last = recorded["profiler_steps"], recorded["first_step"], recorded["last_step"]
        numbers = f"ProfilerStep#{a}" if a == b else f"ProfilerStep#{a}-{b}"
        line = f"  recorded {_span(first, last)} ({numbers} in the trace) {settings}"
        if not recorded["complete"]:
            line += f"; step {last} cut short: the script {_how_it_ended(doc)} during it"
        lines.append(line)
    elif not doc["traces"] and not doc["aside"]:
        lines.append(f"  nothing recorded: {_why_nothing(doc, options, steps)}")
    return lines


def _aside_line(aside: dict, traces: bool) -> str:
    """Why the run recorded nothing (or nothing after the script's profiler started), and the steps it timed."""
    where = f" ({aside['where']})" if aside["where"] else ""
    after = f"after step {aside['after_step']}" if aside["after_step"] else "before the first step"
    kept = "kept what it had recorded before" if traces else "recorded no trace"
    line = (f"the script runs its own torch profiler{where}: two profilers cannot run in one process, so tracelint "
            f"run stepped aside {after} and {kept}; the findings are the lint's")
    times = aside["steps_ms"]
    if times:
        first = aside["first_step"]
        line += (f"; {_span(first, first + len(times) - 1)} took {median(times):.2f} ms each (median; one device "
                 "synchronization per step, the script's profiler on)")
    return line


def _why_nothing(doc: dict, options: RunOptions, steps: int) -> str:
    plan = options.plan
    if not plan.active:
        return f"--max-steps {options.max_steps} leaves no step after the first"
    started = (doc["unprofiled"] or {}).get("profiler_started_after")
    if started is None:
        when = "before the warm-up was over"
    else:
        when = f"before the recorded steps (from step {started + 1 + plan.wait + plan.warmup})"
    return (f"the script {_how_it_ended(doc)} after {_plural(steps, 'step')}, {when}; a run needs "
            f"{options.steps_needed} steps at least (the first, {WINDOW} to see the warm-up settle, --wait "
            f"{plan.wait}, --warmup {plan.warmup}, --active {plan.active})")


def _how_it_ended(doc: dict) -> str:
    if doc["failure"]:
        return "failed"
    return "stopped" if "max-steps" in doc["ended"] else "ended"


def _span(first: int, last: int) -> str:
    return f"step {first}" if first == last else f"steps {first}-{last}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _shown(path: Path, cwd: Path) -> str:
    """A path relative to the working directory when it is under it (as reports name files), else absolute."""
    try:
        return str(Path(path).resolve().relative_to(cwd))
    except ValueError:
        return str(path)
