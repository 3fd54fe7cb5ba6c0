"""tracelint.profile.waits on flight-recorder entries as torch 2.11 writes them with NCCL (no torch needed): the
coalesced send/recv of torch.distributed.pipelining, the wait per collective, and its bounds across groups."""
from __future__ import annotations

from tracelint.profile.waits import ARRIVAL, TIMING, _merged, _payload, _reduce, _waits

SIZE = [[8, 1024, 2048]]


def _entry(record_id, name, t_ns, *, seq=2, p2p_seq=0, op_id=None, pg=("0", "default_pg"), dur=None, p2p=False,
           sizes=SIZE):
    e = {"record_id": record_id, "process_group": list(pg), "collective_seq_id": seq, "p2p_seq_id": p2p_seq,
         "op_id": op_id if op_id is not None else record_id, "profiling_name": name, "time_created_ns": t_ns,
         "input_sizes": sizes, "output_sizes": sizes, "state": "completed", "retired": dur is not None,
         "is_p2p": p2p}
    if dur is not None:
        e["duration_ms"] = dur
    return e


def test_a_coalesced_send_is_one_timed_point_to_point_operation():
    """pipelining's batch_isend_irecv: a "nccl:send 1->0" part (no events, never retired) and a "nccl:coalesced"
    entry with the same sequence numbers that carries the duration (seen on 4 x H100, torch 2.11, NCCL 2.28.9)."""
    entries = [_entry(2435, "nccl:recv 1<-2", 100, p2p_seq=1216, op_id=1221, p2p=True),
               _entry(2436, "nccl:coalesced", 101, p2p_seq=1216, op_id=1221, dur=12.5, sizes=[]),
               _entry(2437, "nccl:send 1->0", 200, p2p_seq=1217, op_id=1222, p2p=True),
               _entry(2438, "nccl:coalesced", 201, p2p_seq=1217, op_id=1222, dur=0.4, sizes=[])]
    ops = _merged(entries)
    assert [(e["profiling_name"], e["is_p2p"], e["duration_ms"], e["input_sizes"]) for e in ops] == [
        ("nccl:recv", True, 12.5, SIZE), ("nccl:send", True, 0.4, SIZE)]
    plain = [_entry(1, "nccl:all_reduce", 10, seq=5, dur=1.0), _entry(2, "nccl:all_reduce", 20, seq=6, dur=2.0)]
    assert _merged(plain) == plain


def test_wait_is_own_duration_minus_the_groups_shortest():
    """Rank 0 ready first: its all-reduce spins 25 ms; rank 1's runs 0.4 ms. Matched by sequence number."""
    mine = [_entry(1, "nccl:all_reduce", 10, seq=7, dur=25.4), _entry(2, "nccl:broadcast", 20, seq=8, dur=0.1)]
    peer = [_entry(1, "nccl:all_reduce", 11, seq=7, dur=0.4), _entry(2, "nccl:broadcast", 21, seq=8, dur=0.1)]
    reduced = {"0": _reduce([_payload(mine), _payload(peer)])}
    groups = {"0": ("default_pg", (0, 1))}
    out = _waits(mine, reduced, groups, block_ms=60.0)
    assert out["methods"] == [TIMING] and out["unmatched"] == 0 and out["untimed"] == 0
    assert round(out["wait_ms"], 6) == 25.0 and round(out["comm_ms"], 6) == 25.5
    assert out["groups"]["0"]["ranks"] == [0, 1] and out["by_kind"]["nccl:broadcast"]["wait_ms"] == 0.0
    assert _waits(peer, reduced, groups, block_ms=60.0)["wait_ms"] == 0.0
    assert _waits(mine, {}, groups, block_ms=60.0)["unmatched"] == 2  # no peer record: not compared


def test_waits_in_two_groups_are_bounded():
    """A tensor-parallel and a data-parallel group run on streams of their own: the rank waited at least its longest
    group's wait (wait_ms_lower) and at most their sum, never more than the block."""
    tp, dp = ("3", "mesh_tp"), ("1", "mesh_dp")
    mine = [_entry(1, "nccl:all_reduce", 10, seq=1, pg=tp, dur=30.0), _entry(2, "nccl:_all_gather_base", 11,
                                                                          seq=1, pg=dp, dur=50.0)]
    reduced = {"3": {"dur": {"c:1": 1.0}, "arr": {}}, "1": {"dur": {"c:1": 2.0}, "arr": {}}}
    groups = {"3": ("mesh_tp", (0, 1)), "1": ("mesh_dp", (0, 2))}
    out = _waits(mine, reduced, groups, block_ms=100.0)
    assert (out["wait_ms"], out["wait_ms_lower"]) == (77.0, 48.0)
    capped = _waits(mine, reduced, groups, block_ms=60.0)
    assert (capped["wait_ms"], capped["wait_ms_lower"]) == (60.0, 48.0)


def test_arrival_waits_overlap_once():
    """Gloo records no durations: a collective waits from this rank's arrival to the group's last; two collectives
    issued 1 ms apart and both completed by the late rank 30 ms later wait over one stretch of time."""
    mine = [_entry(1, "gloo:all_reduce", 0, seq=1), _entry(2, "gloo:all_reduce", 1_000_000, seq=2)]
    reduced = {"0": {"dur": {}, "arr": {"c:1": 30_000_000, "c:2": 31_000_000}}}
    out = _waits(mine, reduced, {"0": ("default_pg", (0, 1))}, block_ms=100.0)
    assert out["methods"] == [ARRIVAL] and out["wait_ms"] == 31.0 and out["comm_ms"] == 0.0
    nccl_untimed = [_entry(1, "nccl:all_reduce", 0, seq=1)]
    assert _waits(nccl_untimed, reduced, {}, block_ms=100.0)["untimed"] == 1
