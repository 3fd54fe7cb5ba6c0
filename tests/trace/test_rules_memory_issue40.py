"""Issue #40's trace findings on the project's H200 fixtures (fixtures/gpu_issue40.sh): memory that grows every step
(TL306's twin), the caching allocator going to the driver every step (TL305's twin) and a peak near the device's
capacity (TL309), each firing on its anti-pattern and silent on its fix, with the figures checked against the
unprofiled truth the fixtures carry (manifest.json) and against tracelint.profile's own record."""
from __future__ import annotations

import gzip
import json

import pytest

from tracelint.trace import analyze_trace

CODES = ("TL305", "TL306", "TL309")
BAD = {"memory_growth": "TL306", "memory_growth_tlprofile": "TL306", "empty_cache_per_step": "TL305",
       "empty_cache_per_step_tlprofile": "TL305", "near_capacity": "TL309"}


def _manifest(fixture_traces) -> dict:
    return json.loads((fixture_traces / "manifest.json").read_text())["traces"]


def _found(path, code):
    return [f for f in analyze_trace(path).findings if f.code == code]


@pytest.mark.parametrize("name", sorted(BAD))
def test_fires_on_the_anti_pattern(fixture_traces, name):
    (found,) = _found(fixture_traces / f"{name}.pt.trace.json.gz", BAD[name])
    assert found.message


@pytest.mark.parametrize("name", ["memory_growth_fixed", "empty_cache_per_step_fixed", "near_capacity_fixed"])
def test_silent_on_the_fix(fixture_traces, name):
    codes = {f.code for f in analyze_trace(fixture_traces / f"{name}.pt.trace.json.gz").findings}
    assert not codes & set(CODES)


def test_growth_per_step_is_the_unprofiled_truth_and_points_at_the_append(fixture_traces):
    """64.08 MiB per step without the profiler (torch.cuda.memory_allocated() at block boundaries): the trace's
    growth within 5 %; the line that keeps the outputs (45), not the frame's line when profiling started (47)."""
    truth = _manifest(fixture_traces)["memory_growth"]["ground_truth"]["memory"]["growth_mib_per_step"]
    (found,) = _found(fixture_traces / "memory_growth.pt.trace.json.gz", "TL306")
    details = dict(found.details)
    assert details["growth_bytes_per_step"] / 2**20 == pytest.approx(truth, rel=0.05)
    assert found.location.source.path.endswith("memory_growth.py") and found.location.source.line == 45
    lines = (fixture_traces.parent / "scenarios" / "memory_growth.py").read_text().splitlines()
    assert "outputs.append(model(x_val))" in lines[44]
    total = 143155.9 * 2**20  # the H200's memory, as the trace's device properties give it (MiB, rounded)
    assert details["steps_until_full"] == pytest.approx(total / details["growth_bytes_per_step"], rel=0.05)


def test_the_unprofiled_growth_is_read_from_the_record(fixture_traces):
    """memory_growth_tlprofile's trace carries tracelint.profile's record: its blocks' allocated memory at their two
    boundaries, read here with json, over their steps."""
    path = fixture_traces / "memory_growth_tlprofile.pt.trace.json.gz"
    blocks = _record(path)["unprofiled"]["blocks"]
    expected = sum(b["allocated_mib"][1] - b["allocated_mib"][0] for b in blocks) / sum(b["steps"] for b in blocks)
    (found,) = _found(path, "TL306")
    assert dict(found.details)["unprofiled_growth_mib_per_step"] == pytest.approx(expected, abs=0.01)
    assert "without the profiler (tracelint.profile)" in found.message


