"""How long each rank waits in collectives during the steps ``tracelint.profile`` does not record, read from c10d's
flight recorder; ``tracelint.profile`` writes it under the trace's ``tracelint.distributed`` key.

Why the flight recorder. The profiler slows each rank's host by a different amount, so balanced ranks arrive at
the collectives of a profiled step one after the other: the trace cannot say who waits for whom. The steps the
profiler does not record can, if something times their collectives cheaply. c10d's flight recorder is on by default
(``TORCH_NCCL_TRACE_BUFFER_SIZE`` / ``TORCH_FR_BUFFER_SIZE``, 2000 entries) and keeps one entry per operation
(``profiling_name``, ``process_group``, ``collective_seq_id``, ``p2p_seq_id``, ``time_created_ns``, ``is_p2p``);
with timing on (``TORCH_NCCL_ENABLE_TIMING=1``, or ``ProcessGroup._enable_collectives_timing()``, which the profiler
calls on every group of this rank when a block starts) NCCL records a CUDA event before each operation too, and the
recorder's ``duration_ms`` is the operation's time on the GPU: from the moment its inputs are ready on this rank's
communication stream (or the previous operation of that stream ended) to the end of its kernel. CUDA events of our
own would have to wrap every call site (DDP's and FSDP's hooks, pipelining's send/recv); the recorder already sees
them all, with their group and sequence number.

Cost, measured on H100s (torch 2.11, NCCL 2.28.9; fixtures/make_ddp_traces.py and make_parallel_traces.py time the
same job with timing off, then on): nothing runs in Python per step; NCCL's timing moved the unprofiled step by
+0.03 % and +1.5 % (ResNet-50 DDP, 39.1 / 40.2 ms, two runs), +0.4 % (pipeline, 285 ms) and +0.9 % (the host-bound
tensor x data parallel job, 77.6 ms off, 78.3 ms with timing on from the start, separate processes; within one
process that job's step drifts by 10-14 % from one block to the next, timing or not). Once per profiling cycle,
when it starts recording, every rank dumps the recorder (without stacks) and exchanges one small record per group
through the job's c10d store: 27-110 ms on those jobs, outside every timed step (``gather_ms``; it includes the wait
for the slowest rank of the groups, so it also lines the ranks up before recording).

What a wait is. An operation cannot finish before its last rank joins: NCCL's kernel on a rank that is ready early
spins until then, so its duration is the wait plus the transfer, and the last rank's duration is about the transfer
alone. For operation k on rank r, with d(k, r) its ``duration_ms``::

    wait(k, r) = max(0, d(k, r) - min over the ranks j of k's process group of d(k, j))

Collectives are matched across a group's ranks by ``collective_seq_id``. Point-to-point transfers (pipeline
send/recv) have no sequence number common to both ends, so their transfer time is the shortest duration of any send
(or recv) of the same sizes in that group during the window, on any rank; pipelining's batched send/recv is recorded
as its parts plus a timed ``nccl:coalesced`` entry, merged into one operation (``_merged``). Ranks exchange their
durations through the default c10d store (no collective on the user's groups): every rank publishes its own per
group, the group's lowest rank reduces them to the minimum per operation, every member reads that back.

``wait_ms`` = the sum of wait(k, r) over the operations this rank issued in the unprofiled steps / their number of
steps, at most the step. It is time on the communication stream spent waiting for other ranks, whether or not this
rank computed beside it: an upper bound of the step time it lost to them. Measured on 2 x H100 (ResNet-50 DDP, rank
1 sleeping 30 ms per step): rank 0 waits 46-48 ms of its 62 ms step, rank 1 0.05 ms (balanced: 0.0-1.5 ms on
both); the sleep made the step 20-25 ms longer, the rest of rank 0's wait ran beside its own backward (DDP's
bucketed all-reduces). On a host-bound rank the GPU-side wait mirrors how far its host runs ahead of its peers'
hosts. One group's operations run one after another on its stream, so they add up; groups have streams of their
own, so their waits can overlap: ``wait_ms_lower`` is the longest single group's wait, ``wait_ms`` their sum, and
the rank's real wait lies between. ``comm_ms``: the sum of d(k, r) per step. ``step_ms``: this rank's mean
unprofiled step over the same steps.

Without durations. Gloo records no timing (torch 2.13: its entries stay ``scheduled``, with no events, and it records
no send/recv), so on a CPU backend an operation's wait runs from this rank's arrival to the last: from its own
``time_created_ns`` to the latest over the group's ranks, and overlapping waits (DDP issues bucketed all-reduces
asynchronously) count once. That is right where a collective runs when the host issues it (CPU tensors; one host or
synchronized clocks) and meaningless on a GPU, whose host runs ahead: NCCL operations without ``duration_ms`` are
counted as ``untimed`` instead. ``method`` says which was used: ``flight_recorder_timing`` (NCCL durations),
``flight_recorder_arrival`` (CPU backends), both joined with ``+``, or ``untimed`` (then ``wait_ms`` is None).

The record, per rank::

    "distributed": {"version": 1, "rank": 0, "world_size": 2, "backend": "nccl", "method": "flight_recorder_timing",
                    "steps": 7, "step_ms": 61.82, "wait_ms": 46.46, "wait_ms_lower": 46.46, "comm_ms": 47.28,
                    "collectives_per_step": 7.0, "untimed": 0, "unmatched": 0, "gather_ms": 79.3,
                    "by_kind": {"nccl:all_reduce": {"per_step": 5.0, "comm_ms": 47.25, "wait_ms": 46.46}, ...},
                    "groups": {"0": {"desc": "default_pg", "ranks": [0, 1], "per_step": 7.0, "comm_ms": 47.28,
                                     "wait_ms": 46.46}},
                    "blocks": [{"first_step": 1, "steps": 7, "ms": 432.7, "wait_ms": 325.2, ...}], "notes": []}

``by_kind`` and ``groups`` sum each operation's wait. Per-step values are over the blocks whose operations the
recorder still held (``steps``); a block that overflowed the recorder's buffer is left out and noted. ``unmatched``:
operations no peer record was found for (not counted in ``wait_ms``; all unmatched: ``wait_ms`` is None). All ranks
must run ``tracelint.profile`` with the same schedule: a rank waits at most ``GATHER_TIMEOUT_S`` for its groups'
other ranks, and skips a group at once where one of them never started a ``tracelint.profile``.
"""
from __future__ import annotations

