"""Issue #37's FLOP and MFU checks against an independent counter: ``torch.utils.flop_counter`` run on the fixtures'
own models (built on the meta device: no memory, no GPU), for every GPT-style trace the project recorded on its
H200 — eager bf16 at two model sizes, torch.compile, through torch.profiler, tracelint.profile and ``tracelint run
--settings full`` — and MFU against those FLOPs over the step time measured outside the profiler.

The counter runs attention as the math path on the meta device (two ``bmm`` forward, four backward: it counts the
causal mask in full); the trace counts the fused kernels' work, causal as half (tracelint.trace.flops). So the GEMMs
must agree exactly, and the attention to half the counter's."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tracelint.trace import analyze_trace
from tracelint.trace.flops import ATTENTION, GEMM, step_flops

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "fixtures" / "scenarios"
RUN = ROOT / "fixtures" / "traces" / "run_gpt_small"
H200_BF16 = 989.4e12  # tracelint.trace.flops.PEAKS, the H200's dense bf16 Tensor Core peak


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(f"_ref_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _counted(model, batch: int, seq: int, vocab: int) -> dict[str, float]:
    """FLOPs of one training step (forward and backward) by aten op, as torch.utils.flop_counter counts them."""
    from torch.nn import functional as F
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.device("meta"):
        tokens = torch.randint(0, vocab, (batch, seq + 1))
    with counter:
        loss = F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
    return {str(op).removeprefix("aten."): float(n) for op, n in counter.get_flop_counts()["Global"].items()}


def _scenario_reference(name: str) -> dict[str, float]:
    module = _module(SCENARIOS / f"{name}.py")
    sizes = getattr(module, "base", module)  # gpt_medium_bf16 sets gpt_eager_bf16's sizes
    with torch.device("meta"):
        model = module.GPT()
    return _counted(model, sizes.BATCH, sizes.SEQ, sizes.VOCAB)


def _run_reference() -> dict[str, float]:
    """fixtures/run/gpt_small.py at the defaults ``tracelint run`` recorded it with."""
    module = _module(ROOT / "fixtures" / "run" / "gpt_small.py")
    with torch.device("meta"):
        model = module.GPT(50304, 1024, 16, 16, 1024)
    return _counted(model, 8, 1024, 50304)


def _trace_flops(path: Path):
    (analysis,) = analyze_trace(path).analyses
    model = analysis.model
    return step_flops(model.shaped_ops, [(s.start, s.end) for s in model.steps]), analysis.metrics


TRACES = [
    ("gpt_eager_bf16", "gpt_eager_bf16"), ("gpt_eager_bf16", "gpt_eager_bf16_tlprofile"),
    ("gpt_eager_bf16", "gpt_compiled_tlprofile"),  # gpt_compiled's model is gpt_eager_bf16's, compiled
    ("gpt_medium_bf16", "gpt_medium_bf16"), ("gpt_medium_bf16", "gpt_medium_bf16_tlprofile"),
]


@pytest.mark.parametrize(("scenario", "trace"), TRACES, ids=[t for _, t in TRACES])
def test_trace_flops_are_the_flop_counters(fixture_traces, scenario, trace):
    reference = _scenario_reference(scenario)
    found, metrics = _trace_flops(fixture_traces / f"{trace}.pt.trace.json.gz")
    assert found.by_kind[GEMM] == pytest.approx(reference["mm"] + reference["addmm"], rel=1e-9)
    assert found.by_kind[ATTENTION] == pytest.approx(reference["bmm"] / 2, rel=1e-9)  # causal: half
    assert found.causal_halved
    assert metrics["model_flop_per_step"] == pytest.approx(sum(found.by_kind.values()), rel=1e-6)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_tracelint_run_full_settings_flops_and_mfu(mode):
    """`tracelint run --settings full`'s traces: FLOPs the counter's (GEMMs exactly, attention half), MFU within ±8 %
    (relative; measured: 0.4 %) of those FLOPs over the step timed in a fresh process without tracelint."""
    path = RUN / f"{mode}.pt.trace.json.gz"
    if not path.exists():
        pytest.skip("fixtures/traces/run_gpt_small is absent")
    reference = _run_reference()
    found, metrics = _trace_flops(path)
    assert found.by_kind[GEMM] == pytest.approx(reference["mm"] + reference["addmm"], rel=1e-9)
    assert found.by_kind[ATTENTION] == pytest.approx(reference["bmm"] / 2, rel=1e-9)
    external_ms = json.loads((RUN / f"time_{mode}.json").read_text())["median_ms"]
    analytic = 100.0 * found.per_step / (external_ms / 1e3) / H200_BF16
    assert metrics["mfu_pct"] == pytest.approx(analytic, rel=0.08)
    assert metrics["mfu_basis"].startswith("unprofiled step")


def test_second_model_size_mfu_against_its_ground_truth(fixture_traces):
    """GPT-2 medium through tracelint.profile: MFU within ±8 % (measured: 0.2 %) of the counter's FLOPs (causal
    attention half) over the step measured without the profiler (manifest.json's ground truth)."""
    reference = _scenario_reference("gpt_medium_bf16")
    flops = reference["mm"] + reference["addmm"] + reference["bmm"] / 2
    truth_ms = json.loads((fixture_traces / "manifest.json").read_text())["traces"]["gpt_medium_bf16"][
        "ground_truth"]["median_ms"]
    _, metrics = _trace_flops(fixture_traces / "gpt_medium_bf16_tlprofile.pt.trace.json.gz")
    assert metrics["mfu_pct"] == pytest.approx(100.0 * flops / (truth_ms / 1e3) / H200_BF16, rel=0.08)


def test_cuda_graph_replays_give_no_flops_and_say_so(fixture_traces):
    """torch.compile(mode="reduce-overhead"): the steps' kernels run inside CUDA graph replays, which carry no op
    shapes; the trace has no model FLOPs and no MFU, and says why."""
    _, metrics = _trace_flops(fixture_traces / "gpt_cudagraphs_tlprofile.pt.trace.json.gz")
    assert metrics["model_flop_per_step"] is None and metrics["mfu_pct"] is None
    assert "graph" in (metrics["mfu_basis"] or "")
