#!/usr/bin/env python3
"""Calibration of `tracelint verify` (issue #26): for every fix class the project can rewrite, one fixture pair
(fixtures/verify/), measured in one invocation by `tracelint verify` and by a fresh-process alternating A/B
(fixtures/verify/ab_time.py), on the same card; one table of both estimates with their 95 % intervals, the
baselines side by side and whether they agree (the intervals overlap and the point estimates are within 3 %).

    python bench/verify_calibration.py --out "$OUT"              # GPU only; keeps to --deadline (510 s)
    python bench/verify_calibration.py --out /tmp/cal --smoke    # the same plumbing on a CPU: shrunk copies,
                                                                 # tiny settings, no claims (a few minutes)
    python bench/verify_calibration.py --summary /tmp/cal [/tmp/cal2]   # the table again (several runs: one)

Writes three files into --out (the device machine returns few files): calibration.md (the table and the method),
calibration.json (every report and A/B result, and the rows) and calibration.log (each step's command and output
tail). The work files live in --work (a temporary folder by default).

Time: each class gets a share of what is left of --deadline, in proportion to its weight, split between verify's
alternating budget (after its fixed start-up cost) and the A/B's. A class that no longer fits is skipped and said
so. After the table, if time is left, the cause of the old bias: verify again on the loader-bound and the
host-bound classes with the method before issue #26 (``--pause workers``: only the DataLoader workers of the
waiting side stopped, found through /proc/PID/task/TID/children) and with no pause at all (what that method did
where the kernel has no such file), beside the new one, and the CPU time each waiting side used while the other
was timed (verify measures it whatever the pause).

Standard library only (tracelint and ab_time run as subprocesses, with this repository on PYTHONPATH).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures" / "verify"
AB_TIME = FIXTURES / "ab_time.py"
AGREE_PCT = 3.0  # point estimates within 3 % (and the intervals overlap)


@dataclass(frozen=True)
class Row:
    """One line of the table: the variant of the verify report (by its rule column) against one A/B script."""

    label: str
    rule: str  # the verify report's "rule" of the variant: a code, "bf16", or "against"
    fixed: str  # the hand-fixed twin ab_time times against the script


@dataclass(frozen=True)
class Entry:
    """One script: its verify options, its A/B twins (one per row), and how to shrink it for --smoke."""

    name: str
    script: str
    rows: tuple[Row, ...]
    verify: tuple[str, ...]
    steps: int = 20
    # Steps before timing, on both sides: long enough to reach the steady state. With 10, the fresh A/B of
    # pinned.py timed the pinned side's transient (its first 40 steps after warm-up read 0.999x, the next 80
    # 1.169x, on an H100): every entry that is not GPU-bound from its first step warms up 60 steps.
    warmup: int = 60
    ab_blocks: int = 4
    weight: float = 1.0
    what: str = ""
    sizes: dict = field(default_factory=dict)  # --smoke: module constants
    literals: dict = field(default_factory=dict)  # --smoke: other text


ENTRIES = (
    Entry("item_loader", "item_loader.py",
          (Row("TL101 `total += loss.item()`, loader-bound step (4 workers)", "TL101", "item_loader_fixed.py"),),
          ("--select", "TL101", "--precision", "none"), what="loader-bound (DataLoader, 4 workers)",
          sizes={"BATCH": 8, "RAW": 256, "FEATURES": 16, "WIDTH": 32, "WORKERS": 2}),
    Entry("losses_append", "losses_append.py",
          (Row("TL101 `losses.append(loss.item())`", "TL101", "losses_append_fixed.py"),),
          ("--select", "TL101", "--precision", "none"), what="host batch assembly beside an MLP",
          sizes={"BATCH": 8, "FEATURES": 32, "WIDTH": 64, "POOL": 64}),
    Entry("cpu_log", "cpu_log.py",
          (Row("TL102 `.cpu()` in a per-step debug log", "TL102", "cpu_log_fixed.py"),),
          ("--select", "TL102", "--precision", "none"), what="host batch assembly beside an MLP",
          sizes={"BATCH": 8, "FEATURES": 32, "WIDTH": 64, "POOL": 64}),
    Entry("pinned", "pinned.py",
          (Row("TL202 + TL203 pinned memory, non_blocking (6 workers)", "TL202", "pinned_fixed.py"),),
          ("--select", "TL202", "--precision", "none"), what="DataLoader, 6 workers, pageable copies",
          sizes={"BATCH": 8, "POOL": 16, "IMAGE": 16}, literals={"num_workers=6": "num_workers=2"}),
    Entry("host_tensors", "host_tensors.py",
          (Row("TL204 tensor built on the host", "TL204", "host_tensors_fixed.py"),),
          ("--select", "TL204", "--precision", "none"), steps=50, what="small step",
          sizes={"BATCH": 2, "SEQ": 8, "DIM": 16}),
    Entry("zero_grad_keep", "zero_grad_keep.py",
          (Row("TL301 zero_grad(set_to_none=False)", "TL301", "zero_grad_keep_fixed.py"),),
          ("--select", "TL301", "--precision", "none"), steps=50, what="6 x 4096 bf16 MLP",
          sizes={"BATCH": 4, "WIDTH": 32, "DEPTH": 2}),
    Entry("foreach_off", "foreach_off.py",
          (Row("TL303 AdamW foreach=False, host-bound small model", "TL303", "foreach_off_fixed.py"),),
          ("--select", "TL303", "--precision", "none"), what="host-bound: 64 layers of 256",
          sizes={"BATCH": 4, "WIDTH": 16, "DEPTH": 8}),
    Entry("mlp_fp32", "mlp_fp32.py",
          (Row("TL401 TF32 matmuls", "TL401", "mlp_fp32_tf32.py"),
           Row("bf16 autocast", "bf16", "mlp_fp32_bf16.py")),
          ("--select", "TL401", "--precision", "bf16"), steps=10, warmup=5, weight=1.7,
          what="fp32 MLP, 8 x 4096", sizes={"BATCH": 8, "DEPTH": 2}, literals={"4096": "2048"}),
    Entry("vocab_head", "vocab_head.py",
          (Row("TL404 vocabulary padded to a multiple of 64", "against", "vocab_head_fixed.py"),),
          ("--against", "vocab_head_fixed.py"), what="bf16 output head, 50,257 tokens",
          sizes={"BATCH": 16, "DIM": 16, "TOKENS": 251}, literals={"VOCAB = 50257": "VOCAB = 251",
                                                                   "VOCAB = 50304": "VOCAB = 256"}),
)
# After the table, time allowing, in this order: classes measured again with a weaker pause of the waiting side.
# "workers" is the method before issue #26; "none" is what it did where /proc/PID/task/TID/children is missing.
CAUSE = (("item_loader", "workers"), ("losses_append", "workers"), ("item_loader", "none"), ("pinned", "workers"))


@dataclass(frozen=True)
class Plan:
    """What one kind of machine runs: verify's and ab_time's fixed options, and the fixed costs budgets leave for."""

    device: str
    verify: tuple[str, ...]
    ab: tuple[str, ...]
    verify_overhead_s: float  # probe, lint, each pair of processes started and warmed up (3 pairs), the last round
    ab_overhead_s: float  # the round that runs past the budget
    min_verify_s: float
    min_ab_s: float
    timeout_s: float
    max_verify_s: float = 1e9
    max_ab_s: float = 1e9
    tiny: bool = False  # the smoke's steps (warm-up 2, blocks of 3 steps) instead of each entry's


GPU = Plan("cuda", ("--blocks", "4", "--target", "1"), ("--min-rounds", "3", "--max-rounds", "40", "--target", "0.01"),
           verify_overhead_s=31, ab_overhead_s=5, min_verify_s=6, min_ab_s=8, timeout_s=240)
SMOKE = Plan("cpu", ("--device", "cpu", "--blocks", "2", "--target", "1", "--resume-warmup", "1"),
             ("--min-rounds", "2", "--max-rounds", "2", "--target", "0.01"),
             verify_overhead_s=0, ab_overhead_s=0, min_verify_s=1, min_ab_s=1, timeout_s=300, max_verify_s=1,
             max_ab_s=1, tiny=True)


# --- running ---------------------------------------------------------------------------------------------------------

class Runner:
    """Runs the steps within the deadline and keeps each one's command, exit code, time and output tail."""

    def __init__(self, work: Path, deadline: float, env: dict) -> None:
        self.work, self.deadline, self.env = work, deadline, env
        self.steps: list[dict] = []

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, name: str, command: list[str], cap: float) -> dict:
        step = {"name": name, "command": command, "rc": None, "status": "done", "wall_s": 0.0}
        started = time.monotonic()
        say(f"{name}: {' '.join(_short(c) for c in command)}")
        log = self.work / f"{name}.log"
        with log.open("w") as handle:
            try:
                done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO, env=self.env,
                                      timeout=max(10.0, min(cap, self.left())))
                step["rc"] = done.returncode
            except subprocess.TimeoutExpired:
                step["status"] = "timeout"
        step["wall_s"] = round(time.monotonic() - started, 1)
        step["tail"] = _tail(log.read_text(errors="replace"), 6000)
        say(f"{name}: {step['status']} rc={step['rc']} in {step['wall_s']} s ({self.left():.0f} s left)")
        self.steps.append(step)
        return step


