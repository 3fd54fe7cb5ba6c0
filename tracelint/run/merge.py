"""One list of findings from the two halves of a run: a lint finding and a trace finding of the same family that
point at the same line become one finding with both evidences, every finding gets the cost the trace measured for
it, and the list is ordered by what each fix is estimated to buy (the trace finding's estimate, issue #38), then by
that cost.

Pairing, in this order (a trace finding's line is the one its Python stack gives, tracelint.trace.rules._common):

1. *same line*: the same family (TL1xx, TL2xx, ...) at the same line of the same file (``loss.item()`` linted as
   TL101 and measured as TL101; ``if loss > 5:`` as TL103 both ways; ``print(loss)``, TL104, measured as the TL101
   sync it makes);
2. for the input pipeline (``LOADER_CODES``), whose trace finding points where the batches are used and whose lint
   finding where the loader is built: *the loop over the loader*, when the trace's line is inside a ``for`` loop
   over a name that the lint finding's line binds (``loader = DataLoader(...)`` ... ``for x, y in loader:``);
3. *the same loop*: outside the input pipeline, the same family in the same innermost loop of the same file, the
   loop's only lint finding of that family. A stack's frame that was already running when the profiler started
   keeps the line it was at then, and a call made while it records is named by its ``def`` line, never by the
   line that calls it; ``tracelint run`` starts the profiler in the optimizer step's hook, so a sync in the step
   function's own body reads as its ``optimizer.step()`` line (``total += loss.item()`` at 58 measured at 57, the
   ``optimizer.step()`` above it, 4 x H100 run; gradcheck's syncs at 57 measured at 61, H200);
4. then *the only one of its rule on each side*, for the input pipeline and the settings a run has once
   (``ONE_PER_RUN``: channels_last, DataParallel, accumulation without ``no_sync``, anomaly detection,
   ``CUDA_LAUNCH_BLOCKING``: the lint finding points at the setting, the trace's at a step): one lint finding of that
   rule left, and the trace findings of that rule left all point at one line.

A trace names a file as its stack does: absolute, relative to the working directory, or by a shorter relative path
(``loader_item.py`` for ``fixtures/run/loader_item.py``): the same file when one path ends with the other.

A lint finding the trace did not pair is kept, after the measured ones, marked "not seen in the profiled steps" —
where the trace could have seen it: with no trace (nothing was recorded) or only traces without GPU work (a CPU run:
a sync or a copy costs nothing there) it keeps no evidence, and the run's header says why; a trace finding no lint
finding paired keeps the source line of its stack. Of several trace findings paired with
one lint finding (one per rank of a job) the costliest is the evidence. A merged finding has the lint finding's
place, message and fix, and the trace finding's severity: what was measured decides (a sync that costs under 1 %
of the step is ``info`` in the trace, and stays so).

The cost is the share of the step the trace finding measured (``cost_pct``): the detail each trace rule reports it
in, as declared in ``COST``.
"""
from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from tracelint.engine import Evidence, Finding, SourceLocation, TraceLocation, TraceSummary
from tracelint.engine import metrics as M

LOADER_CODES = frozenset({"TL201", "TL202"})
# Rules whose lint finding is a setting of the whole run (a model built without channels_last, a debug switch) and
# whose trace finding points at a line of the step: paired as the only one of their rule on each side.
ONE_PER_RUN = LOADER_CODES | {"TL405", "TL605", "TL606", "TL701", "TL702"}

# How a trace finding's details give its cost in percent of the step, first match wins: a detail that is that share,
# the product of two shares (a share of the idle time times the idle share of the window), or a time per step over
# the trace's step time.
COST: tuple[tuple[str, ...], ...] = (
    ("cost_pct_of_step",),  # TL101, TL102, TL103, TL105, TL106: the GPU idle time the syncs cause
    ("host_pct_of_step",),  # TL204
    ("wait_pct_of_step",),  # TL602
    ("pageable_pct_of_window",),  # TL202: the pageable copies' share of the GPU window
    ("fp32_off_tc_pct_of_window",),  # TL401
    ("gpu_idle_pct", "data_wait_pct_of_idle"),  # TL201
    ("gpu_idle_pct", "launch_idle_pct"),  # TL501
    ("fill_gpu_us_per_step",),  # TL301
    ("per_tensor_gpu_us_per_step",),  # TL303
    ("softmax_us_per_step",),  # TL402
    ("off_tile_us_per_step",),  # TL404
)


