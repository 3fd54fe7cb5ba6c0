#!/usr/bin/env python3
"""Trace-analyzer benchmark: `tracelint trace` vs HTA (HolisticTraceAnalysis) on a ~250 MB trace, same run.

The big trace is built from a real one by repeating its profiler steps: every event from the first ProfilerStep#
onwards is copied K times with timestamps shifted by K*span (span = first step start to last event end), with
correlation ids, External ids, flow ids, Ev Idx, Python ids, sequence numbers and ProfilerStep numbers renumbered so
they stay unique. Metadata events (ph M) and events before the first step are kept once; top-level keys
(deviceProperties, distributedInfo, ...) are kept. The result goes to bench/.cache/big/ and is reused.

Timed, each as one subprocess: tracelint (`tracelint trace BIG.json --format json`) and HTA in its own venv
(bench/.cache/venv-hta; hta_driver.py: TraceAnalysis(trace_dir) load + get_temporal_breakdown() +
get_idle_time_breakdown()). Reports wall time (perf_counter), peak RSS (os.wait4 ru_maxrss), CPU time, ratios.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
from pathlib import Path

from _benchutil import (
    BENCH,
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

PUBLIC = REPO.parent / "shared" / "traces" / "public"
DEFAULT_PUBLIC = PUBLIC / "hta-critical_path-benchmark_result_2869224_1695835535_trace.json.gz"
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
# id families: renumbered with one stride per family so cross-references within a copy stay intact
ARG_FAMILY = {
    "correlation": "corr", "External id": "corr", "external id": "corr",
    "Ev Idx": "evidx", "Python id": "pyid", "Python parent id": "pyid",
    "Sequence number": "seq", "Record function id": "rfid",
}
TARGET_RSS_MB = 1024
TARGET_SPEEDUP = 20.0
# issue #30: tracelint end to end within 1.0x one single-threaded typed msgspec decode of the same bytes
TARGET_PEER_RATIO = 1.0
TARGET_PHASES_RSS_MB = 300
TARGET_GZIP_RSS_MB = 400
# The peer (the figure issue #30 compares with): msgspec decoding the trace's bytes, already in memory, into typed
# Structs holding what a trace analysis needs (ph, cat, name, ts, dur, args.correlation; everything else skipped), in
# one thread, the Structs untracked by the garbage collector (gc=False: 2-3x faster than tracked ones on a million
# events). Run in a fresh interpreter; it prints the seconds to read the file and to decode it, and both are shown.
MSGSPEC_PEER = r"""
import gzip, json, sys, time
from typing import Optional, Union
import msgspec
class Args(msgspec.Struct, gc=False):
    correlation: Optional[int] = None
class Event(msgspec.Struct, gc=False):
    ph: Optional[str] = None
    cat: Optional[str] = None
    name: Optional[str] = None
    ts: Union[int, float, None] = None
    dur: Union[int, float, None] = None
    args: Optional[Args] = None
class Trace(msgspec.Struct, gc=False):
    traceEvents: list[Event]
t0 = time.perf_counter()
with open(sys.argv[1], "rb") as f:
    data = f.read()
if data[:2] == b"\x1f\x8b":
    data = gzip.decompress(data)
