"""The parent side of the measured runs: start the harness in a subprocess, talk to it over two pipes (run a turn
of blocks, stop, profile), freeze it while the other side of a comparison runs, reap its process group, and turn
what it left behind into a RunOutcome. Never imports torch."""
from __future__ import annotations

import contextlib
import json
import math
import os
import select
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
    """How every run of one verification is measured (the same for the baseline and each variant).

    ``steps`` per block; a comparison alternates single blocks of the baseline and the variant (B V V B ...),
    each after ``resume_warmup`` untimed steps, for at least ``blocks`` rounds, and goes on until the 95 %
    interval of the speedup is within ±``target`` or ``budget_s`` seconds of alternating have passed."""

    warmup: int = 5
    steps: int = 20
    blocks: int = 5
    device: str = "cuda"
    timeout_s: float = 300.0
    seed: int = 0
    trace: bool = False  # profile a few steps after the timed blocks of the baseline and of each variant
    budget_s: float = 60.0
    target: float = 0.03
    resume_warmup: int = 2
    max_rounds: int = 400
    freeze: bool = True  # SIGSTOP the waiting side's DataLoader workers (the processes its harness started)

    def __post_init__(self) -> None:
        if self.warmup < 1 or self.steps < 1 or self.blocks < 2:
            raise ValueError("verify needs warmup >= 1, steps >= 1 and blocks >= 2")
        if self.budget_s < 0 or not 0 < self.target < 1 or self.resume_warmup < 0:
            raise ValueError("verify needs budget >= 0, 0 < target < 1 and resume_warmup >= 0")

    @property
    def needed_steps(self) -> int:
        """Steps a script must run for the minimum comparison: warm-up, then ``blocks`` turns."""
        return self.warmup + (self.resume_warmup + self.steps) * self.blocks


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


