"""The command line: parses options and calls the library. Exit codes: 0 clean, 1 findings, 2 error.

Every line it writes to stderr (errors, notes, usage errors) goes through ``say``: text from traces, file names and
config files in it is escaped for the terminal, and no line starts a GitHub Actions workflow command
(tracelint.engine.escape.log_line); the report on stdout is escaped by its format.
"""
from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import click

from tracelint.engine import (
    Config,
    ConfigError,
    Severity,
    catalog,
    find_config,
    load_config_file,
)
from tracelint.engine.config import selectors, threshold_items
from tracelint.engine.escape import log_line, terminal
from tracelint.engine.result import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, RunResult
from tracelint.render import formats
from tracelint.render.text import would_fix_line

FORMATS = formats()


class _DispatchGroup(click.Group):
    """``tracelint PATH...`` with no command name runs ``tracelint auto PATH...`` (lint or analyze by type)."""

    # Commands whose module is imported only when they run, to keep the lint path's start-up short.
    lazy = {"verify": ("tracelint.cli.verify", "verify_cmd"), "diff": ("tracelint.cli.diff", "diff_cmd"),
            "run": ("tracelint.cli.run", "run_cmd")}

    def parse_args(self, ctx, args):
        known = (*self.commands, *self.lazy, "--help", "-h", "--version")
        if args and args[0] not in known:
            args = ["auto", *args]
        return super().parse_args(ctx, args)

    def list_commands(self, ctx):
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx, name):
        if name in self.lazy and name not in self.commands:
            import importlib

            module, attr = self.lazy[name]
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)


def format_option(fn):
    """``--format`` (as ``fmt``): any format of tracelint.render, text by default."""
    return click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
                        help="Output format.")(fn)


def output_option(fn):
    """``--output`` / ``-o``: where ``emit`` writes the report instead of stdout."""
    return click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), default=None,
                        help="Write the report to this file instead of stdout.")(fn)


def _options(*options):
    def apply(fn):
        for option in reversed(options):
            fn = option(fn)
        return fn
    return apply


