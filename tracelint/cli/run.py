"""``tracelint run``: the click command (registered lazily by tracelint.cli). Parses options and calls tracelint.run;
imports without torch."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from tracelint.cli import _SHARED, _options, _overrides, base_config, emit, progress_enabled, say
from tracelint.engine import ConfigError
from tracelint.engine.result import EXIT_ERROR

_RUN = (
    click.option("--module", "-m", "module", default=None, metavar="MODULE",
                 help="Run a module as `python -m MODULE` does (its arguments after `--`)."),
    click.option("--wait", type=click.IntRange(1), default=5, show_default=True,
                 help="Steps without the profiler once the warm-up is over: the first starts it, the rest are timed."),
    click.option("--warmup", type=click.IntRange(0), default=2, show_default=True,
                 help="Steps the profiler runs without recording, before the recorded ones."),
    click.option("--active", type=click.IntRange(1), default=5, show_default=True, help="Steps recorded."),
    click.option("--settings", type=click.Choice(["minimal", "stacks", "full", "memory"]), default="stacks",
                 show_default=True,
                 help="What the profiler records: minimal (ops and kernels), stacks (+ Python stacks: source lines, "
                      "the least that gives them), full (+ shapes and memory: the slowest), memory (stacks + memory: "
                      "the memory timeline, growth per step, allocator churn, without shapes)."),
    click.option("--max-steps", type=click.IntRange(1), default=None, metavar="N",
                 help="Stop the script cleanly after N optimizer steps (default: it runs to its end)."),
    click.option("--no-step-timeout", type=click.FloatRange(0), default=300, show_default=True, metavar="SECONDS",
                 help="No optimizer step within this many seconds: profile a time window instead (0: never)."),
    click.option("--window", "window_s", type=click.FloatRange(0.1), default=5, show_default=True,
                 metavar="SECONDS", help="The length of that time window."),
    click.option("--step-function", default=None, metavar="MODULE:QUALNAME",
                 help="A step is a call of this function of yours (train:train_step, train:Trainer.step), not an "
                      "optimizer step."),
    click.option("--out", type=click.Path(file_okay=False), default=None,
                 help="Where the traces land (default: ./tracelint_runs/<timestamp>/); a new or empty folder."),
    click.option("--threshold", "thresholds", multiple=True, metavar="KEY=VALUE",
                 help="A trace gate threshold, e.g. min-gpu-busy-pct=80 (overrides [tool.tracelint.trace])."),
    click.option("--verbose", "-v", is_flag=True, help="List every metric of every trace and rank."),
    click.option("--verify", is_flag=True,
                 help="Measure the fixes of the findings that cost at least --verify-min-pct of the step "
                      "(tracelint verify, on the script run directly)."),
    click.option("--verify-min-pct", type=click.FloatRange(0), default=1.0, show_default=True,
                 help="The measured cost, in percent of the step, from which --verify measures a finding's fix."),
    click.option("--verify-device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
                 help="Where --verify measures: auto is cuda when the trace shows a GPU (cpu: its timings are no "
                      "claims)."),
    click.option("--verify-budget", type=click.FloatRange(0), default=60, show_default=True, metavar="SECONDS",
                 help="Seconds of alternating runs per fix (tracelint verify --budget)."),
)


@click.command("run", context_settings={"help_option_names": ["-h", "--help"], "allow_interspersed_args": False,
                                        "ignore_unknown_options": True})
@_options(*_SHARED, *_RUN)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run_cmd(command, module, wait, warmup, active, settings, max_steps, no_step_timeout, window_s, step_function,
            out, thresholds, verbose, verify, verify_min_pct, verify_device, verify_budget, fmt, fail_on, exit_zero,
            select, ignore, exclude, config_path, output, quiet, statistics, show_source) -> None:
    """Profile a training script as it is and report its findings: the lint of the script and of the project files
    it imports, and the analysis of a few profiled optimizer steps, merged into one finding per problem with its
    source line and its measured cost, the costliest first.

    \b
    tracelint run train.py -- --epochs 1
    tracelint run --max-steps 30 -m mypkg.train -- --config small.yaml
    tracelint run torchrun --nproc_per_node 2 train.py --epochs 1

    The script runs in a child process with its own arguments, your working directory and environment; its
    output passes through and Ctrl-C reaches it. Exit code 2 when it fails (its traces are still analyzed).
    """
    from tracelint.run import EnvironmentProblem, NotStarted, RunOptions, UsageProblem, execute, parse_command, report

    try:
        target = parse_command(command, module)
        options = RunOptions(wait=wait, warmup=warmup, active=active, settings=settings, max_steps=max_steps,
                             no_step_timeout=no_step_timeout or None, window_s=window_s,
                             step_function=step_function, out=Path(out) if out else None)
        base = base_config(config_path)
    except (UsageProblem, ConfigError) as exc:
        raise click.UsageError(str(exc)) from None
    overrides = dict(select=select, ignore=ignore, fail_on=fail_on, thresholds=thresholds,
                     exclude=tuple(p.strip() for v in exclude for p in v.split(",") if p.strip()) or None)
    config = _overrides(base, **overrides)

    def configure(found):
        return _overrides(base if config_path or found is None else found, **overrides)

    try:
        execution = execute(target, options, note=lambda text: say(f"tracelint run: note: {text}"))
    except UsageProblem as exc:
        raise click.UsageError(str(exc)) from None
    except EnvironmentProblem as exc:
        say(str(exc))
        sys.exit(EXIT_ERROR)
    except NotStarted as exc:
        say(f"error: {exc}")
        sys.exit(EXIT_ERROR)
    try:
        result = report(execution, configure=configure, timelines=fmt == "html")
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if verify:
        _verify(result, execution, verify_min_pct, verify_device, verify_budget)
    emit(result, fmt, output, verbose=verbose, quiet=quiet, statistics=statistics, show_source=show_source)
    if execution.failure:
        say(f"error: the script failed: {execution.failure}")
        sys.exit(EXIT_ERROR)
    sys.exit(result.exit_code(config.fail_on, exit_zero))


def _verify(result, execution, min_pct: float, device: str, budget_s: float) -> None:
    from tracelint.run.measured import verify_measured
    from tracelint.verify import EnvironmentProblem, RunSettings

    if device == "auto":
        device = "cuda" if any(s.metrics.get("gpu_events") for s in result.traces) else "cpu"
    progress = (lambda line: say(f"tracelint run --verify: {line}")) if progress_enabled() else None
    try:
        verify_measured(result, execution, RunSettings(device=device, budget_s=budget_s), min_pct, progress=progress)
    except EnvironmentProblem as exc:
        result.run["verify"]["note"] = str(exc)


if __name__ == "__main__":  # `python -m tracelint.cli.run`, usable before the command is registered
    run_cmd.main(prog_name="tracelint run")
