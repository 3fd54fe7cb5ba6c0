"""Where the per-file analyses of a run happen: in this process, in worker processes of this machine, or on the
workers of a running Dask distributed cluster — one trace per worker at a time, and only each file's small result
(tracelint.trace.analyze.Analyzed) comes back, so the parent never holds a trace.

A worker that dies (the kernel's OOM killer, a signal) costs its file only: that file's result is a ``Lost`` record
("worker died while analyzing: ..."), and the other files are analyzed. Locally a death breaks the whole
``ProcessPoolExecutor`` (every file in flight in it fails alike), so the files that were in flight are analyzed
again, each in a process of its own, which tells whose death it was. On Dask the scheduler reschedules the tasks of a
lost worker itself (``distributed.scheduler.allowed-failures``, default 3, then ``KilledWorker``).

A path may be an fsspec URL (``s3://``, ``gs://``, ``file://``, ...): folders are listed by the parent, files are
read by the worker that analyzes them, through a local copy (the loader maps local files).
"""
from __future__ import annotations

import os
import re
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tracelint.engine import Config, InputError
from tracelint.engine.workers import pool_context
from tracelint.trace.files import TRACE_SUFFIXES, traces_in

DASK_MISSING = 'needs Dask: pip install "torch-tracelint[dask]"'
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True, slots=True)
class Lost:
    """A file whose analysis gave no result: its worker died, or the result could not come back."""

    message: str  # the file's one-line error

    def __str__(self) -> str:
        return self.message


class SchedulerError(Exception):
    """The Dask scheduler cannot be used (Dask not installed, address unreachable): no file was analyzed."""


def is_url(path: object) -> bool:
    return isinstance(path, str) and _URL.match(path) is not None


def dask_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("distributed") is not None


def workers(jobs: int | None, files: int, total_bytes: int, min_bytes: int) -> int:
    """How many worker processes analyze ``files`` files of ``total_bytes`` in all; 1: this process."""
    n = min(jobs or os.cpu_count() or 1, files)
    return 1 if n < 2 or total_bytes < min_bytes else n


# ---- finding the files ------------------------------------------------------------------------------------------


def find_traces(raw, config: Config, notes: list) -> list[tuple[str, bool, int]]:
    """The trace files of one input path or URL: (path, found by a folder search, size in bytes); its notes
    (Skipped) and errors (InputError) are appended to ``notes``. Raises OSError when it cannot be looked at."""
    if is_url(raw):
        return _find_url(raw, config, notes)
    path = Path(raw)
    if path.is_dir():
        files = traces_in(path, named_only=False, excluded=config.excluded, skipped=notes)
        if not files:
            notes.append(InputError(str(path), "no trace (*.json, *.json.gz) in this directory"))
        return [(str(f), True, _size(f)) for f in files]
    if path.exists():
        return [(str(path), False, _size(path))]
    notes.append(InputError(str(path), "no such file or directory"))
    return []


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _fsspec(url: str):
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise OSError(f"reading a URL needs fsspec: pip install fsspec, or {DASK_MISSING.partition(': ')[2]}"
                      ) from None
    return url_to_fs(url)


def _find_url(url: str, config: Config, notes: list) -> list[tuple[str, bool, int]]:
    fs, root = _fsspec(url)
    if not fs.exists(root):
        notes.append(InputError(url, "no such file or directory"))
        return []
    if not fs.isdir(root):
        return [(url, False, int(fs.info(root).get("size") or 0))]
    found = []
    for name, info in sorted(fs.find(root, detail=True).items()):
        if name.endswith(TRACE_SUFFIXES) and not config.excluded(Path(name)):
            found.append((fs.unstrip_protocol(name), True, int(info.get("size") or 0)))
    if not found:
        notes.append(InputError(url, "no trace (*.json, *.json.gz) in this directory"))
    return found


