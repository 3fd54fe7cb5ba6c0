"""One verification: start the baseline once, then for each variant start its process and alternate single timed
blocks of the two (stats.py says how and why) until the speedup's interval is tight enough or the budget is
spent, over ``settings.pairs`` pairs of processes one after the other (both sides restarted between pairs; with
``processes="fresh"``: a new process for every block instead); judge every variant against the baseline blocks it
was paired with; and the result as the engine's RunResult (what every format of
tracelint.render shows). Never imports torch in this process."""
from __future__ import annotations

import importlib.util
import json
import math
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tracelint.engine import Finding, InputError, RunResult
from tracelint.engine.display import report_path
from tracelint.verify.harness_control import Idle, RunOutcome, RunSettings, Session
from tracelint.verify.stats import (
    FAILED,
    NO_EFFECT,
    NOT_MEASURED,
    Baseline,
    Interval,
    Timing,
    Verdict,
    baseline_of,
    judge,
    legend,
    paired_interval,
    percent,
)
from tracelint.verify.tracing import TraceResult, analyze, metric_for, summary_of
from tracelint.verify.variants import Unmeasured, Variant

Progress = Callable[[str], None]
MAX_RESTARTS = 3  # a script that runs out of steps mid-comparison is started again this many times (per pair)


class EnvironmentProblem(Exception):
    """torch or the device is missing: one line for the user, exit code 2."""


@dataclass(frozen=True, slots=True)
class Row:
    variant: Variant
    verdict: Verdict
    outcome: RunOutcome | None  # None when it was not run (the baseline failed)
    # what each side's process group used while it waited for the other side's blocks (run.Idle.to_dict)
    idle: dict | None = None


@dataclass(frozen=True, slots=True)
class Verification:
    """Everything one ``tracelint verify`` target produced: the baseline runs, one row per variant, the lint
    findings the variants came from, and those that could not be measured."""

    target: str
    settings: RunSettings
    device: str
    torch: str
    baseline_runs: tuple[RunOutcome, ...]
    rows: tuple[Row, ...]
    findings: tuple[Finding, ...] = ()
    errors: tuple[InputError, ...] = ()
    notes: tuple[str, ...] = field(default=())
    unmeasured: tuple[Unmeasured, ...] = ()

    @property
    def baseline(self) -> Baseline | None:
        return baseline_of(self.baseline_runs)

    @property
    def baseline_trace(self) -> TraceResult | None:
        """--trace: the profiled steps of the baseline (after its last timed block)."""
        traced = [o.trace for o in self.baseline_runs if o.trace is not None]
        return traced[-1] if traced else None

    @property
    def baseline_failed(self) -> RunOutcome | None:
        """The failed first baseline run, when the baseline could not be measured at all."""
        return None if self.baseline else (self.baseline_runs[0] if self.baseline_runs else None)


def probe(device: str) -> tuple[str, str]:
    """(device name, torch version) of the interpreter the runs will use; EnvironmentProblem when it cannot run
    them. Probed in a subprocess: the parent never imports torch nor holds a CUDA context while the runs work."""
    if importlib.util.find_spec("torch") is None:
        raise EnvironmentProblem("tracelint verify: needs torch with a CUDA device (torch not installed)")
    code = (
        "import json, platform, torch\n"
        "cuda = torch.cuda.is_available()\n"
        "name = (torch.cuda.get_device_name() if cuda\n"
        "        else 'CPU (' + (platform.processor() or platform.machine()) + ')')\n"
        "print(json.dumps({'torch': torch.__version__, 'cuda': cuda, 'device': name}))\n"
    )
    if device == "cpu":
        code = code.replace("torch.cuda.is_available()", "False")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
        facts = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        raise EnvironmentProblem("tracelint verify: needs torch with a CUDA device (importing torch failed)") from None
    if device == "cuda" and not facts["cuda"]:
        raise EnvironmentProblem(
            f"tracelint verify: needs torch with a CUDA device (torch {facts['torch']} sees no CUDA device; "
            "--device cpu runs on the CPU for testing)")
    return facts["device"], facts["torch"]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:40]


