#!/usr/bin/env python3
"""Hostile rank sets: mutated multi-rank jobs through the job analysis (run by bench/fuzz.py --rank-sets N; also on
its own: `python bench/fuzz_jobs.py N SEED`).

The bases are real jobs of ../shared/traces/multi-gpu (2-rank DDP with a straggler, a 4-rank pipeline, the 2-D
TP x FSDP job), each rank cut to its last profiled step (the metadata, the step's CPU span and what starts within
one more step length of it, so GPU work that lags the host stays), read once and kept in memory. A case applies one
to three mutations to a copy of one base and writes its ranks to a folder:

- ``drop``: a rank is missing;  ``duplicate``: two files claim one rank;  ``unpair``: the sends (or recvs) of one
  rank vanish: a p2p with no partner;  ``regroup``: one rank's process groups disagree with the others' (pg_config
  and the collectives' group names);  ``skew``: one rank's clock is seconds off;  ``truncate``: one rank's file ends
  early;  ``world``: one rank says another rank number or world size;  ``sizes``: message sizes that disagree;
  ``shuffle``: one rank's events out of order;  ``nodist``: one rank without distributedInfo.

Every case runs through the API, `analyze_paths([folder])`, under a 30 s alarm. Behaving: nothing escapes; no
"internal error"; every file gives a Report or one one-line InputError naming it; every metric is a JSON value; a
job's ranks wait no longer than their step (``comm_wait_us`` at most the rank's step time). Case ``i`` of seed ``S``
is drawn from ``random.Random(f"S:{i}")`` alone. Failures are saved under ``workdir/failures/`` (the case's
mutations and the problem).
"""
from __future__ import annotations

import copy
import gzip
import json
import random
import shutil
import signal
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.shared import MULTI_GPU_TRACES  # noqa: E402 - after the path is set

BASES = ("ddp-2xh100/ddp_straggler", "pp-4xh100-hostbound/pp_gpipe_m8", "tp2dp2-4xh100")
MUTATIONS = ("drop", "duplicate", "unpair", "regroup", "skew", "truncate", "world", "sizes", "shuffle", "nodist")
HANG_S = 30


def _last_step(doc: dict) -> dict:
    """The rank's document cut to its last ProfilerStep (and the GPU work that lags it by up to one step)."""
    events = doc.get("traceEvents") or []
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"
             and e.get("cat") != "gpu_user_annotation"]  # the host's step, not its GPU-side twin
    if not steps:
        return doc
    last = max(steps, key=lambda e: e.get("ts", 0))
    lo, hi = last["ts"], last["ts"] + 2 * last.get("dur", 0)
    # the Python frames (with_stack) are most of a rank's events and no part of the job's matching: left out, a case
    # reads in a fraction of the time
    kept = [e for e in events if e.get("ph") == "M" or (isinstance(e.get("ts"), (int, float)) and lo <= e["ts"] <= hi
                                                         and e.get("cat") != "python_function")]
    return {**doc, "traceEvents": kept}


def load_bases(root: Path = MULTI_GPU_TRACES) -> dict[str, list[dict]]:
    bases = {}
    for name in BASES:
        folder = root / name
        files = sorted(folder.glob("*.pt.trace.json.gz"))
        if files:
            bases[name] = [_last_step(json.loads(gzip.decompress(f.read_bytes()))) for f in files]
    return bases


def _rank(doc: dict) -> int | None:
    return (doc.get("distributedInfo") or {}).get("rank")


def _args(event: dict) -> dict:
    args = event.get("args")
    return args if isinstance(args, dict) else {}


def mutate(ranks: list[dict], rng: random.Random) -> tuple[list[dict], list[str]]:
    """One to three mutations of a copy of ``ranks``; the ranks (as documents, or bytes for a truncated one) and the
    mutations in words."""
    ranks = copy.deepcopy(ranks)
    done: list[str] = []
    for kind in rng.sample(MUTATIONS, rng.randint(1, 3)):
        i = rng.randrange(len(ranks))
        doc = ranks[i]
        if kind == "drop" and len(ranks) > 1:
            ranks.pop(i)
        elif kind == "duplicate":
            ranks.append(copy.deepcopy(doc))
        elif kind == "unpair" and isinstance(doc, dict):
            side = rng.choice(("send", "recv"))
            doc["traceEvents"] = [e for e in doc["traceEvents"]
                                  if not (side in str(_args(e).get("Collective name", "")).lower()
                                          or (side == "send" and "SendRecv" in str(e.get("name", ""))
                                              and rng.random() < 0.5))]
        elif kind == "regroup" and isinstance(doc, dict):
            info = doc.setdefault("distributedInfo", {})
            for group in (info.get("pg_config") or [])[:]:
                if isinstance(group, dict):
                    group["ranks"] = sorted(rng.sample(range(8), rng.randint(1, 4)))
            for e in doc["traceEvents"]:
                if "Process Group Name" in _args(e) and rng.random() < 0.5:
                    e["args"]["Process Group Name"] = str(rng.randint(0, 9))
        elif kind == "skew" and isinstance(doc, dict):
            shift = rng.choice((-1, 1)) * rng.uniform(1e6, 1e9)  # µs: seconds to minutes
            for e in doc["traceEvents"]:
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] += shift
        elif kind == "truncate":
            text = json.dumps(doc).encode() if isinstance(doc, dict) else doc
            ranks[i] = text[: rng.randrange(1, len(text))]
        elif kind == "world" and isinstance(doc, dict):
            info = doc.setdefault("distributedInfo", {})
            info[rng.choice(("rank", "world_size"))] = rng.choice((0, 1, 3, 7, 64, -1, None))
        elif kind == "sizes" and isinstance(doc, dict):
            for e in doc["traceEvents"]:
                if "In msg nelems" in _args(e) and rng.random() < 0.3:
                    e["args"]["In msg nelems"] = rng.randint(0, 1 << 20)
        elif kind == "shuffle" and isinstance(doc, dict):
            rng.shuffle(doc["traceEvents"])
        elif kind == "nodist" and isinstance(doc, dict):
            doc.pop("distributedInfo", None)
        else:
            continue
        done.append(f"{kind}@{i}")
    return ranks, done


