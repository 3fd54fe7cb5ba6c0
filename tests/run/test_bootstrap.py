"""The child bootstrap's pure parts: --step-function's decorator added at compile time (lines unchanged), the
command line split into its target, and the run's options checked (no torch, no child process)."""
from __future__ import annotations

import ast

import pytest

from tracelint.profile.settle import CAP, Settle
from tracelint.run.bootstrap import decorate, profiler_notes_held
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
    assert RunOptions(wait=5, warmup=2, active=5).steps_needed == 16  # the first, 3 to see the warm-up settle, 12


# ---- the plan: what --max-steps leaves room for (issue #34) ----------------------------------------------------------

@pytest.mark.parametrize(("options", "plan", "words"), [
    # no --max-steps: the warm-up detection may take up to CAP steps
    (dict(), (CAP, 5, 2, 5), None),
    (dict(max_steps=100), (CAP, 5, 2, 5), None),
    (dict(max_steps=20), (7, 5, 2, 5), None),  # 19 steps after the first: 12 for the schedule, the rest to settle
    (dict(wait=3, warmup=1, active=3, max_steps=11), (3, 3, 1, 3), None),  # exactly room for the detection
    # below the schedule: the recorded steps first, then the profiler's start, a warm-up step, the detection
    (dict(max_steps=8), (3, 1, 1, 2), "recording steps 7-8 instead (--wait 1, --warmup 1, --active 2); no step "
                                      "timed without the profiler"),
    (dict(max_steps=14), (3, 3, 2, 5), "recording steps 10-14 instead (--wait 3, --warmup 2, --active 5); 2 "
                                       "steps timed without the profiler"),
    (dict(max_steps=5), (0, 1, 1, 2), "recording steps 4-5 instead (--wait 1, --warmup 1, --active 2); no step "
                                      "timed without the profiler; no warm-up detection"),
    (dict(max_steps=2), (0, 0, 0, 1), "recording step 2 instead"),
    (dict(max_steps=1), (0, 0, 0, 0), "nothing will be recorded: the first step only starts the count"),
])
def test_max_steps_below_the_schedule_plans_what_fits_and_says_so(options, plan, words):
    got = RunOptions(**options).plan
    assert (got.settle, got.wait, got.warmup, got.active) == plan
    if words is None:
        assert got.note is None
    else:
        assert got.note.startswith(f"--max-steps {options['max_steps']} is below the schedule") and words in got.note


# ---- the warm-up detection -------------------------------------------------------------------------------------------

def _settled_after(times, **kwargs):
    """How many step times Settle took before it was done, and whether it saw the warm-up settle."""
    settle = Settle(**kwargs)
    for n, ms in enumerate(times, 1):
        if settle.add(ms):
            return n, settle.settled
    return None, settle.settled


@pytest.mark.parametrize(("times", "after", "settled"), [
    ([383.0, 32.0, 136.0, 11.0, 12.0, 11.6, 11.8], 6, True),  # issue #34's CPU LM: steps 2-4 are start-up
    ([60_000.0, 900.0, 40.1, 36.2, 35.9, 36.0], 6, True),  # compilation, a recompile; 40.1 is 12 % off
    ([10.0, 14.0, 9.0, 13.0, 10.0, 12.0], 6, True),  # noisy but no longer falling: the medians of 3 agree
    ([320.0, 160.0, 80.0, 40.0, 20.0, 10.0, 5.0, 2.5], None, False),  # still falling
])
def test_the_warm_up_is_over_when_consecutive_steps_agree_or_stop_falling(times, after, settled):
    assert _settled_after(times) == (after, settled)


def test_the_detection_gives_up_at_its_cap():
    assert _settled_after([320.0, 160.0, 80.0, 40.0, 20.0], cap=4) == (4, False)
    assert Settle(cap=0).done and not Settle(cap=0).settled


# ---- the profiler's own notes on stderr ------------------------------------------------------------------------------

def test_the_profilers_notes_are_held_back_and_the_rest_passes(capfd):
    """Kineto writes 'USDT: ... profiler_start' from C++ straight to fd 2 and torch warns 'Profiler clears events'
    when a cycle starts: both are left out; anything else written meanwhile (a thread of the script's) passes."""
    import os
    import warnings

    with profiler_notes_held():
        os.write(2, b"USDT:2026-11-28 00:20:28 4363:4363 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"the script's own line\n")
        warnings.warn("Warning: Profiler clears events at the end of each cycle. Only events from the current cycle "
                      "will be reported.", UserWarning, stacklevel=1)
        os.write(2, b"USDT:2026-11-28 00:20:28 4363:4363 SyncActivityProfilerHandler.cpp:59] profiler_stop\n")
    err = capfd.readouterr().err
    assert err == "the script's own line\n"


def test_a_notebook_is_refused_with_the_way_to_run_it(tmp_path):
    # #34's trial: `tracelint run nb.ipynb` said only 'not a Python script (.py)'.
    notebook = tmp_path / "nb.ipynb"
    notebook.write_text("{}")
    with pytest.raises(UsageProblem) as refused:
        parse_command([str(notebook)])
    assert str(refused.value) == (f"{notebook}: a notebook; tracelint run runs a script: `jupyter nbconvert --to "
                                  f"script {notebook}` makes one (`tracelint {notebook}` lints the notebook as it is)")