# Options of both halves, then each half's own: `check --help` lists no trace threshold, `trace --help` no --fix.
_SHARED = (
    format_option,
    click.option("--fail-on", type=click.Choice(["info", "warning", "error"]), default=None,
                 help="Lowest severity that makes the exit code 1 (default: warning, or the config's)."),
    click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings."),
    click.option("--select", multiple=True, help="Only these codes or code prefixes (repeatable, comma lists)."),
    click.option("--ignore", multiple=True, help="Skip these codes or code prefixes."),
    click.option("--exclude", multiple=True, metavar="PATTERN",
                 help="Skip files and folders whose name matches when searching folders (repeatable, comma lists; "
                      "added to the config's exclude)."),
    click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                 help="A pyproject.toml to read [tool.tracelint] from instead of the nearest one."),
    output_option,
    click.option("--quiet", "-q", is_flag=True, help="Print the verdict line and the findings only."),
    click.option("--statistics", is_flag=True, help="Count the findings per rule instead of listing them."),
    click.option("--show-source", is_flag=True, help="Show each finding's source line (with carets under its span)."),
)
# Baselines adopt tracelint on existing code (check, trace, and the bare `tracelint PATH`); `tracelint run`
# reports one fresh run and takes none.
_BASELINE = (
    click.option("--baseline", "baseline_path", type=click.Path(), default=None, metavar="FILE",
                 help="Report only the findings that are not in this baseline file (written by --write-baseline; "
                      "matched by rule, file, the flagged line's text and its occurrence, not by line number). "
                      "Overrides the config's `baseline`."),
    click.option("--write-baseline", type=click.Path(), default=None, metavar="FILE",
                 help="Write this run's findings to FILE as a baseline and exit 0; entries of files not checked "
                      "this time are kept, stale ones dropped."),
)
_TRACE = (
    click.option("--threshold", "thresholds", multiple=True, metavar="KEY=VALUE",
                 help="A trace gate threshold, e.g. min-gpu-busy-pct=80 (overrides [tool.tracelint.trace])."),
    click.option("--verbose", "-v", is_flag=True, help="List every metric of every trace and rank."),
    click.option("--jobs", type=click.IntRange(min=1), default=None, metavar="N",
                 help="Processes that analyze the trace files, one file each at a time (default: one per core; "
                      "1: this process)."),
    click.option("--dask-scheduler", default=None, metavar="ADDRESS", envvar="TRACELINT_DASK_SCHEDULER",
                 help="Analyze the trace files on this running Dask cluster instead; its workers read them by path "
                      "(shared storage) or fsspec URL (s3://, gs://). Env: TRACELINT_DASK_SCHEDULER."),
    click.option("--annotate", type=click.Path(dir_okay=False, writable=True), default=None, metavar="OUT.json.gz",
                 help="Also write a copy of the trace with tracelint's reading added as tracks (idle gaps by cause, "
                      "findings, host syncs) for Perfetto UI and chrome://tracing; one trace file only."),
)
_SOURCE = (
    click.option("--fix", is_flag=True, help="Apply safe fixes to source files (atomically)."),
    click.option("--unsafe-fixes", is_flag=True, help="With --fix or --diff, also apply fixes that may change "
                                                      "behaviour."),
    click.option("--diff", "show_diff", is_flag=True,
                 help="Print what --fix would change as a unified diff and write nothing; exit 1 if it would change "
                      "anything."),
    click.option("--stdin-filename", default=None, metavar="PATH",
                 help="With `-` as the path: the name the code read from stdin goes by (config, messages); "
                      "with --fix the fixed code goes to stdout and the report to stderr."),
    click.option("--watch", "-w", is_flag=True, help="Run again whenever a file under the paths changes."),
    click.option("--add-noqa", is_flag=True,
                 help="Add `# noqa: TLxxx` to each flagged line (merged into an existing noqa; notebooks too), "
                      "writing the files atomically, and exit 0."),
    click.option("--cache-dir", default=None, metavar="DIR", envvar="TRACELINT_CACHE_DIR",
                 help="Where to keep the results of unchanged files between runs [default: .tracelint_cache at the "
                      "project root]."),
    click.option("--no-cache", is_flag=True, envvar="TRACELINT_NO_CACHE", help="Read and write no cache."),
)
_PATHS = click.argument("paths", nargs=-1, type=click.Path(allow_dash=True), required=True)


def split_codes(values: tuple[str, ...], option: str) -> tuple[str, ...]:
    """Comma lists of codes, upper-cased; a code that matches no rule is a usage error (exit 2)."""
    try:
        return selectors([p for v in values for p in v.split(",") if p.strip()], option)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


def base_config(config_path: str | None, near: Path | None = None) -> Config:
    if config_path:
        return load_config_file(Path(config_path))
    return find_config((near or Path.cwd()).resolve())


def _overrides(config: Config, select, ignore, fail_on, thresholds, exclude=None) -> Config:
    changes: dict = {}
    if exclude:
        changes["exclude"] = config.exclude + exclude
    if select:
        changes["select"] = split_codes(select, "--select")
    if ignore:
        changes["ignore"] = config.ignore + split_codes(ignore, "--ignore")
    if fail_on:
        changes["fail_on"] = Severity.parse(fail_on)
    if thresholds:
        merged = {**dict(config.trace_thresholds), **threshold_options(thresholds)}
        try:
            changes["trace_thresholds"] = threshold_items(merged.items(), "--threshold")
        except ConfigError as exc:
            raise click.UsageError(str(exc)) from None
    return config.override(**changes)


def threshold_options(items: tuple[str, ...]) -> dict[str, float]:
    """``--threshold KEY=VALUE`` options as {key: number} (the keys are checked by the caller's registry); a usage
    error for an item that is not KEY=NUMBER."""
    out: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise click.UsageError(f"--threshold {item!r}: expected KEY=NUMBER") from None
        if not sep:
            raise click.UsageError(f"--threshold {item!r}: expected KEY=NUMBER")
    return out


