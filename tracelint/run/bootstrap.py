"""The child side of ``tracelint run``: runs a training script unmodified as ``__main__`` and profiles a few of its
optimizer steps with ``tracelint.profile``, driven by a global optimizer-step hook.

Started by tracelint.run.launch as ``python bootstrap.py CONFIG.json script|module TARGET [ARGS...]`` (under
torchrun, as each worker's "training script"; ``python bootstrap.py CONFIG.json launch TORCHRUN_ARGS...`` is the
launcher that rewrites torchrun's command line so). Run by path, not with ``-m``: the script then sees the
``sys.path`` that ``python train.py`` gives it (its own folder first); tracelint's root is on the path only while
this module imports what it needs of tracelint (no torch) before the script starts.

The clock
    One step is one optimizer step: a hook registered with ``register_optimizer_step_post_hook`` the moment the
    script imports ``torch.optim.optimizer`` (torch is never imported before the script imports it: a script that
    sets ``OMP_NUM_THREADS`` before ``import torch`` keeps that meaning). The first optimizer that steps is the
    clock (a GAN's second optimizer does not double the count); gradient accumulation steps the optimizer once per
    N micro-batches, and so does the clock. ``step_function`` (``module:qualname``) replaces the hook: each return
    of that function is a step (a function of ``__main__`` gets a decorator at compile time, lines unchanged; one of
    another module is wrapped when that module is imported).

The profile
    First the warm-up: from the first step on, each step is timed (one device synchronization per step) until
    ``tracelint.profile.settle`` sees the start-up costs settle (compilation, autotuning, the allocator, the
    DataLoader's workers), or for at most ``plan.settle`` steps; under torch.distributed the ranks agree through the
    job's c10d store on the step it ends at, so that they run one schedule. Then ``tracelint.profile`` starts with
    ``schedule(wait, warmup, active, repeat=1)`` and ``prof.step()`` is called at every step after: its first wait
    step (the profiler starts in it) is not timed, the other wait steps are timed unprofiled as one block (the
    ``tracelint`` record of the trace, with the warm-up's step times under ``warmup``), the active ones recorded and
    exported to ``out`` by ``on_trace_ready``. Then the profiler is stopped: from there on the hook only counts
    steps (bench/bench_run_hook.py measures what a step pays). What torch's profiler writes to stderr while it
    starts and stops (kineto's ``USDT: ... profiler_start`` lines, the "Profiler clears events" warning) is held
    back; anything else written meanwhile passes. No step within ``no_step_timeout`` seconds: a SIGALRM handler (it
    runs on the main thread, where the profiler's op callbacks must be installed) profiles a window of ``window_s``
    seconds instead.

The script's own profiler
    Two profilers cannot run in one process: torch has one profiler state, so the second's start or stop breaks
    the first (on an H200, torch 2.11, the script's profiler raised "Can't disable Kineto profiler when it's not
    running" at its exit after ``tracelint run`` had recorded inside it; on CPU, torch 2.13, both scripts of the
    TL704 pair crashed with SIGSEGV). So the moment the script makes a profiler of its own (``torch.profiler.
    profile``; ``torch.autograd.profiler.profile`` when it starts; whoever calls them, the script or a library),
    or when a profiler is already on where ours would start, the run steps aside: a profile of ours
    still open is stopped first (what it recorded is exported), none is started after, and the next steps are
    timed (one device synchronization per step, ``ASIDE_TIMED`` steps at most) with the script's profiler as it
    runs. The status's ``aside`` says where the script made it.

The end
    ``max_steps`` steps: ``StopRun`` (a BaseException: a script's ``except Exception`` lets it through) unwinds the
    script, its ``finally`` blocks run, and the process exits 0. A script that raises has its traceback printed
    once, as Python prints it (this module's frames left out), and exits 1. Either way a profile still recording
    is stopped and exported, and one status file is written (``status/<worker>.json``): steps, how the run ended,
    the traces written (each with the steps it holds), the project files it imported. A script that never started
    (no such module, a syntax error) writes its status and nothing else: the parent says so, once.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import importlib.abc
import importlib.util
import json
import os
import re
import signal
import sys
import tempfile
import time
import traceback
import types
import warnings
from datetime import timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
OPTIMIZER_MODULE = "torch.optim.optimizer"
SETTINGS = {  # --settings: what torch.profiler records beyond the op and kernel timeline
    "minimal": {},
    "stacks": {"with_stack": True},  # the least that gives a trace finding its source line
    "full": {"with_stack": True, "record_shapes": True, "profile_memory": True},
    # issue #40: the [memory] events and the stacks that name the line allocating what is never freed; no shapes
    "memory": {"with_stack": True, "profile_memory": True},
}


ASIDE_TIMED = 64  # steps timed after stepping aside for the script's own profiler; later ones are only counted
AGREE_TIMEOUT_S = 300  # how long a rank waits for the others' warm-up verdict of the same step
# What torch's profiler writes on stderr as it starts and stops: kineto's USDT probe lines (C++, straight to fd 2)
# and a UserWarning torch gives once when a profiler prepares a second cycle.
KINETO_NOTE = re.compile(rb"^USDT:[^\n]*\] profiler_(start|stop)\s*$")
CLEARS_EVENTS = "Warning: Profiler clears events"


class StopRun(BaseException):
    """Raised from the step hook once ``max_steps`` steps ran."""


class Driver:
    """Counts steps, times the warm-up, drives the profiler's schedule from the steps and remembers what happened
    for the status file.

    ``phase``: "before" (no step yet), "settling" (the warm-up's steps are timed), "window" (a time window is being
    profiled), "scheduled" (the schedule runs), "over" (the scheduled profile is exported; the profiler is gone),
    "aside" (the script runs its own profiler: steps are timed and counted, nothing is profiled)."""

    def __init__(self, config: dict, worker: str) -> None:
        self.config, self.worker = config, worker
        self.plan = config["plan"]
        self.max_steps = config.get("max_steps") or 0
        self.steps = 0
        self.clock = None  # the optimizer whose steps count
        self.prof = None
        self.phase = "before"
        self.windowed = False  # a time window was profiled (no step came in time)
        self.traces: list[dict] = []  # {"path", "kind": "steps" | "window", and for steps the ones it holds}
        self.first_step_s: float | None = None
        self.started = time.monotonic()
        self.note: str | None = None
        self.aside: dict | None = None  # where the script made its own profiler, and the steps timed after
        self.agreed = False  # aside during the warm-up: the other ranks were told this rank is done with it
        self.pid = os.getpid()  # a process forked from this one inherits the hook: its steps are not ours
        self.settle = None  # tracelint.profile.settle.Settle, from the first step
        self.tick_s: float | None = None  # when the last step of the warm-up ended (perf_counter, synchronized)
        self.started_after: int | None = None  # the step after which the scheduled profiler started
        self.stopping = False  # prof.stop() runs: an export now comes from the stop, not from the schedule
        self.stopped_at_step_end = False  # ... and the step it closes ended with an optimizer step

    # --- steps ----------------------------------------------------------------------------------------------------

    def optimizer_step(self, optimizer, args, kwargs) -> None:
        if self.pid != os.getpid():
            return
        if self.clock is None:
            self.clock = optimizer
        elif optimizer is not self.clock:
            return
        self.tick()

    def tick(self) -> None:
        self.steps += 1
        last = bool(self.max_steps) and self.steps >= self.max_steps
        if self.phase == "scheduled":
            if last:  # the step that just ended is the last: export it whole, enter none that will not run
                self.finish_profile(at_step_end=True)
            else:
                self.step_profiler()
        elif self.phase == "settling":
            self.settle_step()
        elif self.phase == "aside":
            self.aside_step()
        elif self.phase == "before":
            if self.first_step_s is None:
                self.first_step_s = time.monotonic() - self.started
            if self.config.get("no_step_timeout") and not self.windowed:
                signal.setitimer(signal.ITIMER_REAL, 0)  # a step came: no time window
            if self.plan["active"]:
                from tracelint.profile.settle import Settle

                self.settle = Settle(cap=self.plan["settle"])
                self.phase = "settling"
                self.settle_step()
            else:
                self.phase = "over"  # --max-steps 1: nothing to record
        if last:
            raise StopRun

    def settle_step(self) -> None:
        """A step of the warm-up ended: time it; once the warm-up is over (every rank's), start the profiler."""
        now = _synchronized_now()
        if self.tick_s is not None:
            self.settle.add((now - self.tick_s) * 1e3)
        self.tick_s = now
        if self.agree(self.settle.done):
            self.start_profile(scheduled=True)

    def agree(self, done: bool) -> bool:
        """Whether every rank of the job is done with its warm-up at this step (all start their profiler at the
        same step, or the schedules and the collective waits' exchange would not line up). Through the default
        c10d store: no collective on the script's groups."""
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
                return done
            store = dist.distributed_c10d._get_default_store()
            rank, world = dist.get_rank(), dist.get_world_size()
            keys = [f"tracelint-run/settle/{self.steps}/{r}" for r in range(world)]
            store.set(keys[rank], "1" if done else "0")
            store.wait(keys, timedelta(seconds=AGREE_TIMEOUT_S))
            return all(store.get(key) == b"1" for key in keys)
        except Exception as exc:  # noqa: BLE001 - never break the user's run over the agreement
            self.note = self.note or (f"the ranks could not agree on the end of the warm-up ({type(exc).__name__}: "
                                      f"{exc}): each started its profiler on its own")
            return done

    def step_profiler(self) -> None:
        exported = len(self.traces)
        try:
            with profiler_notes_held() if self.transition_ahead() else contextlib.nullcontext():
                self.prof.step()
        except Exception as exc:  # the profiler's failure (an export to a full disk) must not stop the run
            self.note = f"the profiler failed: {type(exc).__name__}: {exc}"
            self.finish_profile()
        if len(self.traces) > exported:  # the cycle was exported in that step: nothing of the profiler stays
            self.finish_profile()

    def transition_ahead(self) -> bool:
        """Whether the next prof.step() changes what the profiler does (only then does it print or warn)."""
        from torch.profiler import ProfilerAction

        prof = self.prof
        return prof.current_action != ProfilerAction.NONE or prof.schedule(prof.step_num + 1) != ProfilerAction.NONE

    # --- the script's own profiler -----------------------------------------------------------------------------

    def profiler_made(self, frame) -> None:
        """A profiler is being made, called from ``frame``: if the script (or a library of it) makes it, step
        aside. One made by tracelint's own code (its profile, and the legacy profiler torch makes inside it) is
        ours."""
        if self.pid != os.getpid() or self.aside is not None:
            return
        torch = sys.modules.get("torch")
        library = os.path.dirname(os.path.realpath(torch.__file__)) if torch is not None else None
        own = os.path.join(os.path.realpath(self.config["root"]), "tracelint")
        while frame is not None:
            path = os.path.realpath(frame.f_code.co_filename)
            if _inside(path, own) or path == os.path.realpath(__file__):
                return
            if library is None or not _inside(path, library):
                self.step_aside(f"{_shown(path)}:{frame.f_lineno}")
                return
            frame = frame.f_back

    def step_aside(self, where: str | None) -> None:
        """The script runs its own profiler: stop ours if it runs (before the script's starts), start none after,
        and time the steps from here."""
        self.aside = {"where": where, "after_step": self.steps, "first_step": None, "steps_ms": []}
        self.agreed = self.phase not in ("before", "settling")  # the ranks' warm-up verdict is behind them
        if self.config.get("no_step_timeout"):
            signal.setitimer(signal.ITIMER_REAL, 0)  # no time window either
        if self.prof is not None:
            self._stop()
        self.phase, self.tick_s = "aside", None

    def aside_step(self) -> None:
        if not self.agreed and self.plan["active"]:  # ranks still in their warm-up wait for this one's word
            self.agreed = self.agree(True)
        times = self.aside["steps_ms"]
        if len(times) >= ASIDE_TIMED:
            return
        now = _synchronized_now()
        if self.tick_s is not None:
            if not times:
                self.aside["first_step"] = self.steps
            times.append(round((now - self.tick_s) * 1e3, 3))
        self.tick_s = now

    # --- the profiler ---------------------------------------------------------------------------------------------

    def start_profile(self, *, scheduled: bool) -> None:
        import torch
        from torch.profiler import ProfilerActivity, schedule

        from tracelint.profile import profile
        from tracelint.trace.profiler import on_trace_ready

        if torch._C._autograd._profiler_enabled():  # on already, and not through a profiler we saw being made
            self.step_aside(None)
            return
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(ProfilerActivity.CUDA)
        kind = "steps" if scheduled else "window"
        name = self.worker if scheduled else f"{self.worker}-time-window"
        save = on_trace_ready(self.config["out"], worker_name=name, print_verdict=False)

        def handler(prof) -> None:
            entry = {"path": str(save(prof)), "kind": kind}
            if scheduled:
                entry.update(self.held_steps(prof))
            self.traces.append(entry)

        options = dict(SETTINGS[self.config["settings"]], activities=activities, on_trace_ready=handler)
        if scheduled:
            p = self.plan
            with warnings.catch_warnings():  # the plan's note says when it has no warm-up step (--max-steps)
                warnings.filterwarnings("ignore", message="Profiler won't be using warmup", category=UserWarning)
                options["schedule"] = schedule(wait=p["wait"], warmup=p["warmup"], active=p["active"], repeat=1)
            self.started_after = self.steps
        try:
            self.prof = profile(**options)
            if scheduled:
                self.prof.tracelint_extra = {"warmup": {**self.warmup_record(), "profiler_step_0": self.steps + 1}}
            with profiler_notes_held():
                self.prof.start()
        except Exception as exc:  # never break the user's run over the profiler
            self.note = f"the profiler did not start: {type(exc).__name__}: {exc}"
            self.prof, self.phase = None, "over"
            return
        self.phase = "scheduled" if scheduled else "window"

    def held_steps(self, prof) -> dict:
        """The steps an exported trace holds, as its ProfilerStep numbers and as the script's steps (ProfilerStep#N
        is step ``started_after + 1 + N``); ``complete``: its last step ran to its optimizer step."""
        p = self.plan
        first = p["wait"] + p["warmup"]
        if self.stopping:  # stopped while recording: the step under way is the last
            last, complete = prof.step_num, self.stopped_at_step_end
        else:  # the schedule exported the cycle on entering the step after it
            last, complete = prof.step_num - 1, True
        offset = self.started_after + 1
        return {"profiler_steps": [first, last], "first_step": first + offset, "last_step": last + offset,
                "complete": complete}

    def warmup_record(self) -> dict:
        """The warm-up's step times (tracelint.profile.settle's record), from step 2: the first only starts the
        clock."""
        if self.settle is None:
            return {"first_step": None, "steps_ms": [], "settled": False, "cap": 0}
        return self.settle.record(first_step=2)

    def finish_profile(self, *, at_step_end: bool = False) -> None:
        """Stop the profiler (a cycle still recording is exported). After a time window, steps that come later
        still get their scheduled profile; after the scheduled one the hook only counts steps."""
        self.phase = "before" if self.phase == "window" else "over"
        self._stop(at_step_end)

    def _stop(self, at_step_end: bool = False) -> None:
        prof, self.prof = self.prof, None
        if prof is not None:
            self.stopping, self.stopped_at_step_end = True, at_step_end
            try:
                with profiler_notes_held():
                    prof.stop()
            except Exception as exc:  # already stopped, or broken: the traces written so far stand
                self.note = self.note or f"stopping the profiler failed: {type(exc).__name__}: {exc}"
            finally:
                self.stopping = False

    def alarm(self, _signum, _frame) -> None:
        """SIGALRM: no step came within ``no_step_timeout`` (start a window), or the window is over (stop it)."""
        if self.phase == "window":
            self.finish_profile()
        elif self.phase == "before" and not self.steps and not self.windowed:
            if "torch" not in sys.modules:
                self.note = "no optimizer step within the time-out, and the script has not imported torch"
                return
            self.windowed = True
            self.start_profile(scheduled=False)
            if self.phase == "window":
                signal.setitimer(signal.ITIMER_REAL, float(self.config["window_s"]))

    def end(self) -> None:
        """The script is over: a profile still open is stopped (what it recorded is exported)."""
        if self.config.get("no_step_timeout"):
            signal.setitimer(signal.ITIMER_REAL, 0)
        self.phase = "over"
        self._stop()
        if self.aside is not None:
            self.stop_scripts_profiler()

    def stop_scripts_profiler(self) -> None:
        """The script's profiler still on as the run ends (``--max-steps`` cut it short before its ``stop()``):
        turn it off. A process that exits with it on after the profiler saw an exception raised inside an op's
        record (StopRun, from the optimizer step's hook) dies with SIGSEGV (torch 2.13, CPU)."""
        torch = sys.modules.get("torch")
        if torch is None or not torch._C._autograd._profiler_enabled():
            return
        try:
            with profiler_notes_held():
                torch.autograd.profiler._disable_profiler()
        except Exception as exc:  # noqa: BLE001 - the run is over either way
            self.note = self.note or f"stopping the script's profiler failed: {type(exc).__name__}: {exc}"
            return
        self.note = self.note or "the script's profiler was still on when the run ended: tracelint run stopped it"

    # --- the status file ------------------------------------------------------------------------------------------

    def unprofiled(self) -> dict:
        """The steps timed without the profiler (``first_step`` None: none were) and the warm-up before them."""
        timed = self.plan["wait"] - 1
        done = self.started_after is not None and timed > 0 and self.steps >= self.started_after + self.plan["wait"]
        return {"first_step": self.started_after + 2 if done else None, "steps": timed if done else 0,
                "warmup": self.warmup_record() if self.settle is not None else None,
                "profiler_started_after": self.started_after}

    def status(self, ended: str, exception: str | None = None, exit_code: int = 0) -> dict:
        if self.config.get("step_function"):
            clock = "function"
        else:
            clock = "optimizer" if self.clock is not None else None
        return {"worker": self.worker, "rank": _rank(), "steps": self.steps, "clock": clock, "ended": ended,
                "exception": exception, "exit_code": exit_code, "traces": self.traces, "window": self.windowed,
                "first_step_s": None if self.first_step_s is None else round(self.first_step_s, 3),
                "unprofiled": self.unprofiled(), "aside": self.aside, "note": self.note,
                "files": project_files(self.config)}


def _synchronized_now() -> float:
    """perf_counter once the device has finished the work queued so far (CUDA, when the script uses it)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():  # initialized implies available, and is the cheaper test
        torch.cuda.synchronize()
    return time.perf_counter()


@contextlib.contextmanager
def profiler_notes_held():
    """Run the block with fd 2 held in a file and torch's "Profiler clears events" warning off, then write back
    what was written there except kineto's ``USDT: ... profiler_start|stop`` lines: the profiler's notes, not the
    script's output. Only around the profiler's own calls: whatever a thread of the script writes meanwhile comes
    out after the call."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
        held = tempfile.TemporaryFile()
    except OSError:  # no fd 2, or no temporary folder: let the notes through
        yield
        return
    os.dup2(held.fileno(), 2)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=CLEARS_EVENTS, category=UserWarning)
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        held.seek(0)
        kept = b"".join(line for line in held.read().splitlines(keepends=True) if not KINETO_NOTE.match(line))
        held.close()
        while kept:
            kept = kept[os.write(2, kept):]


