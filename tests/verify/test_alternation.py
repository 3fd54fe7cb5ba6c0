"""Baseline and variant alternate single blocks (B V, V B, ...) until the interval is tight or the budget is spent;
the side that waits is paused with its whole process group; a script that runs out of steps is started again;
with fresh processes every turn is a new process."""
from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest

from tests.verify.conftest import CPU, SCRIPTS, logging_session
from tracelint.verify.harness_control import RunSettings, Session
from tracelint.verify.measure import _Side, compare, measure
from tracelint.verify.variants import Variant


class FakeSide:
    """A side whose blocks come from a function of the global turn number (the machine's drift)."""

    def __init__(self, label: str, log: list, step_ms, fail_at: int | None = None) -> None:
        self.label, self.log, self.step_ms, self.fail_at = label, log, step_ms, fail_at
        self.failure = None

    def turn(self):
        if self.fail_at is not None and len(self.log) >= self.fail_at:
            return None
        self.log.append(self.label)
        return self.step_ms(len(self.log))


def test_rounds_alternate_their_order_and_stop_at_the_target():
    log: list[str] = []
    settings = RunSettings(blocks=4, budget_s=60, target=0.03, pairs=1)  # several pairs: test_process_pairs.py
    base = FakeSide("B", log, lambda t: 10.0 + 0.01 * t)  # a slow drift: paired rounds see it on both sides
    variant = FakeSide("V", log, lambda t: (10.0 + 0.01 * t) / 1.25)
    rounds = compare(base, variant, settings)
    assert rounds.stopped == "target" and len(rounds.base) == len(rounds.variant) == 4
    # tight from the minimum number of rounds on
    assert "".join(log) == "BVVBBVVB"


def test_rounds_go_on_while_the_interval_is_wide_until_the_budget_is_spent():
    log: list[str] = []
    noise = [1.0, 1.3, 0.8, 1.25, 0.85, 1.2]
    settings = RunSettings(blocks=3, budget_s=0.05, target=0.01, max_rounds=10**7, pairs=1)
    base = FakeSide("B", log, lambda t: 10.0 * noise[t % len(noise)])
    variant = FakeSide("V", log, lambda t: 10.0 * noise[(t * 7) % len(noise)])
    rounds = compare(base, variant, settings)  # how soon after the budget it stops: bench/check_timing.py
    assert rounds.stopped == "budget" and len(rounds.base) >= 3


def test_a_failing_side_ends_the_comparison_and_says_which():
    log: list[str] = []
    settings = RunSettings(blocks=3)
    assert compare(FakeSide("B", log, lambda t: 10.0, fail_at=3), FakeSide("V", log, lambda t: 9.0),
                   settings).stopped == "baseline-failed"
    log.clear()
    assert compare(FakeSide("B", log, lambda t: 10.0), FakeSide("V", log, lambda t: 9.0, fail_at=1),
                   settings).stopped == "variant-failed"


def _state(pid: int) -> str:
    """The scheduler state (R, S, T...) of a process."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _settled_states(pid: int, want: set[str]) -> tuple[str, list[str]]:
    """The state of the harness and those of its children, once a signal sent to them has arrived."""
    from tracelint.verify.harness_control import _descendants

    deadline = time.monotonic() + 5
    while True:
        harness, children = _state(pid), [_state(child) for child in _descendants(pid)]
        if {harness, *children} <= want or time.monotonic() > deadline:
            return harness, children


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_a_waiting_session_is_paused_whole_and_resumes(tmp_path):
    """The default pause stops the harness's whole process group: the harness (and with it its threads: a
    pin-memory thread, CUDA's) and its DataLoader worker; SIGCONT resumes them for the next turn."""
    script = SCRIPTS / "train_cpu.py"  # a DataLoader with one worker process
    session = Session(script, script, [], CPU, tmp_path)
    session.start()
    try:
        assert session.ready(), session.finish().reason
        assert _settled_states(session.proc.pid, {"T"}) == ("T", ["T"])
        assert session.run(2) is not None and len(session.blocks) == 2
        assert _settled_states(session.proc.pid, {"T"}) == ("T", ["T"])
        idle = session.idle
        assert idle.pauses == 1 and idle.wall_s > 0 and idle.stopped == 2  # the harness and its worker
        outcome = session.finish()
    finally:
        session.kill()
    assert outcome.ok and len(outcome.block_ms) == 2 and session.proc.poll() is not None


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_the_old_pause_stopped_only_the_workers(tmp_path):
    """pause="workers", the method before issue #26: the workers found through /proc/.../children stop, the
    harness runs on (and on a kernel without that file, nothing stops)."""
    from dataclasses import replace

    script = SCRIPTS / "train_cpu.py"
    session = Session(script, script, [], replace(CPU, pause="workers"), tmp_path)
    session.start()
    try:
        assert session.ready(), session.finish().reason
        assert _settled_states(session.proc.pid, {"S", "T"}) == ("S", ["T"])
        assert session.idle.stopped == 1
    finally:
        session.kill()


FINITE = """\
import sys
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(8, 2).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 8, device=device)
for step in range(int(sys.argv[1])):
    opt.zero_grad(set_to_none=False)
    model(x).pow(2).mean().backward()
    opt.step()
"""