class Session:
    """One harness process under the parent's control: ``start`` it, wait until it is ``ready`` (warmed up), ask
    it for turns of blocks (``run``), then ``finish`` it (stop, or profile and stop). ``pause``/``resume`` freeze
    the processes it started (DataLoader workers) between turns (``RunSettings.freeze``). A failure at any point
    leaves ``failed`` set and ``finish`` returns the outcome that says why."""

    def __init__(self, code: Path, original: Path, argv: list[str], settings: RunSettings, workdir: Path, *,
                 precision: str | None = None, trace: bool = False) -> None:
        self.code, self.original, self.argv, self.settings = code, original, list(argv), settings
        self.workdir, self.precision, self.trace = workdir, precision, trace
        self.proc: subprocess.Popen | None = None
        self.blocks: list[float] = []
        self.losses: list[float | None] = []
        self.failed = False
        self.timed_out = False
        self.frozen = False
        self._stopped: list[int] = []
        self.ended = False  # the script returned by itself (ran out of steps)
        self._events = -1
        self._commands = None
        self._buffer = b""
        self._started = 0.0
        self._outcome: RunOutcome | None = None

    # --- life cycle ---------------------------------------------------------------------------------------------

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        command_read, command_write = os.pipe()
        event_read, event_write = os.pipe()
        config = {
            "code": str(self.code), "original": str(self.original), "argv": self.argv,
            "result": str(self.workdir / "result.json"), "warmup": self.settings.warmup,
            "steps": self.settings.steps, "blocks": self.settings.blocks, "device": self.settings.device,
            "precision": self.precision, "seed": self.settings.seed, "resume_warmup": self.settings.resume_warmup,
            "trace": str(self.workdir / TRACE_FILE) if self.trace else None,
            "control": {"commands": command_read, "events": event_write},
        }
        config_path = self.workdir / "config.json"
        config_path.write_text(json.dumps(config), encoding="utf-8")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # Files, not pipes, for the output: DataLoader workers inherit the child's stdout/stderr, and a pipe would
        # stay open (and the parent blocked) until the last of them exits.
        with (self.workdir / "stdout.txt").open("wb") as out, (self.workdir / "stderr.txt").open("wb") as err:
            self.proc = subprocess.Popen([sys.executable, str(HARNESS), str(config_path)], cwd=self.original.parent,
                                         stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                         start_new_session=True, pass_fds=(command_read, event_write))
        os.close(command_read)
        os.close(event_write)
        self._events = event_read
        self._commands = os.fdopen(command_write, "w", encoding="utf-8")
        self._started = time.perf_counter()

    def ready(self) -> bool:
        """Wait until the script has run its warm-up steps; False when it failed (``finish`` says why)."""
        event = self._next_event(self.settings.timeout_s)
        if event is None or event.get("event") != "ready":
            return self._fail()
        self.pause()
        return True

    def run(self, blocks: int = 1) -> list[float] | None:
        """One turn: the block means (ms per step) of ``blocks`` timed blocks; None when the run failed or ended."""
        if self.failed:
            return None
        self.resume()
        if not self._send({"cmd": "run", "blocks": blocks}):
            return self._fail()
        event = self._next_event(self.settings.timeout_s)
        if event is None or event.get("event") != "blocks":
            return self._fail()
        self.pause()
        new = [float(b) for b in event["block_ms"]]
        self.blocks.extend(new)
        self.losses.extend(event.get("losses") or [None] * len(new))
        return new

    def finish(self, trace: bool | None = None) -> RunOutcome:
        """Stop the run (after profiling a few steps when ``trace``, default: as started) and reap it."""
        if self._outcome is not None:
            return self._outcome
        trace = self.trace if trace is None else trace
        rc = None
        if self.proc is not None:
            if not self.failed:
                self.resume()
                self._send({"cmd": "trace" if trace else "stop"})
                try:
                    rc = self.proc.wait(timeout=self.settings.timeout_s)
                except subprocess.TimeoutExpired:
                    self.timed_out = True
            else:
                rc = self.proc.poll()
            self.kill()
        self._outcome = self._collect(rc, trace)
        return self._outcome

    def kill(self) -> None:
        if self.proc is None:
            return
        _kill_group(self.proc)
        if self._commands is not None:
            with contextlib.suppress(OSError):
                self._commands.close()
            self._commands = None
        if self._events >= 0:
            os.close(self._events)
            self._events = -1

    # --- freezing -----------------------------------------------------------------------------------------------
    # Only the harness's descendants (DataLoader workers, which would go on filling their queues and compete for
    # the CPU with the other side's turn). The harness itself waits in a blocking read and uses no CPU; stopping
    # it buys nothing and would stop the threads of the process that times the next turn (its OpenMP team,
    # CUDA's), a disturbance the timing does not need.

    def pause(self) -> None:
        if not self.settings.freeze or self.frozen or self.proc is None or self.proc.poll() is not None:
            return
        self._stopped = [pid for pid in _descendants(self.proc.pid) if _signal(pid, signal.SIGSTOP)]
        self.frozen = True

    def resume(self) -> None:
        if self.frozen:
            for pid in self._stopped:
                _signal(pid, signal.SIGCONT)
            self._stopped = []
            self.frozen = False

    # --- the conversation ---------------------------------------------------------------------------------------

    def _send(self, message: dict) -> bool:
        try:
            self._commands.write(json.dumps(message) + "\n")
            self._commands.flush()
            return True
        except (OSError, ValueError, AttributeError):  # the child is gone
            return False

    def _next_event(self, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        while True:
            if b"\n" in self._buffer:
                line, _, self._buffer = self._buffer.partition(b"\n")
                try:
                    return json.loads(line)
                except ValueError:
                    continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.timed_out = True
                return None
            exited = self.proc.poll() is not None
            ready, _, _ = select.select([self._events], [], [], 0 if exited else min(remaining, 0.25))
            if ready:
                chunk = os.read(self._events, 65536)
                if chunk:
                    self._buffer += chunk
                    continue
            if exited:
                return None
            if ready:  # end of file: every writer closed, the child is exiting
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=min(max(remaining, 0.1), 10))

    def _fail(self) -> None:
        self.failed = True
        return None

    def _collect(self, rc: int | None, trace: bool) -> RunOutcome:
        wall = time.perf_counter() - self._started
        tail = _tail(self.workdir / "stderr.txt")
        data = _read_json(self.workdir / "result.json")
        if data is not None and data.get("status") == "ended":
            self.ended = True  # the script ran out of steps: the blocks it gave are good
        if self.blocks and (not self.failed or self.ended):
            # The parent's own record of the blocks (the result file may lag behind a frozen or killed child).
            data = {**(data or {}), "block_ms": list(self.blocks), "losses": list(self.losses)}
            if data.get("status") in (None, "running", "ended"):
                data["status"] = "ok"
        elif self.failed and self.blocks and data is not None and data.get("status") in ("ok", "running"):
            data = {**data, "status": "error"}  # a turn failed after earlier turns: not a usable run
        return _outcome(data, rc, self.timed_out, tail, wall, self.settings)


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs (Linux /proc; none elsewhere, where nothing is frozen)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children", encoding="ascii") as handle:
                    children = [int(c) for c in handle.read().split()]
            except (OSError, ValueError):
                continue
            for child in children:
                if child not in found:
                    found.append(child)
                    todo.append(child)
    return found


def run_once(code: Path, original: Path, argv: list[str], settings: RunSettings, workdir: Path,
             precision: str | None = None, trace: bool = False) -> RunOutcome:
    """Run ``code`` as if it were ``original`` (cwd = its folder, argv = [original, *argv]) under the harness:
    warm-up, one turn of ``settings.blocks`` blocks, stop. ``trace``: then profile a few steps into
    ``workdir/TRACE_FILE`` (not analyzed here)."""
    session = Session(code, original, argv, settings, workdir, precision=precision, trace=trace)
    session.start()
    try:
        if session.ready():
            session.run(settings.blocks)
        return session.finish()
    finally:
        session.kill()


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