def cost_pct(finding: Finding, step_us: float | None) -> float | None:
    """The share of the step a trace finding measured, in percent (``COST``); None when it says none."""
    details = dict(finding.details)
    for keys in COST:
        values = [details.get(k) for k in keys]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            continue
        if keys[0].endswith("_us_per_step"):
            return round(100.0 * values[0] / step_us, 2) if step_us else None
        share = values[0] if len(values) == 1 else values[0] * values[1] / 100.0
        return round(float(share), 2)
    return None


def step_us(summary: TraceSummary) -> float | None:
    """A trace's mean profiled step: the longer of its CPU span and its GPU span (µs)."""
    spans = [v for v in (M.STEP_CPU_US_MEAN.of(summary.metrics), M.STEP_GPU_SPAN_US_MEAN.of(summary.metrics))
             if isinstance(v, (int, float)) and v > 0]
    return max(spans) if spans else None


def could_see(traces: Iterable[TraceSummary]) -> bool:
    """Whether the traces could show what the lint finds: there is one, and not every one is without GPU work."""
    counts = [M.GPU_EVENTS.of(t.metrics) for t in traces]
    return bool(counts) and any(n is None or n > 0 for n in counts)


def merge(findings: Iterable[Finding], traces: Iterable[TraceSummary], cwd: Path | None = None) -> list[Finding]:
    """The run's findings paired, each with its Evidence, ordered by measured cost (module docstring)."""
    cwd = (cwd or Path.cwd()).resolve()
    traces = list(traces)
    seen = could_see(traces)
    steps = {(s.path, s.rank): step_us(s) for s in traces}
    linted = [f for f in findings if f.origin == "source"]
    measured = [_relative(f, cwd) for f in findings if f.origin == "trace"]
    cost = {id(t): cost_pct(t, steps.get((t.location.path, t.location.rank))
                                or steps.get((t.location.path, None))) for t in measured}
    paired: dict[int, tuple[Finding, str]] = {}  # id(lint finding) -> (trace finding, how)
    used: set[int] = set()

    def pair(lint: Finding, candidates: list[Finding], how: str) -> None:
        best = max(candidates, key=lambda t: cost[id(t)] if cost[id(t)] is not None else -1.0)
        paired[id(lint)] = (best, how)
        used.update(id(t) for t in candidates)

    for lint in linted:
        found = [t for t in measured if t.source is not None and _family(t.code) == _family(lint.code)
                 and t.source.line == lint.location.line and _same_file(t.source.path, lint.path, cwd)]
        if found:
            pair(lint, found, "same line")
    for lint in linted:
        if id(lint) in paired or lint.code in LOADER_CODES:
            continue
        left = [t for t in measured if id(t) not in used and _family(t.code) == _family(lint.code)]
        found = _same_loop(lint, left, [f for f in linted if id(f) not in paired], cwd)
        if found:
            pair(lint, found, "the same loop")
    for lint in linted:
        if id(lint) in paired or lint.code not in LOADER_CODES:
            continue
        left = [t for t in measured if id(t) not in used and t.code == lint.code]
        loop = _loop_link(lint, left, cwd)
        if loop is not None:
            name, found = loop
            pair(lint, found, f"the loop over `{name}`")
    for code in sorted(ONE_PER_RUN):
        lints = [f for f in linted if id(f) not in paired and f.code == code]
        left = [t for t in measured if id(t) not in used and t.code == code]
        if len(lints) == 1 and left and len({(t.source.path, t.source.line) if t.source else None for t in left}) == 1:
            pair(lints[0], left, f"the only {code} of the run on each side")

    out = []
    for lint in linted:
        if id(lint) in paired:
            trace, how = paired[id(lint)]
            out.append(replace(lint, severity=trace.severity, estimate=trace.estimate,
                               evidence=Evidence(lint, trace, cost[id(trace)], how)))
        else:
            out.append(replace(lint, evidence=Evidence(lint, None) if seen else None))
    out.extend(replace(t, evidence=Evidence(None, t, cost[id(t)])) for t in measured if id(t) not in used)
    return sorted(sorted(out, key=Finding.sort_key), key=_order)


