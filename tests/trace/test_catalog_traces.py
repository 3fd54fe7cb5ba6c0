"""The trace scenarios of the rule catalog run as test cases: every rule the trace half implements has ```` ```python
trace ```` blocks (built with tracelint.testing) under *Example*, which must make it fire, and under *Use instead*,
which must not. A block defines ``trace`` (a TraceBuilder) — or ``ranks``, a list of them, the ranks of one job,
read as one folder — and may define ``config``, a dict of ``[tool.tracelint.trace]`` thresholds to analyze it with
(TL010 checks nothing unless a limit is set)."""
from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping
from itertools import pairwise, takewhile

import pytest

import tracelint.testing
from tracelint.engine import Finding, RuleDoc, catalog
from tracelint.testing import TraceBuilder, analyze, analyze_job
from tracelint.trace import Report, analyze_trace

TRACE_DOCS = [doc for doc in catalog().values() if "trace" in doc.implemented_by]


def _d(finding: Finding) -> dict:
    return dict(finding.details)


def _every_step(finding: Finding, config: Mapping) -> bool:
    return _d(finding)["steps_with_sync"] == _d(finding)["steps"]


# Why a bad scenario must make its rule fire, checked on the finding, so that a scenario cannot pass by accident.
# Optional: a rule without an entry is only required to fire.
REASONS: dict[str, Callable[[Finding, Mapping], bool]] = {
    "TL001": lambda f, config: "no ProfilerStep" in f.message,
    "TL002": lambda f, config: "ends early" in f.message,
    "TL010": lambda f, config: any(key in f.message for key in config),
    "TL101": _every_step,
    "TL102": _every_step,
    "TL105": _every_step,
    "TL106": _every_step,
    "TL201": lambda f, config: "_SingleProcessDataLoaderIter" in f.location.event,
    "TL202": lambda f, config: f.location.event.startswith("Memcpy HtoD (Pageable"),
    "TL301": lambda f, config: f.location.event.startswith("Optimizer.zero_grad") and _d(f)["fills_per_step"] >= 1,
    "TL302": lambda f, config: _d(f)["peak_memory_bytes"] < _d(f)["device_memory_bytes"] / 4,
    "TL401": lambda f, config: "ffma" in f.location.event,
    "TL405": lambda f, config: "nchwToNhwc" in f.location.event and _d(f)["nchw_kernel_us_per_step"] > 0,
    "TL501": lambda f, config: _d(f)["kernels_per_step"] >= 50 and _d(f)["launch_delay_us"] <= 50,
    "TL505": lambda f, config: _d(f)["fusable_pct_of_kernel_time"] >= 30 and "Gelu" in f.location.event,
    "TL601": lambda f, config: _d(f)["comm_overlap_pct"] < 10,
    "TL602": lambda f, config: _d(f)["straggler_rank"] == 1 and _d(f)["straggler_verdict"] == "cpu-bound",
    "TL603": lambda f, config: _d(f)["stage_bubble_pct"] >= 15 and _d(f)["pipeline_bubble_analytic_pct"] > 40,
    "TL604": lambda f, config: _d(f)["bottleneck_stage"] == 3 and _d(f)["stage_imbalance_pct"] >= 20,
    "TL605": lambda f, config: f.location.event == "Broadcast" and _d(f)["gpus"] == 2,
    "TL606": lambda f, config: _d(f)["redundant_reductions_per_step"] == 30,
    "TL701": lambda f, config: _d(f)["nan_checks_per_step"] == 20 and "evaluate_function" in f.location.event,
    "TL702": lambda f, config: _d(f)["blocking_launches_per_step"] == _d(f)["launches_per_step"] == 50,
}


