"""The source half: lint Python files, notebooks and directories for PyTorch training anti-patterns.

``lint_paths(paths)`` yields Findings, InputErrors (a file it could not read or parse; the others are still linted)
and one FileChecked per file read. Rules are ``SourceRule`` classes in ``tracelint/source/rules/`` (see rule.py for
the framework, semantic/model.py for what a rule knows about its file). Speed comes from a text prefilter (files that
never mention torch, or none of a rule's trigger words, are not parsed for it), an ``ast`` screen (screen.py: a
file without any site a rule reports on is never parsed with libcst, nor is libcst imported), one shared traversal
per file, and worker processes when there are many files.
"""
from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Literal

from tracelint.engine import Config, FileChecked, Finding, InputError, find_config
from tracelint.engine.workers import pool_context

SOURCE_SUFFIXES = (".py", ".pyi", ".ipynb")
PARALLEL_MIN_FILES = 24  # below this, starting worker processes costs more than it saves

__all__ = ["SOURCE_SUFFIXES", "iter_source_files", "lint_paths"]


def _default_config_for(path: Path) -> Config:
    return find_config(path.resolve().parent)


def iter_source_files(paths: Iterable[Path | str], config_for: Callable[[Path], Config]) -> Iterator[Path | InputError]:
    """The source files under ``paths`` in a stable order; excluded directories are not entered, explicit files
    are always linted, and an explicit non-Python file is an InputError."""
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            if path.suffix not in SOURCE_SUFFIXES:
                expected = ", ".join(SOURCE_SUFFIXES)
                yield InputError(str(path), f"not a Python source file or notebook (expected {expected})")
            elif path.resolve() not in seen:
                seen.add(path.resolve())
                yield path
        elif path.is_dir():
            for file in _walk(path, config_for):
                if file.resolve() not in seen:
                    seen.add(file.resolve())
                    yield file
        else:
            yield InputError(str(path), "no such file or directory")


def _walk(directory: Path, config_for: Callable[[Path], Config]) -> Iterator[Path]:
    config = config_for(directory / "__init__.py")  # the config that governs this folder
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        path = Path(entry.path)
        if config.excluded(path):
            continue
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
            # a symlink loop or a dangling link raises or says no here: it is not a source file, skip it
            is_file = not is_dir and path.suffix in SOURCE_SUFFIXES and entry.is_file()
        except OSError:
            continue
        if is_dir:
            yield from _walk(path, config_for)
        elif is_file:
            yield path


def _lint_job(job: tuple) -> tuple[list, object]:
    """One file of a run: its results, and (when ``entries`` is not None: a run of several files) what it tells
    the other files about its per-step calls (runcalls.RunCalls)."""
    from tracelint.source.lint import _Run, lint_in_run

    path, config, fix, unsafe, part, cache = job
    # (entries, on_device, graph_collates, precision, pinned, stepping, alone, factories, parameters, arguments,
    #  calls_only)
    run = _Run(*part) if part is not None else None
    return lint_in_run(path, config, fix=fix, unsafe_fixes=unsafe, run=run, cache=cache)


def _cached(jobs: list) -> dict[int, tuple[list, object]]:
    """{position: results} of the jobs the run's cache holds: those need no worker process (nor libcst)."""
    from tracelint.source.lint import _Run, cached

    found = {}
    for i, (path, config, fix, _unsafe, part, cache) in enumerate(jobs):
        if cache is not None and not fix:
            known = cached(path, config, cache, run=_Run(*part) if part is not None else None)
            if known is not None:
                found[i] = known
    return found


