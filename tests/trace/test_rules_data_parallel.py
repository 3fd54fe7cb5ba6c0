"""TL605 (nn.DataParallel) and TL606 (gradient accumulation without no_sync, DDP and FSDP2) in traces: synthetic
cases and the project's 2-GPU fixtures (fixtures/traces/ddp36, 2 × H200), and silence on the shared multi-GPU jobs."""
from __future__ import annotations

import json

import pytest

from tracelint.testing import TraceBuilder, analyze
from tracelint.trace import analyze_trace

CONV = "sm90_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x32"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, ...>"


def _found(trace, code):
    return [f for f in analyze(trace).findings if f.code == code]


def _dp_step(trace, devices=(0, 1)):
    with trace.span("Broadcast"):
        trace.kernel("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", gpu_us=800)
    with trace.span("Scatter"):
        trace.kernel("Memcpy PtoP (Device -> Device)", gpu_us=50)
    trace.idle(5_000)
    for _ in range(10):
        trace.kernel(CONV, gpu_us=300)
        for device in devices[1:]:
            trace.launch(CONV, trace.now, trace.now + 10, 300, device=device)
        trace.idle(1_000)
    with trace.span("Gather"):
        trace.kernel("Memcpy PtoP (Device -> Device)", gpu_us=50)


def test_tl605_once_per_trace_on_the_first_gpu_with_the_ops_host_time():
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):
        _dp_step(trace)
    report = analyze(trace)
    (found,) = [f for f in report.findings if f.code == "TL605"]  # two devices analyzed, one finding
    details = dict(found.details)
    assert details["gpus"] == 2 and details["dp_host_us_per_step"] > 0
    assert 2_900 <= details["gpu_work_us_per_step"] <= 4_000  # the Broadcast, 10 convs and the copies of GPU 0
    assert found.location.event == "Broadcast"


def test_tl605_silent_with_one_gpu_at_work():
    """An autograd Function of one's own named Broadcast/Gather on a single GPU is not DataParallel."""
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(3):
        _dp_step(trace, devices=(0,))
    assert _found(trace, "TL605") == []


DDP = ("DistributedDataParallel.forward", "all_reduce")
FSDP2 = ("FSDP::root_pre_forward", "reduce_scatter")


def _accumulate(trace, micro=4, reduce_in=None, optimizer=True, per_micro_step_profiler_steps=False, wrapper=DDP,
                reduce_host_us=0.0):
    reduce_in = range(micro) if reduce_in is None else reduce_in
    forward, collective = wrapper

    def micro_step(i):
        with trace.span(forward):
            for _ in range(5):
                trace.kernel(CONV, gpu_us=300)
        for _ in range(5):
            trace.kernel(CONV, gpu_us=300)
            if i in reduce_in:
                if reduce_host_us:  # FSDP2's host code around each unit's reduce-scatter
                    trace.cpu("FSDP::post_backward_reduce (layer1.0)", reduce_host_us)
                trace.collective(collective, gpu_us=400, blocking=False)

    if per_micro_step_profiler_steps:  # prof.step() after each micro-step: an optimizer step every `micro` steps
        for i in trace.steps(2 * micro):
            micro_step(i % micro)
            if i % micro == micro - 1:
                with trace.span("Optimizer.step#SGD.step"):
                    trace.kernel(ELEMENTWISE, gpu_us=200)
        return
    for _ in trace.steps(3):
        for i in range(micro):
            micro_step(i)
        if optimizer:
            with trace.span("Optimizer.step#SGD.step"):
                trace.kernel(ELEMENTWISE, gpu_us=200)


def test_tl606_counts_the_redundant_all_reduces_and_bounds_the_gain_by_their_exposed_time():
    trace = TraceBuilder().device_properties().distributed(0, 2)
    _accumulate(trace)
    (found,) = _found(trace, "TL606")
    details = dict(found.details)
    assert details["micro_steps"] == 4 and details["reductions_per_step"] == 20
    assert details["redundant_reductions_per_step"] == 15 and details["wrapper"] == "DDP"
    assert 0 < details["redundant_exposed_us_per_step"] <= details["redundant_reduction_us_per_step"]
    assert found.location.event == "DistributedDataParallel.forward" and "no_sync()" in found.message


def test_tl606_reads_fsdp2_forwards_and_reduce_scatters_with_their_host_code():
    trace = TraceBuilder().device_properties().distributed(0, 2)
    _accumulate(trace, wrapper=FSDP2, reduce_host_us=2_000)
    (found,) = _found(trace, "TL606")
    details = dict(found.details)
    assert details["wrapper"] == "FSDP2" and details["collective"] == "reduce_scatter"
    assert details["reductions_per_step"] == 20 and details["redundant_reductions_per_step"] == 15
    assert details["redundant_host_us_per_step"] == 15 * 2_000  # the redundant micro-steps' host code only
    assert found.location.event == "FSDP::root_pre_forward" and "set_requires_gradient_sync(False)" in found.message
    under_skip = TraceBuilder().device_properties().distributed(0, 2)
    _accumulate(under_skip, wrapper=FSDP2, reduce_in={3}, reduce_host_us=2_000)
    assert _found(under_skip, "TL606") == []