def say(message: str) -> None:
    print(f"[calibration] {message}", flush=True)


def _short(arg: str) -> str:
    return arg.replace(str(REPO) + "/", "")


def _tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]


def verify_command(script: Path, entry: Entry, plan: Plan, budget: float, report: Path, extra=()) -> list[str]:
    options = list(entry.verify)
    if "--against" in options:
        i = options.index("--against") + 1
        options[i] = str(script.parent / options[i])
    return [sys.executable, "-m", "tracelint", "verify", str(script), *options, *plan.verify, *extra,
            "--warmup", str(2 if plan.tiny else entry.warmup), "--steps", str(3 if plan.tiny else entry.steps),
            "--budget", f"{budget:.1f}", "--timeout", str(int(plan.timeout_s)), "--progress", "--format", "json",
            "-o", str(report)]


def ab_command(script: Path, fixed: list[Path], entry: Entry, plan: Plan, budget: float, result: Path) -> list[str]:
    steps, warmup, blocks = (3, 2, 1) if plan.tiny else (entry.steps, entry.warmup, entry.ab_blocks)
    return [sys.executable, str(AB_TIME), str(script), *map(str, fixed), "--warmup", str(warmup), "--steps",
            str(steps), "--blocks", str(blocks), *plan.ab, "--budget", f"{budget:.1f}", "--timeout",
            str(int(plan.timeout_s)), "--json", str(result)]


