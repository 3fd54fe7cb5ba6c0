"""The child side of ``tracelint verify``: runs one variant of a training script as ``__main__`` under a step clock,
times blocks of steps on the parent's command, and writes what it measured as JSON.

Started by tracelint.verify.harness_control as ``python /path/to/harness.py CONFIG.json`` with the working directory set
to the script's folder. Run by path, not with ``-m``, so that the script sees the ``sys.path`` it would see when run as
``python train.py`` (its own folder first, nothing of ours). For the same reason this module imports nothing from
tracelint, only the standard library and (inside functions) torch and numpy; the runtime of verify's device-side
rewrites (deferred.py, beside this file) is loaded by path.

The clock
    A tick is one optimizer step: a global hook (``register_optimizer_step_post_hook``) sees every ``step()``; the
    first optimizer that steps is the clock (a GAN's second optimizer or a scheduler's do not double the count).
    Fallback: a script that calls ``Tensor.backward()`` ``BACKWARD_FALLBACK`` times without any optimizer step
    (a hand-written SGD update, ``torch.autograd.grad`` loops excepted) switches the clock to backward calls.
    A script with neither never ticks: the parent reports "no steps found" when it ends or times out.

Timing, in turns
    Skip ``warmup`` ticks (at least 1: a tick marks the end of a step, so timing starts at the end of one). Then,
    with a control channel (``config["control"]``: two pipe descriptors), report ``ready`` and wait for a command:
    ``run N`` runs one *turn*: ``resume_warmup`` untimed ticks (re-warming what the pause between turns left cold,
    and going on until ``resume_warmup_s`` seconds have passed), then synchronize the device once, then N blocks
    of ``steps`` ticks, each closed by one synchronize; the block means go back to the parent (``blocks`` event)
    and the harness waits for the next command; ``stop`` ends the run, ``trace`` profiles a few steps and ends it.
    The parent alternates turns of the baseline's and a variant's process and pauses the one that waits (its
    whole process group, see run.py).
    Without a control channel (the in-process tests), one turn of ``blocks`` blocks runs right after warm-up.
    Never a synchronize per step: that would make the baseline synchronous too and hide exactly the host syncs a
    fix removes.

Loss
    The last scalar passed to ``Tensor.backward()`` is read once per block boundary (it is the run's loss curve, at
    a resolution that costs nothing) and a non-finite value stops the run as ``diverged``.

Profiling (``--trace``)
    On ``trace`` (or, without a control channel, with ``config["trace"]`` after the blocks) the run writes its
    timing result (``status: ok``), then profiles ``TRACE_WARMUP`` + ``TRACE_ACTIVE`` more steps with
    torch.profiler, one ``prof.step()`` per tick, exports the Chrome trace to ``config["trace"]`` and stops. The
    timed blocks never run under the profiler, and a profiling failure (the script ends or raises first, the
    profiler raises) is recorded under ``trace`` without touching the timing.

Precision variants (applied by the harness, not by editing the script)
    ``tf32``: ``torch.backends.cuda.matmul.allow_tf32 = True`` and ``cudnn.allow_tf32 = True`` before the script
    runs and again at every tick, so a script that turns TF32 off during setup (``allow_tf32 = False`` in
    ``train()``) is overridden from the first step on; warm-up absorbs the steps before. The legacy setters on
    purpose: on torch 2.9+ they are safe after the script used either API, while ``set_float32_matmul_precision``
    before a script's legacy ``allow_tf32 = False`` makes its later ``get_float32_matmul_precision()`` raise
    ("mix of the legacy and new APIs"; tried on torch 2.13).
    ``bf16``: every top-level ``nn.Module`` call *of the training process on the training device* runs under
    ``torch.autocast(device, dtype=torch.bfloat16)`` and its bf16 outputs are cast back to float32, so loss code
    outside the model sees float32 as with the usual ``with autocast(): loss = ...`` recipe. Never in another
    process (DataLoader workers forked from this one run torchvision transforms, which are nn.Modules: entering a
    CUDA autocast there would initialize CUDA in a forked child and crash it) and never around a module that runs
    elsewhere (a transform or a metric on the CPU during a GPU run): the module's first parameter or buffer, else
    its first tensor argument, says where it runs. Limits: matmuls outside any module call (``x @ w`` in the loop)
    stay in float32; a script that already runs under autocast is left as it is; a module whose output must stay
    bf16 would get float32.
"""
from __future__ import annotations

