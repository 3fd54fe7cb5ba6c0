"""A ``torch.profiler`` ``on_trace_ready`` handler that saves the trace and prints tracelint's verdict.

    from tracelint.trace.profiler import on_trace_ready
    with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=2, active=3),
                                on_trace_ready=on_trace_ready("./traces")) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

Each time a profiling cycle ends the trace is written to ``<dir_name>/<worker>.<ns>.pt.trace.json.gz`` (the
layout torch's own ``tensorboard_trace_handler`` uses, so a multi-rank folder reads as one job) and, unless
``print_verdict=False``, one line goes to stderr: ``tracelint: gpu-bound: GPU busy 98% of the step window …``.
torch is never imported here: the handler only calls the profiler object it is given.
"""
from __future__ import annotations

import gzip
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path


def on_trace_ready(dir_name: str | os.PathLike[str] = "./tracelint_traces", *, worker_name: str | None = None,
                   print_verdict: bool = True, stream=None) -> Callable[[object], Path]:
    """A handler for ``torch.profiler.profile(on_trace_ready=...)``; it returns the path it wrote, for tests."""
    directory = Path(dir_name)

    def handler(prof) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        target = directory / f"{worker}.{time.time_ns()}.pt.trace.json.gz"
        plain = target.with_suffix("")  # export_chrome_trace writes plain JSON; gzip it next to it, then drop it
        prof.export_chrome_trace(str(plain))
        with open(plain, "rb") as src, gzip.open(target, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        plain.unlink()
        if print_verdict:
            print(f"tracelint: {target.name}: {_verdict_line(target)}", file=stream or sys.stderr, flush=True)
        return target

    return handler


def _verdict_line(path: Path) -> str:
    from tracelint.trace.analyze import analyze_trace
    from tracelint.trace.load import TraceReadError

    try:
        report = analyze_trace(path)
    except TraceReadError as exc:  # never break the user's training run over a report
        return f"could not analyze the trace: {exc}"
    return report.evidence