def test_churn_names_empty_cache_and_counts_the_driver_calls(fixture_traces):
    """empty_cache_per_step: 6 cudaFree and 6 cudaMalloc in every step, read here from the raw events."""
    path = fixture_traces / "empty_cache_per_step.pt.trace.json.gz"
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    steps = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    inside = [e for e in events if e.get("name") in ("cudaFree", "cudaMalloc")
              and any(s["ts"] <= e["ts"] <= s["ts"] + s["dur"] for s in steps)]
    (found,) = _found(path, "TL305")
    details = dict(found.details)
    assert details["frees_per_step"] == sum(e["name"] == "cudaFree" for e in inside) / len(steps) == 6
    assert details["mallocs_per_step"] == sum(e["name"] == "cudaMalloc" for e in inside) / len(steps)
    assert details["churn_host_us_per_step"] == pytest.approx(sum(e["dur"] for e in inside) / len(steps), abs=0.1)
    assert "empty_cache() is called once per step" in found.message
    assert found.location.source is not None and found.location.source.line == 43  # the empty_cache() frame's
    assert found.estimate is not None and found.estimate.saved_ms_per_step == pytest.approx(
        details["churn_host_us_per_step"] / 1000)


def test_peak_near_capacity_against_the_unprofiled_peak(fixture_traces):
    """near_capacity: 125,811 MiB allocated at the peak without the profiler; the trace's peak within 1 %, in the
    forward (the residual add), with activation checkpointing as the advice."""
    truth = _manifest(fixture_traces)["near_capacity"]["ground_truth"]["memory"]["max_allocated_mib"]
    (found,) = _found(fixture_traces / "near_capacity.pt.trace.json.gz", "TL309")
    details = dict(found.details)
    assert details["peak_memory_bytes"] / 2**20 == pytest.approx(truth, rel=0.01)
    assert details["peak_phase"] == "forward" and "activation checkpointing" in found.message
    assert 85 <= details["peak_pct"] < 95


def test_silent_on_every_other_trace(fixture_traces, public_traces, multi_gpu_traces):
    """No other trace the project holds grows every step, churns the allocator or peaks near capacity (HTA's
    V100 trace: 19.5 % of the device, reserved 93 % over allocated, no driver calls in its steps)."""
    own = {f"{name}.pt.trace.json.gz" for name in BAD}
    paths = [p for p in sorted(fixture_traces.glob("*.json.gz")) if p.name not in own]
    paths += sorted(public_traces.glob("**/*.json.gz")) + sorted(multi_gpu_traces.glob("**/*.json.gz"))
    assert len(paths) > 40
    fired = [(p.name, f.code) for p in paths for f in analyze_trace(p).findings if f.code in CODES]
    assert fired == []


def _record(path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)["tracelint"]


@pytest.mark.parametrize(("name", "code"), [("memory_growth", "TL306"), ("empty_cache_per_step", "TL305"),
                                            ("near_capacity", "TL309")])
def test_tracelint_run_memory_traces(fixture_traces, name, code):
    """`tracelint run --settings memory` (fixtures/traces/run_memory): each finding on its script's trace, none on
    the fixed twins'."""
    folder = fixture_traces / "run_memory"
    assert _found(folder / f"{name}.pt.trace.json.gz", code)
    fixed = folder / f"{name}_fixed.pt.trace.json.gz"
    if fixed.exists():
        assert not {f.code for f in analyze_trace(fixed).findings} & set(CODES)


def test_the_peak_when_not_profiled_comes_from_the_run_record(fixture_traces):
    """The run's record: the allocator's peak over the unprofiled steps (max_allocated_mib) over the device's memory
    (device_total_mib), read here with json: 87.9 % of the H200."""
    path = fixture_traces / "run_memory" / "near_capacity.pt.trace.json.gz"
    unprofiled = _record(path)["unprofiled"]
    share = 100.0 * unprofiled["max_allocated_mib"] / unprofiled["device_total_mib"]
    report = analyze_trace(path)
    (found,) = [f for f in report.findings if f.code == "TL309"]
    assert f"{share:.1f} % of the device when not profiled" in found.message
    assert dict(found.details)["unprofiled_max_allocated_mib"] == unprofiled["max_allocated_mib"]
    assert report.metrics["unprofiled_peak_memory_pct"] == pytest.approx(share, abs=0.01)
    # a trace without tracelint.profile's memory record has none
    assert analyze_trace(fixture_traces / "near_capacity.pt.trace.json.gz").metrics["unprofiled_peak_memory_pct"] \
        is None
