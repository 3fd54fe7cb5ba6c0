"""Work beside this process, written once: the fork/spawn choice, the pipe, the pickle and a worker's death.

``fork(task)`` runs ``task()`` in a forked child and ``Worker.result()`` brings its result back by pickle through a
pipe (source.lint's isolated files, trace.load's parallel read, diff's two sides); ``pool_context()`` is the start
method of the pools that live for a run (trace.pool, the source linter's run workers). A call that raises, dies
(SIGSEGV in a native parser, SIGKILL from the OOM killer), runs past its time limit, runs out of its memory limit
or returns what pickle cannot carry gives a WorkerFailed that says which, for that call only: never a hang, never a
traceback or a crash dump on stderr, never a core file; the other calls' results come back.

Fork only where it is safe (``can_fork``): fork copies the calling thread alone, with whatever locks the others
held. Where it is not (Windows, or threads running), each caller has its own fallback, in this process.
"""
from __future__ import annotations

import os
import pickle
import signal
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

_HEADER = 8  # the payload's length, before the payload
_PIPE_BYTES = 1 << 20  # a larger pipe: a big result comes back in 1 MiB reads, not 64 kB ones


def can_fork() -> bool:
    """fork is there and safe: no other thread runs (fork would copy their locks, held, without them)."""
    return hasattr(os, "fork") and threading.active_count() == 1


def pool_context():
    """The multiprocessing context of a pool: fork where the platform has it (a worker starts in milliseconds with
    tracelint and the rules already imported; spawn re-imports them in every worker), else the platform's default.
    A pool forks its processes as it starts them: start them before any thread of yours."""
    import multiprocessing

    return multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)


class WorkerFailed(Exception):
    """A call in a worker gave no result. ``cause`` says why:

    - ``raised``: ``error`` is what it raised (of the same type name and message: a stand-in, when the original
      would not pickle);
    - ``unpicklable``: its result could not be pickled, ``error`` says why;
    - ``memory``: it ran out of its memory limit (``limit``, bytes: MemoryError under the limit);
    - ``time``: it ran past its time limit (``limit``, seconds) and was killed;
    - ``signal``: its process was killed by ``signal`` (its name: SIGSEGV, SIGKILL);
    - ``exit``: its process ended with ``status`` and no result."""

    def __init__(self, cause: str, *, error: BaseException | None = None, signal: str | None = None,
                 status: int | None = None, limit: float | None = None) -> None:
        self.cause, self.error, self.signal, self.status, self.limit = cause, error, signal, status, limit
        super().__init__(self._message())

    @property
    def exitcode(self) -> int | None:
        """As multiprocessing says it: the status, or minus the signal's number."""
        if self.signal is not None:
            number = getattr(signal.Signals, self.signal, None)
            return -int(number) if number is not None else None
        return self.status

    def _message(self) -> str:
        if self.cause == "time":
            return f"it took longer than {self.limit:g} s (its time limit) and was killed"
        if self.cause == "signal":
            return f"its process was killed by {self.signal}"
        if self.cause == "exit":
            return f"its process ended with status {self.status} and no result"
        if self.cause == "memory":
            return f"it ran out of memory (its limit: {self.limit / (1 << 20):g} MiB)"
        text = " ".join(str(self.error).split())
        text = f"{type(self.error).__name__}: {text}" if text else type(self.error).__name__
        return f"its result could not be pickled: {text}" if self.cause == "unpicklable" else f"it raised {text}"


