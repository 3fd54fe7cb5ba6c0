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
(tracelint.engine.escape). The color codes are tracelint's own, added after.
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
from tracelint.engine.display import Paint, format_metric, runs
from tracelint.engine.escape import map_strings, no_commands, terminal
from tracelint.engine.finding import Finding, SourceLocation, TraceLocation
from tracelint.engine.metrics import GPU_BUSY_PCT, IDLE_CAUSES, registry
from tracelint.engine.result import RunResult, TraceSummary
from tracelint.engine.sourcelines import source_line
from tracelint.render._common import is_rank_summary, rule_counts, verdict_line
from tracelint.render._diff import diff_block
from tracelint.render._verify import verify_block

_PAIRED_ABOVE = 6  # metrics beyond this count are laid out two per row


# --- metric values ---------------------------------------------------------------------------------------------

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
    return no_commands(_report(_escaped(result), Paint(color_wanted() if color is None else color), view))


def _escaped(result: RunResult) -> RunResult:
    """``result`` with the text this format shows of it escaped for the terminal (``escape.terminal``): the traces,
    and each finding's location, message and details."""
    return replace(result, findings=[f.escaped() for f in result.findings],
                   traces=map_strings(result.traces, terminal))


def _report(result: RunResult, paint: Paint, view: View = View()) -> str:
    """The report of a result whose text is already escaped."""
    if view.statistics:
        return "\n".join([*statistics_lines(result.findings), "", count_line(result, paint)]) + "\n"
    lines: list[str] = []
    placed: set[int] = set()
    # The analyzer adds one summary over the ranks of a job directory: it gives the headline, its ranks the blocks.
    overall = [s for s in result.traces if is_rank_summary(s, result.traces)]
    ranks = [s for s in result.traces if not any(s is o for o in overall)]
    if result.run is not None and not view.quiet:  # `tracelint run`: what ran, then the report
        lines.extend([*result.run["summary"], ""])
    if result.traces:
        lines.append(headline(overall or ranks, paint))
    if result.traces and not view.quiet:
        # `tracelint run` lists every finding in one list, ordered by measured cost, after the trace blocks.
        blocks = findings_by_trace(result.findings, ranks) if result.run is None else {}
        members = {id(o): [s for s in ranks if Path(o.path) in Path(s.path).parents] for o in overall}
        in_job = {id(s) for group in members.values() for s in group}
        for i, summary in enumerate(ranks):
            lines.append("")
            lines.extend(_trace_block(summary, blocks.get(i, []), paint, view, with_evidence=len(result.traces) > 1,
                                      in_job=id(summary) in in_job))
            placed.update(id(f) for f in blocks.get(i, []))
        for summary in overall:
            mine = [f for f in result.findings if id(f) not in placed and isinstance(f.location, TraceLocation)
                    and f.location.path == summary.path and result.run is None]
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

    rows = [(n, code, rule_name(code) or "", "[*]" if fixable else "") for code, n, fixable in rule_counts(findings)]
    if not rows:
        return []
    text = tabulate(rows, tablefmt="plain", colalign=("right", "left", "left", "left"), disable_numparse=True)
    return [line.rstrip() for line in text.splitlines()]


def shown_metrics(summary: TraceSummary, view: View) -> dict:
    """The metrics a trace block lists: all under --verbose, else those that explain its verdict."""
    if view.verbose:
        return summary.metrics
    job = summary.profiler is None and M.RANKS.of(summary.metrics) is not None
    keep = {m.name for m in M.explaining(summary.verdict, job=job, metrics=summary.metrics)}
    keep |= {f"{name[:-4]}_us" for name in keep if name.endswith("_pct")}  # a share is shown with its time
    return {k: v for k, v in summary.metrics.items() if k in keep}


def _hidden_metrics(summary: TraceSummary, view: View) -> bool:
    return len(shown_metrics(summary, view)) < len(summary.metrics)


def headline(traces: list[TraceSummary], paint: Paint) -> str:
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
        every = "both" if len(traces) == 2 else f"all {len(traces)}"
        return f"{paint(s.verdict, 'bold')} on {every} {noun}: {evidence} ({labels[worst]})"
    parts = []
    for verdict, _n in verdicts.most_common():
        where = ", ".join(labels[i] for i, s in enumerate(traces) if s.verdict == verdict)
        parts.append(f"{paint(verdict, 'bold')} on {where}")
    return f"mixed verdicts across {len(traces)} {noun}: " + "; ".join(parts)


