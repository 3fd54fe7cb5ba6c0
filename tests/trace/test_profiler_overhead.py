"""Right about the run, not the profiler: what the profiler recorded, its measured cost (tracelint.profile's record),
the verdict of the unprofiled run, TL003, compiled and graph-replayed code, and syncs that cost nothing — on the H200
GPT-2 fixtures, whose unprofiled step times were measured outside the profiler (fixtures/traces/manifest.json)."""
from __future__ import annotations

import gzip
import json
import re
from functools import cache

import pytest

from tracelint.engine import Severity
from tracelint.engine import metrics as M
from tracelint.testing import TraceBuilder, analyze
from tracelint.trace import analyze_trace

TINY = "void at::native::vectorized_elementwise_kernel<4, ...>"


@cache
def _report(fixture_traces, name: str):
    path = fixture_traces / f"{name}.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"fixture trace {name} not recorded")
    return analyze_trace(path)


@cache
def _raw(fixture_traces, name: str) -> dict:
    with gzip.open(fixture_traces / f"{name}.pt.trace.json.gz") as f:
        return json.load(f)


def _manifest(fixture_traces) -> dict:
    return json.loads((fixture_traces / "manifest.json").read_text())["traces"]


def _codes(report) -> set[str]:
    return {f.code for f in report.findings}


def test_what_the_profiler_recorded(fixture_traces, public_traces):
    recorded = _report(fixture_traces, "gpt_eager_bf16").summaries[0].profiler
    assert {k: recorded[k] for k in ("with_stack", "record_shapes", "profile_memory")} == dict.fromkeys(
        ("with_stack", "record_shapes", "profile_memory"), True)
    assert recorded["inferred"] == [] and recorded["unprofiled_step_ms"] is None
    # PyTorch 1.9 traces say nothing at the top level: stacks and memory are read from the events
    old = analyze_trace(public_traces / "tbplugin-resnet50_num_workers_0.pt.trace.json.gz").summaries[0].profiler
    assert set(old["inferred"]) == {"with_stack", "profile_memory"} and old["record_shapes"] is None


@pytest.mark.parametrize("name", ["gpt_eager_bf16", "gpt_compiled", "gpt_fp32", "gpt_tiny_item"])
def test_unprofiled_step_and_inflation(fixture_traces, name):
    """unprofiled_step_ms is the record's, within 2 % of the step time measured outside the profiler, and
    profiler_inflation is the profiled step (plain reading of the ProfilerStep spans and of the GPU spans of the
    steps) over it."""
    report = _report(fixture_traces, f"{name}_tlprofile")
    raw = _raw(fixture_traces, f"{name}_tlprofile")
    m = report.metrics
    record = raw["tracelint"]["unprofiled"]["step_ms"]
    assert M.UNPROFILED_STEP_MS.of(m) == record
    truth = _manifest(fixture_traces)[name]["ground_truth"]["median_ms"]
    assert record == pytest.approx(truth, rel=0.02)
    events = raw["traceEvents"]
    steps = [e for e in events if e.get("cat") == "user_annotation" and re.fullmatch(r"ProfilerStep#\d+", e["name"])]
    cpu_ms = sum(e["dur"] for e in steps) / len(steps) / 1000
    gpu_ms = M.STEP_GPU_SPAN_US_MEAN.of(m) / 1000
    assert M.PROFILER_INFLATION.of(m) == pytest.approx(max(cpu_ms, gpu_ms) / record, abs=0.01)


@pytest.mark.parametrize(("name", "verdict"), [("gpt_eager_bf16", "gpu-bound"), ("gpt_compiled", "gpu-bound"),
                                               ("gpt_fp32", "gpu-bound"), ("gpt_tiny_item", "cpu-bound")])
