"""TL503 in a trace: a graph break in a compiled model (two compiled graphs per forward, eager work between them,
the breaking line from the resume frame), the readback it explains, and TL501's advice on a compiled model."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tracelint.testing import TraceBuilder, analyze
from tracelint.trace import analyze_paths, analyze_trace

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _fixture(name: str):
    path = FIXTURES / "traces" / f"{name}.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"fixture trace {name} not recorded")
    return analyze_trace(path)


def _compiled_step(trace, *, brk: bool, kernels: int = 20):
    with trace.span("Torch-Compiled Region: 0/0"):
        with trace.span("CompiledFunction"):
            for i in range(kernels):
                trace.kernel(f"triton_poi_fused_add_{i}", gpu_us=40, api="cuLaunchKernel")
        if brk:
            trace.item()
            start = trace.now
            with trace.span("Torch-Compiled Region: 1/1"), trace.span("CompiledFunction"):
                for i in range(kernels):
                    trace.kernel(f"triton_poi_fused_mul_{i}", gpu_us=40, api="cuLaunchKernel")
            trace.frame("net.py(7): torch_dynamo_resume_in_forward_at_7", start, trace.now - start)


def test_the_recorded_break_is_named_at_its_line_with_its_cost():
    report = _fixture("compiled_graph_break")
    (found,) = [f for f in report.findings if f.code == "TL503"]
    details = dict(found.details)
    assert details["compiled_graphs_per_step"] == 4 and details["graph_breaks_per_step"] == 1
    assert found.location.source.path.endswith("compiled_graph_break.py")
    script = (FIXTURES / "scenarios" / "compiled_graph_break.py").read_text().splitlines()
    assert ".item()" in script[found.location.source.line - 1]
    assert "aten::item" in found.message and "4 compiled graphs" in found.message
    assert "sheds at least" in found.message and "host-bound" in found.message
    assert details["estimated_saving_us_per_step"] > 0
    # the .item() is the break: TL101 on it is not reported beside TL503
    assert "TL101" not in {f.code for f in report.findings}


def test_silent_on_the_fixed_twin_and_on_compiled_models_without_breaks():
    for name in ("compiled_graph_break_fixed", "gpt_compiled", "gpt_compiled_tlprofile", "compiled"):
        assert "TL503" not in {f.code for f in _fixture(name).findings}, name


def test_silent_on_the_shared_corpora(public_traces, multi_gpu_traces):
    for root in (public_traces, multi_gpu_traces):
        codes = {f.code for report in analyze_paths([root]) for f in getattr(report, "findings", ())}
        assert "TL503" not in codes, root


def test_a_break_in_one_step_of_several_is_not_the_steady_state():
    trace = TraceBuilder().device_properties()
    for i in trace.steps(4):
        _compiled_step(trace, brk=i == 0)
    assert "TL503" not in {f.code for f in analyze(trace).findings}
    assert "TL503" in {f.code for f in analyze(trace, thresholds={"graph-break-min-steps-pct": 25}).findings}


def test_a_user_sync_beside_the_break_stays():
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):
        _compiled_step(trace, brk=True)
        trace.item()  # a loss.item() after the forward: not the break
    codes = [f.code for f in analyze(trace).findings]
    assert "TL503" in codes and "TL101" in codes


def test_launch_bound_compiled_model_is_not_told_to_compile():
    for name in ("compiled_graph_break", "compiled_graph_break_fixed"):
        (tl501,) = [f for f in _fixture(name).findings if f.code == "TL501"]
        assert "use torch.compile" not in tl501.message and "already compiled" in tl501.message
        assert ("graph breaks (TL503)" in tl501.message) == (name == "compiled_graph_break")


def test_silent_on_a_compiled_ddp_model_whose_graph_ddpoptimizer_splits():
    # DDPOptimizer splits a compiled DDP model's graph at the bucket boundaries on purpose (the coverage table of
    # #36 feared a false TL503 there); recorded on an H200: three compiled frames per step, no eager work between.
    import gzip
    import json

    path = FIXTURES / "traces" / "compiled_ddp.pt.trace.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    regions = {e["name"] for e in events if e.get("name", "").startswith("Torch-Compiled Region")}
    assert len(regions) == 3  # the case is there to be judged
    assert "TL503" not in {f.code for f in analyze_trace(path).findings}


# TL504: recompilation inside steady-state steps

def _compile(trace, compile_id: str, *, us: float = 200_000):
    with trace.span("dynamo"), trace.span("entire_frame_compile"), trace.span("backend_compile"):
        with trace.span("inductor_compile"):
            trace.cpu(f"GraphLowering.run_data: compile_id={compile_id}", 10)
            trace.cpu("GraphLowering.run (dynamo_timed)", us)


def _run_graph(trace, compile_id: str):
    with trace.span(f"Torch-Compiled Region: {compile_id}"), trace.span("CompiledFunction"):
        for k in range(8):
            trace.kernel(f"triton_poi_fused_div_{k}", gpu_us=50, api="cuLaunchKernel")


def test_the_recorded_recompilation_is_named_with_its_compile_time():
    (found,) = [f for f in _fixture("compiled_recompile").findings if f.code == "TL504"]
    details = dict(found.details)
    assert details["compiling_steps"] == 2 == details["profiled_steps"]
    assert details["compile_ids"] == "0/3, 0/4"
    # the H200 trace: 1.82 and 2.61 s of compilation in steps of 1.84 and 2.63 s, all of it what the fix buys
    assert details["estimated_saving_us_per_step"] == details["compile_us_per_step"] > 0
    assert re.search(r"\(9\d\.\d % of the step\)", found.message)
    assert found.location.event == "dynamo" and found.location.step == 3
    assert "TORCH_LOGS=recompiles" in found.message and "as a tensor" in found.message


def test_recompilation_silent_on_the_fixed_twin_and_other_compiled_models():
    for name in ("compiled_recompile_fixed", "gpt_compiled", "gpt_compiled_tlprofile", "compiled",
                 "compiled_graph_break", "compiled_graph_break_fixed", "compiled_ddp"):
        assert "TL504" not in {f.code for f in _fixture(name).findings}, name


def test_recompilation_silent_on_the_shared_corpora(public_traces, multi_gpu_traces):
    for root in (public_traces, multi_gpu_traces):
        codes = {f.code for report in analyze_paths([root]) for f in getattr(report, "findings", ())}
        assert "TL504" not in codes, root


def test_compilation_in_the_first_step_only_is_warm_up():
    trace = TraceBuilder().device_properties()
    for i in trace.steps(4):
        if i == 0:
            _compile(trace, "0/0")
        _run_graph(trace, "0/0")
    assert "TL504" not in {f.code for f in analyze(trace).findings}


def test_one_stray_recompilation_and_first_compiles_are_not_the_steady_state():
    trace = TraceBuilder().device_properties()  # automatic dynamic: one recompilation, then a symbolic graph
    for i in trace.steps(4):
        if i == 1:
            _compile(trace, "0/1")
        _run_graph(trace, "0/1" if i else "0/0")
    assert "TL504" not in {f.code for f in analyze(trace).findings}
    trace = TraceBuilder().device_properties()  # a new frame's first compile in each step (F/0): not guarded
    for i in trace.steps(3):
        _compile(trace, f"{i}/0")
        _run_graph(trace, f"{i}/0")
    assert "TL504" not in {f.code for f in analyze(trace).findings}


def test_recompilation_every_step_is_named_at_the_user_frame():
    trace = TraceBuilder().device_properties()
    for i in trace.steps(3):
        start = trace.now
        _compile(trace, f"0/{i + 3}")
        _run_graph(trace, f"0/{i + 3}")
        trace.frame("train.py(40): train_step", start, trace.now - start)
    (found,) = [f for f in analyze(trace).findings if f.code == "TL504"]
    assert dict(found.details)["compiling_steps"] == 3
    assert found.location.source.path == "train.py" and found.location.source.line == 40
    assert "train_step" in found.message and "0/3, 0/4, 0/5" in found.message
