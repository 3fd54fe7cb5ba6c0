"""Shared helpers for the benchmarks in bench/ (not part of the tracelint package)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
CACHE = BENCH / ".cache"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def venv_bin(venv: Path, exe: str) -> Path:
    return venv / "bin" / exe


def byte_compile(venv: Path, *extra: Path) -> None:
    """Write the .pyc files of everything installed in ``venv`` (and of ``extra`` source trees, e.g. an editable
    install's package) that are missing or stale, as a normal `pip install` does.

    Without them every run compiles each imported module from source: on a machine with PYTHONDONTWRITEBYTECODE set
    (this one has it) that costs tracelint ~0.3 s and the peers as much per process, and it is not what users run.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    site = sorted((venv / "lib").glob("python*/site-packages"))
    subprocess.run([str(venv_bin(venv, "python")), "-m", "compileall", "-q", "-j", "0",
                    *map(str, site), *map(str, extra)], env=env, check=False, stdout=subprocess.DEVNULL)


def ensure_venv(name: str, pip_args: list[str], check_exe: str) -> Path:
    """Create CACHE/name with `pip install *pip_args` unless bin/check_exe already exists; byte-compile it."""
    venv = CACHE / name
    if venv_bin(venv, check_exe).exists():
        byte_compile(venv)
        return venv
    CACHE.mkdir(parents=True, exist_ok=True)
    log(f"[setup] creating {venv} and installing {' '.join(pip_args)}")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv_bin(venv, "python")), "-m", "pip", "install", "-q", *pip_args], check=True)
    byte_compile(venv)
    return venv


def resolve_tracelint(cmd: str | None, sub: str) -> list[str] | None:
    """The tracelint command to time, as an argv prefix, or None when there is none.

    --tracelint CMD wins. Otherwise bench/.cache/venv-tracelint (created with `pip install -e REPO` when the repo has a
    pyproject.toml), else `tracelint` on PATH.
    """
    if cmd:
        return shlex.split(cmd)
    venv = CACHE / "venv-tracelint"
    exe = venv_bin(venv, "tracelint")
    if not exe.exists() and (REPO / "pyproject.toml").exists():
        try:
            ensure_venv("venv-tracelint", ["-e", str(REPO)], "tracelint")
        except subprocess.CalledProcessError as e:
            log(f"[setup] pip install -e {REPO} failed: {e}")
    if exe.exists():
        byte_compile(venv, REPO / "tracelint")  # the editable install runs the repo's sources
        return [str(exe), sub]
    found = shutil.which("tracelint")
    return [found, sub] if found else None


# Runs in a small, fresh interpreter so that the child's ru_maxrss does not include the benchmark process's own memory
# (on Linux the high-water RSS of the pre-exec address space, shared with the parent under vfork, is counted).
_LAUNCHER = r"""
import os, sys, time, json
out, argv = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
pid = os.posix_spawn(argv[0], argv, os.environ)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(out, "w") as f:
    json.dump({"wall": wall, "maxrss_kib": ru.ru_maxrss, "cpu": ru.ru_utime + ru.ru_stime,
               "rc": os.waitstatus_to_exitcode(status)}, f)
"""


def measure(argv: list[str], stdout_path: Path | None = None, env: dict | None = None, cwd: Path | None = None) -> dict:
    """Run argv once; wall time (perf_counter), peak RSS of the child (os.wait4 ru_maxrss), CPU time, exit code.

    ru_maxrss from wait4 is the largest resident set of the child or any descendant it reaped (not their sum).
    """
    exe = shutil.which(argv[0]) or argv[0]
    stdout_path = stdout_path or Path(os.devnull)
    err_path = stdout_path.with_suffix(stdout_path.suffix + ".err") if stdout_path != Path(os.devnull) else stdout_path
    res_path = CACHE / f".measure-{os.getpid()}.json"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(stdout_path, "wb") as out, open(err_path, "wb") as err:
        subprocess.run([sys.executable, "-I", "-S", "-c", _LAUNCHER, str(res_path), exe, *argv[1:]],
                       stdout=out, stderr=err, env=env, cwd=cwd, check=True)
    r = json.loads(res_path.read_text())
    res_path.unlink()
    return {
        "wall": r["wall"],
        "rss_mb": r["maxrss_kib"] / 1024.0,  # Linux: KiB
        "cpu": r["cpu"],
        "rc": r["rc"],
        "stdout": stdout_path,
        "stderr": err_path,
    }


def measure_median(argv: list[str], repeat: int, **kw) -> dict:
    runs = [measure(argv, **kw) for _ in range(repeat)]
    best = dict(runs[-1])
    best["wall"] = statistics.median(r["wall"] for r in runs)
    best["rss_mb"] = max(r["rss_mb"] for r in runs)
    best["cpu"] = statistics.median(r["cpu"] for r in runs)
    best["walls"] = [r["wall"] for r in runs]
    if repeat > 1:
        log(f"[runs] {argv[0]}: wall " + ", ".join(f"{w:.2f}" for w in best["walls"]) + " s")
    return best


def tail(path: Path | None, n: int = 5) -> str:
    if not path or not Path(path).exists():
        return ""
    lines = Path(path).read_text(errors="replace").splitlines()
    return "\n".join(lines[-n:])


def table(headers: list[str], rows: list[list]) -> str:
    cells = [[str(c) for c in r] for r in [headers, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    fmt = lambda r: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=False)))  # noqa: E731
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(cells[0]), sep, *(fmt(r) for r in cells[1:])])