@contextmanager
def local_copy(path: str) -> Iterator[str]:
    """A local path to read ``path`` from: itself, or for a URL of another file system a temporary copy, removed
    afterwards (the worker that analyzes a file fetches it; the parent never holds it)."""
    if not is_url(path):
        yield path
        return
    fs, remote = _fsspec(path)
    if "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        yield remote
        return
    import shutil
    import tempfile

    suffix = ".json.gz" if remote.endswith(".gz") else ".json"
    fd, tmp = tempfile.mkstemp(prefix="tracelint-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as out, fs.open(remote, "rb") as src:
            shutil.copyfileobj(src, out, 8 << 20)
        yield tmp
    finally:
        os.unlink(tmp)


# ---- running the analyses ---------------------------------------------------------------------------------------


def run(fn: Callable, calls: Sequence[tuple], *, workers: int, scheduler: str | None = None,
        sizes: Sequence[int] = (), progress: bool = False) -> list:
    """``fn(*call)`` for every call, in input order: in this process (``workers`` 1), in that many local worker
    processes, or on the Dask cluster at ``scheduler``. A call whose worker died, or whose result could not come
    back, gives a ``Lost``. Raises SchedulerError when the scheduler cannot be used."""
    results: list = [None] * len(calls)
    bar = _Bar(sizes or [0] * len(calls)) if progress else None
    try:
        if scheduler is not None:
            _dask(fn, calls, scheduler, results, bar)
        elif workers <= 1:
            for i, call in enumerate(calls):
                results[i] = fn(*call)
                _advance(bar, i)
        else:
            _local(fn, calls, workers, results, bar)
    finally:
        if bar is not None:
            bar.finish()
    return results


def _advance(bar: _Bar | None, i: int) -> None:
    if bar is not None:
        bar.advance(i)


def _share_cores(workers: int) -> None:
    """In a worker process: the parallel read of one big trace (tracelint.trace.load) gets this worker's share of
    the cores, not all of them (``workers`` processes each forking a reader per core would oversubscribe)."""
    from tracelint.trace import load

    load.MAX_PARTS = min(load.MAX_PARTS, max(1, (os.cpu_count() or 1) // workers))


def _failure(exc: BaseException) -> Lost:
    from concurrent.futures.process import BrokenProcessPool

    if isinstance(exc, BrokenProcessPool):
        return Lost("worker died while analyzing: its process was killed (out of memory, or a signal)")
    text = " ".join(str(exc).split())[:300]
    return Lost(f"internal error while analyzing: {type(exc).__name__}" + (f": {text}" if text else ""))


def _local(fn: Callable, calls: Sequence[tuple], workers: int, results: list, bar: _Bar | None) -> None:
    # imported here: the source half's runs (pre-commit) never start processes and should not pay for the modules
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    # The pool's processes are all started at its first submit, before its manager thread: no thread is forked.
    ctx = pool_context()
    todo = deque(range(len(calls)))
    suspects: list[int] = []
    while todo:
        # At most ``workers`` files in flight, so that a death makes only the files then running suspects.
        with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_share_cores,
                                 initargs=(workers,)) as executor:
            running: dict = {}
            broken = False
            while (todo or running) and not broken:
                while todo and len(running) < workers:
                    i = todo.popleft()
                    running[executor.submit(fn, *calls[i])] = i
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    i = running.pop(future)
                    try:
                        results[i] = future.result()
                    except BrokenProcessPool:
                        suspects.append(i)
                        broken = True
                        continue
                    except Exception as exc:  # the result could not come back (pickling): that file's error
                        results[i] = _failure(exc)
                    _advance(bar, i)
            suspects.extend(running.values())  # after a death: the other files in flight, failed alike
    _alone(fn, calls, suspects, workers, results, bar, ctx)


def _alone(fn: Callable, calls: Sequence[tuple], indexes: list[int], workers: int, results: list,
           bar: _Bar | None, ctx) -> None:
    """Each file in a worker process of its own (``workers`` at a time): a death is that file's."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    todo = deque(indexes)
    running: dict = {}
    while todo or running:
        while todo and len(running) < workers:
            i = todo.popleft()
            executor = ProcessPoolExecutor(1, mp_context=ctx, initializer=_share_cores, initargs=(workers,))
            running[executor.submit(fn, *calls[i])] = (i, executor)
        done, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in done:
            i, executor = running.pop(future)
            try:
                results[i] = future.result()
            except Exception as exc:
                results[i] = _failure(exc)
            executor.shutdown()
            _advance(bar, i)


def _dask(fn: Callable, calls: Sequence[tuple], address: str, results: list, bar: _Bar | None) -> None:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise SchedulerError(f"a Dask scheduler {DASK_MISSING}") from None
    try:
        client = Client(address, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise SchedulerError(f"cannot reach the Dask scheduler: {' '.join(str(exc).split())}") from None
    with client:
        # pure=False: two files may have equal arguments (never cached results). The task function never raises:
        # what fails in it is that file's InputError. A lost worker's tasks are rescheduled by the scheduler.
        futures = client.map(fn, *(list(column) for column in zip(*calls, strict=True)), pure=False)
        index = {future.key: i for i, future in enumerate(futures)}
        for future in as_completed(futures, loop=client.loop):
            i = index[future.key]
            try:
                results[i] = future.result()
            except Exception as exc:
                if type(exc).__name__ == "KilledWorker":
                    results[i] = Lost("worker died while analyzing: Dask lost the workers that ran it (KilledWorker; "
                                      "out of memory?)")
                else:
                    results[i] = _failure(exc)
            future.release()
            _advance(bar, i)


class _Bar:
    """``tracelint: 37/256 traces, 1.2/9.8 GB read, ETA 41 s`` on stderr, rewritten in place as files finish."""

    def __init__(self, sizes: Sequence[int]) -> None:
        self.sizes, self.done, self.bytes = sizes, 0, 0
        self.total = sum(sizes)
        self.unit, self.scale = ("GB", 1e9) if self.total >= 1e9 else ("MB", 1e6)
        self.start = time.monotonic()
        self._show()

    def advance(self, i: int) -> None:
        self.done += 1
        self.bytes += self.sizes[i]
        self._show()

    def _show(self) -> None:
        elapsed = time.monotonic() - self.start
        share = self.bytes / self.total if self.total else self.done / max(1, len(self.sizes))
        eta = f", ETA {elapsed * (1 - share) / share:.0f} s" if 0 < share < 1 else ""
        print(f"\rtracelint: {self.done}/{len(self.sizes)} traces, {self.bytes / self.scale:.1f}/"
              f"{self.total / self.scale:.1f} {self.unit} read{eta}   ", end="", file=sys.stderr, flush=True)

    def finish(self) -> None:
        print(f"\rtracelint: analyzed {self.done} traces, {self.bytes / self.scale:.1f} {self.unit}, in "
              f"{time.monotonic() - self.start:.1f} s" + " " * 20, file=sys.stderr, flush=True)
