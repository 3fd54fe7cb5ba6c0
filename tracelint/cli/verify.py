"""``tracelint verify``: the click command (registered lazily by tracelint.cli). Parses options and calls
tracelint.verify; imports without torch."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from tracelint.cli import emit, format_option, output_option, progress_enabled, split_codes
from tracelint.engine.result import EXIT_CLEAN, EXIT_ERROR


def _progress(enabled: bool | None):
    if enabled is None:
        enabled = progress_enabled()
    if not enabled:
        return None
    from tracelint.engine.escape import log_line

    return lambda message: click.echo(log_line(f"tracelint verify: {message}"), err=True)


def _precision(value: str) -> list[str] | None:
    if value == "auto":
        return None
    if value == "none":
        return []
    modes = [m.strip().lower() for m in value.split(",") if m.strip()]
    bad = [m for m in modes if m not in ("tf32", "bf16")]
    if bad:
        raise click.UsageError(f"--precision {value!r}: expected auto, none, tf32, bf16 or tf32,bf16")
    return modes


@click.command("verify", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("script", required=False, type=click.Path(dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--rule", "rules", multiple=True, help="Run this rule's catalog bad/good example pair (repeatable).")
@click.option("--all-rules", is_flag=True, help="Run every rule's runnable catalog example pair.")
@click.option("--warmup", type=click.IntRange(1), default=5, show_default=True, help="Steps run before timing.")
@click.option("--steps", type=click.IntRange(1), default=20, show_default=True, help="Steps per timed block.")
@click.option("--blocks", type=click.IntRange(2), default=5, show_default=True,
              help="At least this many rounds (one baseline block beside one variant block) per variant.")
@click.option("--budget", "budget_s", type=click.FloatRange(0), default=60, show_default=True,
              help="Seconds of alternating per variant: rounds go on until the 95% interval of the speedup is "
                   "within --target, or this is spent.")
@click.option("--target", "target_pct", type=click.FloatRange(0.1, 50), default=3, show_default=True,
              help="Stop a variant's rounds once the 95% interval is within ±this many percent.")
@click.option("--min-effect", "min_effect_pct", type=click.FloatRange(0, 50), default=2, show_default=True,
              help="The smallest speedup worth a claim, in percent: confirmed only when the interval's lower bound "
                   "clears it; below it, small (the interval excludes 1) or no-effect (it holds 1).")
@click.option("--select", "select", default=None,
              help="Measure only the findings of these rules (codes or prefixes, comma-separated: TL101,TL2).")
@click.option("--against", "against", type=click.Path(dir_okay=False), default=None,
              help="Measure this file, a fix of SCRIPT written by hand, against SCRIPT (run as if it were SCRIPT).")
@click.option("--processes", type=click.Choice(["persistent", "fresh"]), default="persistent", show_default=True,
              help="persistent: one process per side, the waiting one paused between blocks; fresh: a new process "
                   "for every block (slower: each pays its start-up and warm-up).")
@click.option("--pairs", type=click.IntRange(1), default=3, show_default=True,
              help="Spread each comparison's rounds over this many pairs of processes, one after the other (both "
                   "sides restarted between pairs): a process's speed is set when it starts, and the interval "
                   "counts the spread between pairs. 1: one pair for the whole comparison. Ignored with "
                   "--processes fresh.")
@click.option("--pause", type=click.Choice(["group", "workers", "none"]), default="group", show_default=True,
              help="How the waiting side is kept quiet (persistent processes): group stops its whole process group "
                   "(harness, threads, DataLoader workers); workers and none are the weaker methods, for calibration.")
@click.option("--resume-warmup", "resume_warmup", type=click.IntRange(0), default=2, show_default=True,
              help="Untimed steps a side runs after each pause before its block (at least 0.05 s of them).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(1), default=300, show_default=True,
              help="Wall-clock limit of a run's start-up (to its first timed block) and of each block, in seconds.")
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default="cuda", show_default=True,
              help="cpu: test the harness without a GPU (its timings are no claims).")
@click.option("--precision", "precision", default="auto", show_default=True,
              help="Precision variants: auto (when the script looks matmul-bound), none, tf32, bf16, tf32,bf16.")
@click.option("--trace", is_flag=True,
              help="Also profile a few steps of the baseline and of each variant (after their timed blocks) and "
                   "show the trace analyzer's verdict before and after each fix.")
@format_option
@output_option
@click.option("--keep", type=click.Path(file_okay=False), default=None,
              help="Keep the patched copies and the run logs in this folder.")
@click.option("--progress/--no-progress", default=None, help="One line per run on stderr (default: on a terminal).")
def verify_cmd(script, script_args, rules, all_rules, warmup, steps, blocks, budget_s, target_pct, min_effect_pct,
               select, against, processes, pairs, pause, resume_warmup, timeout_s, device, precision, trace, fmt,
               output, keep, progress) -> None:
    """Measure the fixes: run SCRIPT as written and with each proposed fix applied (or, for a sync finding without
    a fix, a device-side rewrite of it), on the GPU, alternating blocks of the two, and report the speedup of each
    with its 95% interval (confirmed, small, no-effect, slower, failed or not-measured). Arguments after `--` go
    to the script.

    \b
    tracelint verify train.py -- --epochs 1     the findings of train.py, measured
    tracelint verify --rule TL101               the rule's catalog example pair as a micro-benchmark
    tracelint verify --all-rules                every rule with a runnable example pair
    tracelint verify train.py --select TL101    only the TL101 findings
    tracelint verify train.py --against fixed.py    a fix written by hand

    The script runs in a subprocess from its own folder; the patched copies live in a temporary folder (your files
    are never written). Each run is stopped once its comparison is done.
    """
    from tracelint.verify import (
        EnvironmentProblem,
        RunSettings,
        run_result,
        verify_against,
        verify_rules,
        verify_script,
    )

    if bool(script) == bool(rules or all_rules):
        raise click.UsageError("give a SCRIPT, or --rule CODE / --all-rules (not both)")
    if (select or against) and not script:
        raise click.UsageError("--select and --against need a SCRIPT")
    if select and against:
        raise click.UsageError("--against measures the file given, all of it: no --select with it")
    codes = list(split_codes((select,), "--select")) if select else None  # a typo must not measure nothing
    settings = RunSettings(warmup=warmup, steps=steps, blocks=blocks, device=device, timeout_s=timeout_s,
                           trace=trace, budget_s=budget_s, target=target_pct / 100, min_effect=min_effect_pct / 100,
                           processes=processes, pause=pause, resume_warmup=resume_warmup, pairs=pairs)
    say = _progress(progress)
    keep_dir = Path(keep) if keep else None
    try:
        if script:
            path = Path(script)
            if not path.is_file():
                raise click.UsageError(f"{script}: no such file")
            if path.suffix != ".py":
                raise click.UsageError(f"{script}: not a Python script (.py)")
            if against:
                fixed = Path(against)
                if not fixed.is_file():
                    raise click.UsageError(f"{against}: no such file")
                verifications = [verify_against(path, fixed, script_args, settings, keep=keep_dir, progress=say)]
            else:
                verifications = [verify_script(path, script_args, settings, precision=_precision(precision),
                                               keep=keep_dir, progress=say, select=codes)]
        else:
            codes = None if all_rules else [c.strip() for r in rules for c in r.split(",") if c.strip()]
            verifications = verify_rules(codes, settings, keep=keep_dir, progress=say)
            if not verifications:
                click.echo("tracelint verify: no rule has a runnable example pair", err=True)
                sys.exit(EXIT_ERROR)
    except EnvironmentProblem as exc:
        from tracelint.engine.escape import log_line

        click.echo(log_line(str(exc)), err=True)
        sys.exit(EXIT_ERROR)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    emit(run_result(verifications), fmt, output)
    failed = any(v.baseline_failed or v.errors for v in verifications)
    sys.exit(EXIT_ERROR if failed else EXIT_CLEAN)


if __name__ == "__main__":  # `python -m tracelint.cli.verify`, usable before the command is registered
    verify_cmd.main(prog_name="tracelint verify")
