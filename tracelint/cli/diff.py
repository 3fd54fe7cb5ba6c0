"""``tracelint diff BASE NEW`` (or ``--base``/``--new`` runs): the click command (registered lazily by
tracelint.cli). Parses options and calls
tracelint.diff; exit 0 (same or faster), 1 (a regression: the gate failed), 2 (an input could not be compared)."""
from __future__ import annotations

import sys

import click

from tracelint.cli import base_config, emit, format_option, output_option, say, threshold_options
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
@click.argument("paths", nargs=-1, type=click.Path(), metavar="[BASE NEW]")
@click.option("--base", "bases", multiple=True, type=click.Path(), metavar="PATH",
              help="A run of BASE (a trace or a folder of rank traces); repeat it for several runs of the same "
                   "configuration, whose spread is then the noise.")
@click.option("--new", "news", multiple=True, type=click.Path(), metavar="PATH",
              help="A run of NEW; repeatable, as --base.")
@format_option
@output_option
@click.option("--max-regression-pct", type=click.FloatRange(0), default=None,
              help="Fail when NEW is this many percent slower than BASE and beyond the noise "
                   "(default 5, or [tool.tracelint.diff]).")
@click.option("--noise-floor-pct", type=click.FloatRange(0), default=None,
              help="With one trace a side: the run-to-run noise to assume, in percent (default: measured per "
                   "measure, docs/ci.md; or [tool.tracelint.diff] noise-floor-pct).")
@click.option("--fail-on-new-findings/--no-fail-on-new-findings", default=None,
              help="Fail when NEW has a finding at --fail-on or above that BASE lacks, whatever the timing says "
                   "(default: on, or [tool.tracelint.diff]).")
@click.option("--fail-on", type=click.Choice(["info", "warning", "error"]), default=None,
              help="Lowest severity of a new finding that fails the gate (default: warning, or the config's).")
@click.option("--gate-measure", type=click.Choice(["time", "mfu"]), default=None,
              help="What the timing gate compares: time (step time, or GPU time per step when both sides are "
                   "GPU-bound) or mfu (MFU, where both sides have one: a bigger batch at a slower step passes when "
                   "MFU held; docs/ci.md). Default: time, or [tool.tracelint.diff] gate-measure.")
@click.option("--threshold", "thresholds", multiple=True, metavar="KEY=VALUE",
              help="A TL010 gate key, e.g. max-syncs-per-step=0: fail when NEW crosses it and BASE did not "
                   "(adds to [tool.tracelint.diff]).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="A pyproject.toml to read [tool.tracelint] from instead of the nearest one.")
def diff_cmd(paths, bases, news, fmt, output, max_regression_pct, noise_floor_pct, fail_on_new_findings, fail_on,
             gate_measure, thresholds, config_path) -> None:
    """Compare two torch.profiler traces (or two folders of rank traces, paired by rank; or several runs a side):
    a new finding fails the gate first; then step time (or GPU time per step, when both sides are GPU-bound)
    before → after against its noise, the verdicts, the metrics that moved, the kernels whose time per step changed
    most, findings new and fixed, and one line that says why.

    \b
    tracelint diff base.pt.trace.json.gz new.pt.trace.json.gz
    tracelint diff --base main1.json.gz --base main2.json.gz --new pr1.json.gz --new pr2.json.gz
    tracelint diff traces/main/ traces/pr/ --format markdown >> "$GITHUB_STEP_SUMMARY"
    """
    from tracelint.diff import diff_traces
    from tracelint.engine import Severity

    if len(paths) not in (0, 2):
        raise click.UsageError(f"give BASE and NEW (two paths), not {len(paths)}; several runs: --base/--new")
    base = [*paths[:1], *bases]
    new = [*paths[1:], *news]
    if not base or not new:
        raise click.UsageError("give BASE and NEW, or at least one --base and one --new")
    try:
        config = base_config(config_path)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if fail_on:
        config = config.override(fail_on=Severity.parse(fail_on))
    report = diff_traces(base, new, config=config, max_regression_pct=max_regression_pct,
                         thresholds=_gates(config, thresholds), noise_floor_pct=noise_floor_pct,
                         fail_on_new_findings=fail_on_new_findings, gate_measure=gate_measure)
    emit(report.run_result(), fmt, output)
    for note in report.notes:  # how the traces were paired where a choice was made (tracelint.diff.pairing)
        say(f"note: {note}")
    sys.exit(report.exit_code())


if __name__ == "__main__":  # `python -m tracelint.cli.diff`
    diff_cmd.main(prog_name="tracelint diff")