import builtins
import itertools
import json
import math
import os
import platform
import sys
import time
import traceback
import types

BACKWARD_FALLBACK = 50  # backward calls without an optimizer step before the clock counts backward calls instead
TRACE_WARMUP, TRACE_ACTIVE = 1, 3  # profiled steps after the timed blocks: one to warm the profiler, three recorded


class StopRun(BaseException):
    """Raised from the step hook after the last block: a BaseException, so a script's ``except Exception`` lets it
    through to the bootstrap."""


class Control:
    """The parent's side of the conversation, seen from the harness: JSON lines on two pipes."""

    def __init__(self, commands_fd: int, events_fd: int) -> None:
        self.commands = os.fdopen(commands_fd, "r", encoding="utf-8")
        self.events = os.fdopen(events_fd, "w", encoding="utf-8")

    def send(self, message: dict) -> None:
        self.events.write(json.dumps(message) + "\n")
        self.events.flush()

    def receive(self) -> dict:
        line = self.commands.readline()
        return json.loads(line) if line.strip() else {"cmd": "stop"}  # the parent is gone: end the run


class Clock:
    """Counts steps and times blocks of them in turns; ``sync`` waits for the device, ``write`` stores the result,
    ``control`` (optional) is the parent's command channel."""

    def __init__(self, *, warmup: int, steps: int, blocks: int, sync, write, read_loss=float,
                 every_tick=None, tracer=None, control=None, resume_warmup: int = 1, resume_warmup_s: float = 0.0,
                 on_tick=None) -> None:
        self.warmup, self.steps, self.blocks = warmup, steps, blocks
        self.sync, self.write, self.read_loss = sync, write, read_loss
        self.every_tick = every_tick  # re-asserts a precision variant the script may have undone
        self.on_tick = on_tick  # the rewrites' runtime (deferred.py): reads deferred values at its interval
        self.tracer = tracer  # profiles a few steps once the blocks are timed (--trace)
        self.control = control
        self.resume_warmup, self.resume_warmup_s = resume_warmup, resume_warmup_s
        self.rewarm_until = 0.0  # a re-warm goes on until this perf_counter() time as well
        self.trace: dict | None = None  # the profiling state once it began: status running | ok | failed
        self.ticks = 0
        self.source: str | None = None  # "optimizer" or "backward", fixed by the first that qualifies
        self.clock_optimizer = None
        self.backward_calls = 0
        self.last_loss = None
        self.block_means: list[float] = []
        self.losses: list[float | None] = []
        self.turns = 0
        self.done = False
        # the state machine: "warmup" (untimed ticks before a turn) or "timed" (inside a block)
        self.phase, self.countdown, self.turn_left = "warmup", warmup, 0
        self.block_start = 0.0
        self.turn_first = 0  # index in block_means of the current turn's first block

    # --- events -------------------------------------------------------------------------------------------------

    def optimizer_step(self, optimizer) -> None:
        if self.source is None:
            self.source, self.clock_optimizer = "optimizer", optimizer
        if self.source == "optimizer" and optimizer is self.clock_optimizer:
            self.tick()

    def backward(self, tensor) -> None:
        if getattr(tensor, "numel", None) is not None and tensor.numel() == 1:
            self.last_loss = tensor.detach()
        self.backward_calls += 1
        if self.source is None and self.backward_calls >= BACKWARD_FALLBACK:
            self.source = "backward"
        if self.source == "backward":
            self.tick()

    # --- timing -------------------------------------------------------------------------------------------------

    def tick(self) -> None:
        if self.done:  # the script swallowed StopRun and went on: end the process now
            _exit(0)
        if self.every_tick is not None:
            self.every_tick()
        self.ticks += 1
        if self.on_tick is not None:
            self.on_tick(self.ticks)
        if self.trace is not None:
            self._trace_tick()
            return
        self.countdown -= 1
        if self.countdown > 0:
            return
        if self.phase == "warmup" and time.perf_counter() < self.rewarm_until:
            return  # a short step: re-warm for the stated time too
        if self.phase == "timed":
            self._end_block()
        elif self.turns == 0 and self.turn_left == 0:
            self._warmed_up()
        else:
            self._start_timing()

    def _warmed_up(self) -> None:
        """The first warm-up is over: wait for the parent's first command (or, alone, time ``blocks`` blocks)."""
        loss = self._loss()
        if loss is not None and not math.isfinite(loss):
            self.finish("diverged", loss=loss)
        self.write(self.result("running"))  # a timeout from now on says how far the run got
        if self.control is None:
            self.turn_left = self.blocks
            self._start_timing()
        else:
            # Nothing of this process may still run on the device while the other side is timed: the warm-up's
            # queued kernels would share the GPU with the other side's first block. (Every block ends synchronized.)
            self.sync()
            self.control.send({"event": "ready", "ticks": self.ticks})
            self._await_command()

    def _await_command(self) -> None:
        command = self.control.receive()
        kind = command.get("cmd")
        if kind == "run":
            self.turn_left = max(1, int(command.get("blocks", 1)))
            if self.resume_warmup > 0:
                self.phase, self.countdown = "warmup", self.resume_warmup
                self.rewarm_until = time.perf_counter() + self.resume_warmup_s
            else:
                self._start_timing()
        elif kind == "trace" and self.tracer is not None:
            self._trace_start()
        else:
            self.finish("ok")

    def _start_timing(self) -> None:
        self.sync()
        self.turn_first = len(self.block_means)
        self.phase, self.countdown = "timed", self.steps
        self.block_start = time.perf_counter()

    def _end_block(self) -> None:
        loss = self._loss()
        self.sync()
        now = time.perf_counter()
        self.block_means.append((now - self.block_start) * 1000.0 / self.steps)
        self.losses.append(loss)
        self.block_start = now
        if loss is not None and not math.isfinite(loss):
            self.finish("diverged", loss=loss)
        self.turn_left -= 1
        if self.turn_left > 0:
            self.countdown = self.steps
            return
        self.turns += 1
        self.phase = "warmup"
        if self.control is None:
            if self.tracer is None:
                self.finish("ok")
            self._trace_start()
            return
        self.control.send({"event": "blocks", "block_ms": self.block_means[self.turn_first:],
                           "losses": self.losses[self.turn_first:], "ticks": self.ticks})
        self._await_command()

    # --- profiling (after the timed blocks) -----------------------------------------------------------------------

    def _trace_start(self) -> None:
        self.trace = {"status": "running", "file": None, "reason": None}
        self.write(self.result("ok"))  # the timing is safe whatever the profiling does next
        try:
            self.tracer.start()
        except Exception as exc:
            self.trace_failed(f"the profiler did not start: {_one_line(exc)}")

    def _trace_tick(self) -> None:
        try:
            done = self.tracer.step()
        except Exception as exc:
            self.trace_failed(f"the profiler raised {_one_line(exc)}")
        if done:
            self.trace = {"status": "ok", "file": self.tracer.path, "reason": None}
            self.finish("ok")

    def trace_failed(self, reason: str) -> None:
        """Record why profiling failed and stop; the timing result stays ``ok``."""
        self.trace = {"status": "failed", "file": None, "reason": reason}
        self.finish("ok")

    @property
    def tracing(self) -> bool:
        return self.trace is not None and self.trace["status"] == "running"

    def _loss(self) -> float | None:
        if self.last_loss is None:
            return None
        try:
            return self.read_loss(self.last_loss)
        except Exception:  # an exotic loss type: the curve is optional
            return None

    def finish(self, status: str, **extra) -> None:
        self.done = True
        self.write({**self.result(status), **extra})
        raise StopRun

    def result(self, status: str) -> dict:
        result = {
            "status": status, "clock": self.source, "ticks": self.ticks, "backward_calls": self.backward_calls,
            "warmup": self.warmup, "steps": self.steps, "blocks": self.blocks, "turns": self.turns,
            "block_ms": list(self.block_means), "losses": list(self.losses),
        }
        if self.trace is not None:
            result["trace"] = dict(self.trace)
        return result


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class Tracer:
    """torch.profiler over ``TRACE_WARMUP`` + ``TRACE_ACTIVE`` steps, exported as a gzipped Chrome trace."""

    def __init__(self, path: str, device: str) -> None:
        self.path, self.device = path, device
        self.profiler = None
        self.steps = 0
        self.exported = False

    def start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU]
        if self.device == "cuda" and torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self.profiler = profile(activities=activities, with_stack=False, on_trace_ready=self._export,
                                schedule=schedule(wait=0, warmup=TRACE_WARMUP, active=TRACE_ACTIVE, repeat=1))
        self.profiler.start()

    def _export(self, prof) -> None:
        prof.export_chrome_trace(self.path)  # a .gz name: torch writes it gzipped
        self.exported = True

    def step(self) -> bool:
        """Called at the end of each step; True once the recorded steps are exported."""
        self.profiler.step()
        self.steps += 1
        if self.steps < TRACE_WARMUP + TRACE_ACTIVE:
            return False
        self.profiler.stop()
        if not self.exported:
            raise RuntimeError("the profiler wrote no trace")
        return True


