#!/usr/bin/env python3
"""The trace half of the fuzz campaign (run by bench/fuzz.py; also on its own: `python bench/fuzz_traces.py N SEED`).

Each case is a real trace mutated by tests/trace/fuzzing.py (the one copy of the mutations, shared with the
hypothesis tests in tests/trace/test_hostile_traces.py): field types, deletions, duplicates, top-level fields,
kineto quirks, truncation, encodings, gzip damage. Case `i` of seed `S` is drawn from `random.Random(f"S:{i}")`
alone, so any case can be re-made on its own and a campaign can be split into ranges run in parallel.

Every case runs through the API (`analyze_paths([mutant, good])`, checked by `fuzzing.check_api`: nothing
escapes, the good file still gives its Report, the mutant a Report or one one-line InputError naming it, metrics
are JSON values), under a 30 s alarm. With `cli`, the cases also run through the CLI, eight mutants and the good
file per process (`python -m tracelint trace ... --format json`, 30 s timeout): a traceback or "internal error" on
stderr, an exit code other than 0/1/2, a signal, a hang, JSON that does not parse (or holds NaN or integers beyond
64 bits), or an input missing from the report is a failure; a failing batch is re-run file by file to name the
culprit. A failing case is minimized (ops dropped one at a time while it still fails) and saved under
`workdir/failures/` with its ops and the error.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.trace import fuzzing as F  # noqa: E402 - after the path is set

HANG_S = 30
CLI_BATCH = 8
SLOW_S = 5.0


class _Hang(BaseException):
    """Raised by the alarm in a case that runs past HANG_S (a BaseException: check_api must not swallow it)."""


def _alarm(signum, frame):  # noqa: ARG001
    raise _Hang


def campaign(n: int, seed: int, workdir: Path, cli: bool, *, start: int = 0, cli_cases: int | None = None,
             progress=None) -> dict:
    """Cases `start` .. `start + n - 1` of `seed`; the first `cli_cases` of them (all by default) also through the
    CLI when `cli`. Returns {"cases", "cli_cases", "failures": [{"input", "error", "ops"}], "slow": [...]}."""
    workdir = Path(workdir)
    cases_dir = workdir / "cases"
    cases_dir.mkdir(parents=True, exist_ok=True)
    bases = F.available_bases()
    if not bases or not F.GOOD.is_file():
        return {"cases": 0, "cli_cases": 0, "failures": [], "slow": [],
                "note": "no base traces (fixtures/traces or ../shared/traces/public missing)"}
    failures: list[dict] = []
    slow: list[str] = []
    batch: list[tuple[int, Path, list, Path]] = []
    done = cli_done = 0
    previous = signal.signal(signal.SIGALRM, _alarm) if hasattr(signal, "SIGALRM") else None
    try:
        for i in range(start, start + n):
            rng = random.Random(f"{seed}:{i}")
            base, ops = F.random_case(rng, bases)
            try:
                path = F.write_case(F.render(base, ops), cases_dir, f"case-{seed}-{i}")
            except Exception as exc:  # the harness's own bug: say so, and go on
                failures.append({"input": f"case {i} of seed {seed}", "via": "harness", "ops": F.describe(ops),
                                 "error": f"the mutation itself failed: {type(exc).__name__}: {exc}"})
                continue
            started = time.perf_counter()
            problem = _api(path)
            took = time.perf_counter() - started
            done += 1
            if took > SLOW_S:
                slow.append(f"case {i}: {took:.1f} s through the API ({path.name})")
            if problem:
                failures.append(_keep(workdir, seed, i, base, ops, problem, "api", _api))
            if cli and (cli_cases is None or cli_done < cli_cases):
                batch.append((i, base, ops, path))
                cli_done += 1
                if len(batch) == CLI_BATCH:
                    failures += _run_batch(workdir, seed, batch)
                    batch = []
            else:
                path.unlink()
            if progress is not None:
                progress(done, len(failures))
        if batch:
            failures += _run_batch(workdir, seed, batch)
    finally:
        if previous is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    return {"cases": done, "cli_cases": cli_done, "failures": failures, "slow": slow}


def _api(path: Path) -> str | None:
    if hasattr(signal, "setitimer"):
        signal.setitimer(signal.ITIMER_REAL, HANG_S)
    try:
        return F.check_api(path)
    except _Hang:
        return f"hang: over {HANG_S} s through the API"
    finally:
        if hasattr(signal, "setitimer"):
            signal.setitimer(signal.ITIMER_REAL, 0)


# ---- the CLI ----------------------------------------------------------------------------------------------------


def check_cli(paths: list[Path], cwd: Path) -> dict[str, str]:
    """Problems of one CLI run over `paths` and the good file, by input ("*" for the run as a whole)."""
    cmd = [sys.executable, "-m", "tracelint", "trace", *map(str, paths), str(F.GOOD), "--format", "json"]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("TRACELINT_DEBUG", None)
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=HANG_S)
    except subprocess.TimeoutExpired:
        return {"*": f"hang: over {HANG_S} s through the CLI"}
    err = proc.stderr.decode("utf-8", "replace")
    out = proc.stdout.decode("utf-8", "replace")
    if proc.returncode < 0:
        return {"*": f"killed by signal {-proc.returncode}"}
    if proc.returncode not in (0, 1, 2):
        return {"*": f"exit code {proc.returncode}: {err.strip()[-300:]}"}
    if "Traceback (most recent call last)" in err:
        return {"*": f"traceback: {err.strip()[-400:]}"}
    problems: dict[str, str] = {}
    for line in err.splitlines():
        if "internal error" in line:
            named = next((str(p) for p in paths if str(p) in line), "*")
            problems[named] = line.strip()[:400]
    try:
        report = json.loads(out, parse_constant=_no_constant)
    except ValueError as e:
        if not problems:
            problems["*"] = f"stdout is not valid JSON: {e}"
        return problems
    big = _big_int(report)
    if big:
        problems["*"] = f"JSON holds an integer beyond 64 bits at {big}"
    seen_ok = {t.get("path") for t in report.get("traces", ()) if isinstance(t, dict)}
    errors = {e.get("path"): e.get("message", "") for e in report.get("errors", ()) if isinstance(e, dict)}
    for message in errors.values():
        if "\n" in str(message) or "internal error" in str(message):
            named = next((str(p) for p in paths if errors.get(str(p)) == message), "*")
            problems[named] = f"error message: {message!r}"[:400]
    if str(F.GOOD) not in seen_ok:
        problems["*"] = "the good file is missing from the report"
    for p in paths:
        if str(p) not in seen_ok and str(p) not in errors:
            problems[str(p)] = "the input is neither in traces nor in errors"
    return problems


def _no_constant(token: str):
    raise ValueError(f"non-JSON constant {token}")


def _big_int(value, where: str = "$") -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return where if not -(2**63) <= value < 2**64 else None
    if isinstance(value, dict):
        return next((w for k, v in value.items() if (w := _big_int(v, f"{where}.{k}"))), None)
    if isinstance(value, list):
        return next((w for i, v in enumerate(value) if (w := _big_int(v, f"{where}[{i}]"))), None)
    return None


def _run_batch(workdir: Path, seed: int, batch: list) -> list[dict]:
    problems = check_cli([path for _, _, _, path in batch], workdir)
    failures = []
    if problems:
        # name the culprits: each input on its own
        for i, base, ops, path in batch:
            own = check_cli([path], workdir)
            if own:
                failures.append(_keep(workdir, seed, i, base, ops, "; ".join(own.values()), "cli", _cli_one))
        if not failures:
            failures.append({"input": ", ".join(str(p) for *_, p in batch), "error": "; ".join(problems.values()),
                             "ops": "(only in a batch)", "via": "cli"})
    for *_, path in batch:
        if path.exists():
            path.unlink()
    return failures


def _cli_one(path: Path) -> str | None:
    problems = check_cli([path], path.parent)
    return "; ".join(problems.values()) or None


# ---- keeping a failure ------------------------------------------------------------------------------------------


def _keep(workdir: Path, seed: int, i: int, base: Path, ops: list, error: str, via: str, check) -> dict:
    """Minimize the case, save the minimized input and its description, and return the failure record."""
    trial_dir = workdir / "minimize"
    trial_dir.mkdir(parents=True, exist_ok=True)

    def fails(trial_ops: list) -> bool:
        trial = F.write_case(F.render(base, trial_ops), trial_dir, "trial")
        try:
            return check(trial) is not None
        finally:
            trial.unlink()

    small = F.minimize(base, ops, fails)
    data = F.render(base, small)
    out_dir = workdir / "failures"
    out_dir.mkdir(parents=True, exist_ok=True)
    kept = F.write_case(data, out_dir, f"trace-{seed}-{i}-{via}")
    final = check(kept) or error
    description = {"seed": seed, "case": i, "via": via, "base": base.name, "ops": json.loads(F.describe(small)),
                   "error": final, "first_error": error}
    kept.with_name(kept.name + ".txt").write_text(json.dumps(description, indent=1) + "\n")
    return {"input": str(kept), "error": final, "ops": F.describe(small), "via": via}


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 200
    seed = int(argv[1]) if len(argv) > 1 else 0
    workdir = BENCH / ".cache" / "fuzz" / "traces"
    result = campaign(n, seed, workdir, cli="--cli" in argv)
    print(json.dumps({k: v for k, v in result.items()}, indent=1))
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
