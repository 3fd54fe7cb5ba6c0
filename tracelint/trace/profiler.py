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

The saved trace gets a top-level ``"tracelint"`` key with the profiler's settings (``record_shapes``,
``with_stack``, ``profile_memory``, ``with_flops``, ``with_modules``, activities, the schedule's parameters when it
is ``torch.profiler.schedule``). With a plain ``torch.profiler.profile`` that is all it can record: the handler runs
once per cycle, after the recording has stopped, so it cannot time the steps the profiler skipped (it would have to
replace ``prof.step``). ``tracelint.profile`` times them and adds ``"unprofiled"`` (see ``tracelint/profile.py``);
with it the handler leaves the key as the wrapper wrote it.
"""
from __future__ import annotations

import gzip
import json
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
        # tracelint.profile added its metadata to the trace itself (add_metadata_json); a plain profiler did not.
        extra = None if getattr(prof, "_tracelint_records_metadata", False) else _handler_metadata(prof)
        with open(plain, "rb") as src, gzip.open(target, "wb", compresslevel=6) as dst:
            _copy_with_key(src, dst, "tracelint", extra)
        plain.unlink()
        if print_verdict:
            from tracelint.engine.escape import log_line

            print(log_line(f"tracelint: {target.name}: {_verdict_line(target)}"), file=stream or sys.stderr, flush=True)
        return target

    return handler


def _verdict_line(path: Path) -> str:
    from tracelint.trace.analyze import analyze_trace
    from tracelint.trace.filetext import TraceReadError

    try:
        report = analyze_trace(path)
    except TraceReadError as exc:  # never break the user's training run over a report
        return f"could not analyze the trace: {exc}"
    return report.evidence


def _copy_with_key(src, dst, key: str, value) -> None:
    """Copy a JSON object document, adding ``key`` as its first top-level key (streamed: traces can be GBs)."""
    if value is None:
        shutil.copyfileobj(src, dst, 1 << 20)
        return
    head = src.read(1 << 16)
    body = head.lstrip()
    if not body.startswith(b"{"):  # not the object export_chrome_trace writes: leave it untouched
        dst.write(head)
        shutil.copyfileobj(src, dst, 1 << 20)
        return
    rest = body[1:]
    while not rest.strip():  # only whitespace after "{" so far: read on until the first key (or the "}")
        chunk = src.read(1 << 16)
        if not chunk:
            break
        rest += chunk
    empty = rest.lstrip().startswith(b"}") or not rest.strip()
    dst.write(b"{" + json.dumps(key).encode() + b": " + json.dumps(value).encode() + (b"" if empty else b", "))
    dst.write(rest)
    shutil.copyfileobj(src, dst, 1 << 20)

def _handler_metadata(prof) -> dict | None:
    try:
        return {"version": 1, "source": "tracelint.trace.profiler.on_trace_ready", "settings": _settings(prof)}
    except Exception:  # noqa: BLE001 - a profiler object we do not know: no metadata, never an error
        return None


def _settings(prof) -> dict:
    """The profiler options that change how much the profiled steps are slowed down (read from the profiler)."""
    settings = {name: bool(getattr(prof, name, False))
                for name in ("record_shapes", "with_stack", "profile_memory", "with_flops", "with_modules")}
    activities = getattr(prof, "activities", None) or ()
    settings["activities"] = sorted(str(getattr(a, "name", a)).rsplit(".", 1)[-1] for a in activities)
    settings["schedule"] = _schedule_params(prof) if getattr(prof, "record_steps", False) else None
    return settings


_SCHEDULE_ARGS = ("skip_first", "skip_first_wait", "wait", "warmup", "active", "repeat")


def _schedule_params(prof) -> dict:
    """``torch.profiler.schedule(...)``'s arguments, read from its closure; a custom schedule gives its name."""
    fn = getattr(prof, "schedule", None)
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
    params = {}
    if code is not None and getattr(fn, "__qualname__", "") == "schedule.<locals>.schedule_fn":
        for name, cell in zip(code.co_freevars, cells, strict=False):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if name in _SCHEDULE_ARGS and isinstance(value, int):
                params[name] = value
    if not params:
        return {"custom": getattr(fn, "__qualname__", None) or type(fn).__name__}
    return {name: params[name] for name in _SCHEDULE_ARGS if name in params}
