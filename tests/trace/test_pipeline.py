"""Pipeline-parallel jobs: sends paired with recvs, stages, bubble and bottleneck — on the project's 4 × H100
pipeline traces (../shared/traces/multi-gpu), checked against a plain sweep of each rank's trace and against what is
true of each run (truth.rank<R>.json, README), and on synthetic GPipe jobs whose every figure is known by
construction (tracelint.testing.pipeline_job)."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from tracelint.engine import metrics as M
from tracelint.testing import analyze, analyze_job, pipeline_job
from tracelint.trace import Report, analyze_paths, analyze_trace

GPU_BOUND_JOBS = ["pp-4xh100/pp_gpipe_m8", "pp-4xh100/pp_1f1b_m8"]
HOST_BOUND_JOBS = ["pp-4xh100-hostbound/pp_gpipe_m8", "pp-4xh100-hostbound/pp_1f1b_m8"]


def _split(reports: list) -> tuple[dict[int, Report], Report]:
    reports = [r for r in reports if isinstance(r, Report)]
    ranks = {r.summaries[0].rank: r for r in reports if r.summaries[0].rank is not None}
    (job,) = [r for r in reports if r.summaries[0].rank is None]
    return ranks, job


def _sweep(path: Path) -> dict:
    """A rank's steps read the plain way: per ProfilerStep, the GPU work whose launch call starts inside its CPU
    span, the span of that work (first start to last end), the union of the non-NCCL part within it (a sweep over
    the sorted intervals), and the ``send`` / ``recv`` record_param_comms ops in the step; ``step`` is the longer of
    the mean CPU span and the mean span of the GPU work (a host that runs ahead has short CPU steps)."""
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "user_annotation"
             and re.fullmatch(r"ProfilerStep#\d+", e.get("name", ""))]
    launch = {e["args"]["correlation"]: e["ts"] for e in events
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    spans, computes, cpu = [], [], []
    for s0, s1 in steps:
        cpu.append(s1 - s0)
        mine = [e for e in gpu if s0 <= launch.get(e["args"].get("correlation"), -1) <= s1]
        w0, w1 = min(e["ts"] for e in mine), max(e["ts"] + e["dur"] for e in mine)
        pieces = sorted((max(e["ts"], w0), min(e["ts"] + e["dur"], w1)) for e in mine
                        if "nccl" not in e["name"].lower())
        covered, reach = 0.0, w0
        for a, b in pieces:
            if b > reach:
                covered += b - max(a, reach)
                reach = b
        spans.append(w1 - w0)
        computes.append(covered)
    ops = [e["args"]["Collective name"] for e in events if e.get("name") == "record_param_comms"
           and any(s0 <= e["ts"] <= s1 for s0, s1 in steps)]
    return {"step": max(sum(cpu), sum(spans)) / len(steps), "compute": sum(computes) / len(computes),
            "sends": ops.count("send"), "recvs": ops.count("recv")}


def _truth(folder: Path) -> dict:
    return json.loads((folder / "truth.rank0.json").read_text())


@pytest.fixture(scope="module", params=GPU_BOUND_JOBS)
def gpu_bound(request, multi_gpu_traces):
    folder = multi_gpu_traces / request.param
    return folder, _split(list(analyze_paths([folder])))


def test_a_gpu_bound_pipeline_is_pipeline_bound_on_its_last_stage(gpu_bound):
    folder, (ranks, job) = gpu_bound
    truth = _truth(folder)
    assert job.verdict == "pipeline-bound"
    assert "stage 3 (rank 3)" in job.evidence
    assert "run by torch.distributed.pipelining" in job.evidence  # its schedules' frames are in the stacks
    assert M.BOTTLENECK_RANK.of(job.metrics) == M.BOTTLENECK_STAGE.of(job.metrics) == truth["stages"] - 1
    assert M.PIPELINE_STAGES.of(job.metrics) == truth["stages"]
    assert M.PIPELINE_MICROBATCHES.of(job.metrics) == truth["microbatches"]
    assert M.PIPELINE_BUBBLE_ANALYTIC_PCT.of(job.metrics) == pytest.approx(truth["analytic_bubble_pct"], abs=0.05)
    # the last stage holds the LM head and the loss: it computes the most, and the others wait for it
    stages = {r: M.STAGE_COMPUTE_US.of(rep.metrics) for r, rep in ranks.items()}
    assert max(stages, key=stages.get) == 3
    assert {r: M.PIPELINE_STAGE.of(rep.metrics) for r, rep in ranks.items()} == {0: 0, 1: 1, 2: 2, 3: 3}
    assert {f.code for f in job.findings} >= {"TL603", "TL604"}
    # waiting in send/recv is no exposed communication, and no rank reads comm-bound
    assert not [f for r in ranks.values() for f in r.findings if f.code == "TL601"]
    assert "comm-bound" not in {r.verdict for r in ranks.values()}


def test_every_send_is_paired_with_its_recv(gpu_bound):
    folder, (ranks, job) = gpu_bound
    plain = [_sweep(path) for path in sorted(folder.glob("rank*.json.gz"))]
    sends, recvs = sum(p["sends"] for p in plain), sum(p["recvs"] for p in plain)
    assert sends == recvs == 2 * 3 * _truth(folder)["microbatches"]  # each of 3 links, both ways, per microbatch
    assert M.P2P_MATCHED.of(job.metrics) == sends
    assert M.P2P_UNMATCHED.of(job.metrics) == 0
    for rank, counts in enumerate(plain):  # rank<R>.* sorted: rank R is the R-th
        m = ranks[rank].metrics
        # per step: send/recv time is its wait for the neighbour plus the transfer
        time = M.P2P_TIME_US.of(m) / M.STEPS.of(m)
        assert M.P2P_WAIT_US.of(m) + M.P2P_TRANSFER_US.of(m) == pytest.approx(time, abs=0.2)
        # a 32 MiB activation crosses NVLink well under a millisecond: the rest is waiting
        ops = counts["sends"] + counts["recvs"]
        assert M.P2P_TRANSFER_US.of(m) / ops < 1_000
        assert M.COMM_WAIT_US.of(m) <= max(M.STEP_CPU_US_MEAN.of(m), M.STEP_GPU_SPAN_US_MEAN.of(m))


def test_the_bubble_of_each_stage_matches_a_plain_sweep(gpu_bound):
    folder, (ranks, job) = gpu_bound
    plain = {}
    for path in sorted(folder.glob("rank*.json.gz")):
        rank = int(path.name.split(".")[0].removeprefix("rank"))
        plain[rank] = _sweep(path)
    for rank, p in plain.items():
        bubble = 100.0 * (1.0 - p["compute"] / p["step"])
        assert M.STAGE_BUBBLE_PCT.of(ranks[rank].metrics) == pytest.approx(bubble, abs=1.0)
        assert M.STAGE_COMPUTE_US.of(ranks[rank].metrics) == pytest.approx(p["compute"], rel=0.01)
    whole = 100.0 * (1.0 - sum(p["compute"] for p in plain.values()) / sum(p["step"] for p in plain.values()))
    assert M.PIPELINE_BUBBLE_PCT.of(job.metrics) == pytest.approx(whole, abs=1.0)
    # the stages compute nothing more often than equal stages would: the others wait for the heavy last stage
    assert M.PIPELINE_BUBBLE_PCT.of(job.metrics) > M.PIPELINE_BUBBLE_ANALYTIC_PCT.of(job.metrics)


@pytest.mark.parametrize("name", HOST_BOUND_JOBS)
def test_a_host_bound_pipeline_stays_cpu_bound(multi_gpu_traces, name):
    ranks, job = _split(list(analyze_paths([multi_gpu_traces / name])))
    assert job.verdict == "cpu-bound"
    assert "a pipeline whose bottleneck stage waits on its host" in job.evidence
    assert M.P2P_UNMATCHED.of(job.metrics) == 0
    assert "comm-bound" not in {r.verdict for r in ranks.values()}
    # the stage the others wait for is host-bound: the pipeline rules leave it to the host's
    assert not {"TL601", "TL603", "TL604"} & {f.code for r in [*ranks.values(), job] for f in r.findings}
    bottleneck = ranks[M.BOTTLENECK_RANK.of(job.metrics)]
    assert bottleneck.verdict == "cpu-bound"


def test_one_stage_alone_is_pipeline_bound_and_not_exposed_communication(multi_gpu_traces):
    path = next((multi_gpu_traces / GPU_BOUND_JOBS[0]).glob("rank0.*.json.gz"))
    report = analyze_trace(path)
    assert report.verdict == "pipeline-bound"
    assert "analyze the folder of all ranks" in report.evidence
    assert not [f for f in report.findings if f.code == "TL601"]


# ---- synthetic GPipe jobs: every figure known ------------------------------------------------------------------


@pytest.mark.parametrize("microbatches", [4, 8, 16])
def test_equal_stages_leave_about_the_analytic_bubble(microbatches, tmp_path):
    ranks = pipeline_job([3_000] * 4, microbatches, transfer_us=1.0)
    reports, job = _split(analyze_job(ranks))
    plain = {r: _sweep(trace.write(tmp_path / f"rank{r}.json.gz")) for r, trace in enumerate(ranks)}
    for rank, p in plain.items():
        assert M.STAGE_COMPUTE_US.of(reports[rank].metrics) == pytest.approx(microbatches * 3_000, abs=1.0)
        assert p["compute"] == pytest.approx(microbatches * 3_000, abs=1.0)
        assert M.STAGE_BUBBLE_PCT.of(reports[rank].metrics) == pytest.approx(
            100.0 * (1.0 - p["compute"] / p["step"]), abs=0.1)
    analytic = 100.0 * 3 / (microbatches + 3)
    assert M.PIPELINE_BUBBLE_ANALYTIC_PCT.of(job.metrics) == pytest.approx(analytic, abs=0.01)
    # GPipe's fill and drain: each device starts the next step when done with this one, so the next fill overlaps
    # this drain a little, and the measured bubble is the analytic one or somewhat less
    assert analytic - 4.0 < M.PIPELINE_BUBBLE_PCT.of(job.metrics) <= analytic + 0.5
    assert M.STAGE_IMBALANCE_PCT.of(job.metrics) == pytest.approx(0.0, abs=0.01)
    findings = {f.code for f in job.findings}
    assert "TL604" not in findings
    assert ("TL603" in findings) == (microbatches <= 8)


def test_a_heavy_last_stage_is_the_bottleneck():
    stage_us = [3_000, 3_000, 3_000, 6_000]
    ranks, job = _split(analyze_job(pipeline_job(stage_us, 8)))
    mean = sum(stage_us) / 4
    assert job.verdict == "pipeline-bound"
    assert M.BOTTLENECK_RANK.of(job.metrics) == 3
    assert M.STAGE_IMBALANCE_PCT.of(job.metrics) == pytest.approx(100.0 * (6_000 / mean - 1.0), abs=0.01)
    assert M.PIPELINE_BALANCED_STEP_US.of(job.metrics) == pytest.approx(8 * mean * 11 / 8, abs=1.0)
    assert {r.verdict for rank, r in ranks.items() if rank != 3} == {"pipeline-bound"}
    (tl604,) = [f for f in job.findings if f.code == "TL604"]
    assert "stage 3 (rank 3)" in tl604.message and "LM head" in tl604.message
    # the light stages wait for the heavy one: most of their send/recv time is waiting
    for rank in (0, 1, 2):
        m = ranks[rank].metrics
        assert M.P2P_WAIT_US.of(m) > 10 * M.P2P_TRANSFER_US.of(m)


def test_sends_and_recvs_without_their_peer_are_reported():
    job_ranks = pipeline_job([3_000] * 4, 8, steps=2)[:3]  # rank 3's trace is not in the folder
    ranks, job = _split(analyze_job(job_ranks))
    # rank 2's 8 sends to rank 3 and 8 recvs from it, in each of 2 steps
    assert M.P2P_UNMATCHED.of(job.metrics) == 2 * 2 * 8
    assert M.P2P_MATCHED.of(job.metrics) == 2 * 2 * 2 * 8
    assert any("rank 3's trace was not read" in w for w in job.warnings)
    assert any("rank 3 of 4 missing" in w for w in job.warnings)


def test_a_lone_stage_trace_reads_its_peers_from_the_ops_that_issued_its_kernels():
    trace = pipeline_job([3_000] * 2, 4, steps=1)[1]
    report = analyze(trace)
    comm = report.analyses[0].comm
    assert [op.kind for c in comm for op in c.p2p] == ["recv"] * 4 + ["send"] * 4
    assert {op.peer for c in comm for op in c.p2p} == {0}
    assert M.P2P_TIME_US.of(report.metrics) == pytest.approx(M.COMM_TIME_US.of(report.metrics))


def test_the_schedule_of_a_stage_covers_its_compute_and_its_sends(multi_gpu_traces):
    """The HTML report's schedule diagram: per stage, the last profiled step's segments. Their compute (forward +
    backward) is the step's compute union as the job reads it (tracelint.trace.job.rank_digest), and the send/recv
    segments hold the step's p2p kernels: a plain reading of the same step."""
    from tracelint.trace.intervals import overlap
    from tracelint.trace.job.communication import compute_of
    from tracelint.trace.timeline import SEGMENT_JOIN_US

    for trace in sorted((multi_gpu_traces / "pp-4xh100" / "pp_gpipe_m8").glob("*.pt.trace.json.gz")):
        report = analyze_trace(trace, timelines=True)
        schedule = report.summaries[0].timeline["schedule"]
        analysis = report.analyses[0]
        step = analysis.steps[-1]
        assert schedule["step"] == step.number and schedule["start_us"] == step.gpu_start
        kinds = {k for _, _, k in schedule["segments"]}
        assert {"forward", "backward", "send/recv"} <= kinds
        compute = sum(b - a for a, b, k in schedule["segments"] if k in ("forward", "backward"))
        union = overlap(compute_of(analysis), step.gpu_start, step.gpu_end)
        # segments bridge the launch gaps under SEGMENT_JOIN_US between a layer's kernels, nothing more
        kernels = sum(1 for g in analysis.gpu_events if g.step == step.index)
        assert union - 1.0 <= compute <= union + SEGMENT_JOIN_US * kernels
        sends = [c for c in analysis.comm if c.p2p and c.step == step.index]
        sent = sum(b - a for a, b, k in schedule["segments"] if k == "send/recv")
        assert sent >= 0.98 * sum(c.end - c.start for c in sends) - 1.0  # merged: overlapping sends count once


def test_the_job_page_draws_the_schedule(multi_gpu_traces, tmp_path):
    from tracelint.dispatch import run_paths
    from tracelint.render import render

    job = multi_gpu_traces / "pp-4xh100" / "pp_gpipe_m8"
    page = render(run_paths([job], mode="trace", timelines=True), "html")
    assert "Pipeline schedule of step 3" in page
    assert page.count("stage 3 (rank 3)") >= 1 and "stage 0 (rank 0)" in page