def test_tl606_silent_under_no_sync_and_without_accumulation():
    no_sync = TraceBuilder().device_properties().distributed(0, 2)
    _accumulate(no_sync, reduce_in={3})
    assert _found(no_sync, "TL606") == []
    one = TraceBuilder().device_properties().distributed(0, 2)
    _accumulate(one, micro=1)  # a forward and an optimizer step per step
    assert _found(one, "TL606") == []
    no_opt = TraceBuilder().device_properties().distributed(0, 2)
    _accumulate(no_opt, optimizer=False)  # no optimizer step in sight: nothing says which micro-steps go together
    assert _found(no_opt, "TL606") == []


def test_tl606_reads_micro_steps_across_profiler_steps():
    trace = TraceBuilder().device_properties().distributed(0, 2)
    _accumulate(trace, per_micro_step_profiler_steps=True)
    (found,) = _found(trace, "TL606")
    assert dict(found.details)["redundant_reductions_per_step"] == 15


DDP36 = "ddp36"


def _job(fixture_traces, job):
    folder = fixture_traces / DDP36 / job
    if not folder.exists():
        pytest.skip(f"{job} not recorded")
    return sorted(folder.glob("rank*.pt.trace.json.gz"))


def test_tl605_on_the_dataparallel_fixture_and_not_on_ddp(fixture_traces):
    (path,) = _job(fixture_traces, "dataparallel")
    (found,) = [f for f in analyze_trace(path).findings if f.code == "TL605"]
    details = dict(found.details)
    manifest = json.loads((fixture_traces / DDP36 / "manifest.json").read_text())["jobs"]
    ddp_ms = manifest["ddp_default"]["ranks"]["0"]["ground_truth"]["median_ms"]
    # the bound the message gives (the busiest GPU's work) lies under what DDP measured: DDP still has its host
    assert details["gpu_work_us_per_step"] / 1e3 < ddp_ms
    assert details["gpus"] == 2 and details["dp_host_us_per_step"] > 1_000
    for path in _job(fixture_traces, "ddp_default"):
        assert not [f for f in analyze_trace(path).findings if f.code == "TL605"]


def test_tl606_on_the_accumulation_fixtures(fixture_traces):
    for path in _job(fixture_traces, "ddp_accum"):
        (found,) = [f for f in analyze_trace(path).findings if f.code == "TL606"]
        details = dict(found.details)
        assert details["micro_steps"] == 4 and details["redundant_reductions_per_step"] * 4 == \
            details["reductions_per_step"] * 3
    for path in _job(fixture_traces, "ddp_accum_no_sync") + _job(fixture_traces, "ddp_default"):
        assert not [f for f in analyze_trace(path).findings if f.code == "TL606"], path


def test_tl606_on_the_fsdp2_accumulation_fixtures(fixture_traces):
    """17 FSDP units reduce-scatter in each of 4 backwards; the host-bound rank's estimate is FSDP2's host code
    around the redundant reduce-scatters (the unprofiled pair gained 54 ms per step, fixtures/traces/ddp36)."""
    manifest = json.loads((fixture_traces / DDP36 / "manifest.json").read_text())["jobs"]
    gained_ms = (manifest["fsdp2_accum"]["ranks"]["0"]["ground_truth"]["median_ms"]
                 - manifest["fsdp2_accum_no_sync"]["ranks"]["0"]["ground_truth"]["median_ms"])
    assert gained_ms > 0
    for path in _job(fixture_traces, "fsdp2_accum"):
        report = analyze_trace(path)
        (found,) = [f for f in report.findings if f.code == "TL606"]
        details = dict(found.details)
        assert details["wrapper"] == "FSDP2" and details["micro_steps"] == 4
        assert (details["reductions_per_step"], details["redundant_reductions_per_step"]) == (68, 51)
        assert details["redundant_host_us_per_step"] > 0
    for path in _job(fixture_traces, "fsdp2_accum_no_sync"):
        assert not [f for f in analyze_trace(path).findings if f.code == "TL606"], path


@pytest.mark.parametrize("job", ["ddp-2xh100/ddp_default", "ddp-2xh100/ddp_no_sync", "ddp-2xh100/fsdp2"])
def test_silent_on_the_shared_ddp_jobs(multi_gpu_traces, job):
    """ddp_no_sync there is backward under no_sync, then one all-reduce per parameter: one forward per optimizer
    step, no accumulation."""
    for path in sorted((multi_gpu_traces / job).glob("rank*.pt.trace.json.gz")):
        assert not [f for f in analyze_trace(path).findings if f.code in ("TL605", "TL606")], path
