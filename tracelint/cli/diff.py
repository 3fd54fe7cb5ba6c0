"""``tracelint diff BASE NEW``: the click command (registered lazily by tracelint.cli). Parses options and calls
tracelint.diff; exit 0 (same or faster), 1 (a regression: the gate failed), 2 (an input could not be compared)."""
from __future__ import annotations

import sys

import click

from tracelint.cli import base_config, emit, format_option, output_option, threshold_options
from tracelint.engine import ConfigError
from tracelint.engine.config import diff_gate_items


def _gates(config, items: tuple[str, ...]) -> tuple[tuple[str, float], ...]:
    """The config's diff thresholds, overridden by ``--threshold KEY=VALUE`` (TL010 gate keys)."""
    merged = {**dict(config.diff_thresholds), **threshold_options(items)}
    try:
        return diff_gate_items(merged.items(), "--threshold")
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


@click.command("diff", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("base", type=click.Path())
@click.argument("new", type=click.Path())
@format_option
@output_option
@click.option("--max-regression-pct", type=click.FloatRange(0), default=None,
              help="Fail when NEW's step is this many percent slower than BASE's and beyond the noise "
                   "(default 5, or [tool.tracelint.diff]).")
@click.option("--threshold", "thresholds", multiple=True, metavar="KEY=VALUE",
              help="A TL010 gate key, e.g. max-syncs-per-step=0: fail when NEW crosses it and BASE did not "
                   "(adds to [tool.tracelint.diff]).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="A pyproject.toml to read [tool.tracelint] from instead of the nearest one.")
def diff_cmd(base, new, fmt, output, max_regression_pct, thresholds, config_path) -> None:
    """Compare two torch.profiler traces (or two folders of rank traces, paired by rank): step time before → after
    against its noise, the verdicts, the metrics that moved, the kernels whose time per step changed most, findings
    new and fixed, and one line that says why.

    \b
    tracelint diff base.pt.trace.json.gz new.pt.trace.json.gz
    tracelint diff traces/main/ traces/pr/ --format markdown >> "$GITHUB_STEP_SUMMARY"
    """
    from tracelint.diff import diff_traces

    try:
        config = base_config(config_path)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    report = diff_traces(base, new, config=config, max_regression_pct=max_regression_pct,
                         thresholds=_gates(config, thresholds))
    emit(report.run_result(), fmt, output)
    sys.exit(report.exit_code())


if __name__ == "__main__":  # `python -m tracelint.cli.diff`
    diff_cmd.main(prog_name="tracelint diff")
