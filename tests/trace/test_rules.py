"""The trace rules on the real H200 fixture pairs (fixtures/traces/manifest.json), the public corpus, and a few
synthetic edge cases."""
from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import FIXTURE_TRACES
from tests.trace.synth import Synth
from tracelint.engine import Config, Severity, catalog
from tracelint.trace import analyze_trace
from tracelint.trace.analyze import report_from_model
from tracelint.trace.build import build_model


@cache
def _fixture(name: str):
    path = FIXTURE_TRACES / f"{name}.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"fixture trace {name} not recorded")
    return analyze_trace(path)


def _codes(report) -> set[str]:
    return {f.code for f in report.findings}


def _one(report, code: str):
    found = [f for f in report.findings if f.code == code]
    assert len(found) == 1, [(f.code, f.message) for f in report.findings]
    return found[0]


# (anti-pattern trace, its rule, traces that must not get that rule)
PAIRS = [
    ("pageable_copies", "TL202", ["pageable_copies_fixed", "gpu_bound", "gpu_bound_nosched"]),
    ("item_per_step", "TL101", ["item_per_step_fixed", "scalar_test_per_step"]),
    ("scalar_test_per_step", "TL103", ["scalar_test_per_step_fixed", "item_per_step", "item_per_step_fixed"]),
    ("item_no_effect", "TL101", ["item_no_effect_fixed"]),
    ("zero_grad_keep", "TL301", ["zero_grad_keep_fixed", "gpu_bound"]),
    ("matmul_fp32", "TL401", ["matmul_tf32", "matmul_bf16", "gpu_bound", "compiled", "dataloader_main_process"]),
    ("launch_bound", "TL501", ["gpu_bound", "compiled", "zero_grad_keep", "zero_grad_keep_fixed", "matmul_fp32"]),
    ("dataloader_main_process", "TL201", ["dataloader_main_process_fixed", "gpu_bound", "item_per_step"]),
    ("gpu_bound_nosched", "TL001", ["gpu_bound"]),
    ("launch_bound", "TL302", ["gpu_bound", "zero_grad_keep", "matmul_bf16", "item_per_step_fixed"]),
]


@pytest.mark.parametrize(("bad", "code", "goods"), PAIRS, ids=[f"{b}-{c}" for b, c, _ in PAIRS])
def test_fixture_pair(fixture_traces, bad, code, goods):
    assert code in _codes(_fixture(bad))
    for good in goods:
        assert code not in _codes(_fixture(good)), (good, [f.message for f in _fixture(good).findings])


def test_fixture_manifest_expectations(fixture_traces):
    """Every trace gets the rules its manifest expects (TL4xx = any TL4 code) and nothing else of the rule families
    the fixtures are about."""
    manifest = json.loads((fixture_traces / "manifest.json").read_text())["traces"]
    for name, spec in manifest.items():
        codes = _codes(_fixture(name))
        for expected in spec["expected_rules"]:
            prefix = expected.rstrip("x")
            assert any(c.startswith(prefix) for c in codes), (name, expected, codes)
        unexpected = {c for c in codes
                      if c not in spec["expected_rules"] and c[:3] + "xx" not in spec["expected_rules"]}
        # TL001 notes a trace without steps, TL302 a launch-bound run's unused memory: both legitimate extras
        assert unexpected <= {"TL001", "TL302"}, (name, unexpected)


def test_item_finding_points_at_the_item_line(fixture_traces):
    for name in ("item_per_step", "item_no_effect"):
        finding = _one(_fixture(name), "TL101")
        script = (fixture_traces.parent / "scenarios" / f"{name}.py").read_text().splitlines()
        src = finding.location.source
        assert src is not None and src.path.endswith(f"{name}.py")
        assert ".item()" in script[src.line - 1]
        assert "1 time per step (3 of 3 steps)" in finding.message
    # the costly sync vs the harmless one: the stall each is measured, not guessed
    costly = dict(_one(_fixture("item_per_step"), "TL101").details)["stall_us_each"]
    cheap = dict(_one(_fixture("item_no_effect"), "TL101").details)["stall_us_each"]
    assert costly > 1000 > 100 > cheap


