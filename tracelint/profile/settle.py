"""When a run's start-up is over: the step times that tell ``tracelint run`` where to time its unprofiled steps.

The first steps of a fresh process pay for ``torch.compile`` and its autotuning, the caching allocator's growth,
cuDNN's algorithm search and the DataLoader's workers starting. Timed there, the "unprofiled" step is wrong by any
amount (issue #34: a CPU LM whose steady step is 6-9 ms ran its steps 2-6 at 383, 32, 136, 11 and 12 ms and read
676 ms; a compiled GPT on an H200, 35.9 ms steady, read 44.9 ms over its steps 1-4 and got a cpu-bound verdict). The
number of such steps depends on the model and the machine, so it is detected: ``Settle`` takes one step time after
another and is done when the warm-up is seen to be over, or after ``cap`` steps.

Over means either of:

- the last ``window`` steps agree: the slowest is at most ``1 + tolerance`` times the fastest;
- the step time stopped falling: the median of the last ``window`` steps is at least ``1 - tolerance`` times the
  median of the ``window`` before them (a noisy machine's steps rarely agree within 10 %, but their medians stop
  falling once start-up is over).

What it cannot see: a plateau of equally slow steps followed by a drop (a DataLoader whose workers all start at
step 20) reads as settled on the plateau.
"""
from __future__ import annotations

from statistics import median

WINDOW = 3
TOLERANCE = 0.10
CAP = 30  # steps; a script shorter than this plus the schedule may end before anything is recorded


class Settle:
    """Step times in (``add``), whether the warm-up is over out (``done``, ``settled``)."""

    def __init__(self, cap: int = CAP, window: int = WINDOW, tolerance: float = TOLERANCE) -> None:
        self.cap, self.window, self.tolerance = cap, window, tolerance
        self.times_ms: list[float] = []
        self.settled = False

    @property
    def done(self) -> bool:
        return self.settled or len(self.times_ms) >= self.cap

    def add(self, ms: float) -> bool:
        """One more step's time; True once done."""
        self.times_ms.append(ms)
        last = self.times_ms[-self.window:]
        if len(last) == self.window and min(last) > 0 and max(last) <= (1 + self.tolerance) * min(last):
            self.settled = True
        before = self.times_ms[-2 * self.window:-self.window]
        if len(before) == self.window and median(last) >= (1 - self.tolerance) * median(before):
            self.settled = True
        return self.done

    def record(self, first_step: int) -> dict:
        """The plain record (``tracelint run``'s status and the trace's ``tracelint.warmup``): the step times
        seen, from step ``first_step`` on, and whether they settled."""
        return {"first_step": first_step, "steps_ms": [round(t, 3) for t in self.times_ms],
                "settled": self.settled, "window": self.window, "tolerance": self.tolerance, "cap": self.cap}