def measure_entry(runner: Runner, entry: Entry, scripts: Path, plan: Plan, share: float) -> dict:
    """verify, then the A/B, of one script within ``share`` seconds."""
    script = scripts / entry.script
    fixed = [scripts / row.fixed for row in entry.rows]
    variants = len(entry.rows)
    verify_s = min(plan.max_verify_s, max(plan.min_verify_s, (0.55 * share - plan.verify_overhead_s) / variants))
    ab_s = min(plan.max_ab_s, max(plan.min_ab_s, 0.45 * share - plan.ab_overhead_s))
    report, result = runner.work / f"verify_{entry.name}.json", runner.work / f"ab_{entry.name}.json"
    done = {"name": entry.name, "script": entry.script, "share_s": round(share, 1),
            "verify_budget_s": round(verify_s, 1), "ab_budget_s": round(ab_s, 1)}
    done["verify_step"] = runner.run(f"verify_{entry.name}", verify_command(script, entry, plan, verify_s, report),
                                     cap=plan.timeout_s + verify_s * variants + 60)
    done["verify"] = _load(report)
    done["ab_step"] = runner.run(f"ab_{entry.name}", ab_command(script, fixed, entry, plan, ab_s, result),
                                 cap=plan.timeout_s + ab_s + 60)
    done["ab"] = _load(result)
    return done


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# --- --smoke: shrunk copies on the CPU ------------------------------------------------------------------------------

def shrink(text: str, entry: Entry) -> str:
    """A fixture as a CPU smoke copy: small sizes, the CPU (keeping the device evidence the linter needs)."""
    text = text.replace('DEVICE = "cuda"', 'DEVICE = "cuda" if torch.cuda.is_available() else "cpu"')
    text = text.replace(".pin_memory()", "")
    for old, new in entry.literals.items():
        text = text.replace(old, new)
    for name, value in entry.sizes.items():
        text = re.sub(rf"^{name} = \d+", f"{name} = {value}", text, flags=re.M)
    return text