class _Side:
    """One side of the comparisons (the baseline, or one variant). Persistent (the default): its current Session,
    restarted when the script runs out of steps after it has given blocks, and replaced for each new pair of
    processes (``relaunch``). Fresh: a new Session for every turn.
    Keeps the outcomes of the sessions it has finished and what they did while they waited (``waited``)."""

    def __init__(self, label: str, code: Path, original: Path, argv: Sequence[str], settings: RunSettings,
                 workdir: Path, precision: str | None) -> None:
        self.label, self.code, self.original, self.argv = label, code, original, list(argv)
        self.settings, self.workdir, self.precision = settings, workdir, precision
        self.fresh = settings.processes == "fresh"
        self.session: Session | None = None
        self.outcomes: list[RunOutcome] = []
        self.failure: RunOutcome | None = None
        self.restarts = 0  # restarts because the script ran out of steps, in the current pair
        self.processes = 0  # persistent processes started so far (each after the first in a folder of its own)
        self.turns = 0
        self._waits: list[Idle] = []  # each session's record of its pauses (live objects)
        self._launched = False  # launch() started the process, start() has not waited for it yet

    def _launch(self, folder: Path, trace: bool) -> None:
        self.processes += 1
        self.session = Session(self.code, self.original, self.argv, self.settings, folder,
                               precision=self.precision, trace=trace)
        self._waits.append(self.session.idle)
        self.session.start()

    def _ready(self) -> bool:
        """Wait for the session's warm-up; on failure record why and return False."""
        if self.session.ready():
            return True
        self.failure = self.session.finish(trace=False)
        self.outcomes.append(self.failure)
        return False

    def _open(self, folder: Path, trace: bool) -> bool:
        self._launch(folder, trace)
        return self._ready()

    def launch(self) -> None:
        """Start the (first) process without waiting for its warm-up: ``start`` waits. Two sides warm up at once
        this way (untimed), which saves one start-up per comparison."""
        if not self.fresh and self.session is None:
            self.relaunch()  # (no process to stop; the first folder is the workdir)

    def relaunch(self) -> None:
        """A new pair: stop the current process (its blocks kept among the outcomes) and start the next without
        waiting for its warm-up (``start`` waits), so that both sides of the new pair warm up at once."""
        if self.session is not None:
            self._close(self.session.finish(trace=False))
            self.session.kill()
        self.restarts = 0
        self._launch(self._next_folder(), self.settings.trace)
        self._launched = True

    def _next_folder(self) -> Path:
        return self.workdir if not self.processes else self.workdir.with_name(f"{self.workdir.name}-{self.processes}")

    def start(self) -> bool:
        if self.fresh:  # the first turn starts the first process
            return True
        if self._launched:
            self._launched = False
            return self._ready()
        return self._open(self._next_folder(), self.settings.trace)

    def turn(self) -> float | None:
        """The mean step time (ms) of one timed block; None when the run failed (``failure`` says why)."""
        if self.fresh:
            return self._fresh_turn()
        blocks = self.session.run(1)
        if blocks:
            return blocks[0]
        outcome = self._close(self.session.finish(trace=False))
        if self.session.ended and outcome.ok:  # the script ran out of steps after giving blocks
            if self.restarts < MAX_RESTARTS:
                self.restarts += 1
                return self.turn() if self.start() else None
            self.failure = replace(outcome, ok=False, reason=f"the script ran out of steps {self.restarts + 1} "
                                   "times; give it more steps (or lower --budget/--blocks)")
            return None
        self.failure = outcome
        return None

    def _fresh_turn(self) -> float | None:
        """A new process: warm-up, ``fresh_blocks`` blocks, stop; the turn's block is their mean."""
        self.turns += 1
        if not self._open(self.workdir.with_name(f"{self.workdir.name}-t{self.turns:03d}"), False):
            return None
        blocks = self.session.run(self.settings.fresh_blocks)
        outcome = self._close(self.session.finish(trace=False))
        self.session.kill()
        if not blocks or not outcome.ok:
            self.failure = outcome if not outcome.ok else replace(outcome, ok=False, reason="no block was timed")
            return None
        return sum(blocks) / len(blocks)

    def _close(self, outcome: RunOutcome) -> RunOutcome:
        self.outcomes.append(outcome)
        return outcome

    def finish(self) -> RunOutcome:
        """Stop the current session (profiling it first under --trace; fresh: one more process for that)."""
        if self.failure is not None:
            return self.failure
        if self.fresh:
            if not self.settings.trace:
                return self.outcomes[-1] if self.outcomes else RunOutcome(False, reason="not run")
            if not self._open(self.workdir.with_name(f"{self.workdir.name}-trace"), True):
                return self.failure
        return self._close(self.session.finish(trace=self.settings.trace))

    def kill(self) -> None:
        if self.session is not None:
            self.session.kill()

    def waited(self) -> Idle:
        """What this side's sessions used while they waited, so far."""
        return Idle(sum(w.cpu_s for w in self._waits), sum(w.wall_s for w in self._waits),
                    sum(w.pauses for w in self._waits), max((w.stopped for w in self._waits), default=0))