def test_truth_value_finding_points_at_the_if_line(fixture_traces):
    """`if loss > LOSS_LIMIT:` (aten::is_nonzero over aten::item) is TL103 at the `if`, not a TL101 at the function's
    `.item()` line (the loss printed after the loop), and it says what the sync costs."""
    finding = _one(_fixture("scalar_test_per_step"), "TL103")
    script = (fixture_traces.parent / "scenarios" / "scalar_test_per_step.py").read_text().splitlines()
    src = finding.location.source
    assert src is not None and src.path.endswith("scalar_test_per_step.py")
    assert script[src.line - 1].strip() == "if loss > LOSS_LIMIT:"
    assert "1 time per step (2 of 2 steps)" in finding.message and finding.location.event == "aten::is_nonzero"
    details = dict(finding.details)
    assert details["cost_pct_of_step"] > 5 and finding.severity is Severity.WARNING
    assert "TL101" not in _codes(_fixture("scalar_test_per_step"))


def test_pageable_finding_measures_the_copies(fixture_traces):
    finding = _one(_fixture("pageable_copies"), "TL202")
    details = dict(finding.details)
    assert details["pageable_copies_per_step"] == 2
    assert details["pageable_bytes_per_step"] > 70 * 2**20  # two float32 batch tensors of ~77 MB in all
    assert finding.location.event.startswith("Memcpy HtoD (Pageable")


def test_fp32_matmul_finding(fixture_traces):
    finding = _one(_fixture("matmul_fp32"), "TL401")
    assert dict(finding.details)["fp32_off_tc_pct_of_window"] > 80
    assert "ffma" in finding.location.event or "simt" in finding.location.event
    assert "TF32" in finding.message


def test_zero_grad_finding(fixture_traces):
    finding = _one(_fixture("zero_grad_keep"), "TL301")
    assert dict(finding.details)["fills_per_step"] >= 25  # one fill per parameter tensor of 25 Linear layers
    assert finding.location.event.startswith("Optimizer.zero_grad")


def test_gate_thresholds(fixture_traces):
    gate = Config(trace_thresholds=(("min-matmul-tensor-core-pct", 50.0), ("min-gpu-busy-pct", 80.0)))
    fp32 = analyze_trace(FIXTURE_TRACES / "matmul_fp32.pt.trace.json.gz", config=gate)
    breach = _one(fp32, "TL010")
    assert "matmul_tensor_core_pct is 0" in breach.message and "min-matmul-tensor-core-pct = 50" in breach.message
    assert "TL010" not in _codes(analyze_trace(FIXTURE_TRACES / "matmul_tf32.pt.trace.json.gz", config=gate))
    loader = analyze_trace(FIXTURE_TRACES / "dataloader_main_process.pt.trace.json.gz", config=gate)
    busy = loader.metrics["gpu_busy_pct"]
    assert busy < 80 and f"gpu_busy_pct is {busy:.4g}" in _one(loader, "TL010").message
    # no limits set: no gate
    assert "TL010" not in _codes(_fixture("dataloader_main_process"))
    # upper limits
    steps = Config(trace_thresholds=(("max-step-ms", 10.0), ("max-kernels-per-step", 100.0)))
    report = analyze_trace(FIXTURE_TRACES / "matmul_fp32.pt.trace.json.gz", config=steps)
    codes = [f.message for f in report.findings if f.code == "TL010"]
    assert len(codes) == 2 and any(m.startswith("step_ms is ") and "max-step-ms = 10" in m for m in codes)


def test_rule_thresholds_are_configurable(fixture_traces):
    measured = dict(_one(_fixture("matmul_fp32"), "TL401").details)["fp32_off_tc_pct_of_window"]
    strict = Config(trace_thresholds=(("fp32-matmul-min-pct", measured + 1.0),))
    assert "TL401" not in _codes(analyze_trace(FIXTURE_TRACES / "matmul_fp32.pt.trace.json.gz", config=strict))


