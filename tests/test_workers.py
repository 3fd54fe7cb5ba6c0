"""The worker helper (tracelint.engine.workers): a call that raises, dies by a signal, runs past its time limit or
out of its memory limit, or returns what pickle cannot carry gives its own clear WorkerFailed, and the results of the
calls started beside it still come back."""
from __future__ import annotations

import os
import signal
import time

import pytest

from tracelint.engine.workers import WorkerFailed, can_fork, fork, pool_context

pytestmark = pytest.mark.skipif(not can_fork(), reason="the worker helper forks")


def _outcomes(tasks, **limits) -> list:
    """Each task started in a worker of its own, all at once; their results (or failures), in order."""
    workers = [fork(task, **limits) for task in tasks]
    outcomes = []
    for worker in workers:
        with worker:
            try:
                outcomes.append(worker.result())
            except WorkerFailed as failed:
                outcomes.append(failed)
    return outcomes


def _raise():
    raise ValueError("bad   input\nin two lines")


def _die():
    os.kill(os.getpid(), signal.SIGSEGV)


def _spin():
    while True:
        pass


def _unpicklable():
    return lambda: None


def _exit():
    os._exit(3)


def _allocate():
    return len(bytearray(512 << 20))


def test_each_failure_is_its_calls_own_and_the_others_come_back():
    big = list(range(300_000))  # a few MB: more than a pipe holds
    started = time.monotonic()
    ok, raised, died, slow, unpicklable, exited, also_ok = _outcomes(
        [lambda: ("ok", os.getpid()), _raise, _die, _spin, _unpicklable, _exit, lambda: big], time_limit=2)
    assert ok[0] == "ok" and ok[1] != os.getpid() and also_ok == big
    assert time.monotonic() - started < 10
    assert raised.cause == "raised" and type(raised.error).__name__ == "ValueError"
    assert str(raised.error) == "bad   input\nin two lines"  # the message as raised: callers cut it their way
    assert str(raised) == "it raised ValueError: bad input in two lines"
    assert (died.cause, died.signal, died.exitcode) == ("signal", "SIGSEGV", -signal.SIGSEGV)
    assert str(died) == "its process was killed by SIGSEGV"
    assert (slow.cause, slow.limit) == ("time", 2)
    assert str(slow) == "it took longer than 2 s (its time limit) and was killed"
    assert unpicklable.cause == "unpicklable" and "pickle" in str(unpicklable.error).lower()
    assert str(unpicklable).startswith("its result could not be pickled: ")
    assert (exited.cause, exited.status, exited.exitcode) == ("exit", 3, 3)
    assert str(exited) == "its process ended with status 3 and no result"


def test_a_result_read_after_the_deadline_is_no_timeout():
    """A call that finished in time and is read late (its reader waited on another worker first: CI caught the
    unpicklable call of the test above read as a timeout on a loaded machine) gives its result or its failure."""
    done, unpicklable = fork(lambda: 41 + 1, time_limit=0.5), fork(_unpicklable, time_limit=0.5)
    time.sleep(1.0)
    with done, unpicklable:
        assert done.result() == 42
        with pytest.raises(WorkerFailed) as failed:
            unpicklable.result()
    assert failed.value.cause == "unpicklable"


def test_a_killed_worker_is_a_signal():
    worker = fork(_spin)
    os.kill(worker.pid, signal.SIGKILL)
    with worker, pytest.raises(WorkerFailed, match="killed by SIGKILL") as failed:
        worker.result()
    assert failed.value.cause == "signal"


def test_the_memory_limit():
    with fork(_allocate, memory_limit=128 << 20) as worker, pytest.raises(WorkerFailed) as failed:
        worker.result()
    assert (failed.value.cause, str(failed.value)) == ("memory", "it ran out of memory (its limit: 128 MiB)")
    with fork(_allocate) as worker:  # no limit: as much as the machine gives
        assert worker.result() == 512 << 20


def test_closing_early_kills_and_reaps_the_child():
    worker = fork(_spin)
    worker.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(worker.pid, os.WNOHANG)


def test_without_fork_it_refuses(monkeypatch):
    monkeypatch.setattr("tracelint.engine.workers.can_fork", lambda: False)
    with pytest.raises(RuntimeError, match="in this process"):
        fork(lambda: 1)


def test_pools_fork_where_they_can():
    assert pool_context().get_start_method() == "fork"