def test_verdict_is_the_unprofiled_runs(fixture_traces, name, verdict):
    """With tracelint.profile's record the verdict is the unprofiled run's: the GPU work per step against the step
    time measured without the profiler (the ground truth says the same)."""
    report = _report(fixture_traces, f"{name}_tlprofile")
    assert report.verdict == verdict
    gpu_ms = M.GPU_BUSY_US.of(report.metrics) / M.STEPS.of(report.metrics) / 1000
    truth = _manifest(fixture_traces)[name]["ground_truth"]["median_ms"]
    assert (gpu_ms / truth >= 0.8) == (verdict == "gpu-bound")
    if name in ("gpt_eager_bf16", "gpt_compiled"):
        assert report.evidence.startswith("gpu-bound: when not profiled, GPU work")
        assert "the profiled trace reads cpu-bound" in report.evidence
        tl003 = dict(next(f for f in report.findings if f.code == "TL003").details)
        assert tl003["profiler_inflation"] > 1.5
    if name == "gpt_fp32":
        assert "TL401" in _codes(report) and "TL003" not in _codes(report)


@pytest.mark.parametrize("name", ["gpt_eager_bf16", "gpt_compiled"])
def test_without_the_record_tl003_says_the_verdict_may_be_the_profilers(fixture_traces, name):
    report = _report(fixture_traces, name)
    assert report.verdict == "cpu-bound"
    (finding,) = [f for f in report.findings if f.code == "TL003"]
    assert finding.severity is Severity.INFO
    d = dict(finding.details)
    m = report.metrics
    host = M.STEP_CPU_US_MEAN.of(m) / M.KERNELS_PER_STEP.of(m)
    assert d["host_gpu_ratio"] == pytest.approx(host / M.MEAN_KERNEL_US.of(m), abs=0.01)
    assert d["host_gpu_ratio"] < 5
    assert "tracelint.profile" in finding.message


@pytest.mark.parametrize("name", ["launch_bound", "gpt_tiny_item", "item_per_step", "gpu_bound", "gpt_fp32"])
def test_no_tl003_where_the_verdict_is_safe(fixture_traces, name):
    """Genuinely host-bound runs (the host needs many times the GPU's time per kernel) and GPU-bound ones."""
    assert "TL003" not in _codes(_report(fixture_traces, name))


@pytest.mark.parametrize("name", ["gpt_compiled", "gpt_compiled_tlprofile", "compiled"])
def test_a_compiled_model_is_never_told_to_compile(fixture_traces, name):
    report = _report(fixture_traces, name)
    assert M.COMPILED_KERNEL_PCT.of(report.metrics) > 50
    for finding in report.findings:
        assert "use torch.compile (" not in finding.message, finding.message
    tl501 = [f for f in report.findings if f.code == "TL501"]
    assert all("reduce-overhead" in f.message for f in tl501)


def test_compiled_metrics_match_a_plain_reading(fixture_traces):
    """Kernels launched inside a ## Call CompiledFxGraph span of their thread, or Triton kernels: their share of
    the kernel time launched in the steps; regions per step."""
    raw = _raw(fixture_traces, "gpt_compiled")["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in raw if e.get("cat") == "user_annotation"
             and re.fullmatch(r"ProfilerStep#\d+", e["name"])]
    regions = [(e["tid"], e["ts"], e["ts"] + e["dur"]) for e in raw if e.get("cat") == "user_annotation"
               and e["name"].startswith("## Call CompiledFxGraph")]
    launches = {e["args"]["correlation"]: e for e in raw if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in e.get("args", {})}
    total = compiled = 0.0
    for k in (e for e in raw if e.get("cat") == "kernel"):
        launch = launches.get(k["args"]["correlation"])
        if launch is None or not any(s <= launch["ts"] <= t for s, t in steps):
            continue
        total += k["dur"]
        inside = any(tid == launch["tid"] and s <= launch["ts"] <= t for tid, s, t in regions)
        if inside or k["name"].startswith("triton_"):
            compiled += k["dur"]
    m = _report(fixture_traces, "gpt_compiled").metrics
    assert M.COMPILED_KERNEL_PCT.of(m) == pytest.approx(100 * compiled / total, abs=0.01)
    assert M.COMPILED_REGIONS_PER_STEP.of(m) == len(regions) / len(steps) == 2  # forward and backward graphs
    assert M.COMPILED_KERNEL_PCT.of(_report(fixture_traces, "gpt_eager_bf16").metrics) is None