def _order(finding: Finding) -> tuple:
    """What the fix is estimated to buy first (the largest share of its step first: issue #38), then the measured
    cost of those without an estimate (highest first), then trace findings without either, then what the trace did
    not see."""
    est = finding.estimate
    if est is not None and est.step_ms > 0:
        return (0, -est.saved_ms_per_step / est.step_ms)
    evidence = finding.evidence
    if evidence is None:
        return (3, 0.0)
    if evidence.cost_pct is not None:
        return (1, -evidence.cost_pct)
    return (2 if evidence.trace is not None else 3, 0.0)


def _family(code: str) -> str:
    return code[:3]


def _same_file(traced: str, linted: str, cwd: Path) -> bool:
    """A trace's file and a lint finding's are one: the same path once resolved, or the trace names by a relative
    path that is no file here the end of the lint finding's path (a stack that names the file by a shorter path)."""
    a, b = _resolved(traced, cwd), _resolved(linted, cwd)
    if a == b:
        return True
    short = Path(traced).parts
    if Path(traced).is_absolute() or not short or a.exists():
        return False
    return b.parts[-len(short):] == short


def _same_loop(lint: Finding, candidates: list[Finding], unpaired: list[Finding], cwd: Path) -> list[Finding]:
    """The trace findings inside the innermost loop around the lint finding's line, in its file, when the lint
    finding is the only one of its family left in that loop."""
    loc = lint.location
    if not isinstance(loc, SourceLocation) or loc.cell is not None:
        return []
    tree = _tree(str(_resolved(loc.path, cwd)))
    if tree is None:
        return []
    loops = [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.AsyncFor, ast.While))
             and n.lineno <= loc.line <= (n.end_lineno or n.lineno)]
    if not loops:
        return []
    loop = max(loops, key=lambda n: n.lineno)  # the innermost
    lo, hi = loop.lineno, loop.end_lineno or loop.lineno

    def inside(path: str, line: int) -> bool:
        return lo <= line <= hi and _same_file(path, loc.path, cwd)

    rivals = [f for f in unpaired if _family(f.code) == _family(lint.code) and isinstance(f.location, SourceLocation)
              and f.location.cell is None and inside(f.path, f.location.line)]
    if len(rivals) != 1:
        return []
    return [t for t in candidates if t.source is not None and inside(t.source.path, t.source.line)]


def _resolved(path: str, cwd: Path) -> Path:
    candidate = Path(path)
    return (candidate if candidate.is_absolute() else cwd / candidate).resolve()


def _relative(finding: Finding, cwd: Path) -> Finding:
    """A trace finding whose stack names a file under ``cwd`` by its absolute path, named relative to it (as the
    lint findings are)."""
    loc = finding.location
    if not isinstance(loc, TraceLocation) or loc.source is None or not Path(loc.source.path).is_absolute():
        return finding
    try:
        shown = Path(loc.source.path).resolve().relative_to(cwd)
    except ValueError:
        return finding
    return replace(finding, location=replace(loc, source=replace(loc.source, path=str(shown))))


def _loop_link(lint: Finding, candidates: list[Finding], cwd: Path) -> tuple[str, list[Finding]] | None:
    """(the loader's name, the trace findings inside a loop over it) when the lint finding's line binds a name and
    candidates point inside a ``for`` loop over that name in the same file."""
    loc = lint.location
    if not isinstance(loc, SourceLocation) or loc.cell is not None:
        return None
    path = _resolved(loc.path, cwd)
    tree = _tree(str(path))
    if tree is None:
        return None
    names = _bound_at(tree, loc.line)
    if not names:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, (ast.For, ast.AsyncFor)):
            continue
        over = {ast.unparse(n) for n in ast.walk(node.iter) if isinstance(n, (ast.Name, ast.Attribute))} & names
        if not over:
            continue
        inside = [t for t in candidates if t.source is not None and _same_file(t.source.path, loc.path, cwd)
                  and node.lineno <= t.source.line <= (node.end_lineno or node.lineno)]
        if inside:
            return sorted(over)[0], inside
    return None


def _bound_at(tree: ast.Module, line: int) -> set[str]:
    """The names (``loader``, ``self.loader``) an assignment spanning ``line`` binds."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.lineno <= line <= (node.end_lineno or node.lineno):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                parts = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
                names.update(ast.unparse(n) for n in parts if isinstance(n, (ast.Name, ast.Attribute)))
    return names


@lru_cache(maxsize=32)
def _tree(path: str) -> ast.Module | None:
    try:
        return ast.parse(Path(path).read_bytes(), path)
    except (OSError, SyntaxError, ValueError):
        return None
