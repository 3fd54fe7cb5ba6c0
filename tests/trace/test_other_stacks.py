"""Traces from other stacks: ROCm's agent-numbered GPUs, CUPTI range-profiler traces, traces without ProfilerStep.

Where there is a number, it is checked against a plain reading of the raw JSON (gzip + json + loops)."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trace.synth import Synth
from tracelint.testing import analyze
from tracelint.trace import analyze_trace
from tracelint.trace.verdict import UNKNOWN

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
MI250 = "hta-amd_trace-mi250_minitoy_train_ROCm6_2_kineto.json.gz"
MI300 = "tracelens-mi300-resnet_act_checkpoint.json.gz"
NO_STEPS = "hta-critical_path-benchmark_result_2869224_1695835535_trace.json.gz"  # AlexNet, no ProfilerStep


def _load(path: Path) -> dict:
    with gzip.open(path) as f:
        return json.load(f)


def _props(data: dict) -> dict[int, dict]:
    return {p["id"]: p for p in data.get("deviceProperties", [])}


# ---- ROCm: GPU events carry HSA agent indices, CPU agents first ------------------------------------------------


def _agent_and_ordinal(data: dict) -> tuple[int, int]:
    """The one agent index the GPU events name, and the HIP ordinal this process used: its local rank when it is a
    rank of a job (one GPU per rank over the GPUs deviceProperties lists), else its first GPU."""
    agents = {e["args"]["device"] for e in data["traceEvents"] if e.get("cat") in GPU_CATS}
    assert len(agents) == 1
    dist = data.get("distributedInfo") or {}
    ordinal = dist["rank"] % len(data["deviceProperties"]) if dist.get("world_size", 1) > 1 else 0
    return agents.pop(), ordinal


@pytest.mark.parametrize("name", [MI250, MI300])
def test_rocm_agent_index_is_reported_as_the_hip_device(public_traces, name):
    data = _load(public_traces / name)
    agent, ordinal = _agent_and_ordinal(data)
    assert agent > ordinal  # the trace numbers the GPU after the CPU agents
    report = analyze_trace(public_traces / name)
    m = report.metrics
    props = _props(data)[ordinal]
    assert m["device"] == ordinal
    assert m["device_name"] == props["name"]
    assert m["device_memory_bytes"] == props["totalGlobalMem"]
    assert report.analyses[0].model.device_agents == {ordinal: agent}
    assert m["gpu_events"] == sum(1 for e in data["traceEvents"] if e.get("cat") in GPU_CATS)


def test_rocm_memory_pct_uses_the_allocators_device(public_traces, tmp_path):
    # The MI250 trace recorded with profile_memory: PyTorch's [memory] samples name the HIP ordinal (0), the kernels
    # agent 2. Reading the samples of "device 2" found none, and peak_memory_pct was missing.
    data = _load(public_traces / MI250)
    steps = sorted((e["ts"], e["dur"]) for e in data["traceEvents"] if str(e.get("name")).startswith("ProfilerStep#")
                   and e.get("cat") == "user_annotation")
    total = 0
    for i, (ts, dur) in enumerate(steps):
        for j, nbytes in enumerate((3 << 30, 5 << 30, -(2 << 30))):
            total += nbytes + i * (1 << 20)
            data["traceEvents"].append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
                                        "pid": 1, "tid": 1, "ts": ts + dur * (j + 1) / 4,
                                        "args": {"Device Type": 1, "Device Id": 0, "Bytes": nbytes,
                                                 "Total Allocated": total}})
    path = tmp_path / "mi250_with_memory.json.gz"
    path.write_bytes(gzip.compress(json.dumps(data).encode()))

    raw = _load(path)
    samples = [e["args"] for e in raw["traceEvents"] if e.get("name") == "[memory]"]
    peak = max(s["Total Allocated"] for s in samples)
    size = _props(raw)[samples[0]["Device Id"]]["totalGlobalMem"]
    m = analyze_trace(path).metrics
    assert m["device"] == samples[0]["Device Id"]
    assert m["peak_memory_bytes"] == peak
    assert m["peak_memory_pct"] == pytest.approx(100 * peak / size, abs=0.01)


def _rocm_rank(agent: int, *, rank: int | None, memory_device: int | None, sizes: list[int]) -> Synth:
    """A roctracer-style rank: hipLaunchKernel launches, GPU events on HSA agent ``agent``."""
    trace = Synth(device=agent)
    for i, size in enumerate(sizes):
        trace.device_properties(name=f"AMD Instinct MI300X #{i}", total_memory=size, compute_major=9, device=i)
    if rank is not None:
        trace.distributed(rank, len(sizes))
    for _ in trace.steps(3):
        trace.kernel("Cijk_Alik_Bljk_BBS_BH_MT128x128x64_MI16x16x16x1", gpu_us=400, api="hipLaunchKernel")
        if memory_device is not None:
            trace.allocate(1 << 30, device=memory_device)
    return trace


@pytest.mark.parametrize(("rank", "memory"), [(7, 7), (7, None), (None, 7)])
def test_agent_nine_is_the_eighth_gpu(tmp_path, rank, memory):
    sizes = [(192 << 30) + (i << 20) for i in range(8)]  # told apart, to see which entry is read
    trace = _rocm_rank(9, rank=rank, memory_device=memory, sizes=sizes)
    report = analyze_trace(trace.write(tmp_path / "rank7.pt.trace.json"))
    m = report.metrics
    assert (m["device"], m["device_name"], m["device_memory_bytes"]) == (7, "AMD Instinct MI300X #7", sizes[7])
    if memory is not None:
        peak = max(e["args"]["Total Allocated"] for e in trace.events if e["name"] == "[memory]")
        assert m["peak_memory_pct"] == pytest.approx(100 * peak / sizes[7], abs=0.01)
    assert not any("peak_memory_pct" in w for w in report.warnings)


@pytest.mark.parametrize("writer", ["cuda", "rocprofiler-sdk"])
def test_device_ids_that_are_ordinals_stay_as_written(writer):
    # CUDA numbers devices as deviceProperties does; so does Kineto's rocprofiler-sdk path (it says so in a key).
    trace = Synth(device=1)
    trace.device_properties(name="GPU zero", device=0).device_properties(name="GPU one", device=1)
    api = "cudaLaunchKernel" if writer == "cuda" else "hipLaunchKernel"
    if writer == "rocprofiler-sdk":
        trace.meta["rocprofiler-sdk_version"] = "1.0"
    for _ in trace.steps(2):
        trace.kernel("some_kernel", gpu_us=100, api=api)
    m = analyze(trace).metrics
    assert (m["device"], m["device_name"]) == (1, "GPU one")


@pytest.mark.parametrize("props", ["none", "other device", "no name"])
def test_a_device_named_nowhere_is_an_unnamed_gpu_and_the_warning_says_why(tmp_path, props):
    trace = Synth(device=3)
    if props == "other device":
        trace.device_properties(device=0)
    elif props == "no name":
        trace.meta["deviceProperties"] = [{"id": 3, "name": "", "computeMajor": 9}]
    for _ in trace.steps(2):
        trace.kernel("some_kernel", gpu_us=100)
        trace.allocate(1 << 30)
    report = analyze_trace(trace.write(tmp_path / "t.pt.trace.json"))  # the file's warnings included
    m = report.metrics
    peak = max(e["args"]["Total Allocated"] for e in trace.events if e["name"] == "[memory]")
    assert (m["device"], m["device_name"]) == (3, "unnamed GPU")
    assert m["peak_memory_bytes"] == peak and m["peak_memory_pct"] is None
    why = {"none": "the trace has no `deviceProperties`", "other device": "has no entry for it (it lists GPU 0)",
           "no name": "entry has no `totalGlobalMem`"}[props]
    notes = [w for w in report.warnings if w.startswith("no peak_memory_pct for GPU 3")]
    assert len(notes) == 1 and why in notes[0]


def test_no_memory_warning_without_memory_samples(public_traces):
    # The 128-rank samples have neither deviceProperties nor [memory] events: nothing is missing because of the props.
    report = analyze_trace(public_traces / "hta-timeline_analysis-sampled_rank-0.json.gz")
    assert not any("peak_memory_pct" in w for w in report.warnings)


# ---- CUPTI range profiler: per-range counters, no kernel timeline -------------------------------------------------

# The shape of Kineto's CuptiRangeProfiler output (pytorch/kineto before #1437; HTA's tests/data/cupti_profiler): one
# `cuda_profiler_range` event per replayed kernel on pid = the device, the counter values in args, the launches
# (cudaLaunchKernel) on the host and no kernel events, under a "__cupti_profiler__" span.
FLOPS_COUNTERS = [f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum"
                  for op in ("dadd", "dfma", "dmul", "hadd", "hfma", "hmul", "fadd", "ffma", "fmul")]


def _range_profiler_trace(ranges: int) -> Synth:
    trace = Synth()
    trace.device_properties(name="NVIDIA A100-PG509-200", compute_major=8)
    trace.meta["distributedInfo"] = {"rank": 0}
    t = 0.0
    for _ in range(ranges):
        trace.op("aten::conv2d", t, 50.0)
        trace.runtime("cudaLaunchKernel", t + 10, 5.0)
        t += 60.0
    span = t / max(ranges, 1)
    for i in range(ranges):
        trace.events.append({"ph": "X", "cat": "cuda_profiler_range", "name": f"void kernel_{i}<float>(float*)",
                             "pid": 0, "tid": 0, "ts": i * span, "dur": span,
                             "args": {c: (i + 1) * 1000 * k for k, c in enumerate(FLOPS_COUNTERS)}})
    trace.events.append({"ph": "X", "cat": "Trace", "ts": 0, "dur": t, "pid": "Spans", "tid": "__cupti_profiler__",
                         "name": "__cupti_profiler__ (-1)", "args": {"Op count": 0}})
    return trace


def test_range_profiler_trace_says_what_it_is():
    trace = _range_profiler_trace(12)
    report = analyze(trace)
    ranges = [e for e in trace.to_dict()["traceEvents"] if e.get("cat") == "cuda_profiler_range"]
    assert report.verdict == UNKNOWN
    assert report.evidence == (
        f"unknown: a CUPTI range-profiler trace ({len(ranges)} ranges of per-range counters, no kernel timeline): "
        "tracelint needs a timeline trace — record without experimental_config profiler_metrics")
    recording = report.analyses[0].recording
    assert recording.profiler_ranges == len(ranges)
    assert recording.range_counters == tuple(sorted({k for e in ranges for k in e["args"]}))


def test_range_profiler_trace_exits_as_a_cpu_only_trace_does(tmp_path):
    ranged = _range_profiler_trace(4).write(tmp_path / "ranges.pt.trace.json")
    plain = _range_profiler_trace(4)
    plain.events = [e for e in plain.events if e.get("cat") != "cuda_profiler_range"]
    plain = plain.write(tmp_path / "cpu_only.pt.trace.json")

    def run(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tracelint", "trace", str(path)], capture_output=True,
                              text=True, timeout=120)

    with_ranges, cpu_only = run(ranged), run(plain)
    assert with_ranges.stdout.splitlines()[0].startswith("unknown: a CUPTI range-profiler trace")
    assert cpu_only.stdout.splitlines()[0] == "unknown: no GPU activity in the trace (CPU-only profile)"
    assert with_ranges.returncode == cpu_only.returncode == 0


# ---- traces without ProfilerStep: the window is the whole trace's GPU activity ------------------------------------


def test_trace_without_steps_measures_the_whole_gpu_window(public_traces):
    data = _load(public_traces / NO_STEPS)
    events = data["traceEvents"]
    assert not any(str(e.get("name")).startswith("ProfilerStep#") for e in events)
    gpu = [e for e in events if e.get("cat") in GPU_CATS]
    per_device: dict[int, float] = {}
    for e in gpu:
        per_device[e["args"]["device"]] = per_device.get(e["args"]["device"], 0.0) + e["dur"]
    device = max(per_device, key=per_device.__getitem__)
    mine = [e for e in gpu if e["args"]["device"] == device]
    window = max(e["ts"] + e["dur"] for e in mine) - min(e["ts"] for e in mine)

    report = analyze_trace(public_traces / NO_STEPS)
    m = report.metrics
    assert m["has_steps"] is False and m["device"] == device
    assert m["gpu_window_us"] == pytest.approx(window, abs=0.1)
    assert m["gpu_events"] == len(mine)
    assert "no ProfilerStep" in report.evidence and "inside the profiled steps" not in report.evidence


@pytest.mark.parametrize("steps", [False, True])
def test_zero_length_gpu_window(steps):
    trace = Synth()
    trace.device_properties()
    if steps:
        trace.step(1, 0.0, 100.0)
    for i in range(3):  # work whose recorded durations are all zero, at one instant
        trace.launch("some_kernel", 10.0 + 10 * i, 50.0, 0.0)
    report = analyze(trace)
    assert report.verdict == UNKNOWN and report.metrics["gpu_window_us"] == 0.0
    if steps:
        assert report.evidence == ("unknown: the GPU activity launched inside the profiled steps spans no time (each "
                                   "event of zero duration)")
    else:
        assert report.evidence == ("unknown: the trace has no ProfilerStep# annotations; measured over the whole "
                                   "trace, its 3 GPU events span no time (each of zero duration)")