def test_graph_replays_get_graph_advice():
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):
        for _ in range(120):  # 120 tiny graphs replayed per step (graph breaks): the host still launches each
            trace.kernel(TINY, gpu_us=3, host_us=15, op="aten::add", api="cudaGraphLaunch")
    report = analyze(trace)
    m = report.metrics
    assert M.GRAPH_KERNEL_PCT.of(m) == 100.0 and M.GRAPH_LAUNCHES_PER_STEP.of(m) == 120
    (tl501,) = [f for f in report.findings if f.code == "TL501"]
    assert "already replays CUDA graphs" in tl501.message and "use torch.compile (" not in tl501.message


def test_a_sync_that_costs_nothing_is_info(fixture_traces):
    """The cost of a sync is the GPU idle time it causes: item_per_step loses what its fixed twin gains, and the
    tiny GPT's .item() comes when the GPU queue is already empty."""
    costly = next(f for f in _report(fixture_traces, "item_per_step").findings if f.code == "TL101")
    manifest = _manifest(fixture_traces)
    gain = 1 - manifest["item_per_step_fixed"]["ground_truth"]["median_ms"] / manifest["item_per_step"][
        "ground_truth"]["median_ms"]
    assert costly.severity is Severity.WARNING
    assert dict(costly.details)["cost_pct_of_step"] == pytest.approx(100 * gain, abs=5)
    for name in ("gpt_tiny_item", "item_no_effect"):
        cheap = next(f for f in _report(fixture_traces, name).findings if f.code == "TL101")
        assert cheap.severity is Severity.INFO and dict(cheap.details)["cost_pct_of_step"] < 1


def test_recorded_settings_and_measured_cost_in_a_synthetic_trace():
    fast_host = TraceBuilder().device_properties().recorded(unprofiled_step_ms=30.0)
    for _ in fast_host.steps(3):
        for _ in range(700):
            fast_host.kernel(TINY, gpu_us=40, op="aten::add", host_us=90)
    report = analyze(fast_host)
    assert report.verdict == "gpu-bound" and M.UNPROFILED_STEP_MS.of(report.metrics) == 30.0
    assert "TL003" in _codes(report) and "TL501" not in _codes(report)
    under_limit = TraceBuilder().device_properties().recorded(unprofiled_step_ms=60.0)
    for _ in under_limit.steps(3):
        for _ in range(700):
            under_limit.kernel(TINY, gpu_us=40, op="aten::add", host_us=90)
    report = analyze(under_limit)  # 63 ms profiled against 60 ms: the profiler cost little, the trace is right
    assert report.verdict == "cpu-bound" and "TL003" not in _codes(report)


# ---- idle causes that say what happened --------------------------------------------------------------------------


def _gap_causes(build) -> dict:
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):
        build(trace)
    m = analyze(trace).metrics
    return {cause: M.IDLE_PCT[cause].of(m) for cause in M.IDLE_CAUSES}


def test_python_inside_an_annotation_is_not_launch_overhead():
    def step(trace):
        with trace.span("Optimizer.step#AdamW.step"):  # a record_function range: Python between its ops
            for _ in range(5):
                trace.kernel(TINY, gpu_us=5, op="aten::add", host_us=10)
                trace.idle(200)

    causes = _gap_causes(step)
    assert causes["other"] > 80 and causes["launch_overhead"] < 20


def test_the_allocator_giving_memory_back_is_its_own_cause():
    def step(trace):
        trace.kernel(TINY, gpu_us=200, op="aten::add")
        end = trace.now + 500  # cudaFree waits for the GPU, then returns the block to the driver
        trace.runtime("cudaFree", trace.now, end - trace.now)
        trace.now = end + 300
        trace.kernel(TINY, gpu_us=200, op="aten::add")

    causes = _gap_causes(step)
    assert causes["allocator"] > 90


def test_convolution_algorithm_search_is_its_own_cause():
    def step(trace):
        trace.kernel(TINY, gpu_us=200, op="aten::add")
        trace.cpu("cudnnFindConvolutionForwardAlgorithmEx", 800)
        trace.kernel(TINY, gpu_us=200, op="aten::cudnn_convolution")

    causes = _gap_causes(step)
    assert causes["autotune"] > 90


