"""The harness: the step clock and its block timing (in process), and runs in a subprocess on the CPU."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from tests.verify.conftest import CPU, SCRIPTS
from tracelint.verify.harness import BACKWARD_FALLBACK, Clock, StopRun
from tracelint.verify.harness_control import RunSettings, run_once


class FakeLoss:
    def __init__(self, value: float) -> None:
        self.value = value

    def numel(self) -> int:
        return 1

    def detach(self) -> FakeLoss:
        return self


def make_clock(warmup=2, steps=3, blocks=2):
    events: list = []
    written: list[dict] = []
    clock = Clock(warmup=warmup, steps=steps, blocks=blocks, sync=lambda: events.append("sync"),
                  write=written.append, read_loss=lambda t: t.value)
    return clock, events, written


def test_clock_syncs_only_at_block_boundaries_and_stops_after_the_last_block():
    clock, events, written = make_clock(warmup=2, steps=3, blocks=2)
    opt = object()
    for _ in range(2 + 3 * 2 - 1):
        clock.optimizer_step(opt)
    # One sync when timing starts (after warm-up) and one at the end of the first block; none per step.
    assert events == ["sync", "sync"]
    with pytest.raises(StopRun):
        clock.optimizer_step(opt)
    assert events == ["sync"] * 3
    result = written[-1]
    assert result["status"] == "ok" and result["ticks"] == 8 and result["clock"] == "optimizer"
    assert len(result["block_ms"]) == 2 and all(ms >= 0 for ms in result["block_ms"])


class FakeControl:
    """The parent's commands, scripted; the events the clock sends, kept."""

    def __init__(self, commands: list[dict]) -> None:
        self.commands, self.events = list(commands), []

    def send(self, message: dict) -> None:
        self.events.append(message)

    def receive(self) -> dict:
        return self.commands.pop(0) if self.commands else {"cmd": "stop"}