import json
import pickle
import re
import time
from datetime import timedelta

PREFIX = "tracelint/waits"
GATHER_TIMEOUT_S = 60.0
RETIRE_TIMEOUT_S = 2.0  # NCCL's watchdog computes a duration when it retires the work (it polls every ~100 ms)
MAX_BLOCKS = 64
TIMING, ARRIVAL = "flight_recorder_timing", "flight_recorder_arrival"
_PEERS = re.compile(r"\s*\d+\s*(?:->|<-)\s*\d+")  # "nccl:send 0->1" and "nccl:recv 1<-0" name their peers


class CollectiveWaits:
    """One rank's waits in collectives, block by block. Needs an initialized torch.distributed; never raises into
    the training loop (problems become ``notes``)."""

    def __init__(self, torch, dist) -> None:
        self._torch, self._dist = torch, dist
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.backend = str(dist.get_backend())
        self.blocks: list[dict] = []
        self.notes: list[str] = []
        self._rounds = 0
        self._t0_ns: int | None = None
        self._pending: list[dict] = []  # closed blocks not yet compared with the peers
        self._store = _default_store(dist)
        if self._store is None:
            self._note("no default c10d store: each rank's waits are not compared with its peers'")
        else:
            self._store.set(f"{PREFIX}/rank/{self.rank}", "1")
        self.open()

    def open(self) -> None:
        """A block starts (after its device synchronization): time its collectives from here."""
        enable_timing(self._dist)  # again for groups made since (a flag on each process group)
        self._t0_ns = time.time_ns()

    def close(self, first_step: int, steps: int, ms: float) -> None:
        """The block that started at ``open`` ends (after its device synchronization); ``settle`` reads it."""
        if self._t0_ns is not None and steps > 0:
            self._pending.append({"first_step": first_step, "steps": steps, "ms": ms, "t0": self._t0_ns,
                                  "t1": time.time_ns()})
        self._t0_ns = None

    def settle(self) -> None:
        """Read the closed blocks' collectives, compare them with the peers' and keep each block's result. Every rank
        calls it at the same step (when its profiler starts recording), a few steps after the blocks closed, so
        NCCL's watchdog has timed their collectives by then."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        started = time.perf_counter()
        self._rounds += 1
        windows = [(b["t0"], b["t1"]) for b in pending]
        entries, lost = _window(self._torch, windows, time.monotonic() + RETIRE_TIMEOUT_S)
        groups = _groups(self._dist)
        own = {name: _payload([e for e in entries if _group(e) == name]) for name in groups}
        peers = self._gather(own, groups)
        gather_ms = round((time.perf_counter() - started) * 1e3, 3)
        for b in pending:
            inside = [e for e in entries if b["t0"] <= e["time_created_ns"] < b["t1"]]
            block = {"first_step": b["first_step"], "steps": b["steps"], "ms": round(b["ms"], 4),
                     **_waits(inside, peers, groups, b["ms"]), "gather_ms": gather_ms}
            for key in ("wait_ms", "wait_ms_lower", "comm_ms"):
                block[key] = round(block[key], 4)
            if lost and b["t0"] <= lost:
                block["lost"] = True
                self._note("the flight recorder's buffer overflowed within a block, which is left out: raise "
                           "TORCH_NCCL_TRACE_BUFFER_SIZE (NCCL) or TORCH_FR_BUFFER_SIZE")
            self.blocks.append(block)
        del self.blocks[:-MAX_BLOCKS]

    def record(self) -> dict:
        """The ``tracelint.distributed`` record (module docstring)."""
        kept = [b for b in self.blocks if not b.get("lost")]
        steps = sum(b["steps"] for b in kept)
        methods = sorted({m for b in kept for m in b["methods"]})
        untimed = sum(b["untimed"] for b in kept)

        def per_step(total):
            return round(total / steps, 4) if steps else None

        collectives = sum(b["collectives"] for b in kept)
        matched = collectives - untimed - sum(b["unmatched"] for b in kept)
        timed = matched > 0 or not collectives  # no collective at all: no wait
        doc = {"version": 1, "rank": self.rank, "world_size": self.world_size, "backend": self.backend,
               "method": "+".join(methods) or ("untimed" if untimed else _default_method(self.backend)),
               "steps": steps, "step_ms": per_step(sum(b["ms"] for b in kept)),
               "wait_ms": per_step(sum(b["wait_ms"] for b in kept)) if timed else None,
               "wait_ms_lower": per_step(sum(b["wait_ms_lower"] for b in kept)) if timed else None,
               "comm_ms": per_step(sum(b["comm_ms"] for b in kept)) if TIMING in methods else None,
               "collectives_per_step": per_step(collectives),
               "untimed": untimed, "unmatched": sum(b["unmatched"] for b in kept),
               "gather_ms": round(max((b["gather_ms"] for b in self.blocks), default=0.0), 3)}
        for key in ("by_kind", "groups"):
            merged: dict[str, dict] = {}
            for b in kept:
                for name, v in b[key].items():
                    into = merged.setdefault(name, {k: v[k] for k in ("desc", "ranks") if k in v})
                    for k in ("count", "comm_ms", "wait_ms"):
                        into[k] = into.get(k, 0.0) + v[k]
            doc[key] = {name: {**{k: v[k] for k in ("desc", "ranks") if k in v}, "per_step": per_step(v["count"]),
                               "comm_ms": per_step(v["comm_ms"]) if doc["comm_ms"] is not None else None,
                               "wait_ms": per_step(v["wait_ms"]) if doc["wait_ms"] is not None else None}
                        for name, v in sorted(merged.items())}
        if kept and not collectives:
            doc["notes"] = ["the flight recorder holds no collective of these steps (gloo records no send/recv)"]
        doc["blocks"] = [{k: b[k] for k in ("first_step", "steps", "ms", "wait_ms", "wait_ms_lower", "comm_ms",
                                            "collectives", "gather_ms", "lost") if k in b} for b in self.blocks]
        doc["notes"] = doc.get("notes", []) + self.notes
        return doc

    # -- the exchange with the peers ------------------------------------------------------------------------------
    def _gather(self, own: dict[str, dict], groups: dict[str, tuple]) -> dict[str, dict]:
        """Per group: the minimum duration per collective and the latest arrival over the group's ranks."""
        result = {name: _reduce([own[name]]) for name, (_, ranks) in groups.items() if len(ranks) <= 1}
        store = self._store
        if store is None:
            return result
        prefix = f"{PREFIX}/{self._rounds}"
        shared = {}
        for name, (_, ranks) in sorted(groups.items()):
            if len(ranks) <= 1:
                continue
            if not store.check([f"{PREFIX}/rank/{r}" for r in ranks]):
                self._note(f"group {name}: a rank of {list(ranks)} runs no tracelint.profile; its waits are not "
                           "compared")
                continue
            shared[name] = ranks
            store.set(f"{prefix}/{name}/{self.rank}", json.dumps(own[name]))
        timeout = timedelta(seconds=GATHER_TIMEOUT_S)
        try:
            for name, ranks in shared.items():  # every rank published all of its groups first: no circular wait
                if self.rank == min(ranks):
                    keys = [f"{prefix}/{name}/{r}" for r in ranks]
                    store.wait(keys, timeout)
                    reduced = _reduce([json.loads(_text(store.get(k))) for k in keys])
                    store.set(f"{prefix}/{name}/result", json.dumps(reduced))
                    for k in keys:
                        store.delete_key(k)
            for name in shared:
                key = f"{prefix}/{name}/result"
                store.wait([key], timeout)
                result[name] = json.loads(_text(store.get(key)))
        except Exception as exc:  # noqa: BLE001 - a peer that never came (another schedule, a crash): no comparison
            self._note(f"could not compare with the peers: {type(exc).__name__}: {str(exc)[:160]}")
        return result

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def _default_method(backend: str) -> str:
    return TIMING if "nccl" in backend else ARRIVAL


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _default_store(dist):
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - a private helper that may move between torch versions
        return None


