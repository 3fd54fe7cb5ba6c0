"""Where `tracelint trace FILE --format json` spends its time, phase by phase (run by bench_trace.py --phases).

Runs in a fresh interpreter with the tracelint under test on sys.path, the same calls as the CLI (`run_paths` +
`render`), with a timer around the functions that make up each phase; prints one JSON object on stdout.

Phases (wall and CPU seconds; CPU counts this process and the loader's reaped worker processes):
  imports          importing the CLI and the trace analyzer
  read/map         open_trace: the file mapped (or read and inflated when gzip'd) and the header before the events
  decode+model     the loader's events through read_events.py into plain records (in parts, in parallel where it does)
    decode         measured again on its own, after the run: the same parts decoded with nothing kept
    event model    decode+model minus decode
  launch matching  build.py's _finish: records sorted and joined, GPU work joined to its launches and steps
  model other      the rest of build_model (parts merged, top-level keys, collectives, ...)
  metrics          analyze_device per device
  verdict+rules    the verdicts, the rules and the summaries
  rendering        the JSON report
  total            from the first import to the rendered report
"""

from __future__ import annotations

import inspect
import json
import os
import resource
import sys
import time

T0 = time.perf_counter()


def cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


CPU0 = cpu()
phases: dict[str, list[float]] = {}


def add(name: str, wall: float, cpu_s: float) -> None:
    w, c = phases.setdefault(name, [0.0, 0.0])
    phases[name] = [w + wall, c + cpu_s]


def timed(name: str, fn):
    def wrapper(*a, **kw):
        w0, c0 = time.perf_counter(), cpu()
        try:
            return fn(*a, **kw)
        finally:
            add(name, time.perf_counter() - w0, cpu() - c0)
    return wrapper


def main() -> int:
    path, fmt = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "json")
    from tracelint.dispatch import run_paths
    from tracelint.engine import Config
    from tracelint.render import render
    from tracelint.trace import analyze, build, load
    add("imports", time.perf_counter() - T0, cpu() - CPU0)

    analyze.open_trace = timed("read/map", load.open_trace)
    map_parts = load.ChunkStream.map_parts
    load.ChunkStream.map_parts = timed("decode+model", map_parts)
    build._finish = timed("launch matching", build._finish)
    analyze.build_model = timed("build_model", build.build_model)
    analyze._measure = timed("metrics", analyze._measure)
    analyze._judge = timed("verdict+rules", analyze._judge)
    result = run_paths([path], mode="trace", configure=lambda c: c or Config(), jobs=1)
    w0, c0 = time.perf_counter(), cpu()
    text = render(result, fmt)
    add("rendering", time.perf_counter() - w0, cpu() - c0)
    total = [time.perf_counter() - T0, cpu() - CPU0]
    bm = phases.pop("build_model")
    inner = [sum(phases[k][i] for k in ("decode+model", "launch matching")) for i in (0, 1)]
    phases["model other"] = [bm[0] - inner[0], bm[1] - inner[1]]
    if result.errors or not text:
        print(json.dumps({"error": [str(e) for e in result.errors]}))
        return 1
    # decode alone: the same split of the same file, each part's chunks decoded and dropped
    import gc
    gc.disable()
    load.ChunkStream.map_parts = map_parts
    trace = load.open_trace(path)
    chunks = trace.iter_chunks(typed=True) if "typed" in inspect.signature(trace.iter_chunks).parameters else \
        trace.iter_chunks()  # (a checkout from before the typed read)
    w0, c0 = time.perf_counter(), cpu()
    chunks.map_parts(lambda chunks: sum(len(c) for c in chunks))
    phases["decode"] = [time.perf_counter() - w0, cpu() - c0]
    phases["event model"] = [phases["decode+model"][i] - phases["decode"][i] for i in (0, 1)]
    phases["total"] = total
    print(json.dumps({k: [round(v, 4) for v in phases[k]] for k in phases}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
