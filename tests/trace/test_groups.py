"""Process groups and stragglers: waits measured within each group as a union of intervals, checked against a plain
reading of the project's multi-GPU traces (../shared/traces/multi-gpu) and what is true of each run (its README), and
the rule that tells a straggler from a lead the profiler made, on those traces and on synthetic jobs."""
from __future__ import annotations

import gzip
import json
import re
from dataclasses import replace
from types import SimpleNamespace

import pytest

from tracelint.engine import Config
from tracelint.engine import metrics as M
from tracelint.testing import TraceBuilder, analyze, analyze_job
from tracelint.trace import Report, analyze_paths
from tracelint.trace.job.rank_digest import digest_of, step_us
from tracelint.trace.job.ranks import analyze_job as judge_job
from tracelint.trace.rules.distributed import StragglerRank

JOBS = ["ddp-2xh100/ddp_default", "ddp-2xh100/ddp_no_sync", "ddp-2xh100/ddp_straggler", "ddp-2xh100/fsdp2",
        "pp-4xh100/pp_gpipe_m8", "pp-4xh100/pp_1f1b_m8", "pp-4xh100-hostbound/pp_gpipe_m8",
        "pp-4xh100-hostbound/pp_1f1b_m8", "tp2dp2-4xh100"]
BALANCED = ["ddp-2xh100/ddp_default", "ddp-2xh100/ddp_no_sync", "ddp-2xh100/fsdp2", "tp2dp2-4xh100"]
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas"


def _split(reports: list) -> tuple[dict[int, Report], Report]:
    reports = [r for r in reports if isinstance(r, Report)]
    ranks = {r.summaries[0].rank: r for r in reports if r.summaries[0].rank is not None}
    (job,) = [r for r in reports if r.summaries[0].rank is None]
    return ranks, job


_CACHE: dict[str, tuple] = {}


def _job(multi_gpu_traces, name: str) -> tuple[dict[int, Report], Report]:
    if name not in _CACHE:
        _CACHE[name] = _split(list(analyze_paths([multi_gpu_traces / name])))
    return _CACHE[name]


@pytest.mark.parametrize("name", JOBS)
def test_no_rank_waits_longer_than_its_step(multi_gpu_traces, name):
    ranks, _ = _job(multi_gpu_traces, name)
    for report in ranks.values():
        m = report.metrics
        step = step_us(m)
        assert 0 <= M.COMM_WAIT_US.of(m) <= step
        rows = M.COMM_GROUPS.of(m)
        assert rows, "a rank of a job has a row per process group"
        for row in rows:
            assert 0 <= row["wait_us"] <= M.COMM_WAIT_US.of(m) + 0.1  # a group's wait is part of the rank's
            assert row["comm_us"] <= step


