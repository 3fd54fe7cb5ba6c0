"""The human report (``--format text``, the default), in ruff's manner.

When traces were analysed, the first line is the verdict with its evidence (what bounds the step, and the number
that says so); then one block per trace and rank: its metrics in a compact table and its findings; a job (the
ranks of one folder) ends with its own block: a table with a row per rank (verdict, step time, busy, compute busy,
communication, overlap, exposed communication, wait for other ranks), its metrics and its findings. Source findings
follow as ``path:line:col: TL101 warning [*] message`` (the severity; ``[*]``: a safe fix exists; columns
1-based; notebooks as ``nb.ipynb:cell 3:4:5:``), and a last line counts them. Color only when stdout is a
terminal and NO_COLOR is unset.
A ``tracelint verify`` result is one block per target instead: the baseline, a table of the measured fixes, and a
legend of the statuses.

Text from traces and source files (paths, messages, event names, metric names and values) is data: control
characters, ANSI escapes and bidi controls in it are shown as escapes (``\\x1b``, ``\\n``, ``\\u202e``), so that
they neither reach the terminal nor start a line, and no line of the report starts a GitHub Actions workflow command
(tracelint.render._escape). The color codes are tracelint's own, added after.
"""
from __future__ import annotations

import math
import os
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from tracelint.engine import metrics as M
from tracelint.engine.finding import Finding, Severity, SourceLocation, TraceLocation
from tracelint.engine.metrics import GPU_BUSY_PCT, IDLE_CAUSES, registry
from tracelint.engine.metrics import unit as metric_unit
from tracelint.engine.result import RunResult, TraceSummary
from tracelint.render._common import is_rank_summary, trace_context, verdict_line
from tracelint.render._escape import map_strings, no_commands, terminal

_PAIRED_ABOVE = 6  # metrics beyond this count are laid out two per row


# --- metric values ---------------------------------------------------------------------------------------------

