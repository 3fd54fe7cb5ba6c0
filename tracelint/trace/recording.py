"""What the profiler recorded, and what recording cost: the settings of a trace and, when the run was profiled with
``tracelint.profile``, the time of its steps without the profiler.

Settings. torch 2.x writes ``with_stack``, ``record_shapes``, ``profile_memory`` (and ``with_flops``,
``with_modules`` when set) as top-level keys of the trace; ``tracelint.profile`` repeats them under
``tracelint.settings``. Where neither says, ``with_stack`` is read from the events (``python_function`` frames or
PyTorch <= 1.9 ``Call stack`` args) and ``profile_memory`` from ``[memory]`` events; ``record_shapes`` and
``with_flops`` then stay unknown (None).

Kind. A trace recorded with ``experimental_config=_ExperimentalConfig(profiler_metrics=[...])`` holds CUPTI
range-profiler events (``cuda_profiler_range``: counter values per range or per replayed kernel) and no kernel
timeline; ``profiler_ranges`` counts them and ``range_counters`` names their counters.

Cost. ``tracelint.profile`` times the steps the profiler does not record (the schedule's wait steps) between device
synchronizations and stores them under the trace's top-level ``tracelint`` key (tracelint/profile.py defines it):

- ``unprofiled_step_ms``: the mean time of a step without the profiler (``tracelint.unprofiled.step_ms``);
- ``profiler_inflation``: the profiled step (``step_ms``: the longer of the mean CPU step span and the mean GPU span
  of a step) over ``unprofiled_step_ms``. 1.0 means recording cost nothing; the seeds' settings (stacks, shapes,
  memory) cost 2x on the project's GPT-2 fixture and 3.4x on its compiled twin. None below 1: not measurable here.

Distributed. Under ``torch.distributed`` ``tracelint.profile`` also records, for the same unprofiled steps, this
rank's time waiting in collectives (``tracelint.distributed``; tracelint/profile/waits.py defines it):
``Recording.distributed`` is that record, or None without one. Its keys ``rank``, ``world_size`` (int),
``step_ms`` (this rank's mean unprofiled step), ``wait_ms`` (its mean wait in collectives per unprofiled step, ms)
and ``method`` (str) are always there and valid; the others (``comm_ms``, ``collectives_per_step``, ``by_kind``,
``groups``, ``blocks``, ``notes``, ...) as recorded. A record without a valid wait (the collectives were not timed)
gives None.
"""
from __future__ import annotations

from dataclasses import dataclass

from tracelint.engine.metrics import is_number
from tracelint.trace.model import TraceModel

SETTINGS = ("with_stack", "record_shapes", "profile_memory", "with_flops", "with_modules")
# The settings that slow the host: stacks most (a Python frame event per call), then shapes and memory events.
HEAVY = ("with_stack", "record_shapes", "profile_memory", "with_flops")


@dataclass(frozen=True, slots=True)
class Recording:
    settings: dict[str, bool | None]  # each of SETTINGS: on, off, or unknown
    inferred: tuple[str, ...]  # the settings read from the events, not from the trace's keys
    unprofiled_step_ms: float | None  # tracelint.profile's measurement, when the trace has one
    unprofiled_steps: int | None
    source: str | None  # "tracelint.profile" when the trace carries its record
    # CUPTI range-profiler events (experimental_config profiler_metrics): counters per range, no kernel timeline
    profiler_ranges: int = 0
    range_counters: tuple[str, ...] = ()
    # tracelint.profile's per-rank record under torch.distributed (module docstring), or None
    distributed: dict | None = None

    @property
    def heavy(self) -> list[str]:
        """The host-slowing settings that were on."""
        return [key for key in HEAVY if self.settings.get(key)]

    def as_dict(self) -> dict:
        """The JSON report's ``profiler`` object."""
        distributed = None
        if self.distributed is not None:  # the summary; the per-block values stay in the trace
            distributed = {k: v for k, v in self.distributed.items() if k not in ("version", "blocks")}
        return {**self.settings, "inferred": list(self.inferred), "unprofiled_step_ms": self.unprofiled_step_ms,
                "unprofiled_steps": self.unprofiled_steps, "source": self.source, "distributed": distributed}


def _flag(value) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value in (0, 1):
        return bool(value)
    return None


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def distributed_of(record: dict) -> dict | None:
    """``tracelint.distributed`` with its fixed keys checked (module docstring), or None."""
    found = record.get("distributed")
    if not isinstance(found, dict):
        return None
    rank, world, step, wait = (found.get(k) for k in ("rank", "world_size", "step_ms", "wait_ms"))
    if not (_count(rank) and _count(world) and rank < world and is_number(step) and step > 0 and is_number(wait)
            and wait >= 0 and isinstance(found.get("method"), str)):
        return None
    return {**found, "step_ms": float(step), "wait_ms": float(wait)}