def _exit(code: int) -> None:
    """Leave without interpreter teardown: a training script's DataLoader workers and CUDA context can take
    seconds to shut down, and the parent reaps the process group anyway."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# --- torch-facing setup -------------------------------------------------------------------------------------------

def _seed(seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass


def _force_tf32() -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def _autocast_modules(device_type: str) -> None:
    """Run every top-level nn.Module call of this process on ``device_type`` under bf16 autocast; see the module
    docstring for where it does not and for the limits."""
    import torch

    original_call = torch.nn.Module.__call__
    training_process = os.getpid()

    def to_float32(value):
        if isinstance(value, torch.Tensor):
            return value.float() if value.dtype == torch.bfloat16 else value
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return tuple(to_float32(v) for v in value)
        if isinstance(value, list):
            return [to_float32(v) for v in value]
        if isinstance(value, dict):
            return {k: to_float32(v) for k, v in value.items()}
        return value

    def call(self, *args, **kwargs):
        if os.getpid() != training_process:  # a DataLoader worker (forked) running a transform: never autocast
            return original_call(self, *args, **kwargs)
        if torch.is_autocast_enabled(device_type):  # a nested module, or a script that chose its own autocast
            return original_call(self, *args, **kwargs)
        where = module_device(self, args, kwargs)
        if where is None or where.type != device_type:  # a module that runs elsewhere (a CPU transform, a metric)
            return original_call(self, *args, **kwargs)
        with torch.autocast(device_type, dtype=torch.bfloat16):
            out = original_call(self, *args, **kwargs)
        return to_float32(out)

    torch.nn.Module.__call__ = call


def module_device(module, args=(), kwargs=None):
    """Where a module call runs: its first parameter's or buffer's device, else its first tensor argument's (one
    level into lists, tuples and dicts); None when neither says."""
    import torch

    for tensors in (module.parameters(), module.buffers()):
        first = next(tensors, None)
        if first is not None:
            return first.device
    for value in itertools.chain(args, (kwargs or {}).values()):
        inner = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else (value,)
        for item in inner:
            if isinstance(item, torch.Tensor):
                return item.device
    return None


def _runtime(steps: int):
    """The runtime of verify's device-side rewrites (deferred.py beside this file), loaded by path and reachable
    from a rewritten script as the builtin ``_tracelint_verify``: its values are read once every ``steps`` ticks
    (one block), in the baseline as in every variant, so that the hook costs the same everywhere."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_tracelint_verify",
                                                  os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                               "deferred.py"))
    runtime = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runtime)
    runtime.INTERVAL = steps
    sys.modules["_tracelint_verify"] = runtime
    builtins._tracelint_verify = runtime
    return runtime


