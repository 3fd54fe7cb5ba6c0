"""tracelint.profile under torch.distributed (gloo, CPU, 2 processes): each rank's unprofiled step time and its wait
in collectives, written to the trace's tracelint.distributed record and read back as Recording.distributed.

What holds on any machine, however loaded: rank 1 issues each all-reduce only after rank 0 has issued it (a store
key says so), and sleeps before the first one, so rank 0 waits at least the sleep and rank 1 never waits; and each
rank's wait is the one computed here from both ranks' flight recorders. How long ranks without a straggler wait is
a measurement: bench/check_timing.py."""
from __future__ import annotations

import gzip
import json
import os
import pickle
import socket
import time
from datetime import timedelta

import pytest

from tracelint.trace import analyze_trace

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

SLEEP_MS = 30.0
STEPS = 12  # wait=8 (step 0 untimed: 7 unprofiled steps), warmup=1, active=1, then 2 more
TIMED = range(1, 8)  # the unprofiled steps


def _rank(rank: int, world: int, port: int, out: str, straggler: int | None, timeout_s: float,
          plain: int | None = None) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s))
    import tracelint
    from tracelint.trace.profiler import on_trace_ready

    model = torch.nn.Linear(64, 64)
    grad = torch.randn(64, 64)
    arrived = dist.FileStore(out + ".store", world)  # the order of arrival, set by the test
    arrived.set_timeout(timedelta(seconds=timeout_s))
    steps = iter(range(STEPS))

    def step():
        n = next(steps)
        if rank == straggler:
            arrived.wait([f"{n}/0"])
            time.sleep(SLEEP_MS / 1e3)  # a slow input pipeline on one rank, once the other rank waits for it
        model(torch.randn(32, 64)).sum().backward()
        for k, tensor in enumerate((grad, model.weight.grad)):  # two collectives per step
            if straggler is None:
                dist.all_reduce(tensor)
            elif rank == straggler:
                arrived.wait([f"{n}/{k}"])
                dist.all_reduce(tensor)
            else:
                work = dist.all_reduce(tensor, async_op=True)  # its arrival is recorded as it is issued
                arrived.set(f"{n}/{k}", "issued")
                work.wait()
        model.weight.grad = None

    sched = torch.profiler.schedule(wait=8, warmup=1, active=1, repeat=1)
    handler = on_trace_ready(out, worker_name=f"rank{rank}", print_verdict=False)
    profile = torch.profiler.profile if rank == plain else tracelint.profile  # plain: this rank records no waits
    with profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched, on_trace_ready=handler) as prof:
        for _ in range(STEPS):
            step()
            prof.step()
    recorder = torch._C._distributed_c10d._dump_fr_trace(includeCollectives=True, includeStackTraces=False,
                                                         onlyActive=False)
    with open(os.path.join(out, f"recorder{rank}.pkl"), "wb") as f:
        f.write(recorder)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _job(tmp_path, straggler, plain=None):
    """Per rank that wrote one: (its tracelint.distributed record, its unprofiled record, Recording.distributed,
    the creation times in ns of its all-reduces in the order issued)."""
    import torch.multiprocessing as mp

    out = tmp_path / f"straggler{straggler}_plain{plain}"
    mp.spawn(_rank, args=(2, _free_port(), str(out), straggler, 60.0, plain), nprocs=2, join=True)
    records = {}
    for path in sorted(out.glob("rank*.pt.trace.json.gz")):
        with gzip.open(path, "rt") as f:
            doc = json.load(f)["tracelint"]
        if "distributed" not in doc:
            continue
        rank = int(path.name[4])
        shown = analyze_trace(path).summaries[0].profiler["distributed"]  # Recording.distributed, as reported
        entries = pickle.loads((out / f"recorder{rank}.pkl").read_bytes())["entries"]
        arrivals = [int(e["time_created_ns"]) for e in sorted(entries, key=lambda e: e["collective_seq_id"])]
        assert [e["profiling_name"] for e in entries] == ["gloo:all_reduce"] * 2 * STEPS
        records[rank] = (doc["distributed"], doc["unprofiled"], shown, arrivals)
    return records


def _arrival_waits(arrivals: dict[int, list[int]]) -> dict[int, float]:
    """Each rank's wait per unprofiled step in ms, from the ranks' arrivals: from its own arrival at an all-reduce
    to the last rank's (the all-reduces of a step follow each other: their waits do not overlap)."""
    ops = [2 * n + k for n in TIMED for k in (0, 1)]
    return {rank: sum(max(a[op] for a in arrivals.values()) - mine[op] for op in ops) / 1e6 / len(TIMED)
            for rank, mine in arrivals.items()}


@pytest.mark.slow
def test_straggler_and_balanced_waits(tmp_path):
    straggler = _job(tmp_path, straggler=1)
    balanced = _job(tmp_path, straggler=None)
    for records in (straggler, balanced):
        assert sorted(records) == [0, 1]
        for rank, (d, unprofiled, shown, _) in records.items():
            assert d["rank"] == rank and d["world_size"] == 2 and d["method"] == "flight_recorder_arrival"
            assert d["steps"] == unprofiled["steps"] == 7 and d["step_ms"] == pytest.approx(unprofiled["step_ms"])
            assert d["collectives_per_step"] == 2 and d["unmatched"] == 0 and d["untimed"] == 0
            assert d["by_kind"]["gloo:all_reduce"]["per_step"] == 2
            assert d["groups"]["0"]["ranks"] == [0, 1] and not d["notes"] and d["comm_ms"] is None
            assert [b["steps"] for b in d["blocks"]] == [7]
            assert shown == {k: v for k, v in d.items() if k not in ("version", "blocks")}
            assert 0 <= d["wait_ms"] <= d["step_ms"]
        waits = {rank: d["wait_ms"] for rank, (d, *_) in records.items()}
        expected = _arrival_waits({rank: arrivals for rank, (*_, arrivals) in records.items()})
        assert waits == pytest.approx(expected, abs=1e-3), (waits, expected)
    # rank 0 waits for rank 1's sleep at the first all-reduce of every step: at least the sleep (the recorder reads
    # the host's real-time clock, which NTP may slew by 0.05 %); rank 1 arrives last at every one and waits for nobody
    waits = {rank: d["wait_ms"] for rank, (d, *_) in straggler.items()}
    assert waits[0] >= 0.99 * SLEEP_MS and waits[1] == 0.0, waits


@pytest.mark.slow
def test_a_rank_without_tracelint_profile(tmp_path):
    """Rank 1 profiles with torch.profiler: rank 0 sees at once that it runs no tracelint.profile, does not wait for
    its durations (a wait would end in a 'could not compare' note after 60 s: timed in bench/check_timing.py), says
    so, and has no wait."""
    records = _job(tmp_path, straggler=None, plain=1)
    assert sorted(records) == [0]
    d, unprofiled, shown, _ = records[0]
    assert d["steps"] == 7 and d["unmatched"] == 14 and d["wait_ms"] is None and shown is None
    assert d["notes"] and all("runs no tracelint.profile" in note for note in d["notes"]), d["notes"]