def recording_of(model: TraceModel) -> Recording:
    meta = model.meta_settings
    record = model.tracelint_record or {}
    declared = record.get("settings") if isinstance(record.get("settings"), dict) else {}
    settings: dict[str, bool | None] = {}
    for key in SETTINGS:
        value = _flag(meta.get(key))
        settings[key] = value if value is not None else _flag(declared.get(key))
    inferred = []
    if settings["with_stack"] is None:
        settings["with_stack"] = bool(model.frames) or any(op.stack for op in model.ops[:1000])
        inferred.append("with_stack")
    if settings["profile_memory"] is None:
        settings["profile_memory"] = bool(model.memory)
        inferred.append("profile_memory")
    unprofiled = record.get("unprofiled") if isinstance(record.get("unprofiled"), dict) else {}
    step_ms = unprofiled.get("step_ms")
    steps = unprofiled.get("steps")
    ok = is_number(step_ms) and step_ms > 0
    return Recording(settings, tuple(inferred), float(step_ms) if ok else None,
                     int(steps) if ok and isinstance(steps, int) and not isinstance(steps, bool) else None,
                     str(record.get("source") or "tracelint.profile") if record else None,
                     model.profiler_ranges, model.range_counters, distributed_of(record))


def unprofiled_memory(model: TraceModel) -> dict | None:
    """What tracelint.profile's record says of the device memory of the unprofiled steps (tracelint.profile's module
    docstring): ``growth_mib_per_step`` (the blocks' allocated memory at their end minus at their start, over their
    steps), ``max_allocated_mib`` and ``device_total_mib``, each None where the record lacks it; None without any."""
    unprofiled = (model.tracelint_record or {}).get("unprofiled")
    if not isinstance(unprofiled, dict):
        return None
    grown = steps = 0.0
    for block in unprofiled.get("blocks") or ():
        pair = block.get("allocated_mib") if isinstance(block, dict) else None
        if isinstance(pair, list) and len(pair) == 2 and all(is_number(v) for v in pair) and \
                is_number(block.get("steps")) and block["steps"] > 0:
            grown += pair[1] - pair[0]
            steps += block["steps"]
    found = {"growth_mib_per_step": grown / steps if steps else None,
             **{key: float(unprofiled[key]) if is_number(unprofiled.get(key)) else None
                for key in ("max_allocated_mib", "device_total_mib")}}
    return found if any(v is not None for v in found.values()) else None


def step_ms(metrics: dict) -> float | None:
    """The profiled step: the longer of the mean CPU step span and the mean GPU span of a step, in ms."""
    from tracelint.engine import metrics as M

    spans = [v for v in (M.STEP_CPU_US_MEAN.of(metrics), M.STEP_GPU_SPAN_US_MEAN.of(metrics)) if v is not None]
    return round(max(spans) / 1000.0, 3) if spans else None


def step_basis_ms(metrics: dict) -> tuple[float | None, bool]:
    """The step a saving or a rate is measured against, in ms, and whether it is the unprofiled one: the step timed
    without the profiler when the trace has it (``unprofiled_step_ms``), else the profiled step (``step_ms``)."""
    from tracelint.engine import metrics as M

    unprofiled = M.UNPROFILED_STEP_MS.of(metrics)
    return (float(unprofiled), True) if unprofiled else (step_ms(metrics), False)


def gpu_busy_ms_per_step(metrics: dict) -> float | None:
    """``gpu_busy_us`` per profiled step (a trace without steps is one), in ms; None without it."""
    from tracelint.engine import metrics as M

    busy = M.GPU_BUSY_US.of(metrics)
    return None if busy is None else busy / max(1, M.STEPS.of(metrics) or 1) / 1000.0


def recording_metrics(metrics: dict, recording: Recording) -> None:
    """Set ``unprofiled_step_ms`` and ``profiler_inflation`` (module docstring)."""
    metrics["unprofiled_step_ms"] = recording.unprofiled_step_ms
    profiled = step_ms(metrics)
    ratio = profiled / recording.unprofiled_step_ms if profiled and recording.unprofiled_step_ms else None
    # Below 1 the steps timed without the profiler were the slower ones: they held what the recorded steps did not
    # (start-up, a changing workload; issue #34 read 0.24), so the ratio is no measure of the profiler (TL003 says so).
    metrics["profiler_inflation"] = round(ratio, 2) if ratio is not None and ratio >= 1 else None