@dataclass(frozen=True, slots=True)
class Options:
    """The options of ``check``, ``trace`` and the bare ``tracelint PATH``, as click parsed them (``mode``: source,
    trace or auto); an option a command does not offer keeps its default here."""

    mode: str
    paths: tuple[str, ...]
    fmt: str = "text"
    fail_on: str | None = None
    exit_zero: bool = False
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    config_path: str | None = None
    output: str | None = None
    exclude: tuple[str, ...] = ()
    quiet: bool = False
    statistics: bool = False
    show_source: bool = False
    thresholds: tuple[str, ...] = ()
    verbose: bool = False
    fix: bool = False
    unsafe_fixes: bool = False
    show_diff: bool = False
    stdin_filename: str | None = None
    watch: bool = False
    annotate: str | None = None
    jobs: int | None = None
    dask_scheduler: str | None = None
    baseline_path: str | None = None
    write_baseline: str | None = None
    add_noqa: bool = False
    cache_dir: str | None = None
    no_cache: bool = False

    @property
    def from_stdin(self) -> bool:
        return "-" in self.paths

    @property
    def fixing(self) -> bool | str:
        """What the linter does to the files: False, True (--fix) or "diff" (--diff: fixes shown, nothing written)."""
        return "diff" if self.show_diff else self.fix

    @property
    def view(self) -> dict:
        """tracelint.render.render's options of what the report shows."""
        return dict(verbose=self.verbose, quiet=self.quiet, statistics=self.statistics, show_source=self.show_source)


def _check_paths(options: Options) -> None:
    """``check``, ``trace`` and ``tracelint PATH``: the report of the paths, then exit with its code."""
    try:
        base = base_config(options.config_path if options.config_path or not options.stdin_filename else None,
                           near=Path(options.stdin_filename).parent if options.stdin_filename else None)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    overrides = dict(select=options.select, ignore=options.ignore, fail_on=options.fail_on,
                     thresholds=options.thresholds, exclude=_split_plain(options.exclude))
    explicit = options.config_path is not None or options.from_stdin
    if options.statistics and options.fmt not in ("text", "json"):
        raise click.UsageError("--statistics counts findings per rule in the text and json reports, not in "
                               f"{options.fmt}")
    config = _overrides(base, **overrides)
    if options.from_stdin:
        if len(options.paths) > 1 or options.watch:
            raise click.UsageError("`-` (read from stdin) must be the only path, without --watch")
    elif options.stdin_filename:
        raise click.UsageError("--stdin-filename names the code read from stdin: give `-` as the path")
    _check_adoption_options(options)
    # The config's baseline is not applied to code from stdin (an editor shows every finding of the buffer).
    used = options.baseline_path or (config.baseline if not (options.write_baseline or options.from_stdin) else None)
    baseline = _read_baseline(Path(used)) if used else None
    cache = _cache_folder(options)

    def once() -> RunResult:
        def configure(cfg: Config | None) -> Config:  # each file's config, with the run's options, baseline, cache
            chosen = _overrides(base if explicit or cfg is None else cfg, **overrides)
            # --fix leaves the baseline's findings alone
            return replace(chosen, baseline=baseline.path if baseline is not None else None, cache_dir=cache)
        try:
            if options.from_stdin:
                return _stdin_run(options, options.stdin_filename or "stdin.py", configure, config)
            from tracelint.dispatch import run_paths

            result = run_paths(list(options.paths), mode=options.mode, fix=options.fixing,
                               unsafe_fixes=options.unsafe_fixes, configure=configure,
                               progress=progress_enabled() and not options.watch, jobs=options.jobs,
                               scheduler=options.dask_scheduler, timelines=options.fmt == "html")
        except ConfigError as exc:  # a pyproject.toml found next to one of the files
            raise click.UsageError(str(exc)) from None
        if baseline is not None:
            from tracelint.engine.baseline import filter_result

            filter_result(result, baseline, config.enabled)
        return result

    if options.watch:
        _watch(once, options.paths, config, lambda result: _report(result, options))
    if options.annotate and (len(options.paths) != 1 or not Path(options.paths[0]).is_file()):
        raise click.UsageError("--annotate writes a copy of one trace: give one trace file")
    if options.dask_scheduler:
        from tracelint.trace.pool import DASK_MISSING, dask_installed

        if not dask_installed():
            say(f"error: --dask-scheduler {DASK_MISSING}")
            sys.exit(EXIT_ERROR)
    result = once()
    if options.write_baseline:
        _write_baseline(result, Path(options.write_baseline), config)
    if options.add_noqa:
        _add_noqa(result)
    # fixed code from stdin went to stdout, its report to stderr
    if not (options.from_stdin and options.fixing is True):
        _report(result, options)
    if options.annotate and not result.errors:
        from tracelint.trace.annotate import AnnotateError, annotate_trace

        try:
            done = annotate_trace(options.paths[0], options.annotate, config=config)
        except (AnnotateError, OSError) as exc:
            say(f"error: --annotate: {exc}")
            sys.exit(EXIT_ERROR)
        say(f"tracelint: wrote {done.path} ({done.gaps} idle gaps, {done.findings} findings, {done.flows} sync "
            "arrows on the tracelint tracks)")
    if options.show_diff:
        sys.exit(result.exit_code() if result.errors else EXIT_FINDINGS if result.diffs_of_fixes else EXIT_CLEAN)
    sys.exit(result.exit_code(config.fail_on, options.exit_zero))