def test_a_turn_re_warms_for_its_steps_and_its_seconds_before_the_block(monkeypatch):
    from tracelint.verify import harness

    now = [0.0]  # the clock's perf_counter: each step below takes 10 ms of it, whatever the machine does
    monkeypatch.setattr(harness, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    control = FakeControl([{"cmd": "run", "blocks": 1}, {"cmd": "run", "blocks": 1}])
    syncs: list[int] = []
    clock = Clock(warmup=1, steps=2, blocks=2, sync=lambda: syncs.append(clock.ticks), write=lambda r: None,
                  control=control, resume_warmup=1, resume_warmup_s=0.045)
    opt = object()
    with pytest.raises(StopRun):
        for _ in range(100):
            now[0] += 0.01
            clock.optimizer_step(opt)
    # the warm-up ends synchronized (nothing left on the device while the other side is timed); each turn: one
    # re-warm step is not enough, the re-warm goes on until 0.045 s have passed (off the 10 ms grid: no step ends
    # on the boundary), 5 steps of 10 ms
    ready, first_start, first_end, second_start = syncs[:4]
    assert ready == 1 and first_start - ready == 5 and first_end - first_start == 2 and second_start - first_end == 5
    assert [e["event"] for e in control.events] == ["ready", "blocks", "blocks"]
    assert [e["block_ms"] for e in control.events[1:]] == [pytest.approx([10.0])] * 2  # ms per step, as timed


def test_clock_counts_only_the_first_optimizer():
    clock, events, _ = make_clock(warmup=1, steps=5, blocks=2)
    generator, discriminator = object(), object()
    for _ in range(3):
        clock.optimizer_step(generator)
        clock.optimizer_step(discriminator)
    assert clock.ticks == 3


def test_clock_falls_back_to_backward_calls_without_optimizer_steps():
    clock, events, written = make_clock(warmup=1, steps=2, blocks=2)
    for _ in range(BACKWARD_FALLBACK - 1):
        clock.backward(FakeLoss(1.0))
    assert clock.source is None and clock.ticks == 0
    with pytest.raises(StopRun):
        for _ in range(10):
            clock.backward(FakeLoss(0.5))
    assert written[-1]["clock"] == "backward" and written[-1]["status"] == "ok"
    assert written[-1]["losses"] == [0.5, 0.5]


def test_clock_stops_a_diverged_run_at_the_next_block_boundary():
    clock, _, written = make_clock(warmup=1, steps=2, blocks=5)
    opt = object()
    clock.optimizer_step(opt)  # end of warm-up: timing starts
    clock.backward(FakeLoss(1.0))
    clock.optimizer_step(opt)
    clock.backward(FakeLoss(float("nan")))
    with pytest.raises(StopRun):  # the end of the first block reads the loss
        clock.optimizer_step(opt)
    assert written[-1]["status"] == "diverged" and math.isnan(written[-1]["losses"][-1])


@pytest.mark.slow
def test_a_script_that_would_run_forever_stops_after_warmup_and_the_blocks(tmp_path):
    script = SCRIPTS / "one_fix.py"
    settings = RunSettings(warmup=3, steps=4, blocks=3, device="cpu", timeout_s=120, resume_warmup_s=0)
    outcome = run_once(script, script, [], settings, tmp_path)
    assert outcome.ok, outcome.reason + outcome.stderr_tail
    assert len(outcome.block_ms) == 3 and all(ms > 0 for ms in outcome.block_ms)
    assert len(outcome.losses) == 3 and all(math.isfinite(v) for v in outcome.losses)
    assert outcome.clock == "optimizer" and outcome.torch and outcome.device.startswith("CPU")
    data = json.loads((tmp_path / "result.json").read_text())
    # warm-up, then one turn: its untimed resume steps and the three blocks; then the parent's stop
    assert data["ticks"] == 3 + settings.resume_warmup + 4 * 3 and data["turns"] == 1


@pytest.mark.slow
def test_backward_fallback_and_tf32_override_in_a_real_run(tmp_path, monkeypatch):
    seen = tmp_path / "precision.txt"
    monkeypatch.setenv("TRACE_PRECISION_TO", str(seen))
    script = SCRIPTS / "no_optimizer.py"
    outcome = run_once(script, script, [], CPU, tmp_path / "run", precision="tf32")
    assert outcome.ok, outcome.reason + outcome.stderr_tail
    assert outcome.clock == "backward"
    lines = seen.read_text().split()
    # The script set allow_tf32 = False itself; from the first tick on the harness holds TF32 on.
    assert lines[BACKWARD_FALLBACK + 1:] and set(lines[BACKWARD_FALLBACK + 1:]) == {"high"}


@pytest.mark.slow
def test_a_script_that_ends_early_fails_with_the_step_count(tmp_path):
    script = SCRIPTS / "short.py"
    outcome = run_once(script, script, [], CPU, tmp_path)
    assert not outcome.ok
    assert "ended after 7 steps" in outcome.reason and str(CPU.needed_steps) in outcome.reason


def test_bf16_variant_runs_module_calls_under_autocast_and_returns_float32():
    torch = pytest.importorskip("torch")
    from tracelint.verify import harness

    original = torch.nn.Module.__call__
    inner_dtypes = []
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    model[0].register_forward_hook(lambda m, i, out: inner_dtypes.append(out.dtype))
    try:
        harness._autocast_modules("cpu")
        out = model(torch.randn(4, 8))
    finally:
        torch.nn.Module.__call__ = original
    assert inner_dtypes == [torch.bfloat16]
    assert out.dtype == torch.float32


def test_bf16_never_enters_autocast_for_a_module_off_the_training_device(monkeypatch):
    """A CPU module (a transform, a metric) during a CUDA run: torch.autocast is not even entered (entering a CUDA
    autocast is what initializes CUDA)."""
    torch = pytest.importorskip("torch")
    from tracelint.verify import harness

    original = torch.nn.Module.__call__

    def refuse(*args, **kwargs):
        raise AssertionError("torch.autocast entered for a CPU module")

    monkeypatch.setattr(torch, "autocast", refuse)
    try:
        harness._autocast_modules("cuda")
        out = torch.nn.Linear(4, 2)(torch.randn(3, 4))  # parameters on the CPU
        flipped = torch.nn.Flatten()(torch.randn(2, 3, 4))  # no parameters: its input says where it runs
    finally:
        torch.nn.Module.__call__ = original
    assert out.dtype == torch.float32 and flipped.shape == (2, 12)


def _autocast_state_in_child(queue):
    import torch

    class Probe(torch.nn.Module):
        def forward(self, x):
            return torch.is_autocast_enabled("cpu")

    queue.put(Probe()(torch.ones(2)))


def test_bf16_never_enters_autocast_in_a_forked_dataloader_worker():
    torch = pytest.importorskip("torch")
    import multiprocessing

    from tracelint.verify import harness

    class Probe(torch.nn.Module):
        def forward(self, x):
            return torch.is_autocast_enabled("cpu")

    original = torch.nn.Module.__call__
    try:
        harness._autocast_modules("cpu")
        in_parent = Probe()(torch.ones(2))
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=_autocast_state_in_child, args=(queue,))
        child.start()
        in_child = queue.get(timeout=60)
        child.join(60)
    finally:
        torch.nn.Module.__call__ = original
    assert in_parent is True and in_child is False


@pytest.mark.slow
def test_bf16_variant_of_a_script_with_transforms_in_forked_workers(tmp_path, monkeypatch):
    """Issue #13: the bf16 variant of a script whose DataLoader workers run nn.Module transforms completes; the
    transforms never ran under autocast (they raise if they do) and the model did."""
    pytest.importorskip("torch")
    seen = tmp_path / "autocast.txt"
    monkeypatch.setenv("AUTOCAST_SEEN_TO", str(seen))
    script = SCRIPTS / "loader_transforms.py"
    outcome = run_once(script, script, [], CPU, tmp_path / "run", precision="bf16")
    assert outcome.ok, outcome.reason + outcome.stderr_tail
    assert "mixed-precision region" not in outcome.stderr_tail
    assert set(seen.read_text().split()) == {"True"}
