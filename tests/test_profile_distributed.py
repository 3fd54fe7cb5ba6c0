"""tracelint.profile under torch.distributed (gloo, CPU, 2 processes): each rank's unprofiled step time and its wait
in collectives, written to the trace's tracelint.distributed record and read back as Recording.distributed."""
from __future__ import annotations

import gzip
import json
import os
import socket
import time

import pytest

from tracelint.trace import analyze_trace

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

SLEEP_MS = 30.0
STEPS = 12  # wait=8 (step 0 untimed: 7 unprofiled steps), warmup=1, active=1, then 2 more


def _rank(rank: int, world: int, port: int, out: str, straggler: int | None, timeout_s: float,
          plain: int | None = None) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                           timeout=__import__("datetime").timedelta(seconds=timeout_s))
    import tracelint
    from tracelint.trace.profiler import on_trace_ready

    model = torch.nn.Linear(64, 64)
    grad = torch.randn(64, 64)

    def step():
        if rank == straggler:
            time.sleep(SLEEP_MS / 1e3)  # a slow input pipeline on one rank
        model(torch.randn(32, 64)).sum().backward()
        dist.all_reduce(grad)
        dist.all_reduce(model.weight.grad)  # two collectives per step
        model.weight.grad = None

    sched = torch.profiler.schedule(wait=8, warmup=1, active=1, repeat=1)
    handler = on_trace_ready(out, worker_name=f"rank{rank}", print_verdict=False)
    profile = torch.profiler.profile if rank == plain else tracelint.profile  # plain: this rank records no waits
    with profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched, on_trace_ready=handler) as prof:
        for _ in range(STEPS):
            step()
            prof.step()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _job(tmp_path, straggler, plain=None):
    import torch.multiprocessing as mp

    out = tmp_path / f"straggler{straggler}_plain{plain}"
    mp.spawn(_rank, args=(2, _free_port(), str(out), straggler, 60.0, plain), nprocs=2, join=True)
    records = {}
    for path in sorted(out.glob("rank*.pt.trace.json.gz")):
        with gzip.open(path, "rt") as f:
            doc = json.load(f)["tracelint"]
        if "distributed" not in doc:
            continue
        shown = analyze_trace(path).summaries[0].profiler["distributed"]  # Recording.distributed, as reported
        records[int(path.name[4])] = (doc["distributed"], doc["unprofiled"], shown)
    return records


@pytest.mark.slow
def test_straggler_and_balanced_waits(tmp_path):
    straggler = _job(tmp_path, straggler=1)
    balanced = _job(tmp_path, straggler=None)
    for records in (straggler, balanced):
        assert sorted(records) == [0, 1]
        for rank, (d, unprofiled, shown) in records.items():
            assert d["rank"] == rank and d["world_size"] == 2 and d["method"] == "flight_recorder_arrival"
            assert d["steps"] == unprofiled["steps"] == 7 and d["step_ms"] == pytest.approx(unprofiled["step_ms"])
            assert d["collectives_per_step"] == 2 and d["unmatched"] == 0 and d["untimed"] == 0
            assert d["by_kind"]["gloo:all_reduce"]["per_step"] == 2
            assert d["groups"]["0"]["ranks"] == [0, 1] and not d["notes"] and d["comm_ms"] is None
            assert [b["steps"] for b in d["blocks"]] == [7]
            assert shown == {k: v for k, v in d.items() if k not in ("version", "blocks")}
    waits = {rank: d["wait_ms"] for rank, (d, *_) in straggler.items()}
    # rank 0 waits for rank 1's sleep at the first all-reduce of every step; rank 1 waits for nobody
    assert waits[0] > SLEEP_MS / 2 and waits[1] < waits[0] / 3, waits
    balanced_waits = {rank: d["wait_ms"] for rank, (d, *_) in balanced.items()}
    assert max(balanced_waits.values()) < SLEEP_MS / 2, balanced_waits


@pytest.mark.slow
def test_a_rank_without_tracelint_profile(tmp_path):
    """Rank 1 profiles with torch.profiler: rank 0 does not wait for its durations, says so, and has no wait."""
    started = time.perf_counter()
    records = _job(tmp_path, straggler=None, plain=1)
    assert time.perf_counter() - started < 50  # far below the 60 s a rank would wait for a peer that never comes
    assert sorted(records) == [0]
    d, unprofiled, shown = records[0]
    assert d["steps"] == 7 and d["unmatched"] == 14 and d["wait_ms"] is None and shown is None
    assert any("runs no tracelint.profile" in note for note in d["notes"])