def fixture_folder(smoke: bool, work: Path, entries: list[Entry]) -> Path:
    if not smoke:
        return FIXTURES
    folder = work / "smoke"
    folder.mkdir(parents=True, exist_ok=True)
    for entry in entries:
        for name in (entry.script, *(row.fixed for row in entry.rows)):
            (folder / name).write_text(shrink((FIXTURES / name).read_text(), entry))
    return folder


# --- the table -------------------------------------------------------------------------------------------------------

def rows_of(entry_result: dict, entry: Entry) -> list[dict]:
    """One table row per Row of the entry: verify's variant beside the A/B of the same change."""
    targets = (entry_result.get("verify") or {}).get("verify") or []
    target = targets[0] if targets else None
    ab = entry_result.get("ab") or {}
    rows = []
    for i, row in enumerate(entry.rows):
        line = {"class": row.label, "script": entry.script, "fixed": row.fixed, "what": entry.what}
        variant = None
        if target is not None:
            variant = next((v["verification"] for v in target["variants"] if v["rule"] == row.rule), None)
        if variant is not None:
            line["verify"] = {k: variant.get(k) for k in ("status", "summary", "speedup", "ci95", "rounds",
                                                          "stopped", "baseline_ms", "fixed_ms", "idle", "reason",
                                                          "pairs", "pair_speedups")}
        elif target is not None:
            reasons = [v["reason"] for v in target.get("not_measured", [])]
            line["verify"] = {"status": "missing", "reason": "; ".join(reasons) or
                              f"no {row.rule} variant (baseline: {target['baseline'].get('reason') or 'ok'})"}
        else:
            line["verify"] = {"status": "missing", "reason": _why(entry_result.get("verify_step"))}
        against = (ab.get("against") or [])[i] if i < len(ab.get("against") or []) else None
        if against and against.get("ci95"):
            line["ab"] = {"speedup": against["speedup"], "ci95": against["ci95"], "rounds": ab.get("rounds"),
                          "stopped": ab.get("stopped"), "a_ms": _mean(ab.get("a_ms")), "b_ms": _mean(against["b_ms"]),
                          "spread": {"a": process_spread(ab.get("runs"), ab.get("a")),
                                     "b": process_spread(ab.get("runs"), against.get("b"))}}
        else:
            line["ab"] = {"status": "missing", "reason": _why(entry_result.get("ab_step"))}
        line["agree"], line["agreement"] = agreement(line["verify"], line["ab"])
        rows.append(line)
    return rows


def process_spread(runs: list[dict] | None, script: str | None) -> dict | None:
    """How much of a script's step time is set per process: over the A/B's fresh processes of ``script``, the SD of
    log(block ms) within a process (pooled) and the SD of the processes' mean log(block ms) between them, with
    the part of it the within-process noise does not explain (``between`` minus within / blocks, as a variance).
    In percent (SD of a log, times 100). None with fewer than 3 processes or 2 blocks each."""
    mine = [r["block_ms"] for r in runs or () if r.get("script") == script and len(r.get("block_ms") or ()) >= 2]
    if len(mine) < 3:
        return None
    logs = [[math.log(ms) for ms in blocks] for blocks in mine]
    within = statistics.fmean(statistics.variance(run) for run in logs)
    between = statistics.variance([statistics.fmean(run) for run in logs])
    blocks = statistics.fmean(len(run) for run in logs)
    return {"processes": len(mine), "within_pct": round(100 * math.sqrt(within), 1),
            "between_pct": round(100 * math.sqrt(between), 1),
            "process_pct": round(100 * math.sqrt(max(0.0, between - within / blocks)), 1)}


def _why(step: dict | None) -> str:
    if not step:
        return "not run"
    if step.get("status") == "skipped":
        return step.get("reason", "skipped")
    last = [line for line in (step.get("tail") or "").splitlines() if line.strip()]
    return f"{step['status']} rc={step.get('rc')}: {last[-1][:200] if last else 'no output'}"


def _mean(values) -> float | None:
    return sum(values) / len(values) if values else None


