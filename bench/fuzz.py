#!/usr/bin/env python3
"""Fuzz campaign for long runs: mutated traces and sources through the API and (--cli) the CLI.

    python bench/fuzz.py --traces 10000 --sources 10000 --rank-sets 2000 --seed 1 [--cli] [--cli-traces 3000]
                         [--jobs 2]

Traces: bench/fuzz_traces.py (mutations of real traces from tests/trace/fuzzing.py, the one copy shared with the
hypothesis tests). Sources: bench/fuzz_sources.py, when it exists. Rank sets: bench/fuzz_jobs.py (mutated
multi-rank jobs: missing, duplicate and truncated ranks, sends without recvs, disagreeing groups, skewed clocks).
The three have one interface:

    campaign(n: int, seed: int, workdir: pathlib.Path, cli: bool) -> {"cases": int,
                                                                       "failures": [{"input": str, "error": str}]}

(a half may add keys: the trace half adds "cli_cases", "slow" and, per failure, "ops" and "via"). `--jobs J`
splits the traces into J ranges run in parallel processes (case i of a seed is the same whichever process runs
it); the sources run in one more process beside them. Prints cases tried, failures and the minimized reproducers
(saved under the workdir, default bench/.cache/fuzz/, git-ignored); exits 1 when anything failed.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
for entry in (str(BENCH), str(REPO)):
    if entry not in sys.path:
        sys.path.insert(0, entry)


def _traces(n: int, seed: int, workdir: str, cli: bool, start: int, cli_cases: int | None) -> dict:
    import fuzz_traces

    return fuzz_traces.campaign(n, seed, Path(workdir), cli, start=start, cli_cases=cli_cases)


def _rank_sets(n: int, seed: int, workdir: str, start: int) -> dict:
    import fuzz_jobs

    return fuzz_jobs.campaign(n, seed, Path(workdir), start=start)


def _sources(n: int, seed: int, workdir: str, cli: bool, cli_cases: int | None) -> dict:
    import inspect

    import fuzz_sources

    extra = {}
    if cli_cases is not None and "cli_cases" in inspect.signature(fuzz_sources.campaign).parameters:
        extra["cli_cases"] = cli_cases
    return fuzz_sources.campaign(n, seed, Path(workdir), cli, **extra)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=int, default=0, help="mutated traces to try")
    ap.add_argument("--sources", type=int, default=0, help="mutated or generated sources to try")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cli", action="store_true", help="also run the cases through the CLI (a subprocess each)")
    ap.add_argument("--cli-traces", type=int, default=None,
                    help="with --cli: how many of the traces also go through the CLI (default: all)")
    ap.add_argument("--cli-sources", type=int, default=None,
                    help="with --cli: how many of the sources also go through the CLI (when the half takes cli_cases)")
    ap.add_argument("--rank-sets", type=int, default=0,
                    help="mutated multi-rank jobs to try (bench/fuzz_jobs.py; needs ../shared/traces/multi-gpu)")
    ap.add_argument("--jobs", type=int, default=1, help="processes for the traces (and for the rank sets)")
    ap.add_argument("--workdir", type=Path, default=BENCH / ".cache" / "fuzz")
    args = ap.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    futures = {}
    have_sources = importlib.util.find_spec("fuzz_sources") is not None
    with ProcessPoolExecutor(max_workers=max(1, args.jobs) + (1 if args.sources and have_sources else 0)) as pool:
        if args.sources:
            if have_sources:
                futures["sources"] = [pool.submit(_sources, args.sources, args.seed, str(args.workdir / "sources"),
                                                  args.cli, args.cli_sources)]
            else:
                print("note: bench/fuzz_sources.py is missing: sources skipped", file=sys.stderr)
        if args.traces:
            jobs = max(1, min(args.jobs, args.traces))
            per, extra = divmod(args.traces, jobs)
            cli_left = args.cli_traces
            start = 0
            parts = []
            for j in range(jobs):
                n = per + (1 if j < extra else 0)
                cli_n = None if cli_left is None else min(n, -(-args.cli_traces // jobs), cli_left)
                if cli_left is not None:
                    cli_left -= cli_n
                parts.append(pool.submit(_traces, n, args.seed, str(args.workdir / "traces" / f"job{j}"), args.cli,
                                         start, cli_n))
                start += n
            futures["traces"] = parts
        if args.rank_sets:
            jobs = max(1, min(args.jobs, args.rank_sets))
            per, extra = divmod(args.rank_sets, jobs)
            starts = [j * per + min(j, extra) for j in range(jobs)]
            futures["rank sets"] = [pool.submit(_rank_sets, per + (1 if j < extra else 0), args.seed,
                                                str(args.workdir / "rank_sets" / f"job{j}"), starts[j])
                                    for j in range(jobs)]
        results = {}
        for half, parts in futures.items():
            merged: dict = {"cases": 0, "failures": []}
            for part in parts:
                try:
                    result = part.result()
                except Exception as exc:  # the campaign itself broke: say so, and count it
                    result = {"cases": 0, "failures": [{"input": f"({half} campaign)",
                                                        "error": f"{type(exc).__name__}: {exc}"}]}
                for key, value in result.items():
                    if isinstance(value, bool) or key == "note":
                        merged[key] = value
                    elif isinstance(value, (int, float)):
                        merged[key] = merged.get(key, 0) + value
                    elif isinstance(value, list):
                        merged[key] = merged.get(key, []) + value
            results[half] = merged
    elapsed = time.perf_counter() - started
    total_failures = 0
    for half, result in results.items():
        extra = "".join(f", {k} {v}" for k, v in result.items() if isinstance(v, int) and k != "cases")
        print(f"{half}: {result['cases']:,} cases{extra}, {len(result['failures'])} failures")
        for note in result.get("slow", []):
            print(f"  slow: {note}")
        if "note" in result:
            print(f"  note: {result['note']}")
        for failure in result["failures"]:
            print(f"  FAIL {failure['input']}\n       {failure['error']}")
            if failure.get("ops"):
                print(f"       minimized: {failure['ops'][:600]}")
        total_failures += len(result["failures"])
    command = "python bench/fuzz.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"{sum(r['cases'] for r in results.values()):,} cases, {total_failures} failures in {elapsed:.0f} s "
          f"({command})")
    (args.workdir / "last.json").write_text(json.dumps({"command": command, "seconds": round(elapsed, 1),
                                                         "results": results}, indent=1, default=str) + "\n")
    return 1 if total_failures else 0


if __name__ == "__main__":
    sys.exit(main())
