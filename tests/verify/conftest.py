"""Helpers for the verify tests: the tiny CPU scripts under tests/verify/scripts, fast CPU run settings, a
synthetic Verification (no run, no GPU) for the reports, and a fake Session that logs what measure() does."""
from __future__ import annotations

from pathlib import Path

import pytest

from tracelint.engine import Edit, Finding, Fix, Severity, SourceLocation
from tracelint.render import render
from tracelint.verify import run_result
from tracelint.verify.harness_control import Idle, RunOutcome, RunSettings
from tracelint.verify.measure import Row, Verification
from tracelint.verify.stats import judge
from tracelint.verify.variants import Variant

SCRIPTS = Path(__file__).resolve().parent / "scripts"
# CPU timings are no claims: these settings only exercise the harness (few steps, a generous timeout for a
# loaded 2-core machine importing torch; no time-based re-warm, so that step counts are exact).
CPU = RunSettings(warmup=2, steps=3, blocks=3, device="cpu", timeout_s=120, budget_s=3, resume_warmup_s=0)


@pytest.fixture
def scripts() -> Path:
    return SCRIPTS


FINDING = Finding("TL202", Severity.WARNING, "DataLoader without pin_memory=True", SourceLocation("train.py", 12, 5),
                  Fix("Set pin_memory=True", (Edit(12, 5, 12, 10, "True"),), True))


def synthetic() -> Verification:
    """One target: a confirmed TL202 fix (1.43x, three rounds against the baseline's blocks 10.0, 10.1, 10.2) and
    a bf16 variant whose run crashed."""
    base = (RunOutcome(True, (10.0, 10.1, 10.2, 10.1, 10.0, 10.2), (2.0,), device="GPU X", torch="2.x"),)
    fast = RunOutcome(True, (7.0, 7.1, 7.05), (2.0,))
    broken = RunOutcome(False, reason="exit code 1", stderr_tail="Traceback\nRuntimeError: boom")
    paired = (10.0, 10.1, 10.2)
    rows = (
        Row(Variant("TL202:12", "Set pin_memory=True", True, "x", finding=FINDING),
            judge(paired, fast, True, stopped="target"), fast),
        Row(Variant("bf16", "bf16 autocast around module calls", False, "x", precision="bf16"),
            judge(paired, broken, True), broken),
    )
    return Verification("train.py", CPU, "GPU X", "2.x", base, rows, (FINDING,))


def report(verifications: list[Verification], fmt: str = "text") -> str:
    """What ``tracelint verify --format FMT`` prints for these verifications."""
    return render(run_result(verifications), fmt)


def logging_session(log: list[str], log_finish: bool = False) -> type:
    """A stand-in for verify.run.Session (monkeypatched into verify.measure): no process; it appends "start NAME",
    "ready NAME" (and with ``log_finish`` "finish NAME") to ``log``, NAME its folder's name; each block takes
    10 ms in a baseline folder and 8 ms in a variant's."""

    class LoggingSession:
        def __init__(self, code, original, argv, settings, workdir, **kwargs) -> None:
            self.name = workdir.name
            self.blocks, self.losses, self.ended, self.idle = [], [1.0], False, Idle()

        def start(self) -> None:
            log.append(f"start {self.name}")

        def ready(self) -> bool:
            log.append(f"ready {self.name}")
            return True

        def run(self, blocks):
            self.blocks.append(10.0 if self.name.startswith("baseline") else 8.0)
            return self.blocks[-1:]

        def finish(self, trace=None):
            if log_finish:
                log.append(f"finish {self.name}")
            return RunOutcome(True, tuple(self.blocks), (1.0,))

        def kill(self) -> None:
            pass

    return LoggingSession