def agreement(v: dict, ab: dict) -> tuple[bool, str]:
    if not v.get("ci95") or not ab.get("ci95"):
        return False, "not both measured"
    (vl, vh), (al, ah) = v["ci95"], ab["ci95"]
    overlap = vl <= ah and al <= vh
    gap = (v["speedup"] / ab["speedup"] - 1) * 100
    close = abs(gap) <= AGREE_PCT
    words = [f"{gap:+.1f} %", "intervals overlap" if overlap else "intervals DISJOINT"]
    return overlap and close, ", ".join(words)


def _ci(m: dict) -> str:
    if not m.get("ci95"):
        return "—"
    return f"{m['speedup']:.3f}× ({m['ci95'][0]:.3f}–{m['ci95'][1]:.3f})"


def _ms(value) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "—"


def _idle(v: dict) -> str:
    idle = v.get("idle") or {}
    rates = [(idle.get(side) or {}).get("cpu_ms_per_s") for side in ("baseline", "variant")]
    return "—" if any(r is None for r in rates) else f"{rates[0]:.0f} / {rates[1]:.0f}"


def table(rows: list[dict]) -> list[str]:
    lines = ["| class | verify (95 % CI) | status | rounds | A/B (95 % CI) | rounds | baseline ms verify / A/B | "
             "fixed ms verify / A/B | waiting side CPU ms/s (base / var) | agree |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        v, ab = r["verify"], r["ab"]
        status = v.get("summary") if v.get("status") in ("no-effect", "small") else v.get("status")
        if v.get("status") in ("missing", "failed"):
            status = f"{v.get('status')}: {(v.get('reason') or '')[:120]}"
        lines.append(
            f"| {r['class']} | {_ci(v)} | {status} | {v.get('rounds') or '—'} | "
            f"{_ci(ab) if ab.get('ci95') else 'missing: ' + ab.get('reason', '')[:120]} | {ab.get('rounds') or '—'} | "
            f"{_ms(v.get('baseline_ms'))} / {_ms(ab.get('a_ms'))} | {_ms(v.get('fixed_ms'))} / {_ms(ab.get('b_ms'))} | "
            f"{_idle(v)} | {'yes' if r['agree'] else 'NO'} ({r['agreement']}) |")
    return lines


def spread_lines(rows: list[dict]) -> list[str]:
    """Per class, how much of the step time each fresh A/B process sets for itself (process_spread)."""
    shown = [r for r in rows if (r.get("ab") or {}).get("spread")]
    if not shown:
        return []
    lines = ["", "## Step time set per process (the A/B's fresh processes)", "",
             "SD of log(block ms), in %: within one process, and of the processes' means between processes; "
             "'per process': the part of the latter that the within-process noise does not explain.", "",
             "| class | processes (A / B) | within % (A / B) | between % (A / B) | per process % (A / B) |",
             "|---|---|---|---|---|"]
    for r in shown:
        a, b = (r["ab"]["spread"].get(side) or {} for side in ("a", "b"))
        cells = [f"{a.get(key, '—')} / {b.get(key, '—')}"
                 for key in ("processes", "within_pct", "between_pct", "process_pct")]
        lines.append(f"| {r['class']} | {' | '.join(cells)} |")
    return lines


def cause_lines(cause: list[dict]) -> list[str]:
    if not cause:
        return []
    lines = ["", "## The waiting side paused whole (new), its workers only (before #26), or not at all", "",
             "| class | pause | verify (95 % CI) | status | baseline / fixed ms | A/B (95 % CI), A / B ms | "
             "waiting side CPU ms/s (base / var) | processes stopped per pause (base / var) |",
             "|---|---|---|---|---|---|---|---|"]
    for c in cause:
        v, ab = c.get("row") or {}, c.get("ab") or {}
        idle = v.get("idle") or {}
        stopped = " / ".join(str((idle.get(s) or {}).get("stopped_processes", "—")) for s in ("baseline", "variant"))
        lines.append(f"| {c['class']} | {c['pause']} | {_ci(v)} | {v.get('summary') or v.get('status') or '—'} | "
                     f"{_ms(v.get('baseline_ms'))} / {_ms(v.get('fixed_ms'))} | {_ci(ab)}, {_ms(ab.get('a_ms'))} / "
                     f"{_ms(ab.get('b_ms'))} | {_idle(v)} | {stopped} |")
    return lines


def summary(doc: dict) -> str:
    env, rows = doc.get("env", {}), doc.get("rows", [])
    agreed = sum(1 for r in rows if r["agree"])
    lines = ["# tracelint verify calibrated against a fresh-process A/B (issue #26)", "",
             f"{env.get('device', '?')} · torch {env.get('torch', '?')} · {env.get('mode', '?')} · "
             f"{env.get('wall_s', '?')} s · {agreed} of {len(rows)} classes agree", "",
             f"verify: {env.get('verify_method', '?')}", "",
             f"A/B: {env.get('ab_method', '?')}", "",
             f"agree: the two 95 % intervals overlap and the point estimates are within {AGREE_PCT:g} %.", ""]
    lines += table(rows)
    lines += spread_lines(rows)
    lines += cause_lines(doc.get("cause", []))
    skipped = [s for s in doc.get("steps", []) if s.get("status") != "done" or s.get("rc")]
    if skipped:
        lines += ["", "## Steps that did not finish cleanly", ""]
        lines += [f"- {s['name']}: {s.get('reason') or s['status']} rc={s.get('rc')} ({s.get('wall_s')} s)"
                  for s in skipped]
    if str(env.get("mode", "")).startswith("cpu"):
        lines += ["", "CPU smoke run: the plumbing only; its timings are no claims."]
    return "\n".join(lines) + "\n"


def merged(docs: list[dict]) -> dict:
    """Several runs (on the same kind of card: the table says which cards) as one document."""
    if len(docs) == 1:
        return docs[0]
    env = dict(docs[0].get("env", {}))
    devices = sorted({str(d.get("env", {}).get("device")) for d in docs})
    env.update(device=" + ".join(devices), wall_s=" + ".join(str(d.get("env", {}).get("wall_s")) for d in docs))
    return {"env": env, **{key: [item for d in docs for item in d.get(key, [])] for key in ("rows", "cause", "steps")}}


# --- the run ---------------------------------------------------------------------------------------------------------

def environment(smoke: bool, env: dict) -> dict:
    code = ("import json, platform, torch; c = torch.cuda.is_available(); print(json.dumps({'torch': "
            "torch.__version__, 'cuda': c, 'device': torch.cuda.get_device_name() if c else 'CPU (' + "
            "(platform.processor() or platform.machine()) + ')', 'cpus': __import__('os').cpu_count()}))")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env)
        facts = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        facts = {"torch": None, "cuda": False, "device": "unknown"}
    missing = subprocess.run([sys.executable, "-c", "import importlib.util as u; print(' '.join(m for m in "
                              "('libcst', 'click', 'tabulate', 'orjson', 'torch') if u.find_spec(m) is None))"],
                             capture_output=True, text=True, env=env).stdout.strip()
    facts.update(mode="cpu smoke (no claims)" if smoke else "gpu", python=sys.version.split()[0], missing=missing,
                 kernel=os.uname().release, children_file=Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
                 .exists())
    return facts