def format_metric(key: str, value: object) -> str:
    """A metric value for people: 81.2%, 1.5 GiB, 812 µs, 12.3 ms, 1,024; n/a for None and NaN."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        number = float(value)
        if math.isnan(number):
            return "n/a"
        if math.isinf(number):
            return "inf" if number > 0 else "-inf"
        unit = metric_unit(key)  # the registry's, or a finding detail's by its name
        if unit == "pct":
            return f"{number:.1f}%"
        if unit == "bytes":
            return format_bytes(number)
        if unit == "ratio":
            return f"{number:.2f}×"
        if unit in ("us", "ms", "s"):
            return format_seconds(number / {"us": 1e6, "ms": 1e3, "s": 1.0}[unit])
        if isinstance(value, int):
            return f"{value:,}"
        return _sig3(number)
    if isinstance(value, (list, tuple)):
        return ", ".join(format_metric(key, v) for v in value)
    return terminal(str(value))


def format_bytes(n: float) -> str:
    if abs(n) < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if abs(n) < 1024 or unit == "TiB":
            return f"{_sig3(n)} {unit}"
    raise AssertionError("unreachable")


def format_seconds(s: float) -> str:
    if abs(s) < 1e-3:
        return f"{_sig3(s * 1e6)} µs"
    if abs(s) < 1:
        return f"{_sig3(s * 1e3)} ms"
    return f"{_sig3(s)} s"


def _sig3(x: float) -> str:
    """About three significant digits, never in exponent notation."""
    size = abs(x)
    if x == int(x) and size < 1e15:
        return f"{int(x):,}"
    if size >= 1000:
        return f"{x:,.0f}"
    if size >= 100:
        return f"{x:.0f}"
    if size >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def flat_metrics(metrics: dict, prefix: str = "") -> Iterator[tuple[str, object]]:
    """(dotted name, value) of the scalar metrics, nested dicts flattened; lists of records are left to JSON."""
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value and all(isinstance(v, str) for v in value.values()):
            yield name, _tally(value)  # e.g. the verdict of every rank: counted, not one row per rank
        elif isinstance(value, dict):
            yield from flat_metrics(value, name + ".")
        elif isinstance(value, (list, tuple)) and any(isinstance(v, (dict, list, tuple)) for v in value):
            continue
        else:
            yield name, value


def _tally(labels: dict) -> str:
    if len(labels) <= 4:
        return ", ".join(f"{k}: {v}" for k, v in labels.items())
    return ", ".join(f"{v} ×{n}" for v, n in Counter(labels.values()).most_common())


def ordered_metrics(metrics: dict) -> list[tuple[str, str]]:
    """(name, formatted value) in the registry's order (tracelint.engine.metrics), undeclared ones after them in
    the analyzer's order. A time and its share of the same name (``idle_host_sync_us`` and ``idle_host_sync_pct``)
    share one row; metrics that do not apply (None) are left out (the JSON report keeps them), and so are idle causes
    that took no time."""
    items = {k: v for k, v in flat_metrics(metrics) if v is not None}
    for cause in IDLE_CAUSES:  # an idle cause that took no time says nothing
        if items.get(f"idle_{cause}_pct") == 0 and not items.get(f"idle_{cause}_us"):
            items.pop(f"idle_{cause}_pct")
            items.pop(f"idle_{cause}_us", None)
    order = _registry_order()

    def rank(key: str) -> int:
        return order.get(key.rsplit(".", 1)[-1], len(order))

    rows = []
    for key in sorted(items, key=rank):
        if key.endswith("_us") and f"{key[:-3]}_pct" in items:
            continue  # shown beside its share
        shown = format_metric(key.rsplit(".", 1)[-1], items[key])
        if key.endswith("_pct") and f"{key[:-4]}_us" in items:
            shown += f" ({format_metric('_us', items[key[:-4] + '_us'])})"
        rows.append((key, shown))
    return rows


@lru_cache(maxsize=1)
def _registry_order() -> dict[str, int]:
    return {name: i for i, name in enumerate(registry())}


def metrics_table(metrics: dict, indent: str = "  ") -> list[str]:
    rows = ordered_metrics(metrics)
    if not rows:
        return []
    from tabulate import tabulate  # only trace reports need it: keeps it off the pre-commit start-up path

    if len(rows) > _PAIRED_ABOVE:
        half = (len(rows) + 1) // 2
        left, right = rows[:half], rows[half:] + [("", "")] * (2 * half - len(rows))
        table = [(a, b, "  " + c, d) for (a, b), (c, d) in zip(left, right, strict=True)]
        text = tabulate(table, tablefmt="plain", colalign=("left", "right", "left", "right"), disable_numparse=True)
    else:
        text = tabulate(rows, tablefmt="plain", colalign=("left", "right"), disable_numparse=True)
    return [indent + line.rstrip() for line in text.splitlines()]


# --- color -----------------------------------------------------------------------------------------------------

def color_wanted() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


class _Paint:
    """ANSI styles, or none at all."""

    CODES = {"bold": "1", "dim": "2", "red": "31", "yellow": "33", "blue": "34", "cyan": "36", "green": "32"}
    BY_SEVERITY = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "blue"}

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, *styles: str) -> str:
        if not self.enabled or not styles:
            return text
        return f"\x1b[{';'.join(self.CODES[s] for s in styles)}m{text}\x1b[0m"

    def code(self, finding: Finding) -> str:
        return self(finding.code, "bold", self.BY_SEVERITY[finding.severity])


# --- the report ------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class View:
    """How much the report shows (the CLI's options).

    ``verbose``: every metric of every trace and rank (by default a trace shows the metrics that explain its
    verdict, tracelint.engine.metrics.EXPLAINS, and a rank of a job only its line of the rank table and its
    findings); ``quiet``: the verdict line and the findings, nothing else; ``statistics``: a count per rule instead
    of the findings; ``show_source``: each finding's source line, with carets under a source finding's span."""

    verbose: bool = False
    quiet: bool = False
    statistics: bool = False
    show_source: bool = False


def render(result: RunResult, *, color: bool | None = None, verbose: bool = False, quiet: bool = False,
           statistics: bool = False, show_source: bool = False) -> str:
    if result.verifications:
        # A failed run's stderr keeps its lines (each is indented under the run); all else is escaped.
        targets = map_strings(result.verifications, lambda text: terminal(text, keep="\n"))
        return no_commands("\n\n".join(verify_block(target) for target in targets) + "\n")
    if result.diffs is not None:
        return no_commands("\n\n".join(diff_block(d) for d in map_strings(result.diffs, terminal)) + "\n"
                           if result.diffs else "")
    view = View(verbose, quiet, statistics, show_source)
    return no_commands(_report(_escaped(result), _Paint(color_wanted() if color is None else color), view))


def _escaped(result: RunResult) -> RunResult:
    """``result`` with the text this format shows of it escaped for the terminal (``_escape.terminal``): the traces,
    and each finding's location, message and details."""
    return replace(result, findings=[_escaped_finding(f) for f in result.findings],
                   traces=map_strings(result.traces, terminal))


def _escaped_finding(finding: Finding) -> Finding:
    loc = finding.location
    shown = [finding.message, loc.path, *(k for k, _ in finding.details)]
    if isinstance(loc, TraceLocation) and loc.source is not None:
        shown.append(loc.source.path)
    # The usual finding has nothing to escape: one test instead of a walk keeps a large report fast. (A detail's
    # value is escaped where format_metric writes it.)
    if all(isinstance(text, str) for text in shown) and "".join(shown).isprintable():
        return finding
    return replace(finding, location=map_strings(loc, terminal), message=terminal(finding.message),
                   details=map_strings(finding.details, terminal))


def _report(result: RunResult, paint: _Paint, view: View = View()) -> str:
    """The report of a result whose text is already escaped."""
    if view.statistics:
        return "\n".join([*statistics_lines(result.findings), "", count_line(result, paint)]) + "\n"
    lines: list[str] = []
    placed: set[int] = set()
    # The analyzer adds one summary over the ranks of a job directory: it gives the headline, its ranks the blocks.
    overall = [s for s in result.traces if is_rank_summary(s, result.traces)]
    ranks = [s for s in result.traces if not any(s is o for o in overall)]
    if result.traces:
        lines.append(headline(overall or ranks, paint))
    if result.traces and not view.quiet:
        blocks = _findings_by_trace(result.findings, ranks)
        members = {id(o): [s for s in ranks if Path(o.path) in Path(s.path).parents] for o in overall}
        in_job = {id(s) for group in members.values() for s in group}
        for i, summary in enumerate(ranks):
            lines.append("")
            lines.extend(_trace_block(summary, blocks.get(i, []), paint, view, with_evidence=len(result.traces) > 1,
                                      in_job=id(summary) in in_job))
            placed.update(id(f) for f in blocks.get(i, []))
        for summary in overall:
            mine = [f for f in result.findings if id(f) not in placed and isinstance(f.location, TraceLocation)
                    and f.location.path == summary.path]
            placed.update(id(f) for f in mine)
            lines.append("")
            lines.extend(_trace_block(summary, mine, paint, view, with_evidence=len(overall) > 1,
                                      ranks=members[id(summary)]))
        if not overall and len(ranks) > 1:
            lines.extend(["", spread_line(ranks)])
        if not view.verbose and any(_hidden_metrics(s, view) for s in result.traces):
            lines.extend(["", paint("(the metrics that explain each verdict; --verbose shows them all)", "dim")])
    rest = [f for f in result.findings if id(f) not in placed]
    if rest:
        if not view.quiet:
            lines.append("")
        for finding in rest:
            lines.extend(finding_lines(finding, paint, view))
    if not view.quiet:
        lines.append("")
        lines.append(count_line(result, paint))
    while lines and lines[0] == "":
        lines.pop(0)
    return "\n".join(lines) + "\n" if lines else ""


def statistics_lines(findings: list[Finding]) -> list[str]:
    """--statistics: a row per rule, most frequent first: count, code, name, ``[*]`` when a safe fix exists."""
    from tabulate import tabulate

    from tracelint.engine.catalog import rule_name

    counts = Counter(f.code for f in findings)
    fixable = {f.code for f in findings if f.fix and f.fix.safe}
    rows = [(n, code, rule_name(code) or "", "[*]" if code in fixable else "")
            for code, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]
    if not rows:
        return []
    text = tabulate(rows, tablefmt="plain", colalign=("right", "left", "left", "left"), disable_numparse=True)
    return [line.rstrip() for line in text.splitlines()]


def _shown_metrics(summary: TraceSummary, view: View) -> dict:
    """The metrics a trace block lists: all under --verbose, else those that explain its verdict."""
    if view.verbose:
        return summary.metrics
    job = summary.profiler is None and M.RANKS.of(summary.metrics) is not None
    keep = {m.name for m in M.explaining(summary.verdict, job=job)}
    keep |= {f"{name[:-4]}_us" for name in keep if name.endswith("_pct")}  # a share is shown with its time
    return {k: v for k, v in summary.metrics.items() if k in keep}


def _hidden_metrics(summary: TraceSummary, view: View) -> bool:
    return len(_shown_metrics(summary, view)) < len(summary.metrics)


def headline(traces: list[TraceSummary], paint: _Paint) -> str:
    """The first line: the verdict with its evidence; over several traces or ranks, the shared or mixed verdict."""
    if len(traces) == 1:
        return _bold_verdict(verdict_line(traces[0]), traces[0].verdict, paint)
    labels = _labels(traces)
    verdicts = Counter(s.verdict for s in traces)
    noun = "ranks" if all(label.startswith("rank ") for label in labels) else "traces"
    if len(verdicts) == 1:
        worst = min(range(len(traces)), key=lambda i: _busy(traces[i]))
        s = traces[worst]
        evidence = _evidence(s)
        return f"{paint(s.verdict, 'bold')} on all {len(traces)} {noun}: {evidence} ({labels[worst]})"
    parts = []
    for verdict, _n in verdicts.most_common():
        where = ", ".join(labels[i] for i, s in enumerate(traces) if s.verdict == verdict)
        parts.append(f"{paint(verdict, 'bold')} on {where}")
    return f"mixed verdicts across {len(traces)} {noun}: " + "; ".join(parts)


def _evidence(summary: TraceSummary) -> str:
    """The evidence without the verdict word the analyzer may start it with."""
    return verdict_line(summary).removeprefix(summary.verdict).removeprefix(":").strip()


def _bold_verdict(line: str, verdict: str, paint: _Paint) -> str:
    return paint(verdict, "bold") + line[len(verdict):] if line.startswith(verdict) else line


def spread_line(traces: list[TraceSummary]) -> str:
    """The summary over ranks: how many share each verdict and how far GPU busy time spreads."""
    labels = _labels(traces)
    verdicts = Counter(s.verdict for s in traces)
    text = f"{len(traces)} traces: " + ", ".join(f"{v} ×{n}" for v, n in verdicts.most_common())
    busy = [(i, _busy(s)) for i, s in enumerate(traces) if math.isfinite(_busy(s))]
    if len(busy) > 1:
        lo, hi = min(busy, key=lambda t: t[1]), max(busy, key=lambda t: t[1])
        name = GPU_BUSY_PCT.name
        text += (f"; {name} {format_metric(name, lo[1])} ({labels[lo[0]]})"
                 f" to {format_metric(name, hi[1])} ({labels[hi[0]]})")
    return text


def _busy(summary: TraceSummary) -> float:
    value = GPU_BUSY_PCT.of(summary.metrics)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.inf


def _labels(traces: list[TraceSummary]) -> list[str]:
    """'rank 3' when the ranks tell the traces apart, else 'path (rank 3)' / 'path'."""
    ranks = [s.rank for s in traces]
    if None not in ranks and len(set(ranks)) == len(ranks):
        return [f"rank {r}" for r in ranks]
    return [f"{s.path} (rank {s.rank})" if s.rank is not None else s.path for s in traces]


def _findings_by_trace(findings: Iterable[Finding], traces: list[TraceSummary]) -> dict[int, list[Finding]]:
    """Trace findings under the block of their trace and rank (a finding without a rank: the file's only block)."""
    exact = {(s.path, s.rank): i for i, s in enumerate(traces)}
    per_path = Counter(s.path for s in traces)
    first = {}
    for i, s in enumerate(traces):
        first.setdefault(s.path, i)
    out: dict[int, list[Finding]] = {}
    for f in findings:
        loc = f.location
        if not isinstance(loc, TraceLocation):
            continue
        i = exact.get((loc.path, loc.rank))
        if i is None and loc.rank is None and per_path[loc.path] == 1:
            i = first[loc.path]
        if i is not None:
            out.setdefault(i, []).append(f)
    return out


def _trace_block(summary: TraceSummary, findings: list[Finding], paint: _Paint, view: View, *,
                 with_evidence: bool, ranks: list[TraceSummary] = (), in_job: bool = False) -> list[str]:
    title = f"{summary.path} (rank {summary.rank})" if summary.rank is not None else summary.path
    lines = [f"{paint(title, 'bold')}: {paint(summary.verdict, 'bold')}"]
    if with_evidence and _evidence(summary):
        lines.append(f"  {_evidence(summary)}")
    if summary.profiler and (view.verbose or not in_job):
        lines.append(f"  {paint('recorded', 'dim')}: {profiler_line(summary.profiler)}")
    if ranks:
        lines.extend(rank_table(ranks))
        lines.append("")
    if view.verbose or not in_job:  # a rank of a job: its row of the job's rank table says it
        lines.extend(metrics_table(_shown_metrics(summary, view)))
    lines.extend(f"  {paint('note', 'dim')}: {w}" for w in summary.warnings)
    if findings:
        lines.append("")
        for finding in findings:
            lines.extend(finding_lines(finding, paint, view))
    return lines


_SETTING_WORDS = {"with_stack": "stacks", "record_shapes": "shapes", "profile_memory": "memory",
                  "with_flops": "FLOPs", "with_modules": "modules"}


def profiler_line(profiler: dict) -> str:
    """What the profiler recorded: ``stacks, shapes, memory; not profiled: 33.7 ms per step (tracelint.profile)``."""
    on = [word for key, word in _SETTING_WORDS.items() if profiler.get(key)]
    unknown = [word for key, word in _SETTING_WORDS.items() if profiler.get(key) is None and key != "with_modules"]
    text = ", ".join(on) if on else "no stacks, shapes or memory events"
    if unknown:
        text += f" ({', '.join(unknown)}: not said)"
    if profiler.get("unprofiled_step_ms"):
        text += f"; not profiled: {profiler['unprofiled_step_ms']:.1f} ms per step ({profiler.get('source')})"
    return text


RANK_COLUMNS = ("rank", "verdict", "step ms", "busy", "compute", "comm ms", "overlap", "exposed ms", "wait ms")


def rank_table(ranks: list[TraceSummary], indent: str = "  ") -> list[str]:
    """A row per rank of a job: its verdict, mean step time, GPU busy and compute busy (percent of the window),
    and per step its communication time, the part of it beside compute, the exposed part and the wait for other
    ranks (ms)."""
    from tabulate import tabulate

    text = tabulate(rank_rows(ranks), headers=RANK_COLUMNS, tablefmt="simple", disable_numparse=True,
                    colalign=("right", "left", *("right",) * 7))
    return [indent + line.rstrip() for line in text.splitlines()]


def rank_rows(ranks: list[TraceSummary]) -> list[tuple]:
    """The rows of ``rank_table`` (``RANK_COLUMNS``), by rank: the text and HTML reports lay them out."""
    def per_step(m: dict, value) -> str:
        return "–" if value is None else f"{value / max(1, M.STEPS.of(m) or 1) / 1000:.1f}"

    def share(value) -> str:
        return "–" if value is None else f"{value:.0f}%"

    rows = []
    for s in sorted(ranks, key=lambda s: (s.rank is None, s.rank)):
        m = s.metrics
        step = max(M.STEP_CPU_US_MEAN.of(m) or 0.0, M.STEP_GPU_SPAN_US_MEAN.of(m) or 0.0)
        wait = M.COMM_WAIT_US.of(m)
        rows.append((s.rank, s.verdict, f"{step / 1000:.1f}" if step else "–", share(GPU_BUSY_PCT.of(m)),
                     share(M.COMPUTE_BUSY_PCT.of(m)), per_step(m, M.COMM_TIME_US.of(m)),
                     share(M.COMM_OVERLAP_PCT.of(m)), per_step(m, M.EXPOSED_COMM_US.of(m)),
                     "–" if wait is None else f"{wait / 1000:.1f}"))
    return rows


def plain_finding(finding: Finding) -> str:
    """``str(finding)``: its lines without color, escaped like the report."""
    return no_commands("\n".join(finding_lines(_escaped_finding(finding), _Paint(False))))


def finding_lines(finding: Finding, paint: _Paint, view: View = View()) -> list[str]:
    """``path:line:col: TL101 warning [*] message`` or ``trace.json.gz (rank 0, step 12): TL202 info message``, then the
    source line of a trace finding (``  --> train.py:42``) and its measured details (``  = key: value``)."""
    loc = finding.location
    fix = f" {paint('[*]', 'cyan')}" if finding.fix and finding.fix.safe else ""
    severity = paint(str(finding.severity), paint.BY_SEVERITY[finding.severity])
    if isinstance(loc, SourceLocation):
        where = paint(f"{loc}:", "bold")
    else:
        context = trace_context(loc)
        where = paint(f"{loc.path}{f' ({context})' if context else ''}:", "bold")
    lines = [f"{where} {paint.code(finding)} {severity}{fix} {finding.message}"]
    if isinstance(loc, TraceLocation) and loc.source is not None:
        lines.append(f"  {paint('-->', 'cyan')} {replace(loc.source, column=None)}")
    if view.show_source and finding.source is not None:
        lines.extend(source_lines(finding.source, paint))
    if finding.details:
        facts = ", ".join(f"{k}: {format_metric(k, v)}" for k, v in finding.details)
        lines.append(f"  {paint('=', 'dim')} {facts}")
    return lines


def source_lines(loc: SourceLocation, paint: _Paint) -> list[str]:
    """--show-source: the line a finding points at, numbered, with carets under its span (a source finding's) or
    none (a trace stack's line); nothing when the file cannot be read there."""
    text = _source_line(loc.path, loc.line, loc.cell)
    if text is None:
        return []
    number = str(loc.line)
    gutter = " " * len(number)
    shown = terminal(text.expandtabs(1))
    lines = [f"  {gutter} {paint('|', 'cyan')}", f"  {number} {paint('|', 'cyan')} {shown}"]
    if loc.column:
        end = loc.end_column if loc.end_line in (None, loc.line) and loc.end_column else len(text) + 1
        width = max(1, min(end, len(text) + 1) - loc.column)
        lines.append(f"  {gutter} {paint('|', 'cyan')} {' ' * (loc.column - 1)}{paint('^' * width, 'red')}")
    return lines


def _source_line(path: str, line: int, cell: int | None) -> str | None:
    """Line ``line`` of a file (of a notebook's cell ``cell``, counting all cells from 1), or None."""
    try:
        if cell is not None:
            import orjson

            source = orjson.loads(Path(path).read_bytes())["cells"][cell - 1]["source"]
            text = "".join(source) if isinstance(source, list) else str(source)
        else:
            with open(path, encoding="utf-8", errors="replace") as file:
                for number, text in enumerate(file, start=1):
                    if number == line:
                        return text.rstrip("\r\n")
            return None
        lines = text.splitlines()
        return lines[line - 1] if 0 < line <= len(lines) else None
    except (OSError, ValueError, LookupError, TypeError):
        return None


def count_line(result: RunResult, paint: _Paint) -> str:
    """ruff's closing line: 'Found 3 findings (2 fixable with --fix).' or 'All checks passed.'"""
    n = len(result.findings)
    fixable = sum(1 for f in result.findings if f.fix and f.fix.safe)
    hidden = sum(1 for f in result.findings if f.fix and not f.fix.safe)
    if result.fixed:
        # The count a plain run gives: what is left of it, and apart from it what the fixes exposed.
        found = n - result.exposed + result.resolved
        text = f"Found {_plural(found, 'finding')} ({result.resolved} fixed, {found - result.resolved} remaining)."
        if result.exposed:
            text += f" The fixes exposed {result.exposed} more, shown above."
    elif n:
        text = f"Found {_plural(n, 'finding')}" + (f" ({fixable} fixable with --fix)." if fixable else ".")
    elif result.errors:
        return f"No findings, but {_plural(len(result.errors), 'input')} could not be read."
    else:
        return paint("All checks passed.", "green", "bold")
    if hidden:
        text += f" ({_plural(hidden, 'hidden fix', 'hidden fixes')} can be enabled with --unsafe-fixes.)"
    return text


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


# --- tracelint verify ------------------------------------------------------------------------------------------

VERIFY_FIX_WIDTH = 60  # the fix column of the verify table; longer titles end in "…"


def verify_block(target: dict) -> str:
    """One ``tracelint verify`` target (a ``RunResult.verifications`` record): settings, baseline, the table of
    measured fixes (under --trace with the analyzer's verdict before → after each fix) and the findings that
    could not be measured, then failures, reasons and the details of the traces."""
    from tabulate import tabulate

    from tracelint.verify.stats import LEGEND

    s, baseline = target["settings"], target["baseline"]
    lines = [f"tracelint verify {target['target']}",
             f"{target['device']} · torch {target['torch']} · {s['warmup']} warm-up steps, then the baseline and "
             f"each variant alternate blocks of {s['steps']} steps",
             f"(one device synchronize per block), at least {s['blocks']} rounds, until the 95% interval is within "
             f"±{s.get('target_pct', 3):g}% or {s.get('budget_s', 0):g} s are spent"]
    if not target["timing_claims"]:
        lines.append("note: timings on the CPU are not claims about a GPU (--device cpu is for testing the harness)")
    if baseline["status"] == "ok":
        count = sum(len(r) for r in baseline["runs_ms"])
        lines.append(f"baseline: {_timing_cell(baseline['median_ms'], baseline['spread'])} ms/step over {count} "
                     f"blocks; block-to-block noise ±{baseline['noise_pct']:.1f}%")
    elif baseline["reason"] is not None:
        lines.append(f"baseline failed: {baseline['reason']}")
        lines.extend(_indented(baseline["stderr_tail"]))
    lines.extend(f"note: {n}" for n in target["notes"])
    variants, skipped = target["variants"], target.get("not_measured", [])
    if not variants and not skipped:
        return "\n".join(lines)
    traced = "trace" in baseline
    headers = ["location", "rule", "fix", "baseline ms", "fixed ms", "speedup (95% CI)", "rounds", "status"]
    if traced:
        headers.append("trace before → after")
    table = []
    for entry in variants:
        m = entry["verification"]
        row = [entry["location"] or "—", entry["rule"], _short(_fix_label(m)),
               _timing_cell(m["baseline_ms"], m["spread"]["baseline"]),
               _timing_cell(m["fixed_ms"], m["spread"]["fixed"]), _speedup_cell(m), _rounds_cell(m), _status_cell(m)]
        if traced:
            row.append(f"{_verdict_of(m.get('trace_before'))} → {_verdict_of(m.get('trace'))}")
        table.append(row)
    for entry in skipped:
        row = [entry["location"] or "—", entry["rule"], "— (see below)", "—", "—", "—", "—", "not-measured"]
        if traced:
            row.append("—")
        table.append(row)
    lines += ["", tabulate(table, headers=headers, tablefmt="simple", disable_numparse=True)]
    for entry in variants:
        follow_ups = entry["verification"]["follow_ups"]
        if follow_ups:
            lines.append(f"  {entry['key']} also applies the fixes it exposes: {', '.join(follow_ups)}")
    for entry in skipped:
        lines.append(f"  {entry['location'] or entry['rule']} {entry['rule']} not measured: {entry['reason']}")
    for entry in variants:
        m = entry["verification"]
        if m["stderr_tail"] is not None:  # a run that failed (a variant not run for a failed baseline has none)
            lines += ["", f"{entry['key']} failed: {m['reason']}", *_indented(m["stderr_tail"])]
    if traced:
        lines += ["", *_verify_trace_lines(target)]
    lines += ["", LEGEND]
    return "\n".join(lines)


def _speedup_cell(m: dict) -> str:
    if not m.get("speedup"):
        return "—"
    ci = m.get("ci95")
    return f"{m['speedup']:.2f}× ({ci[0]:.2f}–{ci[1]:.2f})" if ci else f"{m['speedup']:.2f}×"


def _rounds_cell(m: dict) -> str:
    if not m.get("rounds"):
        return "—"
    return f"{m['rounds']} ({m['stopped']})" if m.get("stopped") else str(m["rounds"])


def _status_cell(m: dict) -> str:
    if m["status"] == "no-effect" and m.get("bound_pct") is not None:
        return f"no-effect: none larger than ±{m['bound_pct']:.1f}%"
    return m["status"]


def _verdict_of(trace: dict | None) -> str:
    if not trace:
        return "—"
    return trace["verdict"] if trace.get("status") == "ok" else "failed"


def _verify_trace_lines(target: dict) -> list[str]:
    """--trace: the analyzer's verdict on the profiled steps, baseline → each variant."""
    from tracelint.verify.tracing import metric_for, summary_of

    lines = ["trace analysis (a few steps profiled after the timed blocks):"]
    before = target["baseline"]["trace"]
    for entry in target["variants"]:
        metric = metric_for(entry["rule"])
        after = entry["verification"]["trace"]
        lines.append(f"  {entry['key']}: trace: {summary_of(before, metric)} → {summary_of(after, metric)}")
    return lines


def _fix_label(measured: dict) -> str:
    if measured["precision"]:
        return f"{measured['fix']} (unsafe: changes numerics)"
    return f"{measured['fix']} ({'safe' if measured['safe'] else 'unsafe'})"


def _timing_cell(median: float | None, spread: list | None) -> str:
    if median is None:
        return "—"
    return f"{median:.2f} ({spread[0]:.2f}–{spread[1]:.2f})" if spread else f"{median:.2f}"


def _short(text: str, width: int = VERIFY_FIX_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _indented(text: str | None) -> list[str]:
    return [f"  | {line}" for line in text.splitlines()] if text else []


# --- tracelint diff ----------------------------------------------------------------------------------------------

DIFF_KERNELS_SHOWN = 10  # the kernel table of a diff shows the ten whose time per step moved most


def diff_block(diff: dict) -> str:
    """One ``tracelint diff`` pair (a ``RunResult.diffs`` record, already escaped): the summary line, the gate, the
    step time with its noise, the verdicts, the metrics that moved, kernel time per step by class and by kernel,
    and the findings new and fixed."""
    from tabulate import tabulate

    rank = f" (rank {diff['rank']})" if diff["rank"] is not None else ""
    lines = [f"tracelint diff {diff['base']} → {diff['new']}{rank}", diff["summary"], f"gate: {diff_gate_line(diff)}"]
    lines.extend(f"  crossed {c}" for c in diff["gate"]["thresholds_crossed"])
    step, verdict = diff["step_ms"], diff["verdict"]
    lines += ["", f"  step time  {_diff_ms(step['base'])} → {_diff_ms(step['new'])}  "
                  f"{_signed_pct(step['change_pct'])}  {diff_noise_words(diff)}",
              f"  verdict    {verdict['base']} → {verdict['new']}"]
    moved = [m for m in diff["metrics"] if m["moved"]]
    if moved:
        rows = [(m["name"], format_metric(m["name"], m["base"]), format_metric(m["name"], m["new"]),
                 diff_delta(m["name"], m["delta"]), _signed_pct(m["delta_pct"])) for m in moved]
        lines += ["", f"  metrics that moved beyond the noise ({len(moved)} of {len(diff['metrics'])}):",
                  *_table(tabulate, rows, ("metric", "base", "new", "change", "%"))]
    else:
        lines += ["", f"  no metric moved beyond the noise (of {len(diff['metrics'])})"]
    classes = [k for k in diff["kernel_classes"] if k["delta_us_per_step"]]
    if classes:
        rows = [(k["name"], *_kernel_cells(k)) for k in classes]
        lines += ["", "  GPU time per step by class:", *_table(tabulate, rows, ("class", "base", "new", "change"))]
    kernels = [k for k in diff["kernels"] if k["delta_us_per_step"]][:DIFF_KERNELS_SHOWN]
    if kernels:
        names = diff["kernel_names"]
        rows = [(*_kernel_cells(k), k["class"], _short(k["name"], 70)) for k in kernels]
        lines += ["", f"  kernels whose time per step changed most ({names['both']} names on both sides, "
                      f"{names['appeared']} appeared, {names['vanished']} vanished):",
                  *_table(tabulate, rows, ("base", "new", "change", "class", "kernel"))]
    for kind in ("new", "fixed"):
        found = diff["findings"][kind]
        lines += ["", f"  findings {kind}: {len(found) or 'none'}"]
        lines.extend(line for f in found for line in diff_finding_lines(f))
    return "\n".join(lines)


def diff_gate_line(diff: dict) -> str:
    """``REGRESSION: 34.4% slower, over the 5% limit and the ±8.9% noise`` or ``ok: ...``."""
    step, gate = diff["step_ms"], diff["gate"]
    change, noise, limit = step["change_pct"], step["noise_pct"], gate["max_regression_pct"]
    if change is None:
        words = "the step time cannot be compared"
    elif change <= 0:
        words = f"{abs(change):.1f}% faster" if change else "same step time"
    else:
        over_noise = noise is None or change > noise
        if change > limit and over_noise:
            band = "(noise unknown)" if noise is None else f"and the ±{noise:.1f}% noise"
            words = f"{change:.1f}% slower, over the {limit:g}% limit {band}"
        elif change > limit:
            words = f"{change:.1f}% slower, over the {limit:g}% limit but within the ±{noise:.1f}% noise"
        else:
            words = f"{change:.1f}% slower, within the {limit:g}% limit"
    if diff["gate"]["thresholds_crossed"]:
        n = len(diff["gate"]["thresholds_crossed"])
        words += f"; {n} threshold{'s' if n > 1 else ''} crossed"
    return ("REGRESSION: " if diff["regression"] else "ok: ") + words


def diff_noise_words(diff: dict) -> str:
    """``noise ±8.9% (95% band from 3 and 3 steps)``, saying when few steps make the band wide."""
    from tracelint.diff.compare import FEW_STEPS

    steps, noise = diff["steps"], diff["step_ms"]["noise_pct"]
    if noise is None:
        return f"noise unknown ({steps['base']} and {steps['new']} steps: a spread needs two)"
    text = f"noise ±{noise:.1f}% (95% band from {steps['base']} and {steps['new']} steps"
    if min(steps["base"], steps["new"]) < FEW_STEPS:
        text += ": few steps, a wide band"
    return text + ")"


def diff_delta(key: str, delta: float | None) -> str:
    """A metric's change with its sign, in the metric's unit: +1, -23.2 ms, +147 MiB."""
    if delta is None:
        return "n/a"
    if metric_unit(key) == "pct":
        return f"{delta:+.1f} pts"  # a change of a percentage, in points (its relative change is beside it)
    return ("+" if delta > 0 else "") + format_metric(key, delta)


def diff_finding_lines(f: dict) -> list[str]:
    """A finding record of a diff (the JSON report's shape): ``TL101 warning message`` and its source line."""
    trace = f.get("trace") or {}
    where = ", ".join(p for p in (f"rank {trace['rank']}" if trace.get("rank") is not None else "",
                                  f"step {trace['step']}" if trace.get("step") is not None else "") if p)
    lines = [f"    {f['code']} {f['severity']} {f['message']}" + (f" ({where})" if where else "")]
    if f.get("source"):
        lines.append(f"      --> {f['source']['path']}:{f['source']['line']}")
    elif f.get("line") is not None:
        lines.append(f"      --> {f['path']}:{f['line']}")
    return lines


def _kernel_cells(k: dict) -> tuple[str, str, str]:
    return (format_metric("_us", k["base_us_per_step"]) if k["base_us_per_step"] is not None else "–",
            format_metric("_us", k["new_us_per_step"]) if k["new_us_per_step"] is not None else "–",
            diff_delta("_us", k["delta_us_per_step"]))


def _table(tabulate, rows, headers) -> list[str]:
    text = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
    return ["    " + line.rstrip() for line in text.splitlines()]


def _diff_ms(value: float | None) -> str:
    return "n/a" if value is None else format_seconds(value / 1e3)


def _signed_pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.1f}%"