def _scenario(doc: RuleDoc, index: int, text: str) -> tuple[list[Report], Mapping]:
    """The scenario's Reports: one for a ``trace``; for ``ranks``, one per rank and the job summary."""
    namespace: dict[str, object] = {"__name__": f"{doc.code.lower()}_trace_{index}"}
    exec(compile(text, f"{doc.path.name} (trace scenario {index})", "exec"), namespace)
    trace, ranks, config = namespace.get("trace"), namespace.get("ranks"), namespace.get("config") or {}
    assert isinstance(config, Mapping), f"`config` of trace scenario {index} of {doc.code} is not a dict"
    if ranks is not None:
        assert isinstance(ranks, list) and all(isinstance(t, TraceBuilder) for t in ranks), \
            f"`ranks` of trace scenario {index} of {doc.code} is not a list of TraceBuilders"
        reports = analyze_job(ranks, thresholds=config)
        assert len(reports) == len(ranks) + 1, f"trace scenario {index} of {doc.code}: the ranks are not one job"
        return reports, config
    assert isinstance(trace, TraceBuilder), f"trace scenario {index} of {doc.code} defines no `trace` builder"
    return [analyze(trace, thresholds=config)], config


SCENARIOS = [(doc, kind, index, text) for doc in TRACE_DOCS
             for kind, texts in (("bad", doc.bad_traces), ("good", doc.good_traces))
             for index, text in enumerate(texts)]


def test_there_are_trace_rules():
    assert TRACE_DOCS


@pytest.mark.parametrize("doc", TRACE_DOCS, ids=lambda d: d.code)
def test_every_trace_rule_has_scenarios(doc):
    assert doc.bad_traces, f"{doc.path.name}: no ```python trace``` scenario under Example"
    assert doc.good_traces, f"{doc.path.name}: no ```python trace``` scenario under Use instead"


@pytest.mark.parametrize(("doc", "kind", "index", "text"), SCENARIOS,
                         ids=[f"{d.code}-{kind}{i}" for d, kind, i, _ in SCENARIOS])
def test_scenario(doc, kind, index, text):
    reports, config = _scenario(doc, index, text)
    findings = [f for report in reports for f in report.findings]
    found = [f for f in findings if f.code == doc.code]
    if kind == "good":
        assert not found, f"good trace scenario {index} of {doc.code} fires: {[f.message for f in found]}"
        assert all(r.verdict != "unknown" for r in reports), \
            f"good trace scenario {index} of {doc.code} has no GPU work in its steps"
        return
    assert found, f"bad trace scenario {index} of {doc.code} does not fire; it got {[f.code for f in findings]}"
    reason = REASONS.get(doc.code)
    assert reason is None or any(reason(f, config) for f in found), \
        f"bad trace scenario {index} of {doc.code} fires for another reason: {[f.message for f in found]}"


def test_module_docstring_example_runs():
    lines = tracelint.testing.__doc__.split("::\n", 1)[1].splitlines()
    example = textwrap.dedent("\n".join(takewhile(lambda line: not line or line.startswith("    "), lines)))
    assert "analyze(trace)" in example
    exec(compile(example, "tracelint.testing docstring", "exec"), {})


def test_in_memory_analysis_matches_the_written_file(tmp_path):
    trace = TraceBuilder().device_properties()
    trace.allocate(2**30)
    for _ in trace.steps(3):
        trace.cpu("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 300)
        trace.to_device(1 << 20)
        trace.kernel("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_"
                     "alignc4_execute_kernel_trt", gpu_us=400, op="aten::mm")
        trace.item()
    written = analyze_trace(trace.write(tmp_path / "t.pt.trace.json.gz"))
    in_memory = analyze(trace)
    assert in_memory.metrics == written.metrics
    assert [(f.code, f.message) for f in in_memory.findings] == [(f.code, f.message) for f in written.findings]


def test_the_gpu_is_a_queue():
    trace = TraceBuilder()
    for _ in trace.steps(2):
        trace.kernel("a", gpu_us=100)
        trace.kernel("b", gpu_us=100)
    trace.synchronize()
    kernels = sorted((e["ts"], e["ts"] + e["dur"]) for e in trace.events if e["cat"] == "kernel")
    assert all(prev[1] <= nxt[0] for prev, nxt in pairwise(kernels))  # one stream: in order, no overlap
    assert kernels[1][0] == kernels[0][1]  # launched while the first runs: starts when it ends
    sync = next(e for e in trace.events if e["name"] == "cudaDeviceSynchronize")
    assert sync["ts"] + sync["dur"] >= kernels[-1][1] and trace.now > kernels[-1][1]
