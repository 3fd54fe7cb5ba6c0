"""The parent side of ``tracelint run``: read the command line the user gave (a script, ``-m`` module or a torchrun
command), start the script under the bootstrap (bootstrap.py) in a child process that shares this terminal, wait
for it, and gather what it left: its exit, its steps and the traces it wrote. Never imports torch."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tracelint.profile.settle import CAP, WINDOW

BOOTSTRAP = Path(__file__).with_name("bootstrap.py")
ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the tracelint package the child imports
TORCHRUN = ("torchrun",)
TORCH_MISSING = "tracelint run: needs torch in this Python environment (pip install torch-tracelint[verify])"
SETTINGS = ("minimal", "stacks", "full", "memory")
WINDOW_MARK = "-time-window."  # in the name of a time window's trace (bootstrap.py: <name>-time-window.<ns>)
SETTINGS_WORDS = {
    "minimal": "ops and kernels only: no source lines",
    "stacks": "with_stack: the least that gives findings their source lines",
    "full": "with_stack, record_shapes and profile_memory: the most, and the slowest",
    "memory": "with_stack and profile_memory: the memory timeline and the lines that allocate, without shapes",
}


class UsageProblem(ValueError):
    """The command line names no runnable script: a usage error (exit 2)."""


class EnvironmentProblem(Exception):
    """torch is not installed where the script would run (exit 2)."""


class NotStarted(Exception):
    """The script never started (no such module, a syntax error, an unreadable file): one error line, exit 2, and
    no report, for there is nothing to report on."""


@dataclass(frozen=True, slots=True)
class Target:
    """What to run: ``kind`` script (``target`` is its path), module (its name) or torchrun (``target`` is the
    script or module torchrun runs, ``launcher`` torchrun's own arguments before it); ``argv`` the script's."""

    kind: str
    target: str
    argv: tuple[str, ...] = ()
    launcher: tuple[str, ...] = ()

    @property
    def script(self) -> Path | None:
        """The script's file when the target is a script (directly or under torchrun)."""
        if self.kind == "script" or (self.kind == "torchrun" and "-m" not in self.launcher
                                     and "--module" not in self.launcher):
            return Path(self.target)
        return None

    @property
    def name(self) -> str:
        """What the traces are named after: the script's stem or the module's last part."""
        return Path(self.target).stem if self.target.endswith(".py") else self.target.rsplit(".", 1)[-1]

    def words(self) -> str:
        if self.kind == "module":
            return f"-m {self.target}"
        if self.kind == "torchrun":
            return f"torchrun {' '.join(self.launcher)} {self.target}".replace("  ", " ")
        return self.target


def parse_command(command: Sequence[str], module: str | None = None) -> Target:
    """``SCRIPT [--] ARGS``, ``-m MODULE`` (``module``) with ``ARGS``, ``torchrun TORCHRUN_ARGS SCRIPT ARGS`` or
    ``python -m torch.distributed.run ...``; a UsageProblem for anything else."""
    command = list(command)
    if module:
        return Target("module", module, tuple(_drop_separator(command)))
    if not command:
        raise UsageProblem("give a SCRIPT, -m MODULE, or a torchrun command")
    head = command[0]
    if head in TORCHRUN:
        return _torchrun(command[1:])
    if Path(head).name.startswith("python") and command[1:3] == ["-m", "torch.distributed.run"]:
        return _torchrun(command[3:])
    if Path(head).name.startswith("python"):
        raise UsageProblem(f"give the script itself (tracelint run train.py), not {head} ...")
    path = Path(head)
    if not path.is_file():
        raise UsageProblem(f"{head}: no such file")
    if path.suffix == ".ipynb":
        raise UsageProblem(f"{head}: a notebook; tracelint run runs a script: `jupyter nbconvert --to script {head}` "
                           f"makes one (`tracelint {head}` lints the notebook as it is)")
    if path.suffix != ".py":
        raise UsageProblem(f"{head}: not a Python script (.py)")
    return Target("script", head, tuple(_drop_separator(command[1:])))


def _drop_separator(args: list[str]) -> list[str]:
    return args[1:] if args[:1] == ["--"] else args


# torchrun's options that take no value (torch 2.13's parser); an unknown flag only misnames the target in words
_TORCHRUN_FLAGS = frozenset({"-m", "--module", "--standalone", "--no-python", "--no_python", "--run-path",
                             "--run_path", "--virtual-local-rank", "--virtual_local_rank"})


def _torchrun(args: list[str]) -> Target:
    """torchrun's arguments split at its training script: the first argument that is not an option or an option's
    value. Only to name the target: the launcher parses them again with torchrun's own parser."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _TORCHRUN_FLAGS:
            i += 1
        elif arg.startswith("-") and "=" not in arg:
            i += 2
        elif arg.startswith("-"):
            i += 1
        else:
            return Target("torchrun", arg, tuple(args[i + 1:]), tuple(args[:i]))
    raise UsageProblem("torchrun: no training script in the command")


@dataclass(frozen=True, slots=True)
class Plan:
    """The steps a run goes through, counted in the script's steps after the first (which only starts the count):
    up to ``settle`` steps timed one by one until the warm-up is over (tracelint.profile.settle), then the profiler
    starts and its schedule runs: ``wait`` steps without recording (the first untimed: the profiler starts in it; the
    others timed as one block), ``warmup``, ``active`` recorded. ``note``: why it is not what the options asked
    (--max-steps below the schedule)."""

    settle: int
    wait: int
    warmup: int
    active: int
    note: str | None = None

    def as_dict(self) -> dict:
        return {"settle": self.settle, "wait": self.wait, "warmup": self.warmup, "active": self.active}


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How the run is profiled (tracelint run's options)."""

    wait: int = 5  # steps without recording once the warm-up is over: the first starts the profiler, the rest timed
    warmup: int = 2
    active: int = 5
    settings: str = "stacks"
    max_steps: int | None = None
    no_step_timeout: float | None = 300.0
    window_s: float = 5.0
    step_function: str | None = None
    out: Path | None = None

    def __post_init__(self) -> None:
        if self.settings not in SETTINGS:
            raise UsageProblem(f"--settings {self.settings!r}: expected one of {', '.join(SETTINGS)}")
        if self.wait < 1 or self.warmup < 0 or self.active < 1:
            raise UsageProblem("tracelint run needs --wait >= 1, --warmup >= 0 and --active >= 1")
        if self.step_function is not None and ":" not in self.step_function:
            raise UsageProblem(f"--step-function {self.step_function!r}: expected module:qualname")

    @property
    def steps_needed(self) -> int:
        """The fewest steps after which the recorded ones are exported: the first, the warm-up detection's
        shortest, the schedule."""
        return 1 + WINDOW + self.wait + self.warmup + self.active

    @property
    def plan(self) -> Plan:
        """The schedule as asked, or what fits in ``max_steps``: first at least one recorded step, the profiler's
        start and one warm-up step, then the warm-up detection (a recording during start-up describes start-up),
        then the recorded, warm-up and timed steps as asked, and what is left to the detection."""
        asked = {"settle": CAP, "wait": self.wait, "warmup": self.warmup, "active": self.active}
        if self.max_steps is None:
            return Plan(**asked)
        left = self.max_steps - 1
        got = dict.fromkeys(asked, 0)
        for key, most in (("active", 1), ("wait", 1), ("warmup", 1), ("settle", WINDOW), ("active", None),
                          ("warmup", None), ("wait", None), ("settle", None)):
            add = min(left, (asked[key] if most is None else min(most, asked[key])) - got[key])
            if key == "settle" and got[key] + add < WINDOW:
                continue  # fewer steps than it needs to see anything: none
            if add > 0:
                got[key] += add
                left -= add
        plan = Plan(**got)
        if got["settle"] >= WINDOW and all(got[k] == asked[k] for k in ("wait", "warmup", "active")):
            return plan
        return Plan(**got, note=self._shrunk(plan))

    def _shrunk(self, plan: Plan) -> str:
        head = (f"--max-steps {self.max_steps} is below the schedule ({self.steps_needed} steps: the first, "
                f"{WINDOW} to see the warm-up settle, --wait {self.wait}, --warmup {self.warmup}, --active "
                f"{self.active})")
        if not plan.active:
            return f"{head}: nothing will be recorded: the first step only starts the count"
        last = self.max_steps
        first = last - plan.active + 1
        steps = f"step {last}" if first == last else f"steps {first}-{last}"
        timed = plan.wait - 1
        return (f"{head}: recording {steps} instead (--wait {plan.wait}, --warmup {plan.warmup}, --active "
                f"{plan.active}); " + (f"{timed} step{'s' if timed > 1 else ''} timed" if timed > 0 else
                                       "no step timed") + " without the profiler"
                + ("" if plan.settle else "; no warm-up detection"))


@dataclass
class Execution:
    """What the child process(es) did: the script's exit code, one status per process that got to write one,
    and the traces it wrote (the scheduled ones; a time window's only when there are none)."""

    target: Target
    options: RunOptions
    out: Path
    exit_code: int
    statuses: list[dict] = field(default_factory=list)
    traces: list[Path] = field(default_factory=list)
    window: bool = False
    wall_s: float = 0.0

    @property
    def failure(self) -> str | None:
        """Why the script failed ('ZeroDivisionError: division by zero', 'exit code 3', 'killed by signal 9'),
        None when it did not."""
        for status in sorted(self.statuses, key=lambda s: (s.get("rank") is None, s.get("rank") or 0)):
            if status.get("exception"):
                where = f" (rank {status['rank']})" if status.get("rank") is not None else ""
                return f"{status['exception']}{where}"
        if self.exit_code == 0:
            return None
        if self.exit_code < 0:
            return f"killed by signal {-self.exit_code}"
        return f"exit code {self.exit_code}"

    @property
    def steps(self) -> dict:
        """Optimizer steps per worker."""
        return {s["worker"]: s["steps"] for s in self.statuses}

    @property
    def files(self) -> list[Path]:
        """The project's Python files the script imported (every process's), the script first."""
        seen = sorted({f for s in self.statuses for f in s.get("files") or ()})
        script = self.target.script
        first = [str(script.resolve())] if script is not None else []
        return [Path(f) for f in dict.fromkeys([*first, *seen]) if Path(f).is_file()]


def default_out(now: float | None = None) -> Path:
    """``./tracelint_runs/<timestamp>/`` (a suffix when two runs start within the same second)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    base = Path("tracelint_runs") / stamp
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{stamp}-{n}")
    return path


def torch_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def execute(target: Target, options: RunOptions, note: Callable[[str], None] | None = None) -> Execution:
    """Run the target under the bootstrap, in a child sharing this terminal (its output passes through, Ctrl-C
    reaches it), and wait for it. ``note`` hears, before the script starts, why the run will not follow the options
    (--max-steps below the schedule). A script that never started raises NotStarted."""
    if not torch_installed():
        raise EnvironmentProblem(TORCH_MISSING)
    out = (options.out or default_out()).resolve()
    if out.is_dir() and any(out.iterdir()):
        raise UsageProblem(f"--out {options.out}: the folder holds files already; give a new or empty one (its "
                           "traces are read as one run)")
    made = next((p for p in reversed((out, *out.parents)) if not p.exists()), None)  # the first folder made here
    out.mkdir(parents=True, exist_ok=True)
    plan = options.plan
    if plan.note and note is not None:
        note(plan.note)
    work = Path(tempfile.mkdtemp(prefix="tracelint-run-"))
    try:
        script = target.script
        config = {
            "root": str(ROOT), "out": str(out), "status": str(work / "status"), "name": target.name,
            "plan": plan.as_dict(), "settings": options.settings, "max_steps": options.max_steps,
            "no_step_timeout": options.no_step_timeout, "window_s": options.window_s,
            "step_function": options.step_function,
            "project_roots": sorted({str(Path.cwd()), *([str(script.resolve().parent)] if script else [])}),
        }
        config_path = work / "config.json"
        config_path.write_text(json.dumps(config), encoding="utf-8")
        boot = [sys.executable, str(BOOTSTRAP), str(config_path)]
        if target.kind == "torchrun":
            command = [*boot, "launch", *target.launcher, target.target, *target.argv]
        else:
            command = [*boot, target.kind, target.target, *target.argv]
        started = time.perf_counter()
        code = _wait(command)
        statuses = _statuses(work / "status")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if statuses and all(s.get("ended") == "not-started" for s in statuses):
        _remove_empty(out, made)
        raise NotStarted(f"{target.words()} did not start: {statuses[0].get('exception')}")
    # The folder, not the statuses: a process that ended with os._exit, or that torchrun killed when another rank
    # failed, wrote no status but may have written its trace (the folder was new: every trace in it is this run's).
    written = sorted(out.glob("*.pt.trace.json.gz"))
    window = [path for path in written if WINDOW_MARK in path.name]
    stepped = [path for path in written if WINDOW_MARK not in path.name]
    if stepped:  # the steps came after all: the window profiled the script's set-up, which they supersede
        for path in window:
            path.unlink(missing_ok=True)
    return Execution(target, options, out, code, statuses, stepped or window,
                     window=not stepped and bool(window), wall_s=time.perf_counter() - started)


def _remove_empty(out: Path, made: Path | None) -> None:
    """Remove ``out`` and the folders above it up to ``made`` (the first this run made), while they are empty."""
    if made is None:
        return
    folder = out
    while True:
        try:
            folder.rmdir()
        except OSError:  # not empty (or gone): whatever is in it stays
            return
        if folder == made:
            return
        folder = folder.parent


def _wait(command: list[str]) -> int:
    """Run ``command`` in this process group (a terminal's Ctrl-C reaches it; this process ignores it meanwhile and
    reports what the script left) and forward a SIGTERM sent to this process."""
    proc = subprocess.Popen(command)

    def forward(signum, _frame) -> None:
        proc.send_signal(signum)

    previous = {sig: signal.signal(sig, handler) for sig, handler in
                ((signal.SIGINT, signal.SIG_IGN), (signal.SIGTERM, forward))}
    try:
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _statuses(folder: Path) -> list[dict]:
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            out.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return out
