"""The child side of ``tracelint verify``: runs one variant of a training script as ``__main__`` under a step clock,
times blocks of steps, stops the script once the last block is timed, and writes what it measured as JSON.

Started by tracelint.verify.run as ``python /path/to/harness.py CONFIG.json`` with the working directory set to the
script's folder. Run by path, not with ``-m``, so that the script sees the ``sys.path`` it would see when run as
``python train.py`` (its own folder first, nothing of ours). For the same reason this module imports nothing from
tracelint, only the standard library and (inside functions) torch and numpy.

The clock
    A tick is one optimizer step: a global hook (``register_optimizer_step_post_hook``) sees every ``step()``; the
    first optimizer that steps is the clock (a GAN's second optimizer or a scheduler's do not double the count).
    Fallback: a script that calls ``Tensor.backward()`` ``BACKWARD_FALLBACK`` times without any optimizer step
    (a hand-written SGD update, ``torch.autograd.grad`` loops excepted) switches the clock to backward calls.
    A script with neither never ticks: the parent reports "no steps found" when it ends or times out.

Timing
    Skip ``warmup`` ticks (at least 1: a tick marks the end of a step, so timing starts at the end of one); then
    synchronize the device once and start; synchronize once every ``steps`` ticks and
    record the block's mean step time; after ``blocks`` blocks, write the result and stop. Never a synchronize per
    step: that would make the baseline synchronous too and hide exactly the host syncs a fix removes.

Loss
    The last scalar passed to ``Tensor.backward()`` is read once per block boundary (it is the run's loss curve, at
    a resolution that costs nothing) and a non-finite value stops the run as ``diverged``.

Profiling (``--trace``)
    With ``config["trace"]`` (a ``.json.gz`` path) the run does not stop after the last block: it writes its timing
    result (``status: ok``), then profiles ``TRACE_WARMUP`` + ``TRACE_ACTIVE`` more steps with torch.profiler, one
    ``prof.step()`` per tick, exports the Chrome trace and stops. The timed blocks never run under the profiler, and
    a profiling failure (the script ends or raises first, the profiler raises) is recorded under ``trace`` without
    touching the timing.

Precision variants (applied by the harness, not by editing the script)
    ``tf32``: ``torch.backends.cuda.matmul.allow_tf32 = True`` and ``cudnn.allow_tf32 = True`` before the script
    runs and again at every tick, so a script that turns TF32 off during setup (``allow_tf32 = False`` in
    ``train()``) is overridden from the first step on; warm-up absorbs the steps before. The legacy setters on
    purpose: on torch 2.9+ they are safe after the script used either API, while ``set_float32_matmul_precision``
    before a script's legacy ``allow_tf32 = False`` makes its later ``get_float32_matmul_precision()`` raise
    ("mix of the legacy and new APIs"; tried on torch 2.13).
    ``bf16``: every top-level ``nn.Module`` call runs under ``torch.autocast(device, dtype=torch.bfloat16)`` and
    its bf16 outputs are cast back to float32, so loss code outside the model sees float32 as with the usual
    ``with autocast(): loss = ...`` recipe. Limits: matmuls outside any module call (``x @ w`` in the loop) stay in
    float32; a script that already runs under autocast is left as it is; a module whose output must stay bf16
    would get float32.
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


class Clock:
    """Counts steps and times blocks of them; ``sync`` waits for the device, ``write`` stores the result."""

    def __init__(self, *, warmup: int, steps: int, blocks: int, sync, write, read_loss=float,
                 every_tick=None, tracer=None) -> None:
        self.warmup, self.steps, self.blocks = warmup, steps, blocks
        self.sync, self.write, self.read_loss = sync, write, read_loss
        self.every_tick = every_tick  # re-asserts a precision variant the script may have undone
        self.tracer = tracer  # profiles a few steps once the blocks are timed (--trace)
        self.trace: dict | None = None  # the profiling state once it began: status running | ok | failed
        self.ticks = 0
        self.source: str | None = None  # "optimizer" or "backward", fixed by the first that qualifies
        self.clock_optimizer = None
        self.backward_calls = 0
        self.last_loss = None
        self.marks: list[float] = []
        self.losses: list[float | None] = []
        self.done = False

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
        if self.trace is not None:
            self._trace_tick()
            return
        timed = self.ticks - self.warmup
        if timed < 0 or timed % self.steps:
            return
        loss = self._loss()
        if timed == 0:
            self.write(self.result("running"))  # a timeout now says how far the run got
        self.sync()
        self.marks.append(time.perf_counter())
        if timed:
            self.losses.append(loss)
        if loss is not None and not math.isfinite(loss):
            self.finish("diverged", loss=loss)
        elif len(self.marks) == self.blocks + 1:
            if self.tracer is None:
                self.finish("ok")
            self._trace_start()

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

    def block_ms(self) -> list[float]:
        return [(b - a) * 1000.0 / self.steps for a, b in itertools.pairwise(self.marks)]

    def result(self, status: str) -> dict:
        result = {
            "status": status, "clock": self.source, "ticks": self.ticks, "backward_calls": self.backward_calls,
            "warmup": self.warmup, "steps": self.steps, "blocks": self.blocks,
            "block_ms": self.block_ms(), "losses": self.losses,
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
    """Run every top-level nn.Module call under bf16 autocast; see the module docstring for the limits."""
    import torch

    original_call = torch.nn.Module.__call__

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
        if torch.is_autocast_enabled(device_type):  # a nested module, or a script that chose its own autocast
            return original_call(self, *args, **kwargs)
        with torch.autocast(device_type, dtype=torch.bfloat16):
            out = original_call(self, *args, **kwargs)
        return to_float32(out)

    torch.nn.Module.__call__ = call


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
    clock = Clock(warmup=config["warmup"], steps=config["steps"], blocks=config["blocks"], sync=sync, write=write,
                  read_loss=lambda t: float(t.float()), every_tick=_force_tf32 if precision == "tf32" else None,
                  tracer=Tracer(config["trace"], device) if config.get("trace") else None)
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