def _evidence(summary: TraceSummary) -> str:
    """The evidence without the verdict word the analyzer may start it with."""
    return verdict_line(summary).removeprefix(summary.verdict).removeprefix(":").strip()


def _bold_verdict(line: str, verdict: str, paint: Paint) -> str:
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


def findings_by_trace(findings: Iterable[Finding], traces: list[TraceSummary]) -> dict[int, list[Finding]]:
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


def _trace_block(summary: TraceSummary, findings: list[Finding], paint: Paint, view: View, *,
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
        for table in (stage_table(ranks), group_table(ranks)):
            if table:
                lines.extend([*table, ""])
    if view.verbose or not in_job:  # a rank of a job: its row of the job's rank table says it
        lines.extend(metrics_table(shown_metrics(summary, view)))
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


def _ms_cell(us: float | None) -> str:
    """A job table's cell of microseconds, in ms (one decimal); "–" when there is no value."""
    return "–" if us is None else f"{us / 1000:.1f}"


def _per_step_ms_cell(m: dict, us: float | None) -> str:
    """A total over the profiled steps as a job table's cell: per step, in ms."""
    return _ms_cell(None if us is None else us / max(1, M.STEPS.of(m) or 1))


def rank_rows(ranks: list[TraceSummary]) -> list[tuple]:
    """The rows of ``rank_table`` (``RANK_COLUMNS``), by rank: the text and HTML reports lay them out."""
    def share(value) -> str:
        return "–" if value is None else f"{value:.0f}%"

    rows = []
    for s in sorted(ranks, key=lambda s: (s.rank is None, s.rank)):
        m = s.metrics
        step = max(M.STEP_CPU_US_MEAN.of(m) or 0.0, M.STEP_GPU_SPAN_US_MEAN.of(m) or 0.0)
        rows.append((s.rank, s.verdict, _ms_cell(step or None), share(GPU_BUSY_PCT.of(m)),
                     share(M.COMPUTE_BUSY_PCT.of(m)), _per_step_ms_cell(m, M.COMM_TIME_US.of(m)),
                     share(M.COMM_OVERLAP_PCT.of(m)), _per_step_ms_cell(m, M.EXPOSED_COMM_US.of(m)),
                     _ms_cell(M.COMM_WAIT_US.of(m))))
    return rows


STAGE_COLUMNS = ("stage", "rank", "compute ms", "bubble", "p2p ms", "p2p wait ms", "transfer ms")


def stage_table(ranks: list[TraceSummary], indent: str = "  ") -> list[str]:
    """A pipeline's stages, in order (none when the job is no pipeline): per step the stage's compute, the part of
    its step it computes nothing, its send/recv time, the wait in it and the transfer (ms)."""
    rows = stage_rows(ranks)
    return _table(rows, STAGE_COLUMNS, indent) if rows else []


def stage_rows(ranks: list[TraceSummary]) -> list[tuple]:
    rows = []
    for s in sorted((s for s in ranks if M.PIPELINE_STAGE.of(s.metrics) is not None),
                    key=lambda s: M.PIPELINE_STAGE.of(s.metrics)):
        m = s.metrics
        bubble = M.STAGE_BUBBLE_PCT.of(m)
        rows.append((M.PIPELINE_STAGE.of(m), s.rank, _ms_cell(M.STAGE_COMPUTE_US.of(m)),
                     "–" if bubble is None else f"{bubble:.0f}%",
                     _per_step_ms_cell(m, M.P2P_TIME_US.of(m)), _ms_cell(M.P2P_WAIT_US.of(m)),
                     _ms_cell(M.P2P_TRANSFER_US.of(m))))
    return rows


GROUP_COLUMNS = ("rank", "group", "ranks", "comm ms", "exposed ms", "wait ms", "waits for")


def group_table(ranks: list[TraceSummary], indent: str = "  ") -> list[str]:
    """A row per process group per rank (the ranks' ``comm_groups``): per step its communication time in the
    group, the exposed part, its wait there (ms) and the member it waits for most."""
    rows = group_rows(ranks)
    return _table(rows, GROUP_COLUMNS, indent) if rows else []


def group_rows(ranks: list[TraceSummary]) -> list[tuple]:
    rows = []
    for s in sorted(ranks, key=lambda s: (s.rank is None, s.rank)):
        groups = M.COMM_GROUPS.of(s.metrics)
        if not isinstance(groups, list):
            continue
        for g in sorted((g for g in groups if isinstance(g, dict)), key=lambda g: str(g.get("kind"))):
            members = g.get("ranks") if isinstance(g.get("ranks"), list) else []
            members = runs(members) if all(isinstance(r, int) for r in members) else ", ".join(map(str, members))
            whom = g.get("waits_for")
            rows.append((s.rank, str(g.get("kind")), members, _ms_cell(g.get("comm_us")),
                         _ms_cell(g.get("exposed_us")), _ms_cell(g.get("wait_us")),
                         "–" if whom is None else f"rank {whom}"))
    return rows


def _table(rows: list[tuple], headers: tuple[str, ...], indent: str) -> list[str]:
    from tabulate import tabulate

    text = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True,
                    colalign=tuple("left" if h in ("group", "ranks", "waits for") else "right" for h in headers))
    return [indent + line.rstrip() for line in text.splitlines()]