def _device_facts(device: str) -> dict:
    import torch

    facts = {"torch": torch.__version__, "device_type": device}
    if device == "cuda" and torch.cuda.is_available():
        facts["device"] = torch.cuda.get_device_name()
    else:
        facts["device"] = f"CPU ({platform.processor() or platform.machine()})"
    return facts


def install(config: dict, write) -> Clock:
    """Seed, hook the optimizer step and Tensor.backward, apply the precision variant; returns the clock."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    device = config["device"]
    if device == "cuda":
        sync = torch.cuda.synchronize
    else:
        def sync() -> None:
            pass
    precision = config.get("precision")
    control = config.get("control")
    runtime = _runtime(config["steps"])
    clock = Clock(warmup=config["warmup"], steps=config["steps"], blocks=config["blocks"], sync=sync, write=write,
                  read_loss=lambda t: float(t.float()), every_tick=_force_tf32 if precision == "tf32" else None,
                  tracer=Tracer(config["trace"], device) if config.get("trace") else None,
                  control=Control(control["commands"], control["events"]) if control else None,
                  resume_warmup=config.get("resume_warmup", 1),
                  resume_warmup_s=config.get("resume_warmup_s", 0.0), on_tick=runtime.on_tick)
    if precision == "tf32":
        _force_tf32()
    elif precision == "bf16":
        _autocast_modules(device)

    def on_step(optimizer, args, kwargs) -> None:
        clock.optimizer_step(optimizer)

    register_optimizer_step_post_hook(on_step)
    original_backward = torch.Tensor.backward

    def backward(self, *args, **kwargs):
        result = original_backward(self, *args, **kwargs)
        clock.backward(self)
        return result

    torch.Tensor.backward = backward
    _seed(config.get("seed", 0))
    return clock


def run_script(code_path: str, original_path: str, argv: list[str]) -> None:
    """Execute the code at ``code_path`` as ``__main__`` as if it were ``original_path``: ``__file__``,
    ``sys.argv[0]`` and ``sys.path[0]`` name the original, so its data paths and sibling imports resolve as they
    do in the original; tracebacks name the file actually run. (``runpy.run_path`` on the copy would point
    ``__file__`` and ``sys.argv[0]`` at the temporary copy.)"""
    with open(code_path, "rb") as handle:
        code = compile(handle.read(), code_path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=original_path, __builtins__=builtins, __spec__=None, __loader__=None,
                         __package__=None, __cached__=None)
    sys.modules["__main__"] = main
    sys.argv = [original_path, *argv]
    sys.path[0] = os.path.dirname(os.path.abspath(original_path))
    exec(code, main.__dict__)


def main(config_path: str) -> None:
    with open(config_path, encoding="utf-8") as handle:
        config = json.load(handle)
    facts: dict = {}

    def write(result: dict) -> None:
        if not facts:  # asked at the first write, not before the script: it may set CUDA_VISIBLE_DEVICES itself
            try:
                facts.update(_device_facts(config["device"]))
            except Exception as exc:  # a broken CUDA state must not hide the script's own error
                facts.update(device=f"unknown ({type(exc).__name__})", torch="")
        tmp = config["result"] + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump({**facts, **result}, handle)
        os.replace(tmp, config["result"])

    clock = install(config, write)
    try:
        run_script(config["code"], config["original"], config["argv"])
    except StopRun:
        _exit(0)
    except BaseException as exc:
        if clock.tracing:  # the blocks are timed: only the profiling failed
            profiled = clock.tracer.steps
            _stop_quietly(clock.tracer.profiler)
            try:
                clock.trace_failed(f"the script stopped {profiled} step(s) into profiling: {_one_line(exc)}")
            except StopRun:
                _exit(0)
        if not isinstance(exc, SystemExit):
            write(clock.result("error"))
            traceback.print_exc()
            _exit(1)
        if exc.code not in (None, 0):
            write(clock.result("error"))
            if not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
            _exit(exc.code if isinstance(exc.code, int) else 1)
    if clock.tracing:
        _stop_quietly(clock.tracer.profiler)
        try:
            clock.trace_failed(f"the script ended {clock.tracer.steps} step(s) into profiling; it needs "
                               f"{TRACE_WARMUP + TRACE_ACTIVE} steps after the timed blocks")
        except StopRun:
            _exit(0)
    # The script returned before the last block: fewer steps than warm-up + blocks x steps.
    try:
        builtins._tracelint_verify.flush()  # what a rewritten script deferred: its last log lines
    except Exception:  # noqa: S110 (the run ended either way; its result says so)
        pass
    write(clock.result("ended"))
    _exit(0)


def _stop_quietly(profiler) -> None:
    try:
        if profiler is not None:
            profiler.stop()
    except Exception:  # already stopped, or broken: the reason recorded is the script's
        pass


if __name__ == "__main__":
    main(sys.argv[1])