def _plain_waits(path_by_rank: dict) -> tuple[dict[int, float], dict[tuple, float]]:
    """Each rank's wait per step, over all groups and within each (rank, group name), read the plain way: the NCCL
    kernels launched inside the step, in sequences by (group name, group ranks), the n-th of a sequence on one rank
    matched with the n-th on the others; a rank waits from its start to the latest start, at most to its end; its
    waits are merged into a union (a sweep over sorted intervals)."""
    kernels: dict[int, list[dict]] = {}
    steps: dict[int, int] = {}
    for rank, path in path_by_rank.items():
        with gzip.open(path) as f:
            events = json.load(f)["traceEvents"]
        spans = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "user_annotation"
                 and re.fullmatch(r"ProfilerStep#\d+", e.get("name", ""))]
        launch = {e["args"]["correlation"]: e["ts"] for e in events
                  if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
        kernels[rank] = [e for e in events if e.get("cat") == "kernel" and "Collective name" in e["args"]
                         and any(a <= launch.get(e["args"]["correlation"], -1) <= b for a, b in spans)]
        steps[rank] = len(spans)
    sequences: dict[tuple, dict[int, list]] = {}
    for rank, found in kernels.items():
        for e in sorted(found, key=lambda e: e["ts"]):
            key = (e["args"]["Process Group Name"], e["args"]["Process Group Ranks"])
            sequences.setdefault(key, {}).setdefault(rank, []).append((e["ts"], e["ts"] + e["dur"]))
    intervals: dict[tuple, list] = {}
    for (group, _), by_rank in sequences.items():
        for column in zip(*by_rank.values(), strict=True):
            arrival = max(s for s, _ in column)
            for rank, (s, e) in zip(by_rank, column, strict=True):
                intervals.setdefault((rank, group), []).append((s, min(arrival, e)))

    def union(pieces: list) -> float:
        total, reach = 0.0, -float("inf")
        for a, b in sorted(pieces):
            if b > max(a, reach):
                total += b - max(a, reach)
                reach = b
        return total

    total = {rank: union([iv for (r, _), ivs in intervals.items() if r == rank for iv in ivs]) / steps[rank]
             for rank in kernels}
    per_group = {key: union(ivs) / steps[key[0]] for key, ivs in intervals.items()}
    return total, per_group


def test_tp2dp2_waits_are_a_union_within_each_group(multi_gpu_traces):
    folder = multi_gpu_traces / "tp2dp2-4xh100"
    ranks, job = _job(multi_gpu_traces, "tp2dp2-4xh100")
    paths = {int(p.name.split(".")[0].removeprefix("rank")): p for p in folder.glob("rank*.json.gz")}
    total, per_group = _plain_waits(paths)
    pairs = {"tp": {0: [0, 1], 1: [0, 1], 2: [2, 3], 3: [2, 3]}, "dp": {0: [0, 2], 1: [1, 3], 2: [0, 2], 3: [1, 3]}}
    for rank, report in ranks.items():
        assert M.COMM_WAIT_US.of(report.metrics) == pytest.approx(total[rank], abs=0.5)
        rows = {row["kind"]: row for row in M.COMM_GROUPS.of(report.metrics)}
        assert set(rows) == {"tp", "dp"}  # a row per group kind, as the mesh names them
        for kind, row in rows.items():
            assert row["ranks"] == pairs[kind][rank]
            assert row["wait_us"] == pytest.approx(per_group[(rank, row["group"])], abs=0.5)
    assert all(total[rank] < step_us(r.metrics) for rank, r in ranks.items())  # a wait is part of its step
    # every rank is host-bound by construction: the trace's leads may be the profiler's, and none is a straggler
    assert not [f for f in job.findings if f.code == "TL602" and f.severity.name != "INFO"]
    assert M.STRAGGLER_RANK.of(job.metrics) is None


@pytest.mark.parametrize("name", BALANCED)
def test_balanced_jobs_name_no_straggler(multi_gpu_traces, name):
    ranks, job = _job(multi_gpu_traces, name)
    assert M.STRAGGLER_RANK.of(job.metrics) is None
    assert "straggler" not in job.evidence
    tl602 = [f for f in job.findings if f.code == "TL602"]
    assert all(f.severity.name == "INFO" for f in tl602)
    # one rank leads in the trace (the profiler desynchronized the ranks): said once, with how to check
    if tl602:
        (info,) = tl602
        assert "may be the profiler's" in info.message and "tracelint.profile(" in info.message


def test_a_sleeping_rank_is_the_straggler(multi_gpu_traces):
    ranks, job = _job(multi_gpu_traces, "ddp-2xh100/ddp_straggler")
    (tl602,) = [f for f in job.findings if f.code == "TL602"]
    assert tl602.severity.name == "WARNING"
    details = dict(tl602.details)
    assert details["straggler_rank"] == 1 and details["waiting_ranks"] == [0]
    # rank 1 sleeps 30 ms on the host per step: that much of its lead is no profiler's
    assert 25_000 < details["lead_not_profiler_us"] < 35_000
    assert M.STRAGGLER_RANK.of(job.metrics) == 1
    assert "rank 1 is the straggler" in job.evidence


@pytest.mark.parametrize(("name", "low", "high"), [("ddp-2xh100/ddp_default", 25, 100),
                                                   ("ddp-2xh100/ddp_no_sync", 0, 5)])
def test_overlap_on_the_rank_that_waits(multi_gpu_traces, name, low, high):
    """DDP's buckets overlap backward; all-reduces after backward (no_sync) overlap nothing."""
    ranks, _ = _job(multi_gpu_traces, name)
    waiting = max(ranks.values(), key=lambda r: M.COMM_WAIT_US.of(r.metrics))
    assert low <= M.COMM_OVERLAP_PCT.of(waiting.metrics) <= high


# ---- synthetic jobs ----------------------------------------------------------------------------------------------


def _two_ranks(lead: str) -> list[TraceBuilder]:
    """Rank 1 reaches every all-reduce 30 ms late: asleep (``idle``: no profiled op) or busy in profiled ops."""
    r0, r1 = ranks = [TraceBuilder().device_properties().distributed(r, 2) for r in (0, 1)]
    for _ in zip(r0.steps(3), r1.steps(3), strict=True):
        if lead == "sleep":
            r1.idle(30_000)
        else:
            for _ in range(300):  # host work the profiler records, op by op
                r1.cpu("aten::copy_", 99.0)
        for trace in ranks:
            for _ in range(20):
                trace.kernel(GEMM, gpu_us=500, op="aten::mm")
        r1.collective("all_reduce", gpu_us=2_000)
        r0.collective("all_reduce", until=r1.gpu_end)
    return ranks


def test_a_lead_made_of_quiet_host_time_is_a_straggler():
    _, job = _split(analyze_job(_two_ranks("sleep")))
    (tl602,) = [f for f in job.findings if f.code == "TL602"]
    assert tl602.severity.name == "WARNING" and dict(tl602.details)["straggler_rank"] == 1
    assert M.STRAGGLER_RANK.of(job.metrics) == 1


def test_a_lead_made_of_profiled_host_work_may_be_the_profilers():
    _, job = _split(analyze_job(_two_ranks("ops")))
    (tl602,) = [f for f in job.findings if f.code == "TL602"]
    assert tl602.severity.name == "INFO"
    assert "may be the profiler's" in tl602.message and "tracelint.profile(" in tl602.message
    assert M.STRAGGLER_RANK.of(job.metrics) is None
    assert M.WAITED_FOR_RANK.of(job.metrics) == 1


def _digests(builders: list[TraceBuilder], records: dict[int, dict] | None) -> dict:
    """The ranks' digests, each recording replaced by one that carries ``records[rank]`` as its unprofiled record
    (``Recording.distributed``, which tracelint.profile writes)."""
    digests = {}
    for rank, trace in enumerate(builders):
        analysis = analyze(trace).analyses[0]
        d = digest_of(analysis, False)
        if records is not None:
            d = replace(d, recording=SimpleNamespace(distributed=records[rank]))
        digests[rank] = d
    return digests


_WAITS_FOR_RANK_1 = {0: {"rank": 0, "world_size": 2, "step_ms": 60.0, "wait_ms": 20.0, "method": "flight recorder"},
                     1: {"rank": 1, "world_size": 2, "step_ms": 60.0, "wait_ms": 0.3, "method": "flight recorder"}}


def test_the_unprofiled_record_and_a_cause_in_the_trace_name_a_straggler():
    # without the profiler rank 0 waits 20 of 60 ms per step for rank 1, and in the trace rank 1 sleeps 30 ms
    job = judge_job(_digests(_two_ranks("sleep"), _WAITS_FOR_RANK_1), Config())
    assert job.straggler == 1
    (finding,) = StragglerRank().check_job(job, {}, Config())
    assert finding.severity.name == "WARNING"
    assert "measured without the profiler" in finding.message and "sits quiet" in finding.message
    assert dict(finding.details)["measured"] == "unprofiled"


def test_unprofiled_waits_the_trace_gives_no_cause_for_are_not_a_straggler():
    # the record's waits, but rank 1 leads the trace only by profiled host work, as the ranks of a host-bound job
    # whose hosts run out of phase do (the project's 2-D TP x FSDP job, recorded on 4 x H100): info, no straggler
    job = judge_job(_digests(_two_ranks("ops"), _WAITS_FOR_RANK_1), Config())
    assert job.straggler is None
    (finding,) = StragglerRank().check_job(job, {}, Config())
    assert finding.severity.name == "INFO"
    assert "rank 1 may be waited for" in finding.message and "out of phase" in finding.message
    assert dict(finding.details)["measured"] == "unprofiled"


def test_the_unexplained_lead_speaks_of_the_jobs_own_verdict():
    # issue 34: the info said "on a host-bound job the GPU-side waits measure how far the hosts run out of phase" on
    # a job whose ranks are gpu-bound (when not profiled), where that explanation does not hold
    from tracelint.trace.verdict import CPU_BOUND, GPU_BOUND, Verdict

    job = judge_job(_digests(_two_ranks("ops"), _WAITS_FOR_RANK_1), Config())

    def message(kind: str | None) -> str:
        verdicts = {} if kind is None else {r: Verdict(kind, f"{kind}: evidence") for r in (0, 1)}
        (finding,) = StragglerRank().check_job(job, verdicts, Config())
        assert finding.severity.name == "INFO" and "rank 1 may be waited for" in finding.message
        return finding.message

    host = message(CPU_BOUND)
    assert "on this cpu-bound job the GPU-side waits measure how far the hosts run out of phase" in host
    gpu = message(GPU_BOUND)
    assert "host-bound" not in gpu and "hosts run out of phase" not in gpu
    assert "on this gpu-bound job a GPU-side wait is time the waiting rank loses" in gpu
    unknown = message(None)  # no verdict to go by: the explanation is a possibility, not a fact about the job
    assert "host-bound job" not in unknown and "if the job is host-bound" in unknown


def test_the_unprofiled_record_clears_a_lead_the_profiler_made():
    # in the trace rank 1 sleeps 30 ms (a straggler by the trace); the record says the ranks wait 0.2 ms: balanced
    records = {r: {"rank": r, "world_size": 2, "step_ms": 40.0, "wait_ms": 0.2, "method": "flight recorder"}
               for r in (0, 1)}
    job = judge_job(_digests(_two_ranks("sleep"), records), Config())
    assert job.straggler is None
    (finding,) = StragglerRank().check_job(job, {}, Config())
    assert finding.severity.name == "INFO" and "the lead is the profiler's" in finding.message


def test_without_a_record_on_every_rank_the_trace_decides():
    records = {0: {"rank": 0, "world_size": 2, "step_ms": 40.0, "wait_ms": 0.2, "method": "x"}, 1: None}
    job = judge_job(_digests(_two_ranks("sleep"), records), Config())
    assert job.straggler == 1  # rank 1's record is missing: its quiet host time decides


def test_overlapping_waits_in_two_groups_count_once():
    """Rank 0 waits for rank 1 in two groups at the same time (two streams): its wait is their union."""
    r0, r1 = ranks = [TraceBuilder().device_properties().distributed(r, 2) for r in (0, 1)]
    for _ in zip(r0.steps(3), r1.steps(3), strict=True):
        r1.idle(10_000)
        for trace in ranks:
            trace.kernel(GEMM, gpu_us=2_000)
        r1.collective("all_reduce", gpu_us=500, group="1", stream=21, blocking=False)
        r1.collective("all_gather", gpu_us=500, group="2", stream=22, nelems=4096)
        end = r1.gpu_end
        r0.collective("all_reduce", until=end, group="1", stream=21, blocking=False)
        r0.collective("all_gather", until=end, group="2", stream=22, nelems=4096)
    reports, _ = _split(analyze_job(ranks))
    m = reports[0].metrics
    rows = {row["group"]: row["wait_us"] for row in M.COMM_GROUPS.of(m)}
    assert set(rows) == {"1", "2"} and min(rows.values()) > 5_000
    assert M.COMM_WAIT_US.of(m) < sum(rows.values())  # the union, not the sum
    assert M.COMM_WAIT_US.of(m) == pytest.approx(max(rows.values()), abs=1.0)