def lint_paths(
    paths: Iterable[Path | str],
    *,
    config_for: Callable[[Path], Config] | None = None,
    fix: bool | Literal["diff"] = False,
    unsafe_fixes: bool = False,
    progress: bool = False,
) -> Iterator[Finding | InputError | FileChecked]:
    """Lint files and directories; see the module docstring."""
    config_for = config_for or _default_config_for
    files: list[tuple[Path, Config]] = []
    for item in iter_source_files(paths, config_for):
        if isinstance(item, InputError):
            yield item
        else:
            files.append((item, config_for(item)))
    with _fewer_collections(), _Workers() as workers:
        results, hidden = _analyse(files, config_for, fix, unsafe_fixes, progress, workers)
    for (path, *_), (items, _) in results:
        if path in hidden:  # a project file the run reached: only what the calls into it bring
            yield from (f for f in items if isinstance(f, Finding) and _key(f) not in hidden[path])
        else:
            yield from items


@contextmanager
def _fewer_collections():
    """Python's cycle collector, less often while a run analyses: a run keeps the parsed trees of the files it may
    analyse again (lint.parse), hundreds of thousands of objects that each full collection walks (on timm, a third
    of the run went to collections); cycles among the young objects are still collected. Restored afterwards."""
    before = gc.get_threshold()
    gc.set_threshold(100_000, 50, 1000)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _analyse(files: list[tuple[Path, Config]], config_for: Callable[[Path], Config], fix: bool | Literal["diff"],
             unsafe_fixes: bool, progress: bool, workers: _Workers,
             ) -> tuple[list[tuple[tuple, tuple[list, object]]], dict]:
    """The jobs of the run (files it reached included) with their results, and the keys of the findings the files
    it reached have on their own ({path: keys}: not reported)."""
    # A run of several files follows per-step calls across them (callers.py): results are held until the
    # functions other files call every step have been analysed as such.
    if len(files) > 1:
        from tracelint.source.loader.collates import graph_collates

        collates = graph_collates([path for path, _ in files])
        # TL401 and TL404 judge a file by its program's precision settings; a run without them need not read them
        # A plain run settles them after the analysis from each file's own (found where it is parsed: settle); a
        # fix must know them before it is written.
        asked = fix and any(config.enabled("TL401") or config.enabled("TL404") for _, config in files)
        precision: dict[Path, frozenset[str]] = {}
        if asked:  # (libcst: only when a fix is asked for)
            from tracelint.source.rules.precision_settings import program_precision

            precision = program_precision([path for path, _ in files])
        parts: list[tuple | None] = [({}, False, collates, precision.get(path, frozenset()) if fix else None, {},
                                      frozenset(), False, {}, {}, {}, False) for path, _ in files]
    else:  # one file: judged on its own as before; what it calls every step is followed into the project
        parts = [_ALONE] * len(files)
    cache = _cache(files) if not fix else None
    jobs = [(path, config, fix, unsafe_fixes, part, cache) for (path, config), part in zip(files, parts, strict=True)]
    results = list(_run_jobs(jobs, workers, progress))
    if progress and jobs:
        print(file=sys.stderr)
    hidden: dict[Path, set[tuple]] = {}
    if len(files) > 1 or any(told is not None and told.hot_calls for _, told in results):
        hidden = _follow_calls(jobs, results, config_for, workers, cache)
        if len(files) > 1 and not fix:
            _settle_precision(jobs, results)
    return list(zip(jobs, results, strict=True)), hidden


# The part of a file analysed on its own (a one-file run, a project file a call leads to): no entry points yet, its
# own precision settings (lint._Run).
_ALONE = ({}, False, frozenset(), None, {}, frozenset(), True, {}, {}, {}, False)
REACH_SECONDS = 10.0  # project files are looked for and read for this long per run at most (project.reached)


def _cache(files: list[tuple[Path, Config]]):
    """The run's on-disk cache (cache.Cache; None: none), where the files' config puts it (Config.cache_dir: the
    CLI sets one folder for every file of a run)."""
    folder = next((config.cache_dir for _, config in files if config.cache_dir is not None), None)
    if folder is None:
        return None
    from tracelint.source.cache import Cache

    return Cache(folder)


def _key(finding: Finding) -> tuple:
    loc = finding.location
    return (finding.code, loc.line, loc.column, loc.cell)