# ---- transformer kernels -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "attention"), [
    ("gpt_eager_bf16", ("cudnn_generated_fort_native_sdpa", "cudnn::fusion::")),  # cuDNN SDPA and its helpers
    ("gpt_fp32", ("fmha_cutlass",)),  # memory-efficient attention
])
def test_attention_share_matches_the_kernel_names(fixture_traces, name, attention):
    """attention_pct against the SDPA kernels picked out by name in the raw trace (launched in the steps)."""
    raw = _raw(fixture_traces, name)["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in raw if e.get("cat") == "user_annotation"
             and re.fullmatch(r"ProfilerStep#\d+", e["name"])]
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in raw if e.get("cat") in ("cuda_runtime", "cuda_driver")
                 and "correlation" in e.get("args", {})}
    kernels = [e for e in raw if e.get("cat") == "kernel"
               and any(s <= launch_ts.get(e["args"]["correlation"], -1) <= t for s, t in steps)]
    total = sum(k["dur"] for k in kernels)
    fused = sum(k["dur"] for k in kernels if any(token in k["name"] for token in attention))
    m = _report(fixture_traces, name).metrics
    assert M.ATTENTION_PCT.of(m) == pytest.approx(100 * fused / total, abs=0.01)
    assert "TL402" not in _codes(_report(fixture_traces, name))


def test_fusion_shrinks_the_memory_bound_share(fixture_traces):
    eager = M.MEMORY_BOUND_KERNEL_PCT.of(_report(fixture_traces, "gpt_eager_bf16").metrics)
    compiled = M.MEMORY_BOUND_KERNEL_PCT.of(_report(fixture_traces, "gpt_compiled").metrics)
    assert 30 < compiled < eager < 70  # Inductor fuses the elementwise and normalization kernels


def test_a_loss_log_softmax_is_not_attention():
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):
        for _ in range(12):
            trace.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas", gpu_us=300)
        for _ in range(4):  # cross-entropy: log_softmax forward and backward, named like any softmax kernel
            trace.kernel("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>",
                         gpu_us=50, op="aten::_log_softmax")
    assert "TL402" not in _codes(analyze(trace))


def _launch_bound(kernel: str, api: str, host_us: float, op: str | None = None, gpu_us: float = 20.0):
    trace = TraceBuilder().device_properties().recorded()  # with_stack, shapes, memory; no tracelint.profile record
    for _ in trace.steps(3):
        for _ in range(600):
            trace.kernel(kernel, gpu_us=gpu_us, host_us=host_us, api=api, op=op)
    return analyze(trace)


@pytest.mark.parametrize(("ratio", "fires"), [(3.5, True), (6.5, True), (7.3, True), (8.0, False), (15.0, False)])
def test_tl003_estimate_on_compiled_code(ratio, fires):
    """Compiled code (Inductor's Triton kernels) recorded with stacks: the profiler slowed its host 3.2-6x in
    bench/tl003_calibration.py, so a GPU-bound run can read up to 6 / 0.8 = 7.5 times as much host as GPU time per
    kernel (profiler-risk-max-host-gpu-ratio-compiled); the same ratios on eager code keep the limit of 5."""
    compiled = _launch_bound("triton_poi_fused_add_0", "cuLaunchKernel", host_us=20.0 * ratio)
    assert compiled.verdict == "cpu-bound" and M.COMPILED_LAUNCH_PCT.of(compiled.metrics) == 100.0
    found = [f for f in compiled.findings if f.code == "TL003"]
    assert bool(found) == fires
    if found:
        d = dict(found[0].details)
        assert d["compiled"] is True and d["host_gpu_ratio"] == pytest.approx(ratio, rel=0.05)
        assert "compiled code" in found[0].message
    eager = _launch_bound(TINY, "cudaLaunchKernel", host_us=20.0 * ratio, op="aten::add")
    assert M.COMPILED_LAUNCH_PCT.of(eager.metrics) is None
    assert ("TL003" in _codes(eager)) == (ratio < 5)
    assert all("compiled" not in dict(f.details) for f in eager.findings if f.code == "TL003")