def _cache_folder(options: Options) -> Path | None:
    """The source half's cache folder for this run (None: none). Code from stdin is linted in a fresh temporary
    folder each time: nothing to find again there."""
    if options.mode == "trace" or options.no_cache or options.from_stdin:
        return None
    if options.cache_dir:
        return Path(options.cache_dir)
    from tracelint.source.cache import default_folder

    return default_folder()


def _check_adoption_options(options: Options) -> None:
    """Usage errors for the options that adopt tracelint on existing code (baseline, --add-noqa)."""
    baseline_path, write_baseline, add_noqa = options.baseline_path, options.write_baseline, options.add_noqa
    fixing, watch = options.fixing, options.watch
    if baseline_path and write_baseline:
        raise click.UsageError("--baseline and --write-baseline: give one (--write-baseline rewrites the file)")
    if (baseline_path or write_baseline or add_noqa) and options.from_stdin:
        raise click.UsageError("--baseline, --write-baseline and --add-noqa read the flagged lines from the files: "
                               "not with `-` (stdin)")
    if add_noqa and (fixing or watch or write_baseline):
        raise click.UsageError("--add-noqa writes comments only: not with --fix, --diff, --watch or --write-baseline")
    if write_baseline and (fixing == "diff" or watch):
        raise click.UsageError("--write-baseline writes the findings once: not with --diff or --watch")


def _read_baseline(path: Path):
    """The baseline at ``path``; a broken one is one error line naming it, exit 2."""
    from tracelint.engine.baseline import BaselineError, read_baseline_once

    try:
        return read_baseline_once(path)  # the linter's --fix asks for it again in this process: read once
    except BaselineError as exc:
        say(f"error: {exc}")
        sys.exit(EXIT_ERROR)


def _write_baseline(result: RunResult, path: Path, config: Config) -> None:
    """--write-baseline: the file, one line saying what it holds, exit 0 (2 when an input could not be read: its
    findings are not in the baseline; the file keeps its old entries)."""
    from tracelint.engine.baseline import BaselineError, write_result

    for error in result.errors:
        say(f"error: {error}")
    try:
        entries = write_result(result, path, config.enabled)
    except BaselineError as exc:
        say(f"error: {exc}")
        sys.exit(EXIT_ERROR)
    say(f"tracelint: wrote {path}: {entries} baseline entr{'y' if entries == 1 else 'ies'} "
        f"({len(result.findings)} from this run)")
    sys.exit(EXIT_ERROR if result.errors else EXIT_CLEAN)