def _display(path: Path) -> Path:
    """A reached project file as findings name it: relative to the working directory when it is below it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def _run_jobs(jobs: list, workers: _Workers, progress: bool = False) -> Iterator[tuple[list, object]]:
    """The results of ``jobs`` in their order: in worker processes once the run has started them (the first time
    it had enough files for them), else in this process."""
    from tracelint.source.lint import source_rules

    known = _cached(jobs) if len(jobs) >= PARALLEL_MIN_FILES else {}
    todo = [job for i, job in enumerate(jobs) if i not in known]
    count = min(os.cpu_count() or 1, len(todo) // 8 or 1)
    if not workers and len(todo) >= PARALLEL_MIN_FILES and count >= 2:
        source_rules()  # import libcst and the rules before forking, so that workers inherit them
        workers.start(count)
    computed: Iterator[tuple[list, object]] = workers.map(todo) if workers else map(_lint_job, todo)
    results = (known[i] if i in known else next(computed) for i in range(len(jobs)))
    for done, result in enumerate(results, start=1):
        if progress:
            print(f"\rtracelint: {done}/{len(jobs)} files", end="", file=sys.stderr, flush=True)
        yield result


def _follow_calls(jobs: list, results: list[tuple[list, object]], config_for: Callable[[Path], Config],
                  workers: _Workers, cache=None) -> dict[Path, set[tuple]]:
    """Analyse again, with their entry points, the files whose functions other files of the run call every step
    (runcalls.resolve), and add the findings that brings to their results (in place, before their FileChecked).
    The rounds that settle who calls what analyse a file with its rules the first time it is in one, and for its
    calls only (no rule runs: lint._Run.calls_only) after that; each file whose last analysis with its rules was not
    with its settled part is then analysed once more with them (mostly none: a part settles in one round). Project
    files the run did not name that those
    calls lead to (project.reached) are added to ``jobs`` and ``results``; the keys of the findings they have on
    their own are returned ({path: keys}): not reported."""
    from tracelint.source.lint import callers_of
    from tracelint.source.project import ProjectIndex, parameter_modules, reached
    from tracelint.source.runcalls import (
        MAX_ROUNDS,
        RunCalls,
        argument_kinds,
        pinned_parameters,
        resolve,
        stepping_calls,
    )

    index = {job[0]: i for i, job in enumerate(jobs)}
    calls = {job[0]: result[1] or RunCalls() for job, result in zip(jobs, results, strict=True)}
    settled: dict[Path, tuple] = {}  # the part each file was last analysed with
    full: dict[Path, tuple] = {}  # the part each file was analysed with its rules in a round, and the results
    on_device: set[Path] = set()
    hidden: dict[Path, set[tuple]] = {}
    deadline = time.monotonic() + REACH_SECONDS
    project = ProjectIndex(callers_of, cache)
    for _ in range(MAX_ROUNDS):
        found = sorted(reached(calls, project)) if time.monotonic() < deadline else []
        if found:
            more = [(_display(path), config_for(path), False, False, _ALONE, cache) for path in found]
            for job, result in zip(more, _run_jobs(more, workers), strict=True):
                index[job[0]] = len(jobs)
                jobs.append(job)
                results.append(result)
                calls[job[0]] = result[1] or RunCalls()
                hidden[job[0]] = {_key(f) for f in result[0] if isinstance(f, Finding)}
        entries, device = resolve(calls)
        # a file that a file with device evidence calls stays on the device: its own evidence then includes the
        # caller's (RunCalls.device), which would drop it from the next round's set
        on_device |= device
        pinned, stepping, given = pinned_parameters(calls), stepping_calls(calls), argument_kinds(calls)
        made = _factories(calls, project, workers, cache) if time.monotonic() < deadline else {}
        passed = parameter_modules(calls, project)

        wanted = {}
        for path in {*entries, *on_device, *pinned, *stepping, *made, *passed, *given} & index.keys():
            first = jobs[index[path]][4]
            part = (entries.get(path, {}), path in on_device, first[2], first[3], pinned.get(path, {}),
                    stepping.get(path, frozenset()), first[6], made.get(path, {}), passed.get(path, {}),
                    given.get(path, {}), True)
            if part[:-1] != settled.get(path, first)[:-1]:
                wanted[path] = part
        if not wanted:
            break
        again = [(path, jobs[index[path]][1], False, False, part if path in settled else (*part[:-1], False), cache)
                 for path, part in wanted.items()]
        for job, (items, told) in zip(again, _run_jobs(again, workers), strict=True):
            settled[job[0]] = job[4]
            if not job[4][-1]:
                full[job[0]] = (job[4][:-1], (items, told))
            if told is not None:
                old = calls[job[0]]
                calls[job[0]] = replace(told, pending=told.pending | old.pending)
    final = [(path, jobs[index[path]][1], False, False, (*part[:-1], False), cache)
             for path, part in settled.items() if full.get(path, ((),))[0] != part[:-1]]
    finals = {path: result for path, (part, result) in full.items() if part == settled[path][:-1]}
    finals.update((job[0], result) for job, result in zip(final, _run_jobs(final, workers), strict=True))
    for path, (items, told) in finals.items():
        old_items = results[index[path]][0]
        seen = {_key(f) for f in old_items if isinstance(f, Finding)}
        new = [f for f in items if isinstance(f, Finding) and _key(f) not in seen]
        if new:
            found = sorted([*(i for i in old_items if isinstance(i, Finding)), *new], key=Finding.sort_key)
            rest = [i for i in old_items if not isinstance(i, Finding)]  # its errors, then its FileChecked
            results[index[path]] = ([*found, *rest], results[index[path]][1])
        if told is not None:
            old = results[index[path]][1]
            calls[path] = replace(told, pending=told.pending | old.pending) if old is not None else told
            results[index[path]] = (results[index[path]][0], calls[path])
    return hidden


def _factories(calls: dict, project, workers: _Workers, cache) -> dict:
    """project.factories of the run: in the workers when it has them, each for the files it analysed (it holds the
    trees of most files a factory leads to, and keeps those it parses for the next round; here none is parsed, and
    each was parsed again)."""
    from tracelint.source.project import factories

    asking = [path for path, told in calls.items() if told.made]
    if not workers or len(asking) < 2:
        return factories(calls, project)
    shares = [(calls, frozenset(p for p in asking if workers.owner(p) == i), cache) for i in range(len(workers))]
    found: dict = {}
    for part in workers.each(_factories_share, shares):
        found.update(part)
    return found


_PROJECT: list = []  # in a worker: the ProjectIndex its shares of ``_factories`` keep for the run


def _factories_share(share: tuple) -> dict:
    from tracelint.source.lint import callers_of
    from tracelint.source.project import ProjectIndex, factories

    calls, asking, cache = share
    if not _PROJECT:
        _PROJECT.append(ProjectIndex(callers_of, cache))
    return factories(calls, _PROJECT[0], asking)


def _settle_precision(jobs: list, results: list[tuple[list, object]]) -> None:
    """Drop the TL401/TL404 findings of files whose programs' precision settings do not call for them
    (precision_settings.standing_pending: the rules reported them pending, as the settings of the other files were
    not known yet)."""
    calls = {job[0]: result[1] for job, result in zip(jobs, results, strict=True) if result[1] is not None}
    if not any(told.pending for told in calls.values()):
        return  # nothing to settle: libcst need not be imported here
    from tracelint.source.rules.precision_settings import standing_pending

    kept = standing_pending(calls)
    for i, (job, (items, told)) in enumerate(zip(jobs, results, strict=True)):
        if told is None or not told.pending:
            continue
        dropped = told.pending - kept.get(job[0], frozenset())
        if dropped:
            results[i] = ([f for f in items if not (isinstance(f, Finding) and f.code in dropped)], told)


class _Workers:
    """Worker processes that live for the whole run: each round of ``_follow_calls`` sends a file to the worker that
    analysed it before, which still holds its tree and screen (lint.parse, lint._examine). A pool per round parsed
    and screened those files again, and a round of fewer than PARALLEL_MIN_FILES ran here, where no file was parsed.
    Falsy until ``start``."""

    def __init__(self) -> None:
        self._conns: list = []
        self._processes: list = []
        self._owner: dict[Path, int] = {}  # the worker each file went to

    def __bool__(self) -> bool:
        return bool(self._conns)

    def __len__(self) -> int:
        return len(self._conns)

    def owner(self, path: Path) -> int:
        """The worker ``path`` went to (the first one if none did)."""
        return self._owner.get(path, 0)

    def __enter__(self) -> _Workers:
        return self

    def __exit__(self, kind, *_) -> None:
        for conn in self._conns:
            try:
                if kind is None:
                    conn.send(None)  # done: the worker returns
                conn.close()
            except OSError:
                pass
        for process in self._processes:
            if kind is not None:  # Ctrl-C or an error: not one more file
                process.kill()
            process.join()

    def start(self, count: int) -> None:
        context = pool_context()  # fork where there is: workers start with the rules already imported
        for _ in range(count):
            ours, theirs = context.Pipe()
            process = context.Process(target=_serve, args=(theirs,), daemon=True)
            process.start()
            theirs.close()
            self._conns.append(ours)
            self._processes.append(process)

    def map(self, jobs: list) -> Iterator[tuple[list, object]]:
        """``_lint_job`` of each job, in their order: a job goes to the worker its file went to before, any other to
        the first worker free, largest file first (so that the workers finish together), a few at a time."""
        from collections import deque
        from multiprocessing.connection import wait

        size = max(1, min(4, len(jobs) // (len(self._conns) * 16)))
        own: list[deque[int]] = [deque() for _ in self._conns]
        new: list[int] = []
        for i, job in enumerate(jobs):
            owner = self._owner.get(job[0])
            own[owner].append(i) if owner is not None else new.append(i)
        anyone = deque(sorted(new, key=lambda i: -_size(jobs[i][0])))
        busy: dict[int, list[int]] = {}  # worker -> the jobs it has
        done: dict[int, tuple[list, object]] = {}

        def feed(worker: int) -> None:
            queue = own[worker] or anyone
            chunk = [queue.popleft() for _ in range(min(size, len(queue)))]
            if chunk:
                self._owner.update((jobs[i][0], worker) for i in chunk)
                self._conns[worker].send((_lint_job, [jobs[i] for i in chunk]))
                busy[worker] = chunk

        for worker in range(len(self._conns)):
            feed(worker)
        for i in range(len(jobs)):
            while i not in done:
                for conn in wait([self._conns[w] for w in busy]):
                    worker = self._conns.index(conn)
                    done.update(zip(busy.pop(worker), _reply(conn), strict=True))
                    feed(worker)
            yield done.pop(i)

    def each(self, task: Callable, items: list) -> list:
        """``task(item)`` of one item per worker, in their order."""
        for conn, item in zip(self._conns, items, strict=True):
            conn.send((task, [item]))
        return [_reply(conn)[0] for conn in self._conns]


def _reply(conn) -> list:
    try:
        ok, value = conn.recv()
    except EOFError:
        raise RuntimeError("a worker process of the run died") from None
    if not ok:
        raise value
    return value


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _serve(conn) -> None:
    """A worker of ``_Workers``: ``task(item)`` of each item of each (task, items) it receives, until it receives
    None. Ctrl-C is the parent's to handle (it kills the workers)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        task, items = message
        try:
            reply: tuple = (True, [task(item) for item in items])
        except Exception as exc:  # noqa: BLE001 - raised again in the parent, as a pool would
            reply = (False, exc)
        conn.send(reply)
