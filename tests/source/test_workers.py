"""The run's worker processes (tracelint.source._Workers): results in the jobs' order, a file sent back to the worker
that had it (its tree is there), and the same findings as one process, rounds of call following included."""
from __future__ import annotations

import multiprocessing
import os
import textwrap
from pathlib import Path

import pytest

import tracelint.source as source
from tracelint.engine import Config, Finding

pytestmark = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                                reason="the workers see the test's stand-ins through fork")


def _pid_job(job):
    return [job[0]], os.getpid()


def test_results_keep_the_jobs_order_and_a_file_goes_back_to_its_worker(monkeypatch):
    monkeypatch.setattr(source, "_lint_job", _pid_job)
    jobs = [(Path(f"m{i:02d}.py"),) for i in range(40)]
    with source._Workers() as workers:
        workers.start(2)
        first = list(workers.map(jobs))
        again = list(workers.map(jobs[::-3]))
    assert [items for items, _ in first] == [[path] for path, in jobs]
    worker_of = {items[0]: pid for items, pid in first}
    assert len(set(worker_of.values())) == 2
    assert [(items[0], pid) for items, pid in again] == [(path, worker_of[path]) for path, in jobs[::-3]]


def _failing_job(job):
    raise ValueError(f"no {job[0]}")


def test_an_error_in_a_worker_is_raised_in_the_run(monkeypatch):
    monkeypatch.setattr(source, "_lint_job", _failing_job)
    with pytest.raises(ValueError, match="no a.py"), source._Workers() as workers:
        workers.start(2)
        list(workers.map([(Path("a.py"),)]))


MODEL = """\
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def forward(self, x):
            if x.abs().max().item() > 1e3:
                x = x / 2
            return x
    """
TRAIN = """\
    import torch
    from model import Net

    model = Net().cuda()
    for x in loader:
        loss = model(x.cuda()).sum()
        loss.backward()
        optimizer.step()
    """


FACTORY = """\
    from head import Head

    def build_head():
        return Head()
    """
TRAIN_HEAD = TRAIN.replace("from model import Net", "from factory import build_head").replace("Net()", "build_head()")


def test_workers_find_what_one_process_finds_across_rounds(tmp_path, monkeypatch):
    (tmp_path / "model.py").write_text(textwrap.dedent(MODEL))
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    (tmp_path / "head.py").write_text(textwrap.dedent(MODEL).replace("Net", "Head"))
    (tmp_path / "factory.py").write_text(textwrap.dedent(FACTORY))
    for name in ("train_head.py", "eval_head.py"):  # two files ask the workers what factories return
        (tmp_path / name).write_text(textwrap.dedent(TRAIN_HEAD))
    for i in range(30):
        (tmp_path / f"util{i:02d}.py").write_text(f"import torch\n\ndef f{i}(x):\n    return x.item()\n")
    config = Config(root=Path("/nonexistent"))

    def found(cpus: int) -> list[tuple[str, int, str]]:
        monkeypatch.setattr(os, "cpu_count", lambda: cpus)
        return [(Path(f.location.path).name, f.location.line, f.code)
                for f in source.lint_paths([tmp_path], config_for=lambda _p: config) if isinstance(f, Finding)]

    alone = found(1)
    assert ("model.py", 6, "TL101") in alone  # reached in a later round: train.py calls Net.forward every step
    assert ("head.py", 6, "TL101") in alone  # through the factory another file defines (project.factories)
    assert found(2) == alone