def _shown(path: str) -> str:
    """A path relative to the working directory when it is under it (as reports name files), else absolute."""
    cwd = os.getcwd()
    return os.path.relpath(path, cwd) if _inside(path, cwd) else path


def _rank() -> int | None:
    value = os.environ.get("RANK")
    return int(value) if value and value.isdigit() else None


def watch_profilers(driver: Driver) -> None:
    """Tell ``driver`` whenever a profiler is made (torch.profiler's ``_KinetoProfile``, the base of
    ``torch.profiler.profile`` and of tracelint.profile) or the legacy ``torch.autograd.profiler.profile``, which
    both drive underneath, prepares to record. Neither method warns with a ``stacklevel`` that the wrapper's frame
    would shift."""
    def wrap(cls, name: str) -> None:
        original = getattr(cls, name)

        @functools.wraps(original)
        def watched(self, *args, **kwargs):
            driver.profiler_made(sys._getframe(1))
            return original(self, *args, **kwargs)

        setattr(cls, name, watched)

    after_import("torch.profiler.profiler", lambda module: wrap(module._KinetoProfile, "__init__"))
    after_import("torch.autograd.profiler", lambda module: wrap(module.profile, "_prepare_trace"))


# --- hooks on imports -------------------------------------------------------------------------------------------------

