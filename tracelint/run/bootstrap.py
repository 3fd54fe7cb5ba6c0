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
    At the first step ``tracelint.profile`` starts with ``schedule(wait, warmup, active, repeat=1)`` and
    ``prof.step()`` is called at every step after: the wait steps are timed unprofiled (the ``tracelint`` record
    of the trace), the active ones recorded and exported to ``out`` by ``on_trace_ready``. Then the profiler is
    stopped: from there on the hook only counts steps (bench/bench_run_hook.py measures what a step pays).
    No step within ``no_step_timeout`` seconds: a SIGALRM handler (it runs on the main thread, where the
    profiler's op callbacks must be installed) profiles a window of ``window_s`` seconds instead.

The end
    ``max_steps`` steps: ``StopRun`` (a BaseException: a script's ``except Exception`` lets it through) unwinds the
    script, its ``finally`` blocks run, and the process exits 0. A script that raises has its traceback printed
    once, as Python prints it (this module's frames left out), and exits 1. Either way a profile still recording
    is stopped and exported, and one status file is written (``status/<worker>.json``): steps, how the run ended,
    the traces written, the project files it imported.
"""
from __future__ import annotations

import ast
import functools
import importlib.abc
import importlib.util
import json
import os
import signal
import sys
import time
import traceback
import types

HERE = os.path.dirname(os.path.abspath(__file__))
OPTIMIZER_MODULE = "torch.optim.optimizer"
SETTINGS = {  # --settings: what torch.profiler records beyond the op and kernel timeline
    "minimal": {},
    "stacks": {"with_stack": True},  # the least that gives a trace finding its source line
    "full": {"with_stack": True, "record_shapes": True, "profile_memory": True},
}


class StopRun(BaseException):
    """Raised from the step hook once ``max_steps`` steps ran."""


class Driver:
    """Counts steps, drives the profiler's schedule from them and remembers what happened for the status file.

    ``phase``: "before" (no profile yet), "window" (a time window is being profiled), "scheduled" (the schedule
    runs), "over" (the scheduled profile is exported; the profiler is gone)."""

    def __init__(self, config: dict, worker: str) -> None:
        self.config, self.worker = config, worker
        self.max_steps = config.get("max_steps") or 0
        self.steps = 0
        self.clock = None  # the optimizer whose steps count
        self.prof = None
        self.phase = "before"
        self.windowed = False  # a time window was profiled (no step came in time)
        self.traces: list[dict] = []  # {"path", "kind": "steps" | "window"}
        self.first_step_s: float | None = None
        self.started = time.monotonic()
        self.note: str | None = None
        self.pid = os.getpid()  # a process forked from this one inherits the hook: its steps are not ours

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
        if self.phase == "scheduled":
            exported = len(self.traces)
            try:
                self.prof.step()
            except Exception as exc:  # the profiler's failure (an export to a full disk) must not stop the run
                self.note = f"the profiler failed: {type(exc).__name__}: {exc}"
                self.finish_profile()
            if len(self.traces) > exported:  # the cycle was exported in that step: nothing of the profiler stays
                self.finish_profile()
        elif self.phase == "before":
            if self.first_step_s is None:
                self.first_step_s = time.monotonic() - self.started
            if self.config.get("no_step_timeout") and not self.windowed:
                signal.setitimer(signal.ITIMER_REAL, 0)  # a step came: no time window
            self.start_profile(scheduled=True)
        if self.max_steps and self.steps >= self.max_steps:
            raise StopRun

    # --- the profiler ---------------------------------------------------------------------------------------------

    def start_profile(self, *, scheduled: bool) -> None:
        import torch
        from torch.profiler import ProfilerActivity, schedule

        from tracelint.profile import profile
        from tracelint.trace.profiler import on_trace_ready

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(ProfilerActivity.CUDA)
        kind = "steps" if scheduled else "window"
        name = self.worker if scheduled else f"{self.worker}-time-window"
        save = on_trace_ready(self.config["out"], worker_name=name, print_verdict=False)

        def handler(prof) -> None:
            self.traces.append({"path": str(save(prof)), "kind": kind})

        options = dict(SETTINGS[self.config["settings"]], activities=activities, on_trace_ready=handler)
        if scheduled:
            c = self.config
            options["schedule"] = schedule(wait=c["wait"], warmup=c["warmup"], active=c["active"], repeat=1)
        try:
            self.prof = profile(**options)
            self.prof.start()
        except Exception as exc:  # never break the user's run over the profiler
            self.note = f"the profiler did not start: {type(exc).__name__}: {exc}"
            self.prof, self.phase = None, "over"
            return
        self.phase = "scheduled" if scheduled else "window"

    def finish_profile(self) -> None:
        """Stop the profiler (a cycle still recording is exported). After a time window, steps that come later
        still get their scheduled profile; after the scheduled one the hook only counts steps."""
        self.phase = "before" if self.phase == "window" else "over"
        self._stop()

    def _stop(self) -> None:
        prof, self.prof = self.prof, None
        if prof is not None:
            try:
                prof.stop()
            except Exception as exc:  # already stopped, or broken: the traces written so far stand
                self.note = self.note or f"stopping the profiler failed: {type(exc).__name__}: {exc}"

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

    # --- the status file ------------------------------------------------------------------------------------------

    def status(self, ended: str, exception: str | None = None, exit_code: int = 0) -> dict:
        if self.config.get("step_function"):
            clock = "function"
        else:
            clock = "optimizer" if self.clock is not None else None
        return {"worker": self.worker, "rank": _rank(), "steps": self.steps, "clock": clock, "ended": ended,
                "exception": exception, "exit_code": exit_code, "traces": self.traces, "window": self.windowed,
                "first_step_s": None if self.first_step_s is None else round(self.first_step_s, 3),
                "note": self.note, "files": project_files(self.config)}


def _rank() -> int | None:
    value = os.environ.get("RANK")
    return int(value) if value and value.isdigit() else None


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
    except (OSError, SyntaxError, ImportError, LookupError) as exc:
        print(f"tracelint run: {one_line(exc)}", file=sys.stderr)
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