def _add_noqa(result: RunResult) -> None:
    """--add-noqa: the comments, what could not be suppressed, how many were added; exit 0 (2 when an input could
    not be read or written)."""
    from tracelint.source.noqa import add_noqa

    done = add_noqa(result.findings)
    for error in [*result.errors, *done.errors]:
        say(f"error: {error}")
    for finding, why in done.skipped:
        say(f"note: {finding.location}: {finding.code} not suppressed: {why}")
    comments = "noqa comment" if done.comments == 1 else "noqa comments"
    say(f"Added {done.comments} {comments} in {done.files} file{'' if done.files == 1 else 's'}.")
    sys.exit(EXIT_ERROR if result.errors or done.errors else EXIT_CLEAN)


def _report(result: RunResult, options: Options) -> None:
    """The report, or under --diff the diffs of the fixes on stdout and their count on stderr."""
    if not options.show_diff:
        emit(result, options.fmt, options.output, **options.view)
        return
    from tracelint.engine.escape import no_commands

    for diff in result.diffs_of_fixes:
        click.echo(no_commands(diff), nl=False)
    for error in result.errors:
        say(f"error: {error}")
    say(would_fix_line(result) if result.diffs_of_fixes else "No fixes to apply.")


def _split_plain(values: tuple[str, ...]) -> tuple[str, ...] | None:
    """Comma lists of patterns; None when none were given."""
    items = tuple(p.strip() for v in values for p in v.split(",") if p.strip())
    return items or None


def _stdin_run(options: Options, name: str, configure, config: Config) -> RunResult:
    """``tracelint check - --stdin-filename src/train.py``: the code from stdin, linted (with ``--fix``: fixed) as
    that file would be, in a private temporary folder (nothing is written beside the user's files); with --fix the
    fixed code goes to stdout and the report to stderr, as ruff does (otherwise the caller reports, as for files)."""
    import tempfile

    from tracelint.dispatch import run_paths

    fix, fmt = options.fixing, options.fmt
    data = sys.stdin.buffer.read()
    with tempfile.TemporaryDirectory(prefix="tracelint-stdin-") as folder:
        path = Path(folder) / (Path(name).name or "stdin.py")
        path.write_bytes(data)
        result = run_paths([path], mode=options.mode, fix=fix, unsafe_fixes=options.unsafe_fixes,
                           configure=configure, timelines=fmt == "html")
        fixed = path.read_bytes() if fix is True else None
    shown = str(path)

    def renamed(item):
        loc = item.location
        loc = replace(loc, path=name) if loc.path == shown else loc
        return replace(item, location=loc)

    result.findings = [renamed(f) for f in result.findings if not config.ignored_for(name, f.code)]
    result.errors = [replace(e, path=name, message=e.message.replace(shown, name)) if e.path == shown else e
                     for e in result.errors]
    result.diffs_of_fixes = [d.replace(shown, name) for d in result.diffs_of_fixes]
    if fixed is not None:
        sys.stdout.buffer.write(fixed)
        sys.stdout.flush()
        from tracelint.render import render

        click.echo(render(result, fmt, **options.view), err=True, nl=False)
        for error in result.errors:
            say(f"error: {error}")
    return result


def _watch(once, paths, config: Config, show) -> None:
    """--watch: run, show, and run again when a Python file, notebook or trace under ``paths`` changes (polled twice
    a second: no extra dependency, and it works on network file systems); Ctrl-C ends it."""
    import time

    def snapshot() -> dict:
        seen = {}
        for root in map(Path, paths):
            files = [root] if root.is_file() else []
            if root.is_dir():
                for folder, dirs, names in os.walk(root):
                    dirs[:] = [d for d in dirs if not config.excluded(Path(folder) / d)]
                    files.extend(Path(folder) / n for n in names if n.endswith((".py", ".ipynb", ".json", ".gz")))
            for file in files:
                try:
                    st = file.stat()
                except OSError:
                    continue
                seen[str(file)] = (st.st_mtime_ns, st.st_size)
        return seen

    while True:
        before = snapshot()
        if sys.stdout.isatty():
            click.clear()
        show(once())
        say(f"tracelint: watching {len(before)} files for changes (Ctrl-C to stop)")
        while snapshot() == before:
            time.sleep(0.5)