def enable_timing(dist) -> None:
    """Ask every process group of this rank to time its collectives (NCCL: CUDA events; others ignore it)."""
    try:
        groups = list(dist.distributed_c10d._world.pg_map)
    except Exception:  # noqa: BLE001
        return
    for pg in groups:
        try:
            pg._enable_collectives_timing()
        except Exception:  # noqa: BLE001 - a backend without it records no durations: the record says untimed
            pass


def _groups(dist) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every process group of this rank: its name (as the flight recorder writes it) -> (description, ranks)."""
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    try:
        names = dict(dist.distributed_c10d._world.pg_names)
    except Exception:  # noqa: BLE001
        names = {}
    for pg, name in names.items():
        try:
            ranks = tuple(int(r) for r in dist.get_process_group_ranks(pg))
        except Exception:  # noqa: BLE001 - a group being destroyed
            continue
        desc = getattr(pg, "group_desc", "") or ""
        out[str(name)] = (str(desc), ranks)
    return out


def _dump(torch) -> list[dict]:
    """The flight recorders' entries: NCCL's (CUDA events) and the generic one (gloo, ...), without stacks."""
    c10d = torch._C._distributed_c10d
    entries, seen = [], set()
    for fn_name in ("_dump_nccl_trace", "_dump_fr_trace"):
        fn = getattr(c10d, fn_name, None)
        if fn is None:
            continue
        try:
            raw = fn(includeCollectives=True, includeStackTraces=False, onlyActive=False)
        except TypeError:  # an older signature
            raw = fn(True, False, False)
        except Exception:  # noqa: BLE001 - no recorder of that kind in this process
            continue
        for e in pickle.loads(raw).get("entries") or []:
            key = (_group(e), e.get("record_id"), e.get("profiling_name"), e.get("time_created_ns"))
            if key not in seen:
                seen.add(key)
                entries.append(e)
    return entries


def _window(torch, windows: list[tuple[int, int]], deadline: float) -> tuple[list[dict], int | None]:
    """The operations created inside the windows ([t0, t1) in ns), once NCCL's watchdog has timed them (or the
    deadline passed), coalesced entries merged (``_merged``); and, when the buffer lost entries, the creation time of
    the oldest one it kept (else None)."""
    while True:
        entries = _dump(torch)
        inside = _merged([e for e in entries if any(a <= int(e.get("time_created_ns") or -1) < b
                                                    for a, b in windows)])
        pending = [e for e in inside if _nccl(e) and "duration_ms" not in e and not e.get("retired")]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.005)
    lost = None
    if entries:
        oldest = min(entries, key=lambda e: int(e.get("time_created_ns") or 0))
        if int(oldest.get("record_id") or 0) > 0:
            lost = int(oldest.get("time_created_ns") or 0)
    return inside, lost


def _merged(entries: list[dict]) -> list[dict]:
    """One entry per operation. A batch of sends and receives (torch.distributed.pipelining's batch_isend_irecv)
    or a coalesced collective is recorded as its parts (``nccl:send 1->0``: no events, never retired) followed by a
    ``nccl:coalesced`` entry with the same sequence numbers that carries the timing: that one stands for the
    operation, with its parts' kind (``nccl:recv+nccl:send``), sizes and point-to-point flag."""
    ops: dict[tuple, list[dict]] = {}
    for e in entries:
        ops.setdefault((_group(e), e.get("collective_seq_id"), e.get("p2p_seq_id"), e.get("op_id")), []).append(e)
    out = []
    for parts in ops.values():
        head = next((e for e in parts if _kind(e).endswith(":coalesced")), None)
        if head is None or len(parts) == 1:
            out.extend(parts)
            continue
        members = [e for e in parts if e is not head]
        out.append({**head, "profiling_name": "+".join(sorted({_kind(e) for e in members})),
                    "is_p2p": any(e.get("is_p2p") for e in members),
                    "input_sizes": [s for e in members for s in e.get("input_sizes") or []],
                    "output_sizes": [s for e in members for s in e.get("output_sizes") or []]})
    return sorted(out, key=lambda e: int(e.get("time_created_ns") or 0))


def _group(entry: dict) -> str:
    pg = entry.get("process_group")
    return str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(pg)


def _nccl(entry: dict) -> bool:
    return str(entry.get("profiling_name") or "").startswith("nccl:")


def _kind(entry: dict) -> str:
    return _PEERS.sub("", str(entry.get("profiling_name") or "?"))


def _key(entry: dict) -> str:
    """Collectives match across a group's ranks by sequence number; point-to-point transfers by kind and sizes."""
    if entry.get("is_p2p"):
        return f"p:{_kind(entry)}:{entry.get('input_sizes')}:{entry.get('output_sizes')}"
    return f"c:{entry.get('collective_seq_id')}"


def _payload(entries: list[dict]) -> dict:
    """What a rank publishes for one group: its durations (ms) and, where there are none, its arrivals (ns)."""
    dur: dict[str, float] = {}
    arr: dict[str, int] = {}
    for e in entries:
        key = _key(e)
        if isinstance(e.get("duration_ms"), (int, float)):
            d = float(e["duration_ms"])
            dur[key] = min(d, dur.get(key, d))
        elif not _nccl(e) and not e.get("is_p2p"):
            arr[key] = int(e["time_created_ns"])
    return {"dur": dur, "arr": arr}


def _reduce(payloads: list[dict]) -> dict:
    dur: dict[str, float] = {}
    arr: dict[str, int] = {}
    for p in payloads:
        for k, v in p["dur"].items():
            dur[k] = min(v, dur.get(k, v))
        for k, v in p["arr"].items():
            arr[k] = max(v, arr.get(k, v))
    return {"dur": dur, "arr": arr}


def _waits(entries: list[dict], peers: dict[str, dict], groups: dict[str, tuple], block_ms: float) -> dict:
    """One block's sums (module docstring): wait and own duration, by kind of collective and by group."""
    out = {"wait_ms": 0.0, "comm_ms": 0.0, "collectives": len(entries), "untimed": 0, "unmatched": 0,
           "methods": set(), "by_kind": {}, "groups": {}}
    timed_wait = 0.0
    waiting: list[tuple[int, int]] = []  # arrival method: [own arrival, last arrival] on the host clock, in ns
    for e in entries:
        name, key = _group(e), _key(e)
        reduced = peers.get(name)
        wait = comm = 0.0
        if isinstance(e.get("duration_ms"), (int, float)):
            comm = float(e["duration_ms"])
            out["methods"].add(TIMING)
            best = reduced["dur"].get(key) if reduced else None
            if best is None:
                out["unmatched"] += 1
            else:
                wait = max(0.0, comm - best)
                timed_wait += wait
        elif not _nccl(e) and not e.get("is_p2p"):
            out["methods"].add(ARRIVAL)
            last = reduced["arr"].get(key) if reduced else None
            if last is None:
                out["unmatched"] += 1
            else:
                mine = int(e["time_created_ns"])
                wait = max(0.0, (last - mine) / 1e6)
                if last > mine:
                    waiting.append((mine, last))
        else:
            out["untimed"] += 1
        out["comm_ms"] += comm
        pg = e.get("process_group")
        desc, ranks = groups.get(name, ("", ()))
        desc = str(pg[1]) if isinstance(pg, (list, tuple)) and len(pg) > 1 and pg[1] else desc
        for table, label, extra in ((out["by_kind"], _kind(e), {}),
                                    (out["groups"], name, {"desc": desc, "ranks": list(ranks)})):
            row = table.setdefault(label, {**extra, "count": 0, "comm_ms": 0.0, "wait_ms": 0.0})
            row["count"] += 1
            row["comm_ms"] += comm
            row["wait_ms"] += wait
    # A group's collectives run one after another on its stream, so their durations add up; collectives issued
    # asynchronously on the host (DDP's buckets on gloo) wait over the same stretch of time, which counts once.
    out["wait_ms"] = min(timed_wait + _union_ns(waiting) / 1e6, block_ms)
    # Groups have streams of their own: where their waits overlap, the rank waited at least its longest group's.
    out["wait_ms_lower"] = min(max((g["wait_ms"] for g in out["groups"].values()), default=0.0), out["wait_ms"])
    out["methods"] = sorted(out["methods"])
    return out


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total