class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``callbacks[name](module)`` right after module ``name`` is executed, before the importer binds it."""

    def __init__(self, callbacks: dict) -> None:
        self.callbacks = callbacks

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader, self.callbacks.pop(fullname))
        if not self.callbacks and self in sys.meta_path:
            sys.meta_path.remove(self)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, callback) -> None:
        self._loader, self._callback = loader, callback

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._callback(module)

    def __getattr__(self, name):  # get_source, get_filename, ... (linecache and inspect ask the loader)
        return getattr(self._loader, name)


def after_import(name: str, callback) -> None:
    """``callback(module)`` once ``name`` is imported (now, if it already is)."""
    if name in sys.modules:
        callback(sys.modules[name])
        return
    finder = next((f for f in sys.meta_path if isinstance(f, _AfterImport)), None)
    if finder is None:
        finder = _AfterImport({})
        sys.meta_path.insert(0, finder)
    finder.callbacks[name] = callback


def wrap_step(function, driver: Driver):
    """``function`` that ends a step each time it returns."""
    @functools.wraps(function)
    def step_function(*args, **kwargs):
        result = function(*args, **kwargs)
        driver.tick()
        return result

    return step_function


def decorate(tree: ast.Module, qualname: str, decorator: str) -> bool:
    """Add ``@decorator`` (outermost, inside a staticmethod/classmethod) to the def whose qualified name is
    ``qualname`` (``train_step``, ``Trainer.step``, ``main.<locals>.step``); line numbers stay as they are."""
    found = False

    def visit(body: list, prefix: str) -> None:
        nonlocal found
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{node.name}"
                if name == qualname:
                    first = node.decorator_list[0] if node.decorator_list else None
                    at = 1 if isinstance(first, ast.Name) and first.id in ("staticmethod", "classmethod") else 0
                    node.decorator_list.insert(at, ast.copy_location(ast.Name(decorator, ast.Load()), node))
                    found = True
                visit(node.body, f"{name}.<locals>.")
            else:  # if / for / while / with / try / match: their blocks define at the same level
                for field in ("body", "orelse", "finalbody"):
                    block = getattr(node, field, None)
                    if isinstance(block, list):
                        visit(block, prefix)
                for part in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
                    visit(part.body, prefix)

    visit(tree.body, "")
    ast.fix_missing_locations(tree)
    return found


# --- running the script -----------------------------------------------------------------------------------------------

STEP_DECORATOR = "__tracelint_step__"


def main_code(kind: str, target: str, step_function: str | None) -> tuple[types.CodeType, dict]:
    """The code of the script or module to run as ``__main__`` and the module attributes it runs with, as
    ``python train.py`` / ``python -m pkg.train`` would set them. With a ``step_function`` of ``__main__``, the
    code is compiled with its decorator."""
    if kind == "script":
        origin = os.path.abspath(target)
        with open(origin, "rb") as handle:
            source = handle.read()
        attrs = {"__file__": origin, "__spec__": None, "__loader__": None, "__package__": None,
                 "__cached__": None}
        argv0 = target
    else:
        spec = importlib.util.find_spec(target)
        if spec is None:
            raise ImportError(f"No module named {target}")
        if spec.submodule_search_locations is not None:  # a package: its __main__, as -m runs it
            spec = importlib.util.find_spec(f"{target}.__main__")
            if spec is None:
                raise ImportError(f"No module named {target}.__main__; '{target}' is a package and cannot be "
                                  "directly executed")
        origin = spec.origin
        source = spec.loader.get_source(spec.name)
        attrs = {"__file__": origin, "__spec__": spec, "__loader__": spec.loader, "__package__": spec.parent,
                 "__cached__": getattr(spec, "cached", None)}
        argv0 = origin
    main_qualname = _main_qualname(step_function, kind, target)
    if main_qualname is None:
        code = compile(source, origin, "exec", dont_inherit=True)
    else:
        tree = ast.parse(source, origin)
        if not decorate(tree, main_qualname, STEP_DECORATOR):
            raise LookupError(f"--step-function {step_function}: no def {main_qualname} in {origin}")
        code = compile(tree, origin, "exec", dont_inherit=True)
    return code, {**attrs, "__argv0__": argv0}


def _main_qualname(step_function: str | None, kind: str, target: str) -> str | None:
    """The qualname of ``step_function`` when it names a function of the code run as ``__main__``."""
    if not step_function:
        return None
    module, _, qualname = step_function.partition(":")
    own = {"__main__", target if kind == "module" else os.path.splitext(os.path.basename(target))[0]}
    return qualname if module in own else None


def run_main(code: types.CodeType, attrs: dict, argv: list[str], extra: dict) -> None:
    main = types.ModuleType("__main__")
    argv0 = attrs.pop("__argv0__")
    main.__dict__.update(attrs, __builtins__=__builtins__, **extra)
    sys.modules["__main__"] = main
    sys.argv = [argv0, *argv]
    exec(code, main.__dict__)


def project_files(config: dict) -> list[str]:
    """The Python files of the run's own project it imported: under the script's folder or the working directory,
    outside site-packages, virtual environments and tracelint."""
    roots = [os.path.realpath(r) for r in config["project_roots"]]
    skip = [os.path.realpath(p) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, config["root"]}]
    out = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not isinstance(path, str) or not path.endswith(".py"):
            continue
        real = os.path.realpath(path)
        parts = real.split(os.sep)
        if "site-packages" in parts or "dist-packages" in parts or any(_inside(real, s) for s in skip):
            continue
        if any(_inside(real, r) for r in roots):
            out.add(real)
    return sorted(out)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def print_script_traceback(exc: BaseException) -> None:
    """The traceback as ``python train.py`` prints it: the frames of this module left out."""
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == os.path.abspath(__file__):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def write_status(config: dict, worker: str, status: dict) -> None:
    folder = config["status"]
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{worker}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(status, handle)
    os.replace(path + ".tmp", path)


def worker_name(config: dict) -> str:
    rank = _rank()
    return config["name"] if rank is None else f"{config['name']}-rank{rank}"


def run(config: dict, kind: str, target: str, argv: list[str]) -> int:
    worker = worker_name(config)
    driver = Driver(config, worker)
    step_function = config.get("step_function")
    extra = {}
    try:
        code, attrs = main_code(kind, target, step_function)
    except (OSError, SyntaxError, ImportError, LookupError) as exc:  # the parent prints it, once
        write_status(config, worker, driver.status("not-started", one_line(exc), 2))
        return 2
    if step_function:
        module, _, qualname = step_function.partition(":")
        if _main_qualname(step_function, kind, target) is not None:
            extra[STEP_DECORATOR] = lambda function: wrap_step(function, driver)
        else:
            after_import(module, lambda m: _patch(m, qualname, driver))
    else:
        def hook(optimizer_module) -> None:
            optimizer_module.register_optimizer_step_post_hook(driver.optimizer_step)

        after_import(OPTIMIZER_MODULE, hook)
    watch_profilers(driver)
    if config.get("no_step_timeout"):
        signal.signal(signal.SIGALRM, driver.alarm)
        signal.setitimer(signal.ITIMER_REAL, float(config["no_step_timeout"]))
    sys.path[0] = os.path.dirname(attrs["__file__"]) if kind == "script" else os.getcwd()
    ended, exception, code_out = "returned", None, 0
    try:
        run_main(code, attrs, argv, extra)
    except StopRun:
        ended = "max-steps"
    except SystemExit as exc:
        status = exc.code
        if status in (None, 0):
            ended = "exit"
        else:
            ended, exception = "exit", f"SystemExit: {status}"
            if not isinstance(status, int):
                print(status, file=sys.stderr)
            code_out = status if isinstance(status, int) else 1
    except BaseException as exc:  # noqa: BLE001 - the script's own failure, KeyboardInterrupt included
        print_script_traceback(exc)
        ended, exception, code_out = "exception", one_line(exc), 1
    finally:
        driver.end()
    write_status(config, worker, driver.status(ended, exception, code_out))
    return code_out


def _patch(module, qualname: str, driver: Driver) -> None:
    owner, _, name = qualname.rpartition(".")
    holder = module
    for part in filter(None, owner.split(".")):
        holder = getattr(holder, part)
    setattr(holder, name, wrap_step(getattr(holder, name), driver))


def launch(config_path: str, config: dict, torchrun_args: list[str]) -> int:
    """torchrun with every worker's training script run under this bootstrap (torchrun's own parser reads its
    command line, so every option of the installed version means what it means there)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args
    from torch.distributed.run import run as torchrun

    args = parse_args(torchrun_args)
    if args.no_python:
        print("tracelint run: torchrun --no-python runs no Python script; tracelint run needs one", file=sys.stderr)
        return 2
    kind = "module" if args.module else "script"
    args.training_script_args = [config_path, kind, args.training_script, *args.training_script_args]
    args.training_script, args.module = os.path.abspath(__file__), False
    try:
        torchrun(args)
    except ChildFailedError:  # the failing worker printed its traceback; the parent names it from its status
        return 1
    return 0