def write(ranks: list, folder: Path) -> None:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for n, doc in enumerate(ranks):
        data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        (folder / f"rank{n}.{1000 + n}.pt.trace.json").write_bytes(data)


def check(folder: Path) -> str | None:
    """The problem the job analysis of ``folder`` showed, or None when it behaved."""
    from tests.trace.fuzzing import _non_json
    from tracelint.engine import InputError
    from tracelint.trace.analyze import Report, analyze_paths
    from tracelint.trace.job.rank_digest import step_us

    try:
        items = list(analyze_paths([folder], jobs=1))
    except (Exception, SystemExit) as exc:
        return f"escaped: {type(exc).__name__}: {exc}"[:500]
    files = {str(p) for p in folder.iterdir()}
    seen: dict[str, int] = {}
    for item in items:
        path = str(getattr(item, "path", ""))
        if isinstance(item, InputError):
            if "internal error" in item.message:
                return f"internal error: {path}: {item.message}"[:500]
            if "\n" in item.message:
                return f"multi-line error: {item.message!r}"[:500]
        elif isinstance(item, Report):
            for summary in item.summaries:
                bad = _non_json(summary.metrics)
                if bad is not None:
                    return f"metric not a JSON value: {bad}"[:500]
                wait, step = summary.metrics.get("comm_wait_us"), step_us(summary.metrics)
                if wait is not None and step and wait > step * 1.001 + 1.0:
                    return f"{path}: waits {wait:.0f} µs per step, longer than its step ({step:.0f} µs)"
        if path in files:
            seen[path] = seen.get(path, 0) + 1
    missing = files - set(seen)
    if missing:
        return f"no Report or error for {sorted(missing)}"[:500]
    return None


def _alarm(signum, frame):
    raise TimeoutError(f"hung over {HANG_S} s")


def campaign(n: int, seed: int, workdir: Path, cli: bool = False, *, start: int = 0) -> dict:
    """``n`` cases from case ``start`` of ``seed`` (the interface of bench/fuzz.py's halves; ``cli`` is unused: the
    CLI's handling of bad files is the trace half's campaign)."""
    bases = load_bases()
    if not bases:
        return {"cases": 0, "failures": [], "skipped": "../shared/traces/multi-gpu not present"}
    names = sorted(bases)
    failures: list[dict] = []
    slow: list[tuple[float, str]] = []
    folder = workdir / "case"
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for i in range(start, start + n):
            rng = random.Random(f"{seed}:{i}")
            base = rng.choice(names)
            ranks, ops = mutate(bases[base], rng)
            write(ranks, folder)
            began = time.perf_counter()
            signal.alarm(HANG_S)
            try:
                problem = check(folder)
            except TimeoutError as exc:
                problem = str(exc)
            finally:
                signal.alarm(0)
            slow.append((time.perf_counter() - began, f"{base} {' '.join(ops)}"))
            if (i - start + 1) % 100 == 0:
                print(f"fuzz_jobs: {i - start + 1} of {n} rank sets, {len(failures)} failures", file=sys.stderr,
                      flush=True)
            if problem:
                saved = workdir / "failures" / f"{seed}-{i}"
                saved.mkdir(parents=True, exist_ok=True)
                (saved / "case.json").write_text(json.dumps({"base": base, "ops": ops, "problem": problem}))
                failures.append({"input": f"case {i}: {base} {' '.join(ops)}", "error": problem})
    finally:
        signal.signal(signal.SIGALRM, previous)
        shutil.rmtree(folder, ignore_errors=True)
    return {"cases": n, "failures": failures, "slow": sorted(slow, reverse=True)[:5]}


if __name__ == "__main__":
    count, seed = (int(a) for a in (sys.argv[1:3] + ["200", "0"])[:2])
    work = REPO / "bench" / ".cache" / "fuzz_jobs"
    work.mkdir(parents=True, exist_ok=True)
    result = campaign(count, seed, work)
    print(f"{result['cases']} rank sets, {len(result['failures'])} failures")
    for f in result["failures"][:20]:
        print(f"  {f['input']}: {f['error']}")
    for seconds, what in result.get("slow", []):
        print(f"  slowest: {seconds:.2f} s {what}")
    sys.exit(1 if result["failures"] else 0)
