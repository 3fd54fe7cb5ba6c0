"""``tracelint.profile``: ``torch.profiler.profile`` that also times the steps it does not record.

    import tracelint, torch
    with tracelint.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
                           schedule=torch.profiler.schedule(wait=5, warmup=2, active=3),
                           record_shapes=True, with_stack=True, profile_memory=True) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

It takes exactly ``torch.profiler.profile``'s arguments and passes them through. When the call names no
``on_trace_ready``, tracelint's handler (``tracelint.trace.profiler.on_trace_ready()``: it saves
``./tracelint_traces/<worker>.<ns>.pt.trace.json.gz`` and prints the verdict) is used; ``on_trace_ready=None``
given explicitly keeps torch's behaviour (no handler).

Why: the profiler settings that make a trace useful (``record_shapes``, ``with_stack``, ``profile_memory``) slow the
host down, often by 1.5x, with ``torch.compile`` by 4x and more. A run whose GPU is the bottleneck can then read as
host-bound in its own trace. The schedule's steps that the profiler does not record run at the real speed, so this
wrapper times them and writes the result into every exported trace, where the analyzer can compare it with the
profiled steps.

What is stored: the top-level key ``"tracelint"`` of the exported Chrome trace JSON (added with
``prof.add_metadata_json`` when each profiling cycle starts recording, so any ``on_trace_ready`` that calls
``export_chrome_trace`` gets it)::

    "tracelint": {
      "version": 1, "source": "tracelint.profile", "recording_from_step": 7,
      "settings": {"record_shapes": true, "with_stack": true, "profile_memory": true, "with_flops": false,
                   "with_modules": false, "activities": ["CPU", "CUDA"],
                   "schedule": {"skip_first": 0, "wait": 5, "warmup": 2, "active": 3, "repeat": 0, ...}},
      "unprofiled": {"steps": 4, "step_ms": 28.41, "sync": "cuda",
                     "blocks": [{"first_step": 1, "steps": 4, "ms": 113.6, "allocated_mib": [585.2, 585.2]}],
                     "max_allocated_mib": 1210.4, "device_total_mib": 143156.1}
    }

``tracelint run`` adds ``"warmup"``: the step times it took, one device synchronization per step, until the
run's start-up settled (tracelint/profile/settle.py: ``first_step``, ``steps_ms``, ``settled``, ...), and
``profiler_step_0``, the script's step that is this profiler's step 0 (its optimizer step count: ProfilerStep#N and
the block's ``first_step`` are script step ``profiler_step_0 + N``). Whoever drives the profiler adds such keys by
setting ``prof.tracelint_extra`` (a dict of JSON values) before the cycle starts recording.

Definitions:

- An *unprofiled step* is a step whose ``ProfilerAction`` is ``NONE``: the schedule's ``skip_first`` and ``wait``
  steps, and the steps after the last cycle. Warm-up steps are not unprofiled (the profiler is already set up).
  Step numbers are ``prof.step_num``: step N runs between the N-th and the (N+1)-th ``prof.step()`` call.
- An *unprofiled block* is a run of consecutive unprofiled steps. It is timed from the ``prof.step()`` call that
  enters it to the ``prof.step()`` call that leaves it, with one device synchronization (``torch.cuda.synchronize()``
  when ``activities`` include CUDA and CUDA is available) and one ``time.perf_counter()`` at each of the two
  boundaries: never per step, so a step's host/device overlap is kept. The profiler's own work at a boundary (the
  export and the ``on_trace_ready`` of the cycle before, the set-up of the next cycle) falls outside the block.
- Step 0 (before the first ``prof.step()``) is never timed: it holds the run's first-call costs (CUDA context,
  cuDNN autotuning, ``torch.compile``). A block starting at step 0 is timed from the first ``prof.step()``.
  ``skip_first`` steps after step 0 are timed: choose ``wait`` large enough that warm-up costs wash out, or read
  the per-block values.
- ``recording_from_step`` is the first step the exported cycle recorded (its ``ProfilerStep#N``).
- Memory (CUDA only, issue #40): a block's ``allocated_mib`` is ``torch.cuda.memory_allocated()`` at its two
  boundaries, after their synchronize (their difference over the block's steps is the unprofiled growth per step);
  ``max_allocated_mib`` is ``torch.cuda.max_memory_allocated()`` when the last block closed: the allocator's peak
  since the process started (or since the script last reset it), before any step of the exported cycle was
  recorded; ``device_total_mib`` the device's memory. The peak statistics are read, never reset.
- ``unprofiled_step_ms`` (``"step_ms"``) = the total time of the unprofiled blocks / their number of steps. The
  blocks are those completed before the exported cycle started recording (the last 64 at most).

Under ``torch.distributed`` (initialized when the first unprofiled block starts) the same blocks also time each
collective through c10d's flight recorder, and ``"distributed"`` holds this rank's step time and its wait in
collectives per unprofiled step (``rank``, ``world_size``, ``step_ms``, ``wait_ms``, ``method``, ...):
``tracelint/profile/waits.py`` defines it. It asks every process group to time its collectives (NCCL: two CUDA events
per collective) and, when a cycle starts recording, exchanges one small record per group with the other ranks
through the job's c10d store; every rank must then use ``tracelint.profile`` with the same schedule.

Without a schedule every step is recorded (torch's default schedule), so nothing is unprofiled: only
``"settings"`` is written. torch is imported inside functions only: ``import tracelint`` does not load it.
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any

__all__ = ["profile"]

MAX_BLOCKS = 64
_UNSET = object()
_CLASS = None


def profile(*args: Any, **kwargs: Any):
    """``torch.profiler.profile(*args, **kwargs)`` that times the unprofiled steps; see the module docstring."""
    cls = _profile_class()
    if kwargs.get("on_trace_ready", _UNSET) is _UNSET:
        from tracelint.trace.profiler import on_trace_ready

        kwargs["on_trace_ready"] = on_trace_ready()
    return cls(*args, **kwargs)


def _profile_class():
    """The torch.profiler.profile subclass, built on first use so that torch is imported only then."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    import torch
    from torch.profiler import ProfilerAction

    from tracelint.trace.profiler import _settings

    class TracelintProfile(torch.profiler.profile):
        """torch.profiler.profile + timing of the NONE steps, written to the trace as metadata "tracelint"."""

        _tracelint_records_metadata = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._tl_blocks: list[dict] = []
            self._tl_open: tuple[int, float] | None = None  # (first step, perf_counter) of the running block
            self._tl_sync = _sync_function(torch, self.use_device)
            self._tl_waits = None  # CollectiveWaits, from the first block that runs under torch.distributed
            self._tl_mem_open: int | None = None  # device memory allocated when the running block started
            self._tl_peak: int | None = None  # the allocator's peak when the last block closed
            self.tracelint_extra: dict = {}  # keys the driver adds to the record (tracelint run: "warmup")

        # -- timing ------------------------------------------------------------------------------------------
        def step(self) -> None:
            if self._tl_open is not None and self.schedule(self.step_num + 1) != ProfilerAction.NONE:
                self._tl_close()  # leaving a block: time it before the profiler sets up its cycle
            super().step()
            if (self._tl_open is None and self.record_steps
                    and self.current_action == ProfilerAction.NONE):
                self._tl_sync_now()  # entering a block (or still in the one step 0 started): time from here
                self._tl_waits_call("open")  # before the clock starts: the first call sets the waits up
                self._tl_mem_open = self._tl_memory()
                self._tl_open = (self.step_num, time.perf_counter())

        def stop(self) -> None:
            self._tl_open = None  # a block still running at the end precedes no trace
            super().stop()

        def _tl_sync_now(self) -> None:
            if self._tl_sync is not None:
                self._tl_sync()

        def _tl_close(self) -> None:
            first, t0 = self._tl_open
            self._tl_sync_now()
            ms = (time.perf_counter() - t0) * 1e3
            steps = self.step_num + 1 - first
            self._tl_open = None
            if steps > 0:
                block = {"first_step": first, "steps": steps, "ms": round(ms, 4)}
                closed = self._tl_memory()
                if closed is not None and self._tl_mem_open is not None:
                    block["allocated_mib"] = [_mib(self._tl_mem_open), _mib(closed)]
                    self._tl_peak = torch.cuda.max_memory_allocated()
                self._tl_blocks.append(block)
                del self._tl_blocks[:-MAX_BLOCKS]
            self._tl_waits_call("close", first, steps, ms)  # after the block's time is taken

        def _tl_memory(self) -> int | None:
            """Device memory allocated now (after the block boundary's synchronize), or None off CUDA."""
            return torch.cuda.memory_allocated() if self._tl_sync_name == "cuda" else None

        def _tl_waits_call(self, what: str, *args: Any) -> None:
            try:
                if self._tl_waits is None and what == "open":
                    import torch.distributed as dist

                    if dist.is_available() and dist.is_initialized():
                        from tracelint.profile.waits import CollectiveWaits

                        self._tl_waits = CollectiveWaits(torch, dist)  # opens its first block
                    return
                if self._tl_waits is not None:
                    getattr(self._tl_waits, what)(*args)
            except Exception as exc:  # noqa: BLE001 - never break the user's run over the waits
                print(f"tracelint: could not time the collectives: {type(exc).__name__}: {exc}", file=sys.stderr)

        # -- metadata ----------------------------------------------------------------------------------------
        def start_trace(self) -> None:
            # Every rank gets here at the same step: compare the closed blocks' collectives with the peers' now,
            # before recording starts (a few steps after the blocks closed, so NCCL has timed them).
            self._tl_waits_call("settle")
            super().start_trace()
            # Kineto keeps metadata added while a trace is being collected and writes it at the top level of the
            # exported JSON; the NONE blocks before this cycle are all closed by now.
            try:
                self.add_metadata_json("tracelint", json.dumps(self.tracelint_metadata()))
            except Exception as exc:  # noqa: BLE001 - never break the user's run over metadata
                print(f"tracelint: could not add the trace metadata: {exc}", file=sys.stderr)

        def tracelint_metadata(self) -> dict:
            """What is stored under the trace's "tracelint" key (see the module docstring)."""
            doc = {"version": 1, "source": "tracelint.profile", "recording_from_step": self.step_num,
                   "settings": _settings(self)}
            if self.record_steps:
                steps = sum(b["steps"] for b in self._tl_blocks)
                total = sum(b["ms"] for b in self._tl_blocks)
                doc["unprofiled"] = {
                    "steps": steps,
                    "step_ms": round(total / steps, 4) if steps else None,
                    "sync": self._tl_sync_name,
                    "blocks": list(self._tl_blocks),
                }
                if self._tl_peak is not None:
                    doc["unprofiled"]["max_allocated_mib"] = _mib(self._tl_peak)
                    doc["unprofiled"]["device_total_mib"] = _mib(torch.cuda.get_device_properties(
                        torch.cuda.current_device()).total_memory)
                if self._tl_waits is not None:
                    doc["distributed"] = self._tl_waits.record()
            return {**doc, **self.tracelint_extra}

        @property
        def _tl_sync_name(self) -> str:
            return "none" if self._tl_sync is None else str(self.use_device)

    TracelintProfile.__module__ = __name__
    TracelintProfile.__qualname__ = "TracelintProfile"
    _CLASS = TracelintProfile
    return _CLASS


def _mib(n: int) -> float:
    return round(n / 2**20, 1)


def _sync_function(torch, use_device):
    """The device synchronize for the profiled device, or None (CPU only, or the device is not there)."""
    if use_device == "cuda":
        return torch.cuda.synchronize if torch.cuda.is_available() else None
    if use_device and hasattr(torch, "accelerator"):
        try:
            if torch.accelerator.is_available():
                return torch.accelerator.synchronize
        except Exception:  # noqa: BLE001 - an accelerator API that differs between versions
            return None
    return None


class _CallableModule(type(sys)):
    """``import tracelint.profile`` binds ``tracelint.profile`` to this module; calling it still profiles."""

    def __call__(self, *args: Any, **kwargs: Any):
        return profile(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