def main(argv: list[str]) -> int:
    local_rank = [a for a in argv if a.startswith(("--local-rank=", "--local_rank="))]  # torchrun --use-env off
    argv = [a for a in argv if a not in local_rank]
    config_path, kind, rest = argv[0], argv[1], argv[2:]
    with open(config_path, encoding="utf-8") as handle:
        config = json.load(handle)
    if kind == "launch":
        return launch(config_path, config, rest)
    return run(config, kind, rest[0], [*local_rank, *rest[1:]])


def _import_tracelint(root: str) -> None:
    """tracelint's modules the run needs, imported from ``root`` (the parent's tracelint) before the script
    starts; none of them imports torch."""
    sys.path.insert(0, root)
    try:
        import tracelint.profile  # noqa: F401
        import tracelint.profile.settle  # noqa: F401
        import tracelint.trace.profiler  # noqa: F401
    finally:
        sys.path.remove(root)


if __name__ == "__main__":
    if sys.path and os.path.abspath(sys.path[0]) == HERE:
        sys.path.pop(0)  # this folder is no folder of the script's
    with open(sys.argv[1], encoding="utf-8") as _handle:
        _import_tracelint(json.load(_handle)["root"])
    sys.path.insert(0, "")  # replaced by the script's folder (or the cwd for a module) in run()
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
