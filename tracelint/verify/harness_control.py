"""The parent side of the measured runs: start the harness in a subprocess, talk to it over two pipes (run a turn
of blocks, stop, profile), pause it while the other side of a comparison runs, reap its process group, and turn
what it left behind into a RunOutcome. Never imports torch.

Pausing (``RunSettings.pause``): a side that waits for its next turn must not compete with the side being timed.
``group`` (the default) stops the harness's whole process group with SIGSTOP: the harness and its threads (a
DataLoader's pin-memory thread, the CUDA driver's), and every process it started (DataLoader workers, which
would otherwise go on filling their prefetch queues). SIGCONT resumes it before its next turn, which begins with
untimed re-warm steps. ``workers`` stops only the harness's descendant processes as found through
``/proc/PID/task/TID/children`` (the method before issue #26: that file is missing on some kernels, and then
nothing is stopped); ``none`` stops nothing. Whatever the mode, the CPU time the waiting side's process group
uses while the other side runs is measured (``Session.idle``)."""
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
    each after ``resume_warmup`` untimed steps (and at least ``resume_warmup_s`` seconds of them), for at least
    ``blocks`` rounds, and goes on until the 95 % interval of the speedup is within ±``target`` or ``budget_s``
    seconds of alternating have passed. ``processes``: ``persistent`` (one process per side for the whole
    comparison, the waiting one paused as ``pause`` says) or ``fresh`` (a new process for every turn: ``warmup``
    steps, then ``fresh_blocks`` blocks whose mean is the turn's block). ``min_effect``: the smallest speedup
    worth a claim (stats.py). ``pairs`` (persistent only): the comparison's rounds are spread over this many pairs
    of processes, both sides restarted (and warmed up, untimed) between pairs, because a process's step time is
    set when it starts (stats.py; measure.py's ``compare`` has the schedule)."""

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
    resume_warmup_s: float = 0.05
    max_rounds: int = 400
    min_effect: float = 0.02
    processes: str = "persistent"  # or "fresh"
    pause: str = "group"  # the waiting side: "group" (SIGSTOP its process group), "workers", "none"
    fresh_blocks: int = 2
    pairs: int = 3

    def __post_init__(self) -> None:
        if self.warmup < 1 or self.steps < 1 or self.blocks < 2:
            raise ValueError("verify needs warmup >= 1, steps >= 1 and blocks >= 2")
        if self.budget_s < 0 or not 0 < self.target < 1 or self.resume_warmup < 0 or self.resume_warmup_s < 0:
            raise ValueError("verify needs budget >= 0, 0 < target < 1 and resume_warmup >= 0")
        if not 0 <= self.min_effect < 1:
            raise ValueError("verify needs 0 <= min_effect < 1")
        if self.processes not in PROCESSES or self.pause not in PAUSES or self.fresh_blocks < 1:
            raise ValueError(f"verify needs processes in {PROCESSES}, pause in {PAUSES} and fresh_blocks >= 1")
        if self.pairs < 1:
            raise ValueError("verify needs pairs >= 1")

    @property
    def planned_pairs(self) -> int:
        """The pairs of processes a comparison runs: ``pairs``, or 1 with fresh processes (each turn has its own)."""
        return 1 if self.processes == "fresh" else self.pairs

    @property
    def needed_steps(self) -> int:
        """Steps a script must run for the minimum comparison: warm-up, then ``blocks`` turns (in one process),
        or one fresh turn."""
        if self.processes == "fresh":
            return self.warmup + self.resume_warmup + self.steps * self.fresh_blocks
        return self.warmup + (self.resume_warmup + self.steps) * self.blocks

    @property
    def method(self) -> str:
        """How the two sides run, in words (the report states it)."""
        if self.processes == "fresh":
            return (f"fresh processes: every turn a new process ({self.warmup} warm-up steps, then the mean of "
                    f"{self.fresh_blocks} blocks), in the order B V, V B, ...")
        waiting = {"group": "paused (SIGSTOP of its whole process group: harness, threads, DataLoader workers)",
                   "workers": "with its DataLoader workers stopped (the harness and its threads running)",
                   "none": "not paused"}[self.pause]
        pairs = ("one pair of persistent processes" if self.pairs == 1 else
                 f"{self.pairs} pairs of persistent processes, one after the other (both sides restarted and warmed "
                 f"up {self.warmup} steps, untimed, for each pair; the budget shared between them)")
        return (f"{pairs} alternating B V, V B, ...; the waiting one {waiting}, re-warmed "
                f"{self.resume_warmup} steps (at least {self.resume_warmup_s:g} s) before each block")


PROCESSES = ("persistent", "fresh")
PAUSES = ("group", "workers", "none")


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


@dataclass(slots=True)
class Idle:
    """What a side did while it waited for its turn: CPU seconds of its whole process group, over wall seconds
    waited, and the most processes one pause stopped (for ``workers``: 0 where the kernel lists no children)."""

    cpu_s: float = 0.0
    wall_s: float = 0.0
    pauses: int = 0
    stopped: int = 0

    @property
    def cpu_ms_per_s(self) -> float | None:
        return self.cpu_s * 1000.0 / self.wall_s if self.wall_s > 0 else None

    def to_dict(self) -> dict:
        per_s = self.cpu_ms_per_s
        return {"cpu_ms_per_s": None if per_s is None else round(per_s, 2), "cpu_s": round(self.cpu_s, 3),
                "wall_s": round(self.wall_s, 3), "pauses": self.pauses, "stopped_processes": self.stopped}


class Session:
    """One harness process under the parent's control: ``start`` it, wait until it is ``ready`` (warmed up), ask
    it for turns of blocks (``run``), then ``finish`` it (stop, or profile and stop). ``pause``/``resume`` keep
    it quiet between turns (``RunSettings.pause``, see the module docstring) and account for what it used
    meanwhile (``idle``). A failure at any point leaves ``failed`` set and ``finish`` returns the outcome that says
    why."""

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
        self.idle = Idle()
        self._stopped: list[int] = []
        self._paused_at: tuple[float, float] | None = None
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
            "resume_warmup_s": self.settings.resume_warmup_s,
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

    # --- pausing ------------------------------------------------------------------------------------------------

    def pause(self) -> None:
        if self.frozen or self.proc is None or self.proc.poll() is not None:
            return
        mode = self.settings.pause
        if mode == "group":
            members = _group_pids(self.proc.pid)
            if _signal_group(self.proc.pid, signal.SIGSTOP):
                self._stopped = [self.proc.pid]
                self.idle.stopped = max(self.idle.stopped, len(members))
                _wait_stopped(members)
        elif mode == "workers":
            self._stopped = [pid for pid in _descendants(self.proc.pid) if _signal(pid, signal.SIGSTOP)]
            self.idle.stopped = max(self.idle.stopped, len(self._stopped))
            _wait_stopped(self._stopped)
        self._paused_at = (time.perf_counter(), _group_cpu_s(self.proc.pid))
        self.frozen = True

    def resume(self) -> None:
        if not self.frozen:
            return
        if self._paused_at is not None and self.proc is not None:
            started, cpu = self._paused_at
            self.idle.wall_s += time.perf_counter() - started
            self.idle.cpu_s += max(0.0, _group_cpu_s(self.proc.pid) - cpu)
            self.idle.pauses += 1
            self._paused_at = None
        if self.settings.pause == "group" and self._stopped:
            _signal_group(self.proc.pid, signal.SIGCONT)
        else:
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


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _group_stats(pgid: int) -> list[tuple[int, float]]:
    """(pid, CPU seconds used so far, all threads) of every process of the process group ``pgid``, from /proc
    (empty where there is none)."""
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        fields = _stat(name) if name.isdigit() else []
        # after the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
        if len(fields) > 12 and fields[2] == str(pgid):
            ticks = (int(fields[11]) + int(fields[12])) / _TICK
            found.append((int(name), _threads_cpu_s(name, ticks)))
    return found


def _stat(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state first); empty when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _threads_cpu_s(pid: str, fallback: float) -> float:
    """The CPU seconds of a process's threads, counted in nanoseconds (/proc/PID/task/TID/schedstat) where the
    kernel gives them: utime + stime come in clock ticks (10 ms), and a pause of a group of seven processes would
    read up to 70 ms of CPU it never used."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as handle:
                total += int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return fallback
    return total / 1e9


def _wait_stopped(pids: list[int], timeout: float = 0.2) -> None:
    """Wait until every process in ``pids`` has stopped (SIGSTOP arrives asynchronously): the other side's turn
    must not begin while this one still runs, and the CPU it uses from here on is what it uses while waiting."""
    deadline = time.monotonic() + timeout
    todo = list(pids)
    while todo and time.monotonic() < deadline:
        todo = [pid for pid in todo if (_stat(pid) or ["X"])[0] not in ("T", "t", "Z", "X")]
        if todo:
            time.sleep(0.001)


def _group_pids(pgid: int) -> list[int]:
    return [pid for pid, _ in _group_stats(pgid)]


def _group_cpu_s(pgid: int) -> float:
    """CPU seconds the living processes of the group have used (a process that exited meanwhile drops out)."""
    return sum(cpu for _, cpu in _group_stats(pgid))


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