def emit(result: RunResult, fmt: str, output: str | None, **view) -> None:
    """The report of ``result`` in format ``fmt`` to the file ``output`` or to stdout, then its unreadable inputs on
    stderr: stdout carries results only. ``view``: tracelint.render.render's options of what the report shows."""
    from tracelint.render import render

    text = render(result, fmt, **view)
    if output:
        Path(output).write_text(text, encoding="utf-8")
    elif text:
        click.echo(text, nl=not text.endswith("\n"))
    for skipped in () if view.get("quiet") else result.skipped:
        say(f"note: skipped {skipped}")
    for error in result.errors:
        say(f"error: {error}")


def say(line: str) -> None:
    """One line on stderr, escaped: a trace's keys or a file's name cannot color the terminal, start a line of their
    own or forge a workflow command in a CI log."""
    click.echo(log_line(line), err=True)


def progress_enabled() -> bool:
    """Progress lines on stderr only for a person watching: stderr is a terminal and pre-commit is not running us."""
    return sys.stderr.isatty() and os.environ.get("PRE_COMMIT") != "1"


@click.group(cls=_DispatchGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="torch-tracelint", prog_name="tracelint")
def cli() -> None:
    """A performance linter for PyTorch training.

    \b
    tracelint train.py          lint training code (Python files, notebooks, directories)
    tracelint trace.json.gz     analyze a torch.profiler trace: what bounds the step
    tracelint run train.py      profile a training run as it is: its findings, measured
    tracelint diff BASE NEW     compare two traces (or folders of rank traces): the CI gate
    tracelint rule TL101        explain a rule
    """


class _BareContext(click.Context):
    """``tracelint PATH`` runs the hidden ``auto`` command: its usage and errors name ``tracelint``, the command the
    user typed."""

    @property
    def command_path(self) -> str:
        return self.parent.command_path if self.parent is not None else "tracelint"


class _BareCommand(click.Command):
    context_class = _BareContext


@cli.command("auto", hidden=True, cls=_BareCommand)
@_options(*_SHARED, *_BASELINE, *_SOURCE, *_TRACE, _PATHS)
def auto_cmd(**kwargs) -> None:
    """Lint Python files and notebooks, analyze traces: each path by its type."""
    _check_paths(Options("auto", **kwargs))


@cli.command("check")
@_options(*_SHARED, *_BASELINE, *_SOURCE, _PATHS)
def check_cmd(**kwargs) -> None:
    """Lint Python files, notebooks and directories (`-` reads the code from stdin).

    \b
    Adopting tracelint on code that already has findings:
      tracelint check --write-baseline tracelint-baseline.json src/   record today's findings (exit 0)
      tracelint check --baseline tracelint-baseline.json src/         report only findings not in it
      tracelint check --add-noqa src/                                 or add `# noqa: TLxxx` to each flagged line
    A baseline entry is the rule, the file, the flagged line's text and its occurrence among identical ones (no
    line number: code that moves stays silenced). `baseline = "FILE"` in [tool.tracelint] applies one to every
    run (relative to that pyproject.toml).
    """
    _check_paths(Options("source", **kwargs))


@cli.command("trace")
@_options(*_SHARED, *_BASELINE, *_TRACE, _PATHS)
def trace_cmd(**kwargs) -> None:
    """Analyze torch.profiler traces (.json, .json.gz, or a directory of rank traces)."""
    _check_paths(Options("trace", **kwargs))