@pytest.mark.slow
def test_a_script_that_runs_out_of_steps_mid_comparison_is_started_again(tmp_path):
    script = tmp_path / "finite.py"
    script.write_text(textwrap.dedent(FINITE))
    settings = RunSettings(warmup=2, steps=3, blocks=6, device="cpu", timeout_s=120, budget_s=1, resume_warmup=1,
                           resume_warmup_s=0, pairs=1)  # restarts in several pairs: test_process_pairs.py
    fixed = FINITE.replace("set_to_none=False", "set_to_none=True")
    # 20 steps: warm-up 2, then 4 turns of 1 + 3 steps; the sixth round needs a second process (a third, a fourth).
    runs, (row,) = measure(script, [Variant("TL301:9", "fix", True, fixed)], ["20"], settings, tmp_path / "runs")
    assert row.verdict.status in ("confirmed", "small", "no-effect", "slower"), row.verdict.reason
    assert row.verdict.interval.rounds >= 6
    assert len(runs) >= 2 and all(run.ok for run in runs)  # the baseline's processes, each with its blocks
    assert sum(len(run.block_ms) for run in runs) == row.verdict.interval.rounds


@pytest.mark.slow
def test_a_variant_that_fails_after_some_rounds_is_failed_not_timed(tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(FINITE))
    broken = FINITE.replace("    opt.step()\n", "    opt.step()\n    assert step < 12, 'boom'\n")
    settings = RunSettings(warmup=2, steps=3, blocks=5, device="cpu", timeout_s=120, budget_s=1, resume_warmup=1)
    _, (row,) = measure(script, [Variant("x", "broken", True, broken)], ["1000000"], settings, tmp_path / "runs")
    assert row.verdict.status == "failed" and row.verdict.interval is None
    assert "AssertionError: boom" in row.outcome.stderr_tail


def test_side_restarts_are_bounded(tmp_path, monkeypatch):
    """A script that ends after every turn is started again at most MAX_RESTARTS times."""
    import sys

    from tracelint.verify.harness_control import Idle, RunOutcome

    measure_module = sys.modules["tracelint.verify.measure"]

    started = []

    class EndingSession:
        def __init__(self, *args, **kwargs) -> None:
            started.append(1)
            self.blocks, self.losses, self.ended, self.idle = [], [], False, Idle()

        def start(self) -> None:
            pass

        def ready(self) -> bool:
            return True

        def run(self, blocks):
            self.ended = True
            return None

        def finish(self, trace=None):
            return RunOutcome(True, (1.0,))

        def kill(self) -> None:
            pass

    monkeypatch.setattr(measure_module, "Session", EndingSession)
    side = _Side("baseline", Path("x.py"), Path("x.py"), [], CPU, tmp_path, None)
    assert side.start() and side.turn() is None
    assert len(started) == 1 + measure_module.MAX_RESTARTS and side.failure is not None
    assert os.path.basename(side.workdir) == tmp_path.name



@pytest.mark.slow
def test_fresh_processes_give_every_turn_a_new_process(tmp_path):
    """processes="fresh": each block of each side comes from its own process (warm-up, then the mean of
    fresh_blocks blocks), in the order B V, V B, ...; the report names the method."""
    from dataclasses import replace

    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(FINITE))
    fixed = FINITE.replace("set_to_none=False", "set_to_none=True")
    settings = replace(CPU, processes="fresh", fresh_blocks=2, blocks=2, budget_s=0, resume_warmup=1)
    runs, (row,) = measure(script, [Variant("TL301:9", "fix", True, fixed)], ["1000000"], settings,
                           tmp_path / "runs")
    assert row.verdict.status in ("confirmed", "small", "no-effect", "slower"), row.verdict.reason
    assert row.verdict.interval.rounds == 2
    assert len(runs) == 2 and all(run.ok and len(run.block_ms) == 2 for run in runs)  # one process per turn
    folders = sorted(p.name for p in (tmp_path / "runs").iterdir() if "-t" in p.name)
    assert folders == ["01-TL301_9-t001", "01-TL301_9-t002", "baseline-t001", "baseline-t002"]
    assert "fresh processes" in settings.method


def test_the_first_variant_warms_up_beside_the_baseline(tmp_path, monkeypatch):
    """Both processes start before either is waited for (their warm-ups are untimed): one start-up saved."""
    import sys

    measure_module = sys.modules["tracelint.verify.measure"]
    log: list[str] = []
    monkeypatch.setattr(measure_module, "Session", logging_session(log))
    settings = RunSettings(blocks=2, budget_s=0, device="cpu", pairs=1)
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    variants = [Variant("a", "a", True, "x = 2\n"), Variant("b", "b", True, "x = 3\n")]
    _, rows = measure(script, variants, [], settings, tmp_path / "runs")
    assert log[:4] == ["start baseline", "start 01-a", "ready baseline", "ready 01-a"]
    assert log[4:] == ["start 02-b", "ready 02-b"]  # a later variant starts when the baseline waits, alone
    assert [row.verdict.status for row in rows] == ["confirmed", "confirmed"]
