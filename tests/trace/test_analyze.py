"""analyze_trace / analyze_paths on real traces: verdicts, reasons, errors, multi-rank folders."""
from __future__ import annotations

import gzip
import json
import shutil
import statistics

import pytest

from tests.trace.synth import Synth
from tracelint.engine import Config, InputError, TraceSummary
from tracelint.trace import Report, analyze_paths, analyze_trace
from tracelint.trace.verdict import COMM_BOUND, CPU_BOUND, GPU_BOUND, INPUT_BOUND, UNKNOWN

VERDICTS = {INPUT_BOUND, CPU_BOUND, GPU_BOUND, COMM_BOUND, UNKNOWN}


def test_every_public_trace_gives_a_report(public_traces):
    for path in sorted(public_traces.glob("*.json*")):
        report = analyze_trace(path)
        assert isinstance(report, Report)
        assert report.summaries and all(isinstance(s, TraceSummary) for s in report.summaries)
        for summary in report.summaries:
            assert summary.verdict in VERDICTS
            assert summary.evidence.startswith(summary.verdict + ":")
            assert "\n" not in summary.evidence
        if report.verdict == UNKNOWN:
            assert "no GPU activity" in report.evidence


def test_cpu_only_trace_is_unknown_not_an_error(public_traces):
    report = analyze_trace(public_traces / "hta-cpu_only-rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert report.verdict == UNKNOWN
    assert "no GPU activity" in report.evidence
    assert report.metrics["rank"] == 34 and report.metrics["world_size"] == 300


def test_trace_without_steps_is_one_window(public_traces):
    report = analyze_trace(public_traces / "hta-critical_path-benchmark_result_2869224_1695835535_trace.json.gz")
    assert report.metrics["has_steps"] is False
    assert report.metrics["steps"] == 1
    assert "no ProfilerStep" in report.evidence
    assert report.metrics["host_syncs_per_step"] > 0  # the AlexNet trace synchronizes (cuda_sync events)


def test_legacy_resnet50_main_process_loader_is_input_bound(public_traces):
    report = analyze_trace(public_traces / "tbplugin-resnet50_num_workers_0.pt.trace.json.gz")
    assert report.verdict == INPUT_BOUND
    assert report.metrics["idle_data_wait_pct"] > 50
    assert report.metrics["h2d_pageable_bytes"] == report.metrics["h2d_bytes"] > 0
    workers = analyze_trace(public_traces / "tbplugin-resnet50_num_workers_4.pt.trace.json.gz")
    assert workers.verdict != INPUT_BOUND
    assert workers.metrics["idle_data_wait_pct"] < 10


def _launched_in_steps(path, cat: str) -> list[tuple[dict, dict]]:
    """The trace's GPU events of category ``cat`` whose launching call (the runtime or driver event with the same
    correlation id) starts inside a ProfilerStep#N span, each with that call: read from the raw events, not through
    tracelint's model, to check its metrics against."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    calls: dict[int, list[dict]] = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("ph") == "X":
            calls.setdefault(e["args"]["correlation"], []).append(e)
    out = []
    for e in events:
        if e.get("cat") == cat and e.get("ph") == "X":
            [call] = calls[e["args"]["correlation"]]  # one launching call each in these traces
            if any(a <= call["ts"] < b for a, b in steps):
                out.append((e, call))
    return out


def _launch_delay_us(launched: list[tuple[dict, dict]]) -> float:
    return statistics.median(kernel["ts"] - call["ts"] for kernel, call in launched)


def test_triton_kernels_launched_by_the_driver_count(public_traces):
    path = public_traces / "hta-triton_example-triton_example.json.gz"
    report = analyze_trace(path)
    kernels = _launched_in_steps(path, "kernel")
    assert [call["name"] for _, call in kernels] == ["cuLaunchKernel"]  # a driver call, no runtime call
    assert report.metrics["kernel_count"] == 1
    # joined through cuLaunchKernel (the metric is rounded to 0.1 us)
    assert report.metrics["launch_delay_us"] == pytest.approx(_launch_delay_us(kernels), abs=0.05)
    assert report.verdict == GPU_BOUND


def test_rocm_trace_reads_hip_launches(public_traces):
    path = public_traces / "hta-amd_trace-mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    m = analyze_trace(path).metrics
    kernels = _launched_in_steps(path, "kernel")
    assert {call["name"] for _, call in kernels} == {"hipLaunchKernel", "hipExtModuleLaunchKernel"}
    assert m["kernel_count"] == len(kernels) == 14
    assert m["launch_delay_us"] == pytest.approx(_launch_delay_us(kernels), abs=0.05)
    copies = [(e, call) for e, call in _launched_in_steps(path, "gpu_memcpy") if "HtoD" in e["name"]]
    assert m["h2d_count"] == len(copies) == 2
    assert m["h2d_pageable_bytes"] == 0  # "(Host -> Device)" says neither pageable nor pinned


def test_memory_metrics(public_traces):
    m = analyze_trace(public_traces / "hta-df_index_resolver-df_index_resolver.json.gz").metrics
    assert m["device_memory_bytes"] == 34089730048
    assert 0 < m["peak_memory_bytes"] < m["device_memory_bytes"]
    assert m["peak_memory_pct"] == pytest.approx(100 * m["peak_memory_bytes"] / m["device_memory_bytes"], abs=0.01)
    assert m["allocations_per_step"] > 0


# ---- the project's own H100/H200 fixtures -----------------------------------------------------------------------

def _manifest(fixture_traces):
    return json.loads((fixture_traces / "manifest.json").read_text())["traces"]


def test_fixture_verdicts(fixture_traces):
    """Every fixture's verdict is the one its manifest expects (the scenarios were built to be that)."""
    checked = 0
    for name, entry in _manifest(fixture_traces).items():
        path = fixture_traces / entry["file"]
        if not path.exists():
            continue
        report = analyze_trace(path)
        assert report.verdict == entry["expected_verdict"], (name, report.evidence)
        checked += 1
    assert checked


def test_fixture_manifest_busy_agrees(fixture_traces):
    """The fixture generator derived the busy share its own way; ours must agree."""
    for name, entry in _manifest(fixture_traces).items():
        expected = (entry.get("facts") or {}).get("gpu_busy_pct")
        path = fixture_traces / entry["file"]
        if expected is None or not path.exists():
            continue
        assert analyze_trace(path).metrics["gpu_busy_pct"] == pytest.approx(expected, abs=0.1), name


def test_fixture_idle_causes(fixture_traces):
    def metrics(name):
        path = fixture_traces / f"{name}.pt.trace.json.gz"
        if not path.exists():
            pytest.skip(f"{name} not recorded")
        return analyze_trace(path).metrics

    assert metrics("item_per_step")["idle_host_sync_pct"] > 50
    assert metrics("item_per_step_fixed")["idle_host_sync_pct"] < 5
    launch = metrics("launch_bound")
    # the host launching (ops and launch calls), and the Python between them inside Optimizer.step#AdamW.step: a
    # record_function range only encloses other code, so its own time is un-profiled Python ("other")
    assert launch["idle_launch_overhead_pct"] > 60
    assert launch["idle_launch_overhead_pct"] + launch["idle_other_pct"] > 95
    loader = metrics("dataloader_main_process")
    assert loader["idle_data_wait_pct"] > 70 and loader["breakdown_data_pct"] > 50
    assert metrics("pageable_copies")["h2d_pageable_bytes"] > 0
    assert metrics("pageable_copies")["idle_host_sync_pct"] > 10  # each blocking pageable copy synchronizes
    assert metrics("pageable_copies_fixed")["h2d_pageable_bytes"] == 0
    assert metrics("matmul_fp32")["matmul_tensor_core_pct"] < 5 < 95 < metrics("matmul_tf32")["matmul_tensor_core_pct"]


def test_fixture_source_lines_from_python_frames(fixture_traces):
    path = fixture_traces / "item_per_step.pt.trace.json.gz"
    if not path.exists():
        pytest.skip("item_per_step not recorded")
    analysis = analyze_trace(path).analyses[0]
    items = [op for op in analysis.model.ops if op.name == "aten::item"]
    assert items
    source = analysis.source_at(items[0].tid, items[0].start)
    assert source is not None and source.path.endswith("item_per_step.py")
    # Kineto names a frame by its function's first line, or, for a frame already running when profiling began
    # (the training loop here), by the line it was on then: the line lies inside train(), not on the call.
    text = (fixture_traces.parent / "scenarios" / "item_per_step.py").read_text().splitlines()
    train_def = next(i for i, line in enumerate(text, 1) if line.startswith("def train("))
    assert train_def <= source.line <= len(text)


# ---- analyze_paths -------------------------------------------------------------------------------------------


def test_analyze_paths_errors_are_input_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("this is not json")
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    results = list(analyze_paths([bad, tmp_path / "missing.json", empty_dir], config=Config()))
    assert len(results) == 3 and all(isinstance(r, InputError) for r in results)
    assert results[0].path == str(bad) and results[0].message


def _rank_trace(path, rank: int, busy_us: float, step_us: float):
    s = Synth()
    s.meta["distributedInfo"] = {"rank": rank, "world_size": 2}
    t = 1_700_000_000_000_000.0
    for n in range(2):
        s.step(n + 1, t, step_us)
        s.launch("volta_sgemm_128x64_nn", t + 10, t + 20, busy_us)
        t += step_us
    return s.write(path)


def test_multi_rank_directory_gets_a_summary(tmp_path):
    _rank_trace(tmp_path / "host_0.1700000000000000001.pt.trace.json.gz", 0, 900, 1000)
    _rank_trace(tmp_path / "host_1.1700000000000000002.pt.trace.json.gz", 1, 300, 2000)
    results = list(analyze_paths([tmp_path], config=Config()))
    assert len(results) == 3
    summary = results[-1]
    assert summary.path == str(tmp_path) and summary.summaries[0].rank is None
    assert summary.metrics["slowest_rank"] == 1 and summary.metrics["ranks"] == 2
    assert summary.metrics["step_spread_pct"] == pytest.approx(100.0)
    assert summary.verdict == results[1].verdict


def test_unrelated_traces_in_one_folder_get_no_summary(public_traces, tmp_path):
    for name in ("hta-df_index_resolver-df_index_resolver.json.gz", "hta-nccl_parser_config-nccl_data.json.gz"):
        shutil.copy(public_traces / name, tmp_path / name)  # both world size 2, ranks 1 and 0, different jobs
    results = list(analyze_paths([tmp_path], config=Config()))
    assert len(results) == 2


def test_truncated_trace_reports_tl002(public_traces, tmp_path):
    raw = gzip.open(public_traces / "hta-trace_filter-sampled_rank-1.json.gz").read()
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: len(raw) * 2 // 3])
    report = analyze_trace(cut)
    assert report.truncated
    assert any(f.code == "TL002" for f in report.findings)
    assert report.verdict in VERDICTS


def test_empty_trace_is_an_input_error(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text('{"schemaVersion": 1, "traceEvents": []}')
    cut = tmp_path / "cut.json"
    cut.write_text('{"traceEvents": [{"name": "a", "ph": "X", "ts": 1')
    (first, second) = list(analyze_paths([empty, cut], config=Config()))
    assert isinstance(first, InputError) and first.message == "empty trace: traceEvents holds no events"
    assert isinstance(second, InputError) and "read 0 complete events" in second.message


def test_trace_cut_before_its_gpu_events_says_so(fixture_traces, tmp_path):
    # Kineto writes CPU events first: a file cut early holds no kernel yet, which is not a CPU-only profile.
    raw = gzip.decompress((fixture_traces / "item_per_step.pt.trace.json.gz").read_bytes())
    first_kernel = raw.index(b'"cat": "kernel"')
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: first_kernel - 200])
    report = analyze_trace(cut)
    assert report.verdict == UNKNOWN
    assert "truncated" in report.summaries[0].evidence and "CPU-only" not in report.summaries[0].evidence


def test_progress_on_stderr_only_for_big_traces(fixture_traces, capsys, monkeypatch):
    import tracelint.trace.analyze as analyze

    path = fixture_traces / "gpu_bound.pt.trace.json.gz"
    list(analyze_paths([path], progress=True))
    assert capsys.readouterr().err == ""  # a small trace shows nothing
    monkeypatch.setattr(analyze._ProgressLine, "MIN_BYTES", 0)
    reports = list(analyze_paths([path], progress=True))
    captured = capsys.readouterr()
    assert "tracelint: reading gpu_bound.pt.trace.json.gz" in captured.err and captured.err.endswith("\n")
    assert captured.out == "" and reports[0].verdict == GPU_BOUND
