"""The child bootstrap's pure parts: --step-function's decorator added at compile time (lines unchanged), the
command line split into its target, and the run's options checked (no torch, no child process)."""
from __future__ import annotations

import ast

import pytest

from tracelint.run.bootstrap import decorate
from tracelint.run.launch import RunOptions, UsageProblem, parse_command

SOURCE = """\
import functools

def train_step(x):
    return x + 1

class Trainer:
    @staticmethod
    def helper(x):
        return x

    @functools.lru_cache(maxsize=None)
    def step(self, x):
        return x * 2

def main():
    def inner(x):
        return x - 1
    if True:
        def guarded(x):
            return x
    return inner
"""


@pytest.mark.parametrize(("qualname", "line", "decorators"), [
    ("train_step", 3, ["MARK"]),
    ("Trainer.helper", 8, ["staticmethod", "MARK"]),  # inside staticmethod: the wrapper stays a static method
    ("Trainer.step", 12, ["MARK", "functools.lru_cache(maxsize=None)"]),  # outermost: the call as the class sees it
    ("main.<locals>.inner", 16, ["MARK"]),
    ("main.<locals>.guarded", 19, ["MARK"]),
])
def test_the_step_decorator_lands_on_the_named_def_and_moves_no_line(qualname, line, decorators):
    tree = ast.parse(SOURCE)
    assert decorate(tree, qualname, "MARK")
    defs = {n.lineno: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert [ast.unparse(d) for d in defs[line].decorator_list] == decorators
    assert sorted(defs) == sorted(n.lineno for n in ast.walk(ast.parse(SOURCE)) if isinstance(n, ast.FunctionDef))
    compile(tree, "train.py", "exec")


def test_an_unknown_qualname_is_reported():
    assert not decorate(ast.parse(SOURCE), "Trainer.missing", "MARK")


@pytest.mark.parametrize(("command", "module", "expected"), [
    (["train.py", "--", "--epochs", "1"], None, ("script", "train.py", ("--epochs", "1"), ())),
    (["train.py", "--epochs", "1"], None, ("script", "train.py", ("--epochs", "1"), ())),
    (["--lr", "1"], "pkg.train", ("module", "pkg.train", ("--lr", "1"), ())),
    (["torchrun", "--nproc_per_node", "2", "--standalone", "train.py", "--epochs", "1"], None,
     ("torchrun", "train.py", ("--epochs", "1"), ("--nproc_per_node", "2", "--standalone"))),
    (["python3", "-m", "torch.distributed.run", "--nproc-per-node=2", "-m", "pkg.train"], None,
     ("torchrun", "pkg.train", (), ("--nproc-per-node=2", "-m"))),
])
def test_the_command_line_names_its_target(tmp_path, monkeypatch, command, module, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    target = parse_command(command, module)
    assert (target.kind, target.target, target.argv, target.launcher) == expected
    assert (target.script is None) == (expected[0] == "module" or "-m" in expected[3])


@pytest.mark.parametrize("command", [[], ["python", "train.py"], ["notes.txt"], ["torchrun", "--nnodes", "1"]])
def test_what_is_no_runnable_target(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(UsageProblem):
        parse_command(command)


def test_options_are_checked():
    with pytest.raises(UsageProblem):
        RunOptions(settings="everything")
    with pytest.raises(UsageProblem):
        RunOptions(step_function="train_step")
    assert RunOptions(wait=5, warmup=2, active=5).steps_needed == 13