def test_truncated_trace(fixture_traces, tmp_path):
    raw = gzip.decompress((FIXTURE_TRACES / "item_per_step.pt.trace.json.gz").read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: len(raw) * 2 // 3])
    report = analyze_trace(cut)
    assert "the trace file ends early" in _one(report, "TL002").message


# --- public corpus -------------------------------------------------------------------------------------------


@cache
def _public(root: Path, name: str):
    return analyze_trace(root / name)


def test_public_traces_do_not_crash(public_traces):
    paths = sorted(public_traces.glob("*.json.gz"))
    assert paths, f"{public_traces} holds no traces"
    findings = 0
    for path in paths:
        report = _public(public_traces, path.name)
        assert report.summaries, path
        for finding in report.findings:
            assert finding.code in catalog(), (path, finding.code)
            assert finding.message and "\n" not in finding.message and finding.location.path == str(path)
        findings += len(report.findings)
    assert findings > 0  # the checks above ran


def test_public_resnet50_loader(public_traces):
    """TensorBoard plugin samples (V100, PyTorch 1.9 format): num_workers=0 is input-bound, num_workers=4 is not;
    both keep zero-filled grads (SGD.zero_grad memsets) and run fp32 convs on a Tensor Core GPU."""
    w0 = _public(public_traces, "tbplugin-resnet50_num_workers_0.pt.trace.json.gz")
    w4 = _public(public_traces, "tbplugin-resnet50_num_workers_4.pt.trace.json.gz")
    assert "_SingleProcessDataLoaderIter" in _one(w0, "TL201").message
    assert "TL201" not in _codes(w4)
    for report in (w0, w4):
        assert {"TL301", "TL401", "TL202"} <= _codes(report)
        assert "fp16 autocast" in _one(report, "TL401").message  # Volta: no TF32/bf16


def test_public_item_and_copies(public_traces):
    report = _public(public_traces, "hta-trace_diff-control.json.gz")
    assert "4 times per step (6 of 6 steps)" in _one(report, "TL101").message
    assert "TL102" in _codes(report)


def test_public_notes(public_traces):
    assert "TL001" in _codes(
        _public(public_traces, "hta-critical_path-benchmark_result_2869224_1695835535_trace.json.gz"))
    assert not _public(public_traces, "hta-cpu_only-rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz").findings
    # DDP's logger reads CUDA events every few steps: not an explicit synchronize in the user's loop
    assert "TL105" not in _codes(_public(public_traces, "hta-nccl_parser_config-nccl_data.json.gz"))


# --- synthetic edge cases ------------------------------------------------------------------------------------


def _report(s: Synth):
    s.meta["deviceProperties"] = [{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 80 * 2**30, "computeMajor": 9}]
    model = build_model([s.events], lambda: s.meta)
    return report_from_model("synthetic.json", model)


def _step_with_item(s: Synth, number: int, t0: float, *, on_gpu: bool) -> None:
    s.step(number, t0, 1000.0)
    s.frame("train.py(10): train", t0, 1000.0)
    s.launch("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", t0 + 10, t0 + 20, 500.0)
    s.op("aten::item", t0 + 100, 600.0)
    s.op("aten::_local_scalar_dense", t0 + 101, 598.0)
    if on_gpu:
        s.launch("Memcpy DtoH (Device -> Pageable)", t0 + 110, t0 + 520, 2.0, kind="gpu_memcpy", api="cudaMemcpyAsync")
        s.runtime("cudaStreamSynchronize", t0 + 120, 570.0)


def test_item_on_cpu_tensors_is_not_a_sync():
    s = Synth()
    for i in range(3):
        _step_with_item(s, i + 1, 10_000.0 * i, on_gpu=False)
    assert "TL101" not in _codes(_report(s))
    s = Synth()
    for i in range(3):
        _step_with_item(s, i + 1, 10_000.0 * i, on_gpu=True)
    finding = _one(_report(s), "TL101")
    assert "1 time per step (3 of 3 steps)" in finding.message and "570 µs each" in finding.message
    assert finding.location.source.path == "train.py"


def test_periodic_sync_is_not_reported():
    s = Synth()
    for i in range(4):
        _step_with_item(s, i + 1, 10_000.0 * i, on_gpu=(i == 3))
    assert "TL101" not in _codes(_report(s))


def test_pageable_htod_sync_is_not_a_readback():
    s = Synth()
    for i in range(3):
        t0 = 10_000.0 * i
        s.step(i + 1, t0, 1000.0)
        s.op("aten::copy_", t0 + 10, 500.0)
        s.launch("Memcpy HtoD (Pageable -> Device)", t0 + 20, t0 + 30, 400.0, kind="gpu_memcpy", api="cudaMemcpyAsync",
                 bytes=1 << 20)
        s.runtime("cudaStreamSynchronize", t0 + 40, 400.0)
    codes = _codes(_report(s))
    assert not codes & {"TL101", "TL102", "TL105"}
    assert "TL202" in codes


def test_explicit_synchronize_per_step():
    s = Synth()
    for i in range(3):
        t0 = 10_000.0 * i
        s.step(i + 1, t0, 1000.0)
        s.launch("ampere_sgemm_128x64_nn", t0 + 10, t0 + 20, 800.0)
        s.runtime("cudaDeviceSynchronize", t0 + 30, 790.0)
    assert "TL105" in _codes(_report(s))


# A loop with both syncs of the trial's cnn.py (issue 34): `.item()` and `if loss > 5:` in one function.
CNN = """\
import torch


def train(model, opt, loader, on_step=None):
    correct = 0
    for step, (x, y) in enumerate(loader):
        out = model(x.cuda())
        loss = out.sum()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(step)
        correct += (out.argmax(1) == y.cuda()).sum().item()
        if loss > 5:
            print("diverging")
        if on_step is not None:
            on_step()
"""


def _readback(s: Synth, t0: float, *ops: str) -> float:
    """A sync under nested CPU ops (outermost first), as a CUDA scalar read shows: copy, then stream synchronize."""
    for depth, name in enumerate(ops):
        s.op(name, t0 + depth, 300.0 - 2 * depth)
    s.launch("Memcpy DtoH (Device -> Pinned)", t0 + 10, t0 + 200, 2.0, kind="gpu_memcpy", api="cudaMemcpyAsync")
    s.runtime("cudaStreamSynchronize", t0 + 20, 270.0)
    return t0 + 300.0


def _cnn_report(tmp_path, script: str):
    (tmp_path / "train.py").write_text(script)
    s = Synth()
    for i in range(3):
        t0 = 10_000.0 * i
        s.step(i + 1, t0, 2000.0)
        s.frame("train.py(4): train", t0, 2000.0)
        s.launch("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", t0 + 10, t0 + 20, 900.0)
        t = _readback(s, t0 + 100, "aten::item", "aten::_local_scalar_dense")  # correct += (...).item()
        _readback(s, t + 50, "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense")  # if loss > 5:
    s.meta["deviceProperties"] = [{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 80 * 2**30, "computeMajor": 9}]
    return report_from_model(str(tmp_path / "t.pt.trace.json"), build_model([s.events], lambda: s.meta))


def test_truth_value_sync_is_tl103_and_the_item_beside_it_stays_tl101(tmp_path):
    """Both syncs went to TL101, "2 times per step" at the `.item()` line, and the `if` had no trace twin."""
    report = _cnn_report(tmp_path, CNN)
    item, test = _one(report, "TL101"), _one(report, "TL103")
    assert "1 time per step (3 of 3 steps)" in item.message and item.location.source.line == 13
    assert "1 time per step (3 of 3 steps)" in test.message and test.location.source.line == 14
    assert test.location.event == "aten::is_nonzero" and "truth value" in test.message


def test_truth_value_line_is_not_guessed_among_several_tests(tmp_path):
    """Two lines that may test a tensor: neither is taken, the finding keeps the function's line from the stack."""
    script = CNN.replace("        if loss > 5:\n", "        if loss < best:\n            best = loss\n"
                                                  "        if loss > 5:\n")
    test = _one(_cnn_report(tmp_path, script), "TL103")
    assert test.location.source.line == 4