@cli.command("rule")
@click.argument("code")
def rule_cmd(code: str) -> None:
    """Print the documentation of one rule, by code (TL101) or name (item-in-loop)."""
    rules = catalog()
    doc = rules.get(code.upper()) or next((d for d in rules.values() if d.name == code.lower().replace("_", "-")),
                                          None)
    if doc is None:
        import difflib

        by_code = code[:2].upper() == "TL"
        close = difflib.get_close_matches(code.upper() if by_code else code.lower(),
                                          list(rules) if by_code else [d.name for d in rules.values()], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ";"
        raise click.UsageError(f"unknown rule {code!r}{hint} `tracelint rules` lists them all.")
    click.echo(doc.text.rstrip())


@cli.command("rules")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rules_cmd(fmt: str) -> None:
    """List the rules."""
    import orjson
    from tabulate import tabulate

    rows = [
        {"code": d.code, "name": d.name, "severity": str(d.severity), "implemented_by": sorted(d.implemented_by),
         "fix": d.fix, "summary": d.summary}
        for d in catalog().values()
    ]
    if fmt == "json":
        click.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    table = [(r["code"], r["name"], r["severity"], "+".join(r["implemented_by"]), r["fix"]) for r in rows]
    click.echo(tabulate(table, headers=["code", "name", "severity", "checks", "fix"], tablefmt="simple"))


@cli.command("metrics")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
def metrics_cmd(fmt: str) -> None:
    """List the metrics of a trace report, with their units and definitions."""
    import orjson
    from tabulate import tabulate

    from tracelint.engine.metrics import markdown_table, registry

    if fmt == "markdown":
        click.echo(markdown_table())
        return
    rows = [{"name": m.name, "unit": m.unit, "better": m.direction, "scope": m.scope, "gate": m.gate,
             "definition": m.definition} for m in registry().values()]
    if fmt == "json":
        click.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    table = [(r["name"], r["unit"], r["better"] or "", r["gate"] or "") for r in rows]
    click.echo(tabulate(table, headers=["metric", "unit", "better", "TL010 gate"], tablefmt="simple"))


@cli.command("thresholds")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def thresholds_cmd(fmt: str) -> None:
    """List the trace thresholds ([tool.tracelint.trace], --threshold KEY=VALUE) and their defaults."""
    import orjson
    from tabulate import tabulate

    from tracelint.engine.thresholds import thresholds

    rows = [{"key": t.key, "default": t.default, "used_by": list(t.owners), "help": t.help}
            for t in thresholds().values()]
    if fmt == "json":
        click.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    table = [(r["key"], "off" if r["default"] is None else f"{r['default']:g}", ", ".join(r["used_by"]))
             for r in rows]
    click.echo(tabulate(table, headers=["key", "default", "used by"], tablefmt="simple"))


def main(argv: list[str] | None = None) -> None:
    """Entry point: maps every failure to one line on stderr and exit code 2 (click would use 1 for some).

    Run as the process itself (``argv`` None: the ``tracelint`` script, ``python -m tracelint``) it leaves with
    ``os._exit`` once the output is flushed: freeing a big trace's million records and tearing the interpreter
    down would only make the user wait longer for the prompt."""
    try:
        _main(argv)
    except SystemExit as exc:
        if argv is None:
            _leave(exc.code)
        raise


def _leave(code: object) -> None:
    status = 0 if code is None else code if isinstance(code, int) else EXIT_ERROR
    if isinstance(code, str):
        print(log_line(code), file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said there
            status = status or EXIT_ERROR
    os._exit(status)


def _main(argv: list[str] | None) -> None:
    try:
        cli.main(args=argv, prog_name="tracelint", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        _show(exc)
        sys.exit(EXIT_ERROR)
    except click.exceptions.Abort:
        say("aborted")
        sys.exit(EXIT_ERROR)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(EXIT_ERROR)
    except SystemExit:
        raise
    except Exception as exc:  # an internal error: one line, exit 2, never 1
        say(f"tracelint: internal error: {type(exc).__name__}: {exc}")
        if os.environ.get("TRACELINT_DEBUG"):
            raise
        sys.exit(EXIT_ERROR)


def _show(exc: click.ClickException) -> None:
    """click's report of a usage error (usage, hint, ``Error: message``), its message escaped as one line (it may
    quote a config file or an argument) and each line through ``say``."""
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):  # `tracelint` alone: our own help text, as it is
        click.echo(exc.ctx.get_help(), err=True)
        return
    exc.message = terminal(exc.message)
    buffer = io.StringIO()
    exc.show(file=buffer)
    for line in buffer.getvalue().splitlines():
        say(line)
