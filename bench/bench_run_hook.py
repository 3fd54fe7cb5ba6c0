"""What ``tracelint run``'s optimizer-step hook costs a training step (issue #27: under 20 µs per step).

Not a test (no test asserts a duration): it prints. Measured in this process with the bootstrap's own Driver
(tracelint/run/bootstrap.py), in the three states a step meets outside the recorded ones:

- *warm-up*: the hook times the step until the start-up settles (a device synchronization, none on the CPU, and
  one step time added to tracelint.profile.settle's window);
- *unprofiled*: the hook advances ``tracelint.profile``'s schedule (``prof.step()`` in a wait step, which closes one
  ``ProfilerStep#N`` record_function and opens the next, as torch's ``profile.step()`` does in every step, recorded
  or not: most of the cost; the profiler records nothing);
- *after*: the recorded steps are exported and the profiler stopped; the hook only counts the step.

Each is timed two ways: the hook called directly (``driver.tick()``, many calls, median of rounds), and a whole
``optimizer.step()`` of a one-parameter SGD with the hook registered against the same step without it, round by
round (the median difference, which includes the hook's dispatch by torch). CPU torch is enough: the hook
synchronizes no device in these states.

    PYTHONPATH=. python bench/bench_run_hook.py [--calls 20000] [--rounds 7]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.optim.optimizer import register_optimizer_step_post_hook  # noqa: E402

from tracelint.run.bootstrap import Driver  # noqa: E402


def driver(out: str, phase: str) -> Driver:
    settle = 10**9 if phase == "warm-up" else 0  # no detection: the first step starts the profiler
    config = {"out": out, "status": out, "name": "bench",
              "plan": {"settle": settle, "wait": 10**9, "warmup": 0, "active": 1}, "settings": "stacks",
              "max_steps": None, "no_step_timeout": None, "window_s": 1.0,
              "step_function": None, "project_roots": [out], "root": str(Path(__file__).resolve().parents[1])}
    d = Driver(config, "bench")
    if phase == "warm-up":
        d.tick()
        assert d.phase == "settling"
    elif phase == "unprofiled":
        d.tick()  # the first step starts the profiler; with wait=10**9 every later step is a wait step
        assert d.phase == "scheduled"
    else:
        d.phase = "over"
    return d


def per_call_us(fn, calls: int, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def step_us(calls: int, rounds: int, hook) -> tuple[float, float]:
    """(median µs of a bare optimizer step, median of the per-round differences with the hook registered): the
    two alternate round by round, so that a busy machine's drift falls on both."""
    param = torch.nn.Parameter(torch.zeros(1))
    param.grad = torch.zeros(1)
    optimizer = torch.optim.SGD([param], lr=0.0)
    bare, extra = [], []
    for _ in range(rounds):
        plain = per_call_us(optimizer.step, calls, 1)
        handle = register_optimizer_step_post_hook(hook)
        try:
            hooked = per_call_us(optimizer.step, calls, 1)
        finally:
            handle.remove()
        bare.append(plain)
        extra.append(hooked - plain)
    return statistics.median(bare), statistics.median(extra)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}; median of {args.rounds} rounds of "
          f"{args.calls} calls")
    with tempfile.TemporaryDirectory() as out:
        rows = []
        for phase in ("warm-up", "unprofiled", "after"):
            d = driver(out, phase)
            direct = per_call_us(d.tick, args.calls, args.rounds)
            bare, extra = step_us(args.calls, args.rounds, d.optimizer_step)
            rows.append((phase, direct, bare, extra))
            if d.prof is not None:
                d.prof.stop()
    print(f"{'state':<12}{'hook alone':>14}{'bare step':>14}{'hooked - bare':>16}")
    for phase, direct, bare, extra in rows:
        print(f"{phase:<12}{direct:>11.2f} µs{bare:>11.2f} µs{extra:>13.2f} µs")
    worst = max(max(direct, extra) for _, direct, _, extra in rows)
    print(f"worst: {worst:.2f} µs per step (target: under 20 µs)")


if __name__ == "__main__":
    main()