def _since(now: Idle, before: Idle) -> dict:
    return Idle(now.cpu_s - before.cpu_s, now.wall_s - before.wall_s, now.pauses - before.pauses,
                now.stopped).to_dict()


@dataclass(slots=True)
class Rounds:
    """What ``compare`` timed: round i is ``base[i]`` beside ``variant[i]``, from the pair of processes
    ``pair[i]`` (0, 1, ...), and why it stopped: target | budget | max-rounds | baseline-failed | variant-failed."""

    base: list[float] = field(default_factory=list)
    variant: list[float] = field(default_factory=list)
    pair: list[int] = field(default_factory=list)
    stopped: str = ""


def compare(base: _Side, variant: _Side, settings: RunSettings, say: Progress = lambda _m: None) -> Rounds:
    """Alternate single blocks of ``base`` and ``variant`` in rounds B V, V B, ... (each pair of processes
    starting with B V) over ``settings.planned_pairs`` pairs of processes, one after the other. A pair other
    than the last ends once it has run at least ``settings.blocks`` rounds and its share of the budget
    (``budget_s / pairs`` seconds of alternating) is spent, or after ``max_rounds / pairs`` rounds; then both
    sides are restarted (``relaunch``: both warm up at once, untimed, outside the budget). The last pair runs
    until the speedup's interval (over all pairs, stats.py) is within ±``settings.target`` or the budget is spent,
    after at least ``settings.blocks`` rounds of its own, or ``max_rounds`` rounds in all; a side that fails ends
    the comparison."""
    rounds = Rounds()
    planned = settings.planned_pairs
    share_s = settings.budget_s / planned
    share_rounds = max(settings.blocks, settings.max_rounds // planned)
    pair = in_pair = 0
    spent = 0.0  # seconds of alternating in the pairs before the current one
    started = time.monotonic()
    for number in range(settings.max_rounds):
        if pair < planned - 1 and in_pair >= settings.blocks and (
                time.monotonic() - started >= share_s or in_pair >= share_rounds):
            spent += time.monotonic() - started
            pair, in_pair = pair + 1, 0
            say(f"{variant.label}: pair {pair + 1} of {planned}: restarting both sides ...")
            failed = _new_pair(base, variant)
            if failed:
                rounds.stopped = failed
                return rounds
            started = time.monotonic()
        order = (base, variant) if in_pair % 2 == 0 else (variant, base)
        got: dict[int, float] = {}
        for side in order:
            value = side.turn()
            if value is None:
                rounds.stopped = "baseline-failed" if side is base else "variant-failed"
                return rounds
            got[id(side)] = value
        rounds.base.append(got[id(base)])
        rounds.variant.append(got[id(variant)])
        rounds.pair.append(pair)
        in_pair += 1
        interval = paired_interval(rounds.base, rounds.variant, rounds.pair)
        if (number + 1) % 10 == 0 and interval is not None:
            say(f"{variant.label}: {_interval_text(interval)} after {number + 1} rounds ...")
        if pair < planned - 1 or in_pair < settings.blocks:
            continue
        if interval is not None and interval.half_width <= settings.target:
            rounds.stopped = "target"
            return rounds
        if spent + time.monotonic() - started >= settings.budget_s:
            rounds.stopped = "budget"
            return rounds
    rounds.stopped = "max-rounds"
    return rounds


def _new_pair(base: _Side, variant: _Side) -> str:
    """Restart both sides for a new pair of processes, warming up at once; "" or which side failed."""
    base.relaunch()
    variant.relaunch()
    base_ok = base.start()
    variant_ok = variant.start()  # waited for even when the baseline failed: finish() then stops it cleanly
    return "" if base_ok and variant_ok else "baseline-failed" if not base_ok else "variant-failed"


def _interval_text(interval: Interval) -> str:
    return (f"{interval.estimate:.3f}× ({interval.low:.3f}–{interval.high:.3f}, "
            f"±{percent(interval.half_width)} %)")


def measure(original: Path, variants: Sequence[Variant], argv: Sequence[str], settings: RunSettings, workdir: Path,
            *, baseline_code: Path | None = None, progress: Progress | None = None) -> tuple[tuple[RunOutcome, ...],
                                                                                          tuple[Row, ...]]:
    """Start the baseline (``baseline_code``, default the original file itself) once and compare each variant
    with it (``compare``). Variants with the same text and precision run once. Returns (baseline runs, rows)."""
    say = progress or (lambda _m: None)
    baseline_code = baseline_code or original
    total = len(variants)
    base = _Side("baseline", baseline_code, original, argv, settings, workdir / "baseline", None)
    started = time.perf_counter()
    say(f"[0/{total}] baseline: starting ...")
    first = _variant_side(variants[0], original, argv, settings, workdir, "01", baseline_code) if variants else None
    try:
        base.launch()
        if first is not None:
            first.launch()  # its warm-up beside the baseline's
        if not base.start():
            reason = base.failure.reason
            say(f"[0/{total}] baseline: failed: {reason}")
            rows = tuple(Row(v, Verdict(FAILED, f"not run: the baseline failed ({reason})"), None) for v in variants)
            return tuple(base.outcomes), rows
        say(f"[0/{total}] baseline: warmed up ({time.perf_counter() - started:.1f} s)")
        results: dict[tuple[str, str | None], tuple[Verdict, RunOutcome | None, dict | None]] = {}
        rows: list[Row] = []
        for i, variant in enumerate(variants, start=1):
            key = (variant.text, variant.precision)
            if key in results:
                say(f"[{i}/{total}] {variant.key}: same code as an earlier variant, not run again")
            elif base.failure is not None:
                results[key] = (Verdict(FAILED, f"not run: the baseline failed ({base.failure.reason})"), None, None)
            else:
                side = first if i == 1 else _variant_side(variant, original, argv, settings, workdir, f"{i:02d}",
                                                          baseline_code)
                results[key] = _measure_one(base, side, variant, settings, f"[{i}/{total}]", say)
            rows.append(Row(variant, *results[key]))
        last = base.finish()
        if settings.trace and last.trace is not None:
            base.outcomes[-1] = replace(last, trace=analyze(last.trace))
        return tuple(base.outcomes), tuple(rows)
    finally:
        base.kill()
        if first is not None:
            first.kill()


def _variant_side(variant: Variant, original: Path, argv: Sequence[str], settings: RunSettings, workdir: Path,
                  number: str, baseline_code: Path) -> _Side:
    """The side of one variant: its code written to its folder (the baseline's file when the text is the same)."""
    name = f"{number}-{_slug(variant.key)}"
    code = baseline_code
    if variant.text != _read(baseline_code):
        code = workdir / name / "code" / original.name
        code.parent.mkdir(parents=True, exist_ok=True)
        code.write_text(variant.text, encoding="utf-8")
    return _Side(variant.key, code, original, argv, settings, workdir / name, variant.precision)


def _measure_one(base: _Side, side: _Side, variant: Variant, settings: RunSettings, tag: str,
                 say: Progress) -> tuple[Verdict, RunOutcome | None, dict | None]:
    started = time.perf_counter()
    say(f"{tag} {variant.key}: starting ...")
    try:
        if not side.start():
            outcome = side.failure
            say(f"{tag} {variant.key}: failed: {outcome.reason} ({time.perf_counter() - started:.1f} s)")
            return judge((), outcome, None), outcome, None
        base_waited = base.waited()
        rounds = compare(base, side, settings, say)
        idle = {"baseline": _since(base.waited(), base_waited), "variant": side.waited().to_dict()}
        if rounds.stopped == "baseline-failed":
            reason = f"the baseline failed during the comparison ({base.failure.reason})"
            side.finish()
            say(f"{tag} {variant.key}: {reason}")
            return Verdict(FAILED, reason, Timing(tuple(rounds.base)) if rounds.base else None), None, idle
        outcome = side.finish()
        if settings.trace and outcome.trace is not None:
            outcome = replace(outcome, trace=analyze(outcome.trace))
        loss_finite = _finite(base.session.losses) if base.session is not None else None
        verdict = judge(rounds.base, outcome, loss_finite, fixed_blocks=rounds.variant, stopped=rounds.stopped,
                        min_effect=settings.min_effect, pair_of=rounds.pair)
        say(f"{tag} {variant.key}: {_progress_line(verdict)} ({time.perf_counter() - started:.1f} s)")
        return verdict, outcome, idle
    finally:
        side.kill()


def _finite(losses: Sequence[float | None]) -> bool | None:
    values = [v for v in losses if v is not None]
    return math.isfinite(values[-1]) if values else None


def _progress_line(verdict: Verdict) -> str:
    if verdict.interval is None:
        return f"{verdict.status}: {verdict.reason}"
    iv = verdict.interval
    return (f"{verdict.status}, {_interval_text(iv)} in {iv.rounds} rounds, {iv.pairs} pair(s) of processes "
            f"(stopped: {verdict.stopped}); "
            f"{verdict.baseline.median:.2f} → {verdict.fixed.median:.2f} ms/step")


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def statistics_line(outcome: RunOutcome) -> str:
    t = Timing(outcome.block_ms)
    return f"{t.median:.2f} ms/step ({t.low:.2f}-{t.high:.2f})"


# --- the result as data: RunResult findings carry ``details.verification``; ``verifications`` the whole targets ---

def run_result(verifications: Sequence[Verification]) -> RunResult:
    """The lint findings, each measured one carrying ``details.verification`` (``not-measured`` with the reason
    for those no variant was built for), and one ``target_dict`` record per target in ``verifications``: what
    ``tracelint.render.render(result, fmt)`` turns into any report format."""
    result = RunResult(files_checked=sum(1 for v in verifications if v.findings or v.rows),
                       verifications=[target_dict(v) for v in verifications])
    for v in verifications:
        by_finding = {id(row.variant.finding): row for row in v.rows if row.variant.finding is not None}
        skipped = {id(u.finding): u for u in v.unmeasured}
        for finding in v.findings:
            row = by_finding.get(id(finding))
            if row is not None:
                finding = replace(finding, details=(*finding.details, ("verification", verification_dict(v, row))))
            elif id(finding) in skipped:
                finding = replace(finding, details=(*finding.details,
                                                    ("verification", unmeasured_dict(v, skipped[id(finding)]))))
            result.findings.append(finding)
        result.errors.extend(v.errors)
    result.findings.sort(key=Finding.sort_key)
    return result


def target_dict(v: Verification) -> dict:
    """One target as plain data: its settings, the baseline runs, one entry per measured variant and one per
    finding that could not be measured."""
    baseline = v.baseline
    failed = v.baseline_failed
    s = v.settings
    doc = {
        "target": v.target, "device": v.device, "torch": v.torch, "device_type": s.device,
        "timing_claims": s.device == "cuda",
        "settings": {"warmup": s.warmup, "steps": s.steps, "blocks": s.blocks, "timeout_s": s.timeout_s,
                     "budget_s": s.budget_s, "target_pct": round(s.target * 100, 2),
                     "resume_warmup": s.resume_warmup, "resume_warmup_s": s.resume_warmup_s,
                     "min_effect_pct": round(s.min_effect * 100, 2), "processes": s.processes, "pause": s.pause,
                     "pairs": s.planned_pairs, "method": s.method},
        "baseline": {
            "status": "ok" if baseline else (FAILED if failed else "not-run"),
            "median_ms": _ms(baseline.pooled.median) if baseline else None,
            "spread": _range(baseline.pooled) if baseline else None,
            "runs_ms": [[_ms(b) for b in o.block_ms] for o in v.baseline_runs],
            "between_process_pct": _between_processes(v.baseline_runs),
            "noise_pct": round(baseline.noise * 100, 2) if baseline else None,
            "reason": failed.reason if failed else None,
            "stderr_tail": failed.stderr_tail if failed else None,
        },
        "variants": [{"key": row.variant.key, "rule": _rule(row), "location": _location(row),
                      "verification": verification_dict(v, row)} for row in v.rows],
        "not_measured": [{"rule": u.finding.code, "location": _finding_location(u.finding), "reason": u.reason}
                         for u in v.unmeasured],
        "notes": list(v.notes),
        "legend": legend(s.min_effect),
    }
    if s.trace:
        before = doc["baseline"]["trace"] = _trace_dict(v.baseline_trace, bool(v.baseline_runs))
        for entry in doc["variants"]:  # the analyzer's verdict, baseline → variant, in words
            metric = metric_for(entry["rule"])
            after = entry["verification"]["trace"]
            entry["trace_change"] = f"{summary_of(before, metric)} → {summary_of(after, metric)}"
    return doc


def verification_dict(v: Verification, row: Row) -> dict:
    """The ``verification`` object of one measured variant (with ``trace`` and ``trace_before`` under --trace)."""
    verdict, s = row.verdict, v.settings
    speedup = verdict.speedup
    iv = verdict.interval
    doc = {
        "status": verdict.status,
        "summary": verdict.summary(),
        "baseline_ms": _ms(verdict.baseline.median) if verdict.baseline else None,
        "fixed_ms": _ms(verdict.fixed.median) if verdict.fixed else None,
        "speedup": round(speedup, 4) if speedup is not None and math.isfinite(speedup) else None,
        "ci95": [round(iv.low, 4), round(iv.high, 4)] if iv else None,
        "bound_pct": float(percent(iv.bound)) if iv and verdict.status == NO_EFFECT else None,
        "rounds": iv.rounds if iv else 0,
        "pairs": iv.pairs if iv else 0,
        "pair_speedups": [round(x, 4) for x in iv.pair_estimates] if iv else [],
        "stopped": verdict.stopped or None,
        "spread": {"baseline": _range(verdict.baseline), "fixed": _range(verdict.fixed)},
        "noise_pct": round(verdict.noise * 100, 2) if verdict.noise is not None else None,
        "baseline_blocks_ms": [_ms(b) for b in verdict.baseline.block_ms] if verdict.baseline else [],
        "fixed_blocks_ms": [_ms(b) for b in verdict.fixed.block_ms] if verdict.fixed else [],
        "blocks": s.blocks, "steps": s.steps, "warmup": s.warmup, "budget_s": s.budget_s,
        "target_pct": round(s.target * 100, 2),
        "device": v.device, "torch": v.torch, "device_type": s.device,
        "fix": row.variant.title, "safe": row.variant.safe, "precision": row.variant.precision,
        "follow_ups": list(row.variant.follow_ups),
        "min_effect_pct": round(s.min_effect * 100, 2),
        "idle": row.idle,
        "reason": verdict.reason or None,
        "stderr_tail": row.outcome.stderr_tail if row.outcome and verdict.status == FAILED else None,
    }
    if s.trace:
        doc["trace"] = _trace_dict(row.outcome.trace if row.outcome else None, row.outcome is not None)
        doc["trace_before"] = _trace_dict(v.baseline_trace, bool(v.baseline_runs))
    return doc


def unmeasured_dict(v: Verification, item: Unmeasured) -> dict:
    """The ``verification`` object of a finding no variant was built for."""
    return {"status": NOT_MEASURED, "summary": f"{NOT_MEASURED}: {item.reason}", "reason": item.reason,
            "speedup": None, "baseline_ms": None, "fixed_ms": None, "ci95": None, "device": v.device,
            "torch": v.torch, "device_type": v.settings.device}


def _finding_location(finding: Finding) -> str | None:
    return None if finding.source is None else f"{report_path(finding.path)}:{finding.source.line}"


def _rule(row: Row) -> str:
    """What a row measures, as its report's ``rule`` column: the finding's code, TF32 / bf16, or the variant key."""
    variant = row.variant
    if variant.finding is not None:
        return variant.finding.code
    if variant.precision:
        return variant.precision.upper() if variant.precision == "tf32" else variant.precision
    return variant.key


def _location(row: Row) -> str | None:
    finding = row.variant.finding
    return None if finding is None else _finding_location(finding)


def _ms(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 4)


def _between_processes(runs: Sequence[RunOutcome]) -> float | None:
    """How far apart the baseline's processes ran (issue #38 item 4): the range of their median step times over the
    median of those medians, in percent; None with fewer than two processes that timed blocks."""
    medians = [statistics.median(o.block_ms) for o in runs if o.block_ms]
    if len(medians) < 2 or statistics.median(medians) <= 0:
        return None
    return round(100.0 * (max(medians) - min(medians)) / statistics.median(medians), 1)


def _range(t: Timing | None) -> list[float | None] | None:
    return [_ms(t.low), _ms(t.high)] if t else None


def _trace_dict(trace: TraceResult | None, ran: bool) -> dict:
    if trace is None:
        return {"status": "failed", "reason": "not profiled: the run did not complete" if ran else "not run"}
    return trace.to_dict()