class Worker(Generic[T]):
    """One call running in a forked child (``fork``): ``result()`` waits for it; ``close()`` (or leaving a
    ``with``) kills it if it still runs and reaps it."""

    def __init__(self, pid: int, fd: int, time_limit: float | None, memory_limit: int | None) -> None:
        self.pid, self._fd = pid, fd
        self._time_limit, self._memory_limit = time_limit, memory_limit
        self._deadline = time.monotonic() + time_limit if time_limit is not None else None
        self._status: int | None = None

    def fileno(self) -> int:
        """The pipe the result comes through (select on it to wait for several workers)."""
        return self._fd

    def __enter__(self) -> Worker[T]:
        return self

    def __exit__(self, *_) -> None:
        self.close()

    def result(self) -> T:
        """The call's result; WorkerFailed when it gave none (the child is reaped either way)."""
        try:
            payload = self._read()
        except BaseException:  # Ctrl-C, say: the child goes too, at once
            self.close()
            raise
        if payload is None:
            self.close()
            raise WorkerFailed("time", limit=self._time_limit)
        self._reap()
        code = os.waitstatus_to_exitcode(self._status)
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else f"signal {-code}"
            raise WorkerFailed("signal", signal=name)
        try:
            reply = pickle.loads(payload)
        except Exception:  # nothing, or cut short: the child died while writing
            raise WorkerFailed("exit", status=code) from None
        if reply[0]:
            return reply[1]
        _, cause, name, text = reply
        if cause == "raised" and name == "MemoryError" and self._memory_limit is not None:
            raise WorkerFailed("memory", limit=self._memory_limit)
        raise WorkerFailed(cause, error=_stand_in(name, text))

    def close(self) -> None:
        """Kill the child if it still runs, and reap it."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap()

    def _reap(self) -> None:
        if self._status is None:
            _, self._status = os.waitpid(self.pid, 0)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _read(self) -> bytearray | None:
        """The child's whole payload (shorter when it died while writing); None when the time limit passed."""
        header = self._read_into(bytearray(_HEADER))
        if header is None:
            return None
        if len(header) < _HEADER:
            return bytearray()
        return self._read_into(bytearray(int.from_bytes(header, "little")))

    def _read_into(self, buffer: bytearray) -> bytearray | None:
        import select

        view, pos = memoryview(buffer), 0
        while pos < len(buffer):
            if self._deadline is not None:
                # past the deadline, what the child already wrote is still read: a result read late (its reader
                # waited on another worker) is no timeout; a child with nothing written is
                left = max(0.0, self._deadline - time.monotonic())
                if not select.select([self._fd], [], [], left)[0]:
                    return None
            n = os.readv(self._fd, [view[pos:]])
            if not n:
                del view
                del buffer[pos:]
                break
            pos += n
        return buffer


def fork(task: Callable[[], T], *, time_limit: float | None = None, memory_limit: int | None = None) -> Worker[T]:
    """``task()`` started in a forked child (``can_fork()`` must hold): its Worker. ``time_limit`` (seconds, from
    now): the child is killed when it passes. ``memory_limit`` (bytes): the address space the call may add to what
    the child inherits (RLIMIT_AS). Leave the child's stdout and stderr alone: nothing is flushed when it ends."""
    if not can_fork():
        raise RuntimeError("fork is not available here, or threads run: run the task in this process")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_fd)
        _child(task, write_fd, memory_limit)
    os.close(write_fd)
    try:
        import fcntl

        fcntl.fcntl(read_fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    except (ImportError, AttributeError, OSError):  # not Linux, or above /proc/sys/fs/pipe-max-size: as it is
        pass
    return Worker(pid, read_fd, time_limit, memory_limit)


def _child(task: Callable[[], object], fd: int, memory_limit: int | None) -> None:
    status = 1
    try:
        import faulthandler

        faulthandler.disable()  # a crash is reported in one line by the parent, never as a dump on stderr
        _limit_resources(memory_limit)
        try:
            reply = (True, task())
        except BaseException as exc:  # noqa: BLE001 - reported by the parent
            reply = (False, "raised", type(exc).__name__, str(exc))
        try:
            payload = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as exc:  # noqa: BLE001 - a result that won't pickle (or an error that won't)
            cause = "unpicklable" if reply[0] else reply[1]
            detail = (type(exc).__name__, str(exc)) if reply[0] else reply[2:]
            payload = pickle.dumps((False, cause, *detail), protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(len(payload).to_bytes(_HEADER, "little") + payload)
        while view:
            view = view[os.write(fd, view):]
        status = 0
    except BaseException:  # noqa: BLE001 - nothing may escape a forked child
        pass
    finally:
        os._exit(status)  # no cleanup of the parent's state: its atexit handlers and buffers are the parent's


def _limit_resources(memory_limit: int | None) -> None:
    try:
        import resource
    except ImportError:
        return
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash leaves no core file behind
    except (ValueError, OSError):
        pass
    if memory_limit is not None:
        try:
            limit = _address_space() + memory_limit
            hard = resource.getrlimit(resource.RLIMIT_AS)[1]
            resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard),
                                                    hard))
        except (ValueError, OSError):
            pass


def _address_space() -> int:
    """The bytes this process maps now (Linux: /proc/self/statm), 0 where it cannot tell."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return 0


def _stand_in(name: str, text: str) -> BaseException:
    """An exception of the type name ``name`` and the message ``text``: what the parent's messages read of the one
    the child raised (``type(e).__name__``, ``str(e)``)."""
    return type(name, (Exception,), {"__module__": __name__})(text)