def run_cause(runner: Runner, entries: list[Entry], scripts: Path, plan: Plan, results: dict) -> list[dict]:
    """verify with a weaker pause (CAUSE) beside the new method's row of the same class."""
    out = []
    names = {e.name: e for e in entries}
    chosen = [(names[name], pause) for name, pause in CAUSE if name in names]
    for i, (entry, pause) in enumerate(chosen):
        left = runner.left()
        need = plan.verify_overhead_s + plan.min_verify_s
        name = f"cause_{entry.name}_{pause}"
        if left < need:
            runner.steps.append({"name": name, "status": "skipped", "rc": None, "wall_s": 0,
                                 "reason": f"skipped: {left:.0f} s left, it needs about {need:.0f} s"})
            continue
        budget = min(plan.max_verify_s, max(plan.min_verify_s, left / (len(chosen) - i) - plan.verify_overhead_s - 5))
        report = runner.work / f"{name}.json"
        command = verify_command(scripts / entry.script, entry, plan, budget, report, extra=("--pause", pause))
        step = runner.run(name, command, cap=plan.timeout_s + budget + 60)
        old = rows_of({"verify": _load(report), "verify_step": step}, entry)[0]["verify"]
        new = next((r for r in results["rows"] if r["script"] == entry.script), {})
        label = entry.rows[0].label
        if not any(c["class"] == label and c["pause"].startswith("group") for c in out):
            out.append({"class": label, "pause": "group (new)", "row": new.get("verify", {}), "ab": new.get("ab")})
        out.append({"class": label, "pause": {"workers": "workers (before #26)", "none": "none"}[pause],
                    "row": old, "ab": new.get("ab")})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "/tmp/tracelint-calibration")
    parser.add_argument("--work", default=None, help="work files (default: a temporary folder, removed)")
    parser.add_argument("--smoke", action="store_true", help="the plumbing on the CPU: shrunk fixtures, tiny settings")
    parser.add_argument("--deadline", type=float, default=510.0, help="seconds for the whole run")
    parser.add_argument("--only", default=None, help="entries to run, comma-separated (default: all)")
    parser.add_argument("--no-cause", action="store_true", help="skip the old-method runs after the table")
    parser.add_argument("--summary", nargs="+", default=None,
                        help="only print the table of these folders' calibration.json (several: one table)")
    args = parser.parse_args(argv)
    if args.summary:
        print(summary(merged([json.loads((Path(d) / "calibration.json").read_text()) for d in args.summary])))
        return 0
    started = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="tracelint-calibration-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    plan = SMOKE if args.smoke else GPU
    facts = environment(args.smoke, env)
    say(f"{facts.get('device')} · torch {facts.get('torch')} · {facts['mode']} · /proc children file: "
        f"{facts['children_file']}")
    if facts["missing"]:
        say(f"missing Python packages: {facts['missing']} (carry their wheels in .whl/ and install them first)")
        return 2
    if not args.smoke and not facts.get("cuda"):
        say("no CUDA device: --smoke runs the plumbing on the CPU")
        return 2
    entries = [e for e in ENTRIES if not args.only or e.name in args.only.split(",")]
    scripts = fixture_folder(args.smoke, work, entries)
    runner = Runner(work, started + args.deadline, env)
    results: dict = {"env": facts, "entries": [], "rows": [], "cause": []}
    # the old-method runs after the table take about this share of the deadline when there is room for them
    reserve = 0.0 if args.no_cause or args.smoke else min(75.0, 0.14 * args.deadline)
    for i, entry in enumerate(entries):
        weights = sum(e.weight for e in entries[i:])
        share = (runner.left() - reserve) * entry.weight / weights
        need = plan.verify_overhead_s + plan.min_verify_s + plan.ab_overhead_s + plan.min_ab_s
        if share < need and runner.left() - 10 < need:
            runner.steps.append({"name": entry.name, "status": "skipped", "rc": None, "wall_s": 0,
                                 "reason": f"skipped: {runner.left():.0f} s left, it needs about {need:.0f} s"})
            say(f"{entry.name}: skipped ({runner.left():.0f} s left)")
            continue
        done = measure_entry(runner, entry, scripts, plan, max(share, need))
        results["entries"].append(done)
        results["rows"].extend(rows_of(done, entry))
        for row in rows_of(done, entry):
            say(f"{row['class']}: verify {_ci(row['verify'])} {row['verify'].get('status')}; A/B {_ci(row['ab'])}; "
                f"agree: {'yes' if row['agree'] else 'NO'} ({row['agreement']})")
    if not args.no_cause:
        results["cause"] = run_cause(runner, entries, scripts, plan, results)
    first = next((e.get("verify") for e in results["entries"] if e.get("verify")), None)
    settings = ((first or {}).get("verify") or [{}])[0].get("settings", {})
    ab_first = next((e.get("ab") for e in results["entries"] if e.get("ab")), None) or {}
    facts.update(wall_s=round(time.monotonic() - started, 1), verify_method=settings.get("method", "?"),
                 ab_method=ab_first.get("method", "?"))
    results["steps"] = runner.steps
    text = summary(results)
    (out / "calibration.json").write_text(json.dumps(results, indent=1))
    (out / "calibration.md").write_text(text)
    (out / "calibration.log").write_text("\n\n".join(
        f"== {s['name']} ({s.get('status')}, rc={s.get('rc')}, {s.get('wall_s')} s)\n"
        f"{' '.join(_short(c) for c in s.get('command', []))}\n{s.get('tail', s.get('reason', ''))}"
        for s in runner.steps))
    print(text)
    agreed = sum(1 for r in results["rows"] if r["agree"])
    say(f"{agreed}/{len(results['rows'])} classes agree in {facts['wall_s']} s; files in {out}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
