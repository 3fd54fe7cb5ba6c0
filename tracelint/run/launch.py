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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

BOOTSTRAP = Path(__file__).with_name("bootstrap.py")
ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the tracelint package the child imports
TORCHRUN = ("torchrun",)
TORCH_MISSING = "tracelint run: needs torch in this Python environment (pip install torch-tracelint[verify])"
SETTINGS = ("minimal", "stacks", "full")
WINDOW_MARK = "-time-window."  # in the name of a time window's trace (bootstrap.py: <name>-time-window.<ns>)
SETTINGS_WORDS = {
    "minimal": "ops and kernels only: no source lines",
    "stacks": "with_stack: the least that gives findings their source lines",
    "full": "with_stack, record_shapes and profile_memory: the most, and the slowest",
}


class UsageProblem(ValueError):
    """The command line names no runnable script: a usage error (exit 2)."""


class EnvironmentProblem(Exception):
    """torch is not installed where the script would run (exit 2)."""


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
class RunOptions:
    """How the run is profiled (tracelint run's options)."""

    wait: int = 5  # unprofiled steps timed before the recorded ones (step 0 never is)
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
        """Optimizer steps before the recorded ones are exported: the first starts the profiler."""
        return 1 + self.wait + self.warmup + self.active


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


def execute(target: Target, options: RunOptions) -> Execution:
    """Run the target under the bootstrap, in a child sharing this terminal (its output passes through, Ctrl-C
    reaches it), and wait for it."""
    if not torch_installed():
        raise EnvironmentProblem(TORCH_MISSING)
    out = (options.out or default_out()).resolve()
    if out.is_dir() and any(out.iterdir()):
        raise UsageProblem(f"--out {options.out}: the folder holds files already; give a new or empty one (its "
                           "traces are read as one run)")
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tracelint-run-"))
    try:
        script = target.script
        config = {
            "root": str(ROOT), "out": str(out), "status": str(work / "status"), "name": target.name,
            "wait": options.wait, "warmup": options.warmup, "active": options.active,
            "settings": options.settings, "max_steps": options.max_steps,
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
