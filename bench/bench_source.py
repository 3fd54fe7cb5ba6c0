#!/usr/bin/env python3
"""Source-linter benchmark: `tracelint check` vs TorchFix on public packages' sources, measured in the same run.

Corpus: the wheels of timm and torchvision (`pip download --no-deps`), unpacked into bench/.cache/corpus/.
Peer: TorchFix in its own venv (bench/.cache/venv-torchfix), created on first use.
Both tools get the same package directory as one command, with their default parallelism and default rule set.
Also times the pre-commit case: one process start on one training-related file (median of --repeat runs).

Also times the floor every libcst-based linter pays: one bare `libcst.parse_module` of each file of the package, in one
process (the row "libcst parse"), and prints tracelint's time as a fraction of it (issues #29, #35: timm <= 0.6x).

tracelint keeps the results of unchanged files in an on-disk cache (issue #35): the row "tracelint" runs it with
`--no-cache` (every file analysed: a first run), the row "tracelint, warm cache" with a cache that one unmeasured run
of the same command filled first (bench/.cache/out/tracelint-cache, emptied before). `--no-cache-rows` times a
tracelint that predates the cache (no cache options).

Prints a table; the ratio columns are tool / tracelint, for wall time and for CPU time (higher = tracelint faster).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from _benchutil import (
    CACHE,
    REPO,
    ensure_venv,
    log,
    measure,
    measure_median,
    resolve_tracelint,
    table,
    tail,
    venv_bin,
)

PACKAGES = ("timm", "torchvision")
DEFAULT_ONE_FILE = "timm/timm/data/loader.py"  # DataLoader construction: what a pre-commit hook sees in training code
EXAMPLE = REPO / "fixtures" / "examples" / "train.py"  # the README's example: findings, so libcst is loaded
# One bare parse of every .py file under argv[1] in this one process: what any libcst linter pays at least.
BARE_PARSE = r"""
import sys, pathlib, libcst
for f in sorted(pathlib.Path(sys.argv[1]).rglob("*.py")) if pathlib.Path(sys.argv[1]).is_dir() else [sys.argv[1]]:
    try:
        libcst.parse_module(pathlib.Path(f).read_bytes())
    except Exception:
        pass
