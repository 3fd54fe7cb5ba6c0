"""What the analysis of one device gives every rule: the TraceAnalysis (its model, GPU events, metrics, gaps and
steps) and the records it holds. tracelint.trace.device_metrics fills it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from tracelint.engine import SourceLocation, TraceLocation
from tracelint.trace.kernels import classify_kernel
from tracelint.trace.model import GpuEvent, Op, TraceModel
from tracelint.trace.recording import recording_of


class Gap(NamedTuple):
    """A hole of at least ``min_gap_us`` in the device's busy union; ``tid`` is the thread it is charged to."""

    start: float
    end: float
    cause: str  # the largest part of its split
    tid: object
    step: int | None  # step of the work that ends the gap


class StepStats(NamedTuple):
    index: int
    number: int | None
    cpu_start: float
    cpu_end: float
    gpu_start: float | None
    gpu_end: float | None
    kernels: int
    dtoh_copies: int
    host_syncs: int
    allocations: int
    breakdown: dict  # part -> µs (data, forward, backward, optimizer, other)

    @property
    def cpu_us(self) -> float:
        return self.cpu_end - self.cpu_start

    @property
    def gpu_span_us(self) -> float | None:
        return None if self.gpu_start is None else self.gpu_end - self.gpu_start


@dataclass(slots=True)
class TraceAnalysis:
    """One device of one trace: the model, this device's GPU events, its metrics, gaps and steps.

    This is what every TraceRule's ``check(analysis, config)`` gets.
    """

    path: str
    model: TraceModel
    device: int | None
    gpu_events: list[GpuEvent]  # this device's, sorted by start
    metrics: dict[str, object]
    gaps: list[Gap]
    steps: list[StepStats]
    window: tuple[float, float] | None
    warnings: tuple[str, ...] = ()  # the loader's notes (truncation, repaired values, skipped events)
    truncated: bool = False  # the file ended early (a killed run): the last step may be partial
    # its communication events (tracelint.trace.job.communication.CommEvent), by start
    comm: list = field(default_factory=list)
    _kernel_classes: dict = field(default_factory=dict, repr=False)
    _memo: dict = field(default_factory=dict, repr=False)

    def memo(self, key: str, compute):
        """``compute(self)`` once per analysis: for derived data that several rules share."""
        if key not in self._memo:
            self._memo[key] = compute(self)
        return self._memo[key]

    @property
    def recording(self):
        """What the profiler recorded and what it cost (tracelint.trace.recording.Recording)."""
        found = self._memo.get("recording")
        if found is None:
            found = self._memo["recording"] = recording_of(self.model)
        return found

    @property
    def rank(self) -> int | None:
        return self.model.rank

    @property
    def has_steps(self) -> bool:
        return self.model.has_steps

    @property
    def main_tid(self) -> object | None:
        return self.model.main_tid

    def kernel_class(self, name: str):
        """``tracelint.trace.kernels.classify_kernel`` of a kernel name, cached per name, with the device's arch."""
        kc = self._kernel_classes.get(name)
        if kc is None:
            props = self.model.devices.get(self.device) if self.device is not None else None
            kc = self._kernel_classes[name] = classify_kernel(name, props.compute_major if props else None)
        return kc

    def step_number(self, index: int | None) -> int | None:
        """The ProfilerStep number of a step index (None for the whole-trace window)."""
        if index is None or not self.model.steps:
            return None
        return self.model.steps[index].number

    def source_at(self, tid: object, ts: float, op: Op | None = None) -> SourceLocation | None:
        """The innermost user-code line on ``tid`` at host time ``ts`` (with_stack traces), if the trace has one."""
        frame = self.model.user_frame(tid, ts)
        if frame is not None:
            return SourceLocation(frame.file, frame.line)
        if op is not None and op.stack:
            file, _, rest = op.stack.rpartition("(")
            line = rest.split(")", 1)[0]
            if file and line.isdigit():
                return SourceLocation(file, int(line))
        return None

    def location(self, *, step: int | None = None, start: float | None = None, end: float | None = None,
                 event: str | None = None, tid: object = None, op: Op | None = None) -> TraceLocation:
        """A TraceLocation in this trace; ``step`` is a step index; ``tid``/``op`` give it a source line."""
        if op is not None:
            tid = op.tid if tid is None else tid
            start = op.start if start is None else start
            end = op.end if end is None else end
            event = op.name if event is None else event
        source = self.source_at(tid, start, op) if tid is not None and start is not None else None
        return TraceLocation(self.path, rank=self.rank, step=self.step_number(step), start_us=start, end_us=end,
                             event=event, source=source)