def finding_lines(finding: Finding, paint: Paint, view: View) -> list[str]:
    """A finding's lines (Finding.lines) with, under --show-source, the line it points at."""
    shown = source_lines(finding.source, paint) if view.show_source and finding.source is not None else ()
    return finding.lines(paint, shown)


def source_lines(loc: SourceLocation, paint: Paint) -> list[str]:
    """--show-source: the line a finding points at, numbered, with carets under its span (a source finding's) or
    none (a trace stack's line); nothing when the file cannot be read there."""
    text = source_line(loc.path, loc.line, loc.cell)
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


def count_line(result: RunResult, paint: Paint) -> str:
    """ruff's closing line: 'Found 3 findings (2 fixable with --fix).' or 'All checks passed.'"""
    n = len(result.findings)
    fixable = sum(1 for f in result.findings if f.fix and f.fix.safe)
    hidden = sum(1 for f in result.findings if f.fix and not f.fix.safe)
    if result.fixed:
        # The count a plain run gives: what is left of it, and apart from it what the fixes exposed.
        found = n - result.exposed + result.resolved
        text = f"Found {_plural(found, 'finding')} ({result.resolved} fixed, {found - result.resolved} remaining)."
        exposed = result.exposed + result.exposed_fixed
        if exposed:
            done = [f"{result.exposed_fixed} fixed"] if result.exposed_fixed else []
            done += [f"{result.exposed} shown above"] if result.exposed else []
            text += f" The fixes exposed {exposed} more: {', '.join(done)}."
    elif n:
        text = f"Found {_plural(n, 'finding')}" + (f" ({fixable} fixable with --fix)." if fixable else ".")
    elif result.errors:
        return f"No findings, but {_plural(len(result.errors), 'input')} could not be read." + baseline_words(result)
    elif result.run is not None and result.run.get("failure"):  # a clean lint is not a clean run
        return "No findings in the code; the script failed, so nothing was measured." + baseline_words(result)
    else:
        return paint("All checks passed.", "green", "bold") + baseline_words(result)
    if hidden:
        text += f" ({_plural(hidden, 'hidden fix', 'hidden fixes')} can be enabled with --unsafe-fixes.)"
    return text + baseline_words(result)


def would_fix_line(result: RunResult) -> str:
    """--diff's closing line: 'Would fix 1 finding, and 3 more that the fixes expose.'"""
    text = f"Would fix {_plural(result.resolved, 'finding')}"
    if result.exposed_fixed:
        text += f", and {result.exposed_fixed} more that the fixes expose"
    if result.exposed:
        text += f" ({result.exposed} more exposed by the fixes stay)"
    return text + "."


def baseline_words(result: RunResult) -> str:
    """' 12 findings hidden by the baseline; 3 baseline entries no longer match (--write-baseline removes stale
    entries).' after the count (nothing without a baseline)."""
    use = result.baseline
    if use is None:
        return ""
    text = f" {_plural(use.hidden, 'finding')} hidden by the baseline"
    if use.stale:
        entries = "baseline entry no longer matches" if use.stale == 1 else "baseline entries no longer match"
        text += f"; {use.stale} {entries} (--write-baseline removes stale entries)"
    return text + "."


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"