t1 = time.perf_counter()
trace = msgspec.json.Decoder(Trace).decode(data)
t2 = time.perf_counter()
print(json.dumps({"events": len(trace.traceEvents), "read": t1 - t0, "decode": t2 - t1}), flush=True)
import os; os._exit(0)
"""


def load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        d = json.load(f)
    return d if isinstance(d, dict) else {"traceEvents": d}


def has_steps(path: Path) -> bool:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return b'"ProfilerStep#' in f.read()


def pick_input() -> Path:
    fixtures = sorted((REPO / "fixtures" / "traces").glob("*.json.gz"), key=lambda p: p.stat().st_size, reverse=True)
    for p in fixtures:
        if has_steps(p):
            return p
    if DEFAULT_PUBLIC.exists() and has_steps(DEFAULT_PUBLIC):
        return DEFAULT_PUBLIC
    public = sorted(PUBLIC.glob("*.json*"), key=lambda p: p.stat().st_size, reverse=True)
    for p in public:
        if has_steps(p):
            return p
    sys.exit("no input trace with ProfilerStep# events found; pass --input")


def build_big(src: Path, dst: Path, target_mb: float) -> dict:
    d = load(src)
    events = d["traceEvents"]
    steps = sorted((e for e in events if e.get("ph") == "X" and STEP_RE.match(str(e.get("name", "")))
                    and e.get("cat") != "gpu_user_annotation"), key=lambda e: e["ts"])
    if not steps:
        sys.exit(f"{src}: no ProfilerStep# events")
    t0 = steps[0]["ts"]
    step_nums = [int(STEP_RE.match(e["name"]).group(1)) for e in steps]
    nsteps = max(step_nums) - min(step_nums) + 1
    meta, pre, body = [], [], []
    for e in events:
        if e.get("ph") == "M":
            meta.append(e)
        elif "ts" in e and e["ts"] >= t0:
            body.append(e)
        else:
            pre.append(e)
    end = max(e["ts"] + (e.get("dur") or 0) for e in body)
    last_step_end = steps[-1]["ts"] + steps[-1].get("dur", 0)
    span = end - t0
    span += max(span // 100 if isinstance(span, int) else span / 100, 1)  # small gap between copies

    strides: dict[str, int] = {}
    def bump(fam, v):
        if isinstance(v, int) and not isinstance(v, bool):
            strides[fam] = max(strides.get(fam, 0), v + 1)
    for e in body:
        if e.get("ph") in ("s", "f", "t"):
            bump("corr", e.get("id"))
        for k, v in (e.get("args") or {}).items():
            if k in ARG_FAMILY:
                bump(ARG_FAMILY[k], v)

    dumps = json.dumps
    body_bytes = sum(len(dumps(e)) + 3 for e in body)
    other_bytes = sum(len(dumps(e)) + 3 for e in meta + pre)
    copies = max(1, round((target_mb * 1e6 - other_bytes) / body_bytes))
    extend = (copies - 1) * span
    log(f"[gen] {src.name}: {len(events)} events, {len(steps)} steps, span {span} us; {copies} copies -> {dst}")

    def shifted(e: dict, k: int) -> dict:
        if k == 0:
            return e
        e = dict(e)
        e["ts"] = e["ts"] + k * span
        if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int):
            e["id"] = e["id"] + k * strides["corr"]
        m = STEP_RE.match(str(e.get("name", "")))
        if m:
            e["name"] = f"ProfilerStep#{int(m.group(1)) + k * nsteps}"
        args = e.get("args")
        if args and any(key in ARG_FAMILY for key in args):
            args = dict(args)
            for key, fam in ARG_FAMILY.items():
                v = args.get(key)
                if isinstance(v, int) and not isinstance(v, bool) and v >= 0 and fam in strides:
                    args[key] = v + k * strides[fam]
            e["args"] = args
        return e

    n = 0
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_suffix(".tmp")
    with open(tmp, "w") as out:
        # Kineto-like layout: top-level keys first (distributedInfo near the top: HTA greps for '"rank": N' by line),
        # then one event per line.
        out.write("{\n")
        for k, v in d.items():
            if k != "traceEvents":
                out.write(f"  {dumps(k)}: {dumps(v)},\n")
        out.write('  "traceEvents": [\n')
        first = True
        def emit(e):
            nonlocal first, n
            out.write(("  " if first else ",\n  ") + dumps(e))
            first = False
            n += 1
        for e in meta:
            emit(e)
        for e in pre:
            if extend and "dur" in e and e["ts"] + e["dur"] >= last_step_end:  # spans covering the profile (Trace)
                e = dict(e, dur=e["dur"] + extend)
            emit(e)
        for k in range(copies):
            for e in body:
                emit(shifted(e, k))
        out.write("\n  ]\n}\n")
    os.replace(tmp, dst)
    info = {"source": src.name, "copies": copies, "events": n, "steps": len(steps) * copies,
            "bytes": dst.stat().st_size}
    return info


def gzipped(big: Path) -> Path:
    """The big trace gzip'd (level 6, as Kineto's exporter writes .json.gz), cached beside it."""
    dst = big.parent.parent / (big.parent.name + "-gz") / "trace.json.gz"
    if not dst.exists() or dst.stat().st_mtime < big.stat().st_mtime:
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_suffix(".tmp")
        with open(big, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as out:
            while block := src.read(1 << 22):
                out.write(block)
        os.replace(tmp, dst)
    return dst


def _stats(values: list[float]) -> str:
    return f"min {min(values):.3f} / median {_median(values):.3f}"


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def phases_study(files: list[Path], python: str, repeat: int, repos: list[Path]) -> int:
    """--phases: for each file, `repeat` rounds of (msgspec peer, then for each checkout in `repos`: tracelint end
    to end and phase by phase), interleaved so that each round sees the same load; best of the rounds, medians
    beside. The target is judged on the last checkout."""
    import subprocess

    venv = ensure_venv("venv-msgspec", ["msgspec"], "python")
    peer = [str(venv_bin(venv, "python")), "-I", "-c", MSGSPEC_PEER]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for repo in repos:  # the sources under test, byte-compiled as an install would
        subprocess.run([python, "-m", "compileall", "-q", str(repo / "tracelint")], env=env, check=False,
                       stdout=subprocess.DEVNULL)
        print(f"tracelint under test: {repo} ({python})")
    out_dir = CACHE / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    ok = True
    for path in files:
        size = path.stat().st_size
        print(f"\n== {path} ({size / 1e6:.1f} MB on disk) ==")
        peers: list[dict] = []
        runs: dict[Path, dict[str, list[dict]]] = {repo: {"tracelint": [], "phases": []} for repo in repos}
        for _ in range(repeat):
            peers.append(measure([*peer, str(path)], stdout_path=out_dir / "trace_msgspec.out"))
            peers[-1].update(json.loads(Path(peers[-1]["stdout"]).read_text()))
            for repo in repos:
                # run from the checkout (python -m puts the working directory first on sys.path)
                env = dict(os.environ, PYTHONPATH=str(repo))
                runs[repo]["tracelint"].append(measure(
                    [python, "-m", "tracelint", "trace", str(path), "--format", "json"],
                    stdout_path=out_dir / "trace_tracelint.out", env=env, cwd=repo))
                runs[repo]["phases"].append(measure([python, str(BENCH / "_trace_phases.py"), str(path)],
                                                    stdout_path=out_dir / "trace_phases.out", env=env, cwd=repo))
                runs[repo]["phases"][-1]["table"] = json.loads(Path(runs[repo]["phases"][-1]["stdout"]).read_text())
        decode_w = [r["decode"] for r in peers]
        peer_w = [r["wall"] for r in peers]
        print(f"msgspec typed decode, 1 thread:  decode {_stats(decode_w)} s (read "
              f"{_stats([r['read'] for r in peers])} s); whole process wall {_stats(peer_w)} s, "
              f"peak RSS {max(r['rss_mb'] for r in peers):.0f} MB")
        for repo in repos:
            passed = _phases_report(path, repo, runs[repo], decode_w, peer_w)
            ok = ok and (passed or repo != repos[-1])
    return 0 if ok else 1


def _phases_report(path: Path, repo: Path, runs: dict[str, list[dict]], decode_w: list[float],
                   peer_w: list[float]) -> bool:
    for name, rs in runs.items():
        bad = [r for r in rs if r["rc"] not in (0, 1)]
        if bad:
            print(f"{repo}: {name} failed (exit {bad[0]['rc']}): {tail(bad[0]['stderr'])}")
            return False
    repeat = len(runs["phases"])
    best = min(runs["phases"], key=lambda r: r["table"]["total"][0])["table"]
    order = ["imports", "read/map", "decode+model", "decode", "event model", "launch matching", "model other",
             "metrics", "verdict+rules", "rendering", "total"]
    rows = [[("  " if k in ("decode", "event model") else "") + k, f"{best[k][0]:.3f}", f"{best[k][1]:.3f}",
             f"{100 * best[k][0] / best['total'][0]:.0f}"] for k in order if k in best]
    print(f"\n-- {repo}: phases (the run with the smallest total of {repeat}; decode and event model: decode+model "
          "split by decoding the same parts again alone):")
    print(table(["phase", "wall s", "cpu s", "% wall"], rows))
    tl_w = [r["wall"] for r in runs["tracelint"]]
    rss = max(r["rss_mb"] for r in runs["tracelint"])
    print(f"tracelint trace --format json:   wall {_stats(tl_w)} s, cpu "
          f"{_stats([r['cpu'] for r in runs['tracelint']])} s, peak RSS {rss:.0f} MB")
    limit = TARGET_GZIP_RSS_MB if path.suffix == ".gz" else TARGET_PHASES_RSS_MB
    ratio = min(tl_w) / min(decode_w)
    for what, peer_x in (("msgspec decode", decode_w), ("msgspec process", peer_w)):
        per_round = sorted(t / p for t, p in zip(tl_w, peer_x, strict=True))
        print(f"tracelint / {what}: best/best {min(tl_w) / min(peer_x):.2f}x, median/median "
              f"{_median(tl_w) / _median(peer_x):.2f}x, per round " + ", ".join(f"{r:.2f}" for r in per_round))
    print(f"targets: tracelint <= {TARGET_PEER_RATIO:.1f}x the msgspec decode (best/best): "
          f"{'PASS' if ratio <= TARGET_PEER_RATIO else 'FAIL'} ({ratio:.2f}x); peak RSS <= {limit} MB: "
          f"{'PASS' if rss <= limit else 'FAIL'} ({rss:.0f} MB)")
    return rss <= limit and (path.suffix == ".gz" or ratio <= TARGET_PEER_RATIO)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", type=Path, help="trace to repeat (default: largest fixtures/traces/*.json.gz with "
                                                "ProfilerStep#, else a public trace with steps)")
    ap.add_argument("--size-mb", type=float, default=250.0, help="target size of the big trace (default 250)")
    ap.add_argument("--regen", action="store_true", help="rebuild the big trace even if cached")
    ap.add_argument("--tracelint", help="command to time, e.g. 'tracelint trace' (default: bench/.cache/"
                                        "venv-tracelint, else tracelint on PATH)")
    ap.add_argument("--tracelint-args", default="--format json")
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool (median wall, max RSS)")
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument("--phases", action="store_true", help="instead of HTA: tracelint phase by phase, end to end, and "
                    "a typed msgspec decode of the same bytes, on the big trace and on it gzip'd (issue #30)")
    ap.add_argument("--python", default=sys.executable, help="--phases: the Python that runs this checkout's "
                    "tracelint (PYTHONPATH=the repo; default: this one)")
    ap.add_argument("--no-gzip", action="store_true", help="--phases: the plain trace only")
    ap.add_argument("--repo", type=Path, action="append", help="--phases: a checkout whose tracelint is measured "
                    "(default: this one); repeat it for a before/after table in one run (e.g. a `git archive` copy of "
                    "the commit before a change, then this one), each measured in every round")
    args = ap.parse_args()
    load0 = os.getloadavg()

    src = args.input or pick_input()
    stem = re.sub(r"\.json(\.gz)?$", "", src.name)
    big_dir = CACHE / "big" / f"{stem}-{int(args.size_mb)}mb"
    big = big_dir / "trace.json"  # alone in its directory: HTA takes a directory and reads every *.json / *.gz in it
    info_path = big_dir.parent / (big_dir.name + ".info.json")
    if args.regen or not big.exists() or not info_path.exists():
        info = build_big(src, big, args.size_mb)
        info_path.write_text(json.dumps(info))
    else:
        info = json.loads(info_path.read_text())
    hta_dir = big_dir
    if args.phases:
        print(f"trace: {big}  ({info['bytes'] / 1e6:.1f} MB = {info['bytes'] / 2**20:.1f} MiB, {info['events']} "
              f"events, {info['steps']} ProfilerSteps, {info['copies']} copies of {info['source']})")
        files = [big] if args.no_gzip else [big, gzipped(big)]
        status = phases_study(files, args.python, max(args.repeat, 3), [r.resolve() for r in args.repo or [REPO]])
        print(f"machine: {os.cpu_count()} CPUs, load average at start {load0[0]:.1f}, at end {os.getloadavg()[0]:.1f}")
        return status

    print(f"trace: {big}  ({info['bytes'] / 1e6:.1f} MB, {info['events']} events, {info['steps']} ProfilerSteps, "
          f"{info['copies']} copies of {info['source']})")

    out_dir = CACHE / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    res: dict[str, dict] = {}
    tl = resolve_tracelint(args.tracelint, "trace")
    if tl:
        argv = [*tl, str(big), *args.tracelint_args.split()]
        log(f"[run] {' '.join(argv)}")
        res["tracelint"] = r = measure_median(argv, args.repeat, stdout_path=out_dir / "trace_tracelint.out")
        if r["rc"] not in (0, 1):
            log(f"[warn] tracelint exited {r['rc']}:\n{tail(r['stderr'])}")
    else:
        log("[tracelint] no tracelint command found: measuring the peer only")
    if not args.skip_hta:
        venv = ensure_venv("venv-hta", ["HolisticTraceAnalysis"], "python")
        argv = [str(venv_bin(venv, "python")), str(BENCH / "hta_driver.py"), str(hta_dir)]
        log(f"[run] {' '.join(argv)}")
        res["HTA"] = r = measure_median(argv, args.repeat, stdout_path=out_dir / "trace_hta.out")
        if r["rc"] != 0:
            log(f"[warn] HTA exited {r['rc']}:\n{tail(r['stderr'])}")
        else:
            phases = json.loads(Path(r["stdout"]).read_text().strip().splitlines()[-1])
            log("[hta] phases: " + ", ".join(f"{k} {phases[k]} s" for k in ("import_s", "load_s", "temporal_s",
                                                                           "idle_s")))
            log(f"[hta] temporal breakdown: {phases['temporal']}")

    base = res.get("tracelint")
    if base and base["rc"] not in (0, 1):
        print(f"tracelint failed (exit {base['rc']}): {tail(base['stderr'], 1)}")
        base = None
    rows = []
    for tool, r in res.items():
        ratio = f"{r['wall'] / base['wall']:.1f}" if base and base["wall"] > 0 else "-"
        cratio = f"{r['cpu'] / base['cpu']:.1f}" if base and base["cpu"] > 0 else "-"
        rratio = f"{r['rss_mb'] / base['rss_mb']:.1f}" if base and base["rss_mb"] > 0 else "-"
        rows.append([tool, f"{r['wall']:.2f}", f"{r['cpu']:.2f}", f"{r['rss_mb']:.0f}", r["rc"], ratio, cratio,
                     rratio])
    print(table(["tool", "wall s", "cpu s", "peak RSS MB", "rc", "wall ratio", "cpu ratio", "RSS ratio"], rows))
    if base and "HTA" in res:
        speedup = res["HTA"]["wall"] / base["wall"]
        print(f"targets: speedup vs HTA {speedup:.1f}x (>= {TARGET_SPEEDUP:.0f}x: "
              f"{'PASS' if speedup >= TARGET_SPEEDUP else 'FAIL'}), tracelint peak RSS {base['rss_mb']:.0f} MB "
              f"(<= {TARGET_RSS_MB} MB: {'PASS' if base['rss_mb'] <= TARGET_RSS_MB else 'FAIL'}), "
              f"HTA/tracelint RSS {res['HTA']['rss_mb'] / base['rss_mb']:.1f}x")
    print(f"machine: {os.cpu_count()} CPUs, load average at start {load0[0]:.1f}, at end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