"""
WARM = "tracelint, warm cache"
DIAG_RE = re.compile(rb"^\S.*:\d+:\d+:? ", re.M)  # path:line:col: CODE message


def ensure_corpus(names: list[str]) -> dict[str, Path]:
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    missing = [n for n in names if not list(wheels.glob(f"{n}-*.whl"))]
    if missing:
        log(f"[setup] pip download --no-deps {' '.join(missing)}")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:", "-d", str(wheels),
             *missing],
            check=True,
        )
    dirs = {}
    for n in names:
        whl = sorted(wheels.glob(f"{n}-*.whl"))[-1]
        dest = CACHE / "corpus" / n
        if not (dest / n).is_dir():
            with zipfile.ZipFile(whl) as z:
                z.extractall(dest, [m for m in z.namelist() if m.startswith(f"{n}/")])
        dirs[n] = dest / n
        log(f"[corpus] {n}: {whl.name}")
    return dirs


def count(path: Path) -> tuple[int, int]:
    files = [path] if path.is_file() else sorted(path.rglob("*.py"))
    lines = 0
    for f in files:
        with open(f, "rb") as fh:
            lines += sum(1 for _ in fh)
    return len(files), lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tracelint", help="command to time, e.g. 'tracelint check' "
                                        "(default: bench/.cache/venv-tracelint, else tracelint on PATH)")
    ap.add_argument("--corpus", choices=["timm", "torchvision", "all"], default="all")
    ap.add_argument("--repeat", type=int, default=5, help="runs of the one-file case (median)")
    ap.add_argument("--corpus-repeat", type=int, default=1, help="runs of each whole-corpus case (median)")
    ap.add_argument("--one-file", action="append",
                    help=f"file for a pre-commit case, repeatable (default: corpus {DEFAULT_ONE_FILE}, which the "
                         f"screen passes without parsing, and {EXAMPLE.relative_to(REPO)}, which has findings)")
    ap.add_argument("--torchfix-select", help="TorchFix --select value (default: TorchFix's default rule set)")
    ap.add_argument("--skip-torchfix", action="store_true")
    ap.add_argument("--skip-parse", action="store_true", help="leave out the bare libcst parse of each package")
    ap.add_argument("--no-cache-rows", action="store_true",
                    help="the tracelint timed predates the on-disk cache: pass it no cache options, no warm row")
    args = ap.parse_args()
    load0 = os.getloadavg()

    names = list(PACKAGES) if args.corpus == "all" else [args.corpus]
    corpus = ensure_corpus(sorted(set(names) | {"timm"} if not args.one_file else set(names)))
    one_files = [Path(f) for f in args.one_file] if args.one_file else [CACHE / "corpus" / DEFAULT_ONE_FILE, EXAMPLE]

    tools: dict[str, list[str]] = {}
    tl = resolve_tracelint(args.tracelint, "check")
    warm_cache = CACHE / "out" / "tracelint-cache"
    if tl and args.no_cache_rows:
        tools["tracelint"] = tl
    elif tl:
        tools["tracelint"] = [*tl, "--no-cache"]
        tools[WARM] = [*tl, "--cache-dir", str(warm_cache)]
    else:
        log("[tracelint] no tracelint command found: measuring the peer only")
    if not args.skip_torchfix:
        venv = ensure_venv("venv-torchfix", ["torchfix"], "torchfix")
        tf = [str(venv_bin(venv, "torchfix"))]
        if args.torchfix_select:
            tf += ["--select", args.torchfix_select]
        tools["TorchFix"] = tf
    for name, argv in tools.items():
        log(f"[cmd] {name}: {' '.join(argv)} PATH")

    out_dir = CACHE / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    cases = [(n, corpus[n], args.corpus_repeat) for n in names]
    cases += [(f"1 file ({f.name})", f, args.repeat) for f in one_files]
    parse_argv = None if args.skip_parse else [sys.executable, "-c", BARE_PARSE]
    fractions = []

    rows = []
    for label, path, repeat in cases:
        files, lines = count(path)
        res = {}
        for tool, argv in tools.items():
            safe = re.sub(r"\W+", "_", f"{tool}_{label}")
            if tool == WARM:  # one run that fills the cache, not measured
                shutil.rmtree(warm_cache, ignore_errors=True)
                measure([*argv, str(path)])
            log(f"[run] {tool} on {label}: {files} files, {lines} lines, x{repeat}")
            r = measure_median([*argv, str(path)], repeat, stdout_path=out_dir / f"{safe}.out")
            if r["rc"] not in (0, 1):
                log(f"[warn] {tool} exited {r['rc']}:\n{tail(r['stderr'])}")
            r["diags"] = len(DIAG_RE.findall(Path(r["stdout"]).read_bytes()))
            res[tool] = r
        if parse_argv and path.is_dir():
            log(f"[run] libcst parse of {label}, one process, x{repeat}")
            res["libcst parse"] = r = measure_median([*parse_argv, str(path)], repeat)
            r["diags"] = 0
            for tool in ("tracelint", WARM):
                base = res.get(tool)
                if base and base["rc"] in (0, 1):
                    fractions.append(f"{label}: {tool} / bare libcst parse = {base['wall'] / r['wall']:.2f}x wall, "
                                     f"{base['cpu'] / r['cpu']:.2f}x CPU ({base['wall']:.2f} s vs {r['wall']:.2f} s)")
        base = res.get("tracelint")
        if base and base["rc"] not in (0, 1):
            base = None  # failed run: no ratio
        for tool, r in res.items():
            ratio = f"{r['wall'] / base['wall']:.2f}" if base and base["wall"] > 0 else "-"
            cratio = f"{r['cpu'] / base['cpu']:.2f}" if base and base["cpu"] > 0 else "-"
            rows.append([tool, label, files, lines, f"{r['wall']:.2f}", f"{r['cpu']:.2f}", f"{r['rss_mb']:.0f}",
                         r["diags"], r["rc"], ratio, cratio])

    print(table(["tool", "corpus", "files", "lines", "wall s", "cpu s", "peak RSS MB", "diag lines", "rc",
                 "wall ratio", "cpu ratio"], rows))
    for line in fractions:
        print(line)
    print(f"machine: {os.cpu_count()} CPUs, load average at start {load0[0]:.1f}, at end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
