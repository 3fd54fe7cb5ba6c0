"""Issue #13 on a GPU, in one command: every measurement the issue's "done" list asks for, with JSON, logs and a
summary under $OUT. Started by tests/verify/gpu_issue13.sh (which installs the wheels first); stdlib only here, the
measurements run as subprocesses (`python -m tracelint verify`, fixtures/verify/ab_time.py).

    (a) verify a script whose DataLoader workers (forked) run torchvision transforms: every variant, bf16 included,
        must run (no `failed`);
    (b) verify the `losses.append(loss.item())` script: a measured TL101 line (not `failed`, not `not-measured`);
    (c) every catalog pair (`verify --all-rules`) three times, and the candidate TL101 pair of
        fixtures/verify/pairs three times: `confirmed` in 3 of 3;
    (d) pinned memory, TF32 and bf16 on fixture scripts, each measured by verify and by a hand-timed A/B of the
        same change (ab_time.py): the two intervals must overlap.

The whole run keeps to ``--deadline`` seconds (default 510, for a 9-minute slot with the install and start-up
around it): each step's budget is cut to what is left, and a step that no longer fits is skipped and said so.
``--cpu`` runs the same steps on the CPU with shrunk copies of the fixtures and tiny settings: the plumbing only
(its timings are no claims; the catalog pairs need CUDA and fail there, which the summary reports as such).
``--only a,b`` runs some steps. ``--summary DIR`` rebuilds the summary from an earlier run's folder.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures" / "verify"
CPU_STAND_IN = REPO / "tests" / "verify" / "scripts" / "loader_transforms.py"  # (a) where torchvision is missing
REPEATS = 3


@dataclass
class Plan:
    """Settings of one kind of machine: the verify options and the A/B options of each step."""

    device: str
    verify: dict[str, list[str]]
    ab: dict[str, list[str]]
    timeout: int


GPU = Plan(
    device="cuda",
    verify={
        "a": ["--precision", "tf32,bf16", "--budget", "6", "--blocks", "4", "--timeout", "150"],
        "b": ["--precision", "none", "--budget", "12", "--timeout", "120"],
        "catalog": ["--budget", "6", "--timeout", "120"],
        "pair": ["--precision", "none", "--budget", "6", "--timeout", "120"],
        "pinned": ["--precision", "none", "--budget", "12", "--timeout", "150"],
        "matmul": ["--precision", "tf32,bf16", "--budget", "8", "--timeout", "120"],
    },
    ab={"pinned": ["--budget", "40", "--min-rounds", "3"], "tf32": ["--budget", "25", "--min-rounds", "3"],
        "bf16": ["--budget", "25", "--min-rounds", "3"]},
    timeout=150,
)
TINY = ["--device", "cpu", "--warmup", "2", "--steps", "3", "--blocks", "3", "--budget", "1", "--timeout", "120"]
CPU = Plan(
    device="cpu",
    verify={"a": [*TINY, "--precision", "tf32,bf16"], "b": [*TINY, "--precision", "none"], "catalog": TINY,
            "pair": [*TINY, "--precision", "none"], "pinned": [*TINY, "--precision", "none"],
            "matmul": [*TINY, "--precision", "tf32,bf16"]},
    ab={k: ["--warmup", "2", "--steps", "3", "--blocks", "2", "--min-rounds", "2", "--max-rounds", "2",
            "--budget", "1"] for k in ("pinned", "tf32", "bf16")},
    timeout=240,
)


@dataclass
class Runner:
    out: Path
    deadline: float
    env: dict
    log: list[dict] = field(default_factory=list)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, name: str, command: list[str], *, need: float, cap: float) -> dict:
        """Run ``command`` (output to OUT/name.log) if at least ``need`` seconds are left; at most ``cap``."""
        entry = {"name": name, "command": command, "status": "skipped", "rc": None, "wall_s": 0.0}
        left = self.left()
        if left < need:
            entry["reason"] = f"skipped: {left:.0f} s left, it needs about {need:.0f} s"
            print(f"[issue13] {name}: {entry['reason']}", flush=True)
            self.log.append(entry)
            return entry
        started = time.monotonic()
        print(f"[issue13] {name}: {' '.join(command)}", flush=True)
        with (self.out / f"{name}.log").open("w") as log:
            try:
                done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=self.env,
                                      timeout=max(10.0, min(cap, left - 5)))
                entry.update(status="done", rc=done.returncode)
            except subprocess.TimeoutExpired:
                entry.update(status="timeout")
        entry["wall_s"] = round(time.monotonic() - started, 1)
        print(f"[issue13] {name}: {entry['status']} rc={entry['rc']} in {entry['wall_s']} s "
              f"({self.left():.0f} s left)", flush=True)
        self.log.append(entry)
        return entry


def verify(runner: Runner, name: str, target: list[str], options: list[str], *, need: float, cap: float) -> dict:
    command = [sys.executable, "-m", "tracelint", "verify", *target, *options, "--progress", "--format", "json",
               "-o", str(runner.out / f"{name}.json")]
    return runner.run(name, command, need=need, cap=cap)


def ab(runner: Runner, name: str, a: Path, b: Path, options: list[str], *, need: float, cap: float) -> dict:
    command = [sys.executable, str(FIXTURES / "ab_time.py"), str(a), str(b), *options,
               "--json", str(runner.out / f"{name}.json")]
    return runner.run(name, command, need=need, cap=cap)


# --- --cpu: shrunk copies of the fixtures ----------------------------------------------------------------------

SIZES = {"BATCH": 8, "WIDTH": 64, "FEATURES": 32, "POOL": 64, "IMAGE": 32, "DEPTH": 2}
LITERALS = {"4096": "64", "2048": "64", "1024": "32", "512": "16"}


def shrink(text: str) -> str:
    """A fixture as a CPU smoke copy: small sizes, the CPU (keeping the device evidence the linter needs)."""
    text = text.replace('DEVICE = "cuda"', 'DEVICE = "cuda" if torch.cuda.is_available() else "cpu"')
    text = text.replace(".cuda(", '.to("cuda" if torch.cuda.is_available() else "cpu", ')
    text = text.replace(".pin_memory()", "")
    for name, value in SIZES.items():
        text = re.sub(rf"^{name} = \d+", f"{name} = {value}", text, flags=re.M)
    for big, small in LITERALS.items():
        text = re.sub(rf"(?<![\w.]){big}(?![\w.])", small, text)
    return text.replace("num_workers=6", "num_workers=2").replace("num_workers=4", "num_workers=2")


def fixture_set(cpu: bool, work: Path) -> dict[str, Path]:
    """The scripts of the run: the fixtures themselves, or (--cpu) shrunk copies of them."""
    names = {"a": "loader_torchvision.py", "b": "losses_append.py", "pair": "pairs/TL101_bad.py",
             "pinned": "pinned.py", "pinned_fixed": "pinned_fixed.py", "matmul": "matmul.py",
             "matmul_tf32": "matmul_tf32.py", "matmul_bf16": "matmul_bf16.py"}
    if not cpu:
        return {key: FIXTURES / name for key, name in names.items()}
    work.mkdir(parents=True, exist_ok=True)
    scripts = {}
    for key, name in names.items():
        source = FIXTURES / name
        if key == "a" and not _has("torchvision"):
            source = CPU_STAND_IN
        target = work / Path(name).name
        target.write_text(shrink(source.read_text()))
        scripts[key] = target
    return scripts


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# --- the summary: what the "done" list asks, from the JSON files -----------------------------------------

def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _targets(path: Path) -> list[dict]:
    doc = _load(path)
    return doc.get("verify", []) if doc else []


def _row(entry: dict) -> str:
    v = entry["verification"]
    ci = v.get("ci95")
    interval = f"{v['speedup']:.3f}× ({ci[0]:.3f}–{ci[1]:.3f})" if v.get("speedup") and ci else "—"
    ms = (f"{v['baseline_ms']:.2f} → {v['fixed_ms']:.2f}" if v.get("baseline_ms") and v.get("fixed_ms") else "—")
    return (f"| {entry.get('location') or '—'} | {entry['rule']} | {v.get('fix', '')} | {ms} | {interval} | "
            f"{v.get('rounds') or '—'} ({v.get('stopped') or '—'}) | {v.get('summary') or v['status']} |")


def _target_lines(t: dict) -> list[str]:
    b = t["baseline"]
    lines = [f"**{t['target']}** · {t['device']} · torch {t['torch']}", ""]
    if b["status"] != "ok":
        return lines + [f"baseline {b['status']}: {b.get('reason')}", "", "```", b.get("stderr_tail") or "",
                        "```", ""]
    lines += [f"baseline {b['median_ms']:.2f} ms/step, block-to-block noise ±{b['noise_pct']:.1f}%", "",
              "| location | rule | fix | ms/step | speedup (95% CI) | rounds | status |",
              "|---|---|---|---|---|---|---|"]
    lines += [_row(e) for e in t["variants"]]
    lines += [f"| {e.get('location') or '—'} | {e['rule']} | — | — | — | — | not-measured: {e['reason']} |"
              for e in t.get("not_measured", [])]
    for e in t["variants"]:
        v = e["verification"]
        if v["status"] == "failed":
            lines += ["", f"{e['key']} failed: {v.get('reason')}", "```", v.get("stderr_tail") or "", "```"]
    return lines + [""]


def check_a(out: Path) -> tuple[bool, str]:
    targets = _targets(out / "a_loader.json")
    if not targets:
        return False, "no report"
    t = targets[0]
    statuses = {e["key"]: e["verification"]["status"] for e in t["variants"]}
    failed = [k for k, s in statuses.items() if s == "failed"]
    ok = t["baseline"]["status"] == "ok" and bool(statuses) and not failed and "bf16" in statuses
    return ok, f"baseline {t['baseline']['status']}; " + ", ".join(f"{k}: {s}" for k, s in statuses.items())


def check_b(out: Path) -> tuple[bool, str]:
    targets = _targets(out / "b_losses_append.json")
    if not targets:
        return False, "no report"
    rows = [e for e in targets[0]["variants"] if e["rule"] == "TL101"]
    if not rows:
        skipped = [e["reason"] for e in targets[0].get("not_measured", []) if e["rule"] == "TL101"]
        return False, f"no TL101 variant ({'; '.join(skipped) or 'not found'})"
    v = rows[0]["verification"]
    return v["status"] not in ("failed", "not-measured"), f"TL101: {v['status']}, {v.get('summary')}"


def check_c(out: Path) -> list[tuple[str, bool, str]]:
    """One line per pair: confirmed in every repeat."""
    results: dict[str, list[str]] = {}
    for i in range(1, REPEATS + 1):
        for t in _targets(out / f"c_catalog_{i}.json"):
            for e in t["variants"] or [{"verification": {"status": f"baseline {t['baseline']['status']}"}}]:
                results.setdefault(t["target"], []).append(e["verification"]["status"])
        for t in _targets(out / f"c_pair_TL101_{i}.json"):
            for e in t["variants"]:
                if e["rule"] == "TL101":
                    results.setdefault("candidate TL101 pair (fixtures/verify/pairs)", []).append(
                        e["verification"]["status"])
    return [(name, statuses.count("confirmed") == REPEATS and len(statuses) == REPEATS,
             f"{statuses.count('confirmed')}/{REPEATS} confirmed: {', '.join(statuses)}")
            for name, statuses in sorted(results.items())]


def _verify_interval(path: Path, rule: str) -> tuple[float, float, float] | None:
    for t in _targets(path):
        for e in t["variants"]:
            v = e["verification"]
            if e["rule"] == rule and v.get("ci95"):
                return v["speedup"], v["ci95"][0], v["ci95"][1]
    return None


def check_d(out: Path) -> list[tuple[str, bool, str]]:
    lines = []
    for label, report, rule, hand in (("pinned memory (TL202)", "d_pinned_verify.json", "TL202", "d_pinned_ab.json"),
                                      ("TF32", "d_matmul_verify.json", "TF32", "d_tf32_ab.json"),
                                      ("bf16", "d_matmul_verify.json", "bf16", "d_bf16_ab.json")):
        measured = _verify_interval(out / report, rule)
        timed = _load(out / hand)
        if measured is None or not timed or not timed.get("ci95"):
            lines.append((label, False, f"missing: verify {'ok' if measured else 'none'}, "
                                        f"A/B {'ok' if timed and timed.get('ci95') else 'none'}"))
            continue
        low, high = timed["ci95"]
        agree = measured[1] <= high and low <= measured[2]
        lines.append((label, agree, f"verify {measured[0]:.3f}× ({measured[1]:.3f}–{measured[2]:.3f}); hand A/B "
                                    f"{timed['speedup']:.3f}× ({low:.3f}–{high:.3f}), {timed['rounds']} rounds: "
                                    f"{'intervals overlap' if agree else 'intervals DISAGREE'}"))
    return lines


def summary(out: Path) -> tuple[str, dict]:
    env = _load(out / "env.json") or {}
    checks: list[tuple[str, bool, str]] = []
    for label, check in (("(a) DataLoader workers with torchvision transforms: no variant failed", check_a),
                         ("(b) losses.append(loss.item()): a measured TL101 line", check_b)):
        ok, detail = check(out)
        checks.append((label, ok, detail))
    checks += [(f"(c) {name}", ok, detail) for name, ok, detail in check_c(out)]
    checks += [(f"(d) {name}: verify agrees with the hand-timed A/B", ok, detail) for name, ok, detail in check_d(out)]
    lines = ["# tracelint verify, issue #13", "",
             f"{env.get('device', '?')} · torch {env.get('torch', '?')} · {env.get('mode', '?')} · "
             f"{env.get('wall_s', '?')} s", "", "## Checks", "", "| check | result | detail |", "|---|---|---|"]
    lines += [f"| {label} | {'PASS' if ok else 'FAIL'} | {detail} |" for label, ok, detail in checks]
    if str(env.get("mode", "")).startswith("cpu"):
        lines += ["", "CPU smoke run: the plumbing only. Its timings are no claims; the catalog pairs need CUDA "
                      "and fail here; (a) runs tests/verify/scripts/loader_transforms.py where torchvision is "
                      "missing."]
    lines += ["", "## Reports", ""]
    for path in sorted(out.glob("*.json")):
        if path.name in ("env.json", "summary.json") or path.name.endswith("_ab.json"):
            continue
        for t in _targets(path):
            lines += [f"### {path.stem}", "", *_target_lines(t)]
    for path in sorted(out.glob("*_ab.json")):
        doc = _load(path) or {}
        lines += [f"### {path.stem} (hand-timed A/B)", "",
                  f"{doc.get('b')} vs {doc.get('a')}: {doc.get('speedup')} × {doc.get('ci95')} over "
                  f"{doc.get('rounds')} rounds ({doc.get('stopped')}); A {doc.get('a_ms')} ms, B {doc.get('b_ms')} "
                  f"ms; {doc.get('method')}", ""]
    steps = (_load(out / "steps.json") or {}).get("steps", [])
    lines += ["## Steps", "", "| step | status | rc | s |", "|---|---|---|---|"]
    lines += [f"| {s['name']} | {s.get('reason') or s['status']} | {s['rc']} | {s['wall_s']} |" for s in steps]
    data = {"checks": [{"check": label, "pass": ok, "detail": detail} for label, ok, detail in checks],
            "passed": sum(ok for _, ok, _ in checks), "total": len(checks)}
    return "\n".join(lines) + "\n", data


# --- the run ---------------------------------------------------------------------------------------------------

def environment(cpu: bool) -> dict:
    code = ("import json, torch; c = torch.cuda.is_available(); print(json.dumps({'torch': torch.__version__, "
            "'cuda': c, 'device': torch.cuda.get_device_name() if c else 'CPU'}))")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        facts = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        facts = {"torch": None, "cuda": False, "device": "unknown"}
    facts.update(mode="cpu smoke (no claims)" if cpu else "gpu", torchvision=_has("torchvision"),
                 python=sys.version.split()[0])
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "/tmp/tracelint-issue13")
    parser.add_argument("--cpu", action="store_true", help="the plumbing on the CPU: shrunk fixtures, tiny settings")
    parser.add_argument("--deadline", type=float, default=510.0, help="seconds for the whole run")
    parser.add_argument("--only", default="a,b,c,d", help="steps to run (a,b,c,d)")
    parser.add_argument("--summary", default=None, help="only rebuild the summary of this folder")
    args = parser.parse_args(argv)
    if args.summary:
        text, _ = summary(Path(args.summary))
        print(text)
        return 0
    started = time.monotonic()
    out = Path(args.out) / "issue13"
    out.mkdir(parents=True, exist_ok=True)
    plan = CPU if args.cpu else GPU
    facts = environment(args.cpu)
    if not args.cpu and not facts.get("cuda"):
        print("[issue13] no CUDA device: run with --cpu for the plumbing only", file=sys.stderr)
        return 2
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    runner = Runner(out, started + args.deadline, env)
    scripts = fixture_set(args.cpu, out / "smoke")
    only = set(args.only.split(","))
    t = plan.timeout
    if "a" in only:
        verify(runner, "a_loader", [str(scripts["a"])], plan.verify["a"], need=50, cap=2 * t)
    if "b" in only:
        verify(runner, "b_losses_append", [str(scripts["b"])], plan.verify["b"], need=30, cap=t)
    if "d" in only:  # before the repeats of (c): each of (d) is needed once, (c)'s third repeat is the cheapest loss
        verify(runner, "d_pinned_verify", [str(scripts["pinned"])], plan.verify["pinned"], need=30, cap=t)
        ab(runner, "d_pinned_ab", scripts["pinned"], scripts["pinned_fixed"], plan.ab["pinned"], need=45, cap=t)
        verify(runner, "d_matmul_verify", [str(scripts["matmul"])], plan.verify["matmul"], need=30, cap=t)
        ab(runner, "d_tf32_ab", scripts["matmul"], scripts["matmul_tf32"], plan.ab["tf32"], need=30, cap=t)
        ab(runner, "d_bf16_ab", scripts["matmul"], scripts["matmul_bf16"], plan.ab["bf16"], need=30, cap=t)
    if "c" in only:
        for i in range(1, REPEATS + 1):
            verify(runner, f"c_catalog_{i}", ["--all-rules"], plan.verify["catalog"], need=35, cap=t)
            verify(runner, f"c_pair_TL101_{i}", [str(scripts["pair"])], plan.verify["pair"], need=20, cap=t)
    facts["wall_s"] = round(time.monotonic() - started, 1)
    (out / "env.json").write_text(json.dumps(facts, indent=1))
    (out / "steps.json").write_text(json.dumps({"steps": runner.log}, indent=1))
    text, data = summary(out)
    (out / "summary.md").write_text(text)
    (out / "summary.json").write_text(json.dumps(data, indent=1))
    print(text)
    print(f"[issue13] {data['passed']}/{data['total']} checks passed in {facts['wall_s']} s; files in {out}")
    if args.cpu:
        shutil.rmtree(out / "smoke", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
