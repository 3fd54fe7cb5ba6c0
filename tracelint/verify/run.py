"""The parent side of one measured run: start the harness in a subprocess, wait with a wall-clock timeout, reap
its process group, and turn what it left behind into a RunOutcome. Never imports torch."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tracelint.verify.tracing import TraceResult

HARNESS = Path(__file__).with_name("harness.py")
TRACE_FILE = "profile.pt.trace.json.gz"  # written in the run's folder by a --trace run
STDERR_TAIL_LINES = 15


@dataclass(frozen=True, slots=True)
class RunSettings:
    """How every run of one verification is measured (the same for the baseline and each variant)."""

    warmup: int = 5
    steps: int = 20
    blocks: int = 5
    device: str = "cuda"
    timeout_s: float = 300.0
    seed: int = 0
    trace: bool = False  # profile a few steps after the timed blocks of the first baseline run and each variant

    def __post_init__(self) -> None:
        if self.warmup < 1 or self.steps < 1 or self.blocks < 2:
            raise ValueError("verify needs warmup >= 1, steps >= 1 and blocks >= 2")

    @property
    def needed_steps(self) -> int:
        return self.warmup + self.steps * self.blocks


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """One child run: its block means (ms per step) when it completed, else why it failed."""

    ok: bool
    block_ms: tuple[float, ...] = ()
    losses: tuple[float | None, ...] = ()
    reason: str = ""
    stderr_tail: str = ""
    device: str = ""
    torch: str = ""
    clock: str | None = None
    wall_s: float = 0.0
    trace: TraceResult | None = None  # --trace: the profiled steps after the timed blocks (analyzed by measure)
    extra: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def final_loss_finite(self) -> bool | None:
        values = [v for v in self.losses if v is not None]
        return math.isfinite(values[-1]) if values else None


def run_once(code: Path, original: Path, argv: list[str], settings: RunSettings, workdir: Path,
             precision: str | None = None, trace: bool = False) -> RunOutcome:
    """Run ``code`` as if it were ``original`` (cwd = its folder, argv = [original, *argv]) under the harness.
    ``trace``: after the timed blocks, profile a few steps into ``workdir/TRACE_FILE`` (not analyzed here)."""
    workdir.mkdir(parents=True, exist_ok=True)
    result_path = workdir / "result.json"
    config = {
        "code": str(code), "original": str(original), "argv": list(argv), "result": str(result_path),
        "warmup": settings.warmup, "steps": settings.steps, "blocks": settings.blocks, "device": settings.device,
        "precision": precision, "seed": settings.seed, "trace": str(workdir / TRACE_FILE) if trace else None,
    }
    config_path = workdir / "config.json"
    config_path.write_text(json.dumps(config), encoding="utf-8")
    out_path, err_path = workdir / "stdout.txt", workdir / "stderr.txt"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = time.perf_counter()
    timed_out = False
    # Files, not pipes: DataLoader workers inherit the child's stdout/stderr, and a pipe would stay open (and the
    # parent blocked) until the last of them exits.
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen([sys.executable, str(HARNESS), str(config_path)], cwd=original.parent,
                                stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        try:
            code_rc = proc.wait(timeout=settings.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out, code_rc = True, None
        finally:
            _kill_group(proc)
    wall = time.perf_counter() - started
    tail = _tail(err_path)
    data = _read_json(result_path)
    return _outcome(data, code_rc, timed_out, tail, wall, settings)


def _kill_group(proc: subprocess.Popen) -> None:
    """The child and whatever it started (DataLoader workers): its own session, so its own process group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _tail(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-STDERR_TAIL_LINES:])


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _outcome(data: dict | None, rc: int | None, timed_out: bool, tail: str, wall: float,
             settings: RunSettings) -> RunOutcome:
    facts = {k: (data or {}).get(k, "") for k in ("device", "torch")}
    common = dict(stderr_tail=tail, wall_s=wall, clock=(data or {}).get("clock"), **facts)
    losses = tuple((data or {}).get("losses", ()))
    ticks = (data or {}).get("ticks", 0)
    status = (data or {}).get("status")
    trace = (data or {}).get("trace")
    # With --trace the timing result is written before profiling starts: a timeout or crash after it leaves the
    # timing valid and only the profiling failed.
    if status == "ok" and (not timed_out or trace is not None):
        return RunOutcome(True, tuple(data["block_ms"]), losses, trace=_trace(trace, rc, timed_out, settings),
                          **common)
    if timed_out:
        if data is None:
            reason = f"timed out after {settings.timeout_s:g} s before the first timed step (no step seen yet?)"
        else:
            reason = f"timed out after {settings.timeout_s:g} s, {ticks} steps in"
    elif status == "diverged":
        reason = f"diverged: the loss became {data.get('loss', 'non-finite')} after {ticks} steps"
    elif status == "ended" and not ticks:
        reason = "no steps found: the script ended without an optimizer.step() or loss.backward()"
    elif status == "ended":
        reason = (f"the script ended after {ticks} steps; the harness needs {settings.needed_steps} "
                  f"(lower --warmup/--steps/--blocks or let it run longer)")
    elif rc:
        reason = f"exit code {rc}" if rc > 0 else f"killed by signal {-rc}"
    else:
        reason = "no result written"
    return RunOutcome(False, (), losses, reason=reason, **common)


def _trace(trace: dict | None, rc: int | None, timed_out: bool, settings: RunSettings) -> TraceResult | None:
    if trace is None:
        return None
    if trace.get("status") == "ok" and trace.get("file"):
        return TraceResult(file=trace["file"])
    if trace.get("status") == "failed":
        return TraceResult(error=trace.get("reason") or "profiling failed")
    if timed_out:
        return TraceResult(error=f"timed out after {settings.timeout_s:g} s while profiling")
    if rc:
        return TraceResult(error=f"the run died while profiling ({f'exit code {rc}' if rc > 0 else f'signal {-rc}'})")
    return TraceResult(error="profiling did not finish")
