"""How long each rank waits in collectives during the steps ``tracelint.profile`` does not record, read from c10d's
flight recorder; ``tracelint.profile`` writes it under the trace's ``tracelint.distributed`` key.

Why the flight recorder. The profiler slows each rank's host by a different amount, so balanced ranks arrive at
the collectives of a profiled step one after the other: the trace cannot say who waits for whom. The steps the
profiler does not record can, if something times their collectives cheaply. c10d's flight recorder is on by default
(``TORCH_NCCL_TRACE_BUFFER_SIZE`` / ``TORCH_FR_BUFFER_SIZE``, 2000 entries) and keeps one entry per collective
(``profiling_name``, ``process_group``, ``collective_seq_id``, ``time_created_ns``, ``is_p2p``); with timing on
(``TORCH_NCCL_ENABLE_TIMING=1``, or ``ProcessGroup._enable_collectives_timing()``, which the profiler calls on every
group of this rank) NCCL also records CUDA events around each collective and the recorder's ``duration_ms`` is the
collective's time on the GPU, from the moment its inputs are ready on this rank's communication stream to the end
of its kernel. CUDA events of our own around the user's collectives would need to wrap every call site (DDP's and
FSDP's hooks included); the recorder already sees them all. Its cost per step is NCCL's two events per collective
(measured: about 1 % of a 30 ms DDP step, DESIGN.md) and nothing in Python; the rest (one dump of the recorder, one
exchange through the job's c10d store) runs once per unprofiled window, after its last synchronization, outside the
timed steps, and is reported as ``gather_ms``.

What a wait is. A collective cannot finish before its last rank joins: NCCL's kernel on a rank that is ready early
spins until then, so its duration is the wait plus the transfer, and the last rank's duration is about the transfer
alone. For collective k on rank r, with d(k, r) its ``duration_ms``::

    wait(k, r) = max(0, d(k, r) - min over the ranks j of k's process group of d(k, j))

The collectives of one group are matched across its ranks by ``collective_seq_id``. Point-to-point transfers
(pipeline send/recv) have no common sequence number, so their transfer time is the shortest duration of any send or
recv of the same kind and sizes in that group during the window, on any rank. Ranks exchange their durations
through the default c10d store (no collective on the user's groups): every rank publishes its own per group, the
group's lowest rank reduces them to the minimum per collective, and every member reads that back.

``wait_ms`` = the sum of wait(k, r) over the collectives this rank issued in the unprofiled steps / their number.
It counts waiting on the communication stream whether or not compute ran beside it, so it is the time this rank's
collectives spent waiting for other ranks, an upper bound of the step time lost to them; it can never exceed the
time the collectives ran, and across groups it is summed (a rank waits for different peers in a tensor-parallel and
a data-parallel group). ``comm_ms``: the sum of d(k, r) per step. ``step_ms``: this rank's mean unprofiled step over
the same steps.

Without durations. Gloo records no timing (torch 2.13: its entries stay ``scheduled``, with no events), so on a CPU
backend a collective's wait is measured from its arrival: wait(k, r) = the latest ``time_created_ns`` of k over the
group's ranks - rank r's. That is right where a collective runs when the host issues it (CPU tensors; one host or
synchronized clocks) and meaningless on a GPU, whose host runs ahead: NCCL collectives without ``duration_ms`` are
counted as ``untimed`` instead. ``method`` says which was used: ``flight_recorder_timing`` (NCCL durations),
``flight_recorder_arrival`` (CPU backends), both joined with ``+``, or ``untimed``.

The record, per rank::

    "distributed": {"version": 1, "rank": 0, "world_size": 2, "backend": "nccl", "method": "flight_recorder_timing",
                    "steps": 7, "step_ms": 60.1, "wait_ms": 29.6, "comm_ms": 30.4, "collectives_per_step": 5.0,
                    "untimed": 0, "unmatched": 0, "gather_ms": 4.1,
                    "by_kind": {"nccl:all_reduce": {"per_step": 4.0, "comm_ms": 1.2, "wait_ms": 0.8}, ...},
                    "groups": {"0": {"desc": "default_pg", "ranks": [0, 1], "comm_ms": ..., "wait_ms": ...}},
                    "blocks": [{"first_step": 1, "steps": 7, "ms": 420.7, "wait_ms": 207.2, "comm_ms": ...,
                                "collectives": 35}], "notes": []}

Per-step values are over the blocks whose collectives the recorder still held (``steps``); a block that overflowed
the recorder's buffer is left out and noted. All ranks must run ``tracelint.profile`` with the same schedule: a rank
waits at most ``GATHER_TIMEOUT_S`` for its groups' other ranks, and skips a group at once where one of them never
started a ``tracelint.profile``.
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
        self._closes = 0
        self._t0_ns: int | None = None
        self._store = _default_store(dist)
        if self._store is None:
            self._note("no default c10d store: each rank's waits are not compared with its peers'")
        else:
            self._store.set(f"{PREFIX}/rank/{self.rank}", "1")
        self.open()

    def open(self) -> None:
        """A block starts (after its device synchronization): time its collectives from here."""
        _enable_timing(self._dist)  # again for groups made since (a flag on each process group)
        self._t0_ns = time.time_ns()

    def close(self, first_step: int, steps: int, ms: float) -> None:
        """The block that started at ``open`` ends (after its device synchronization): read its collectives, compare
        them with the peers', store the block's result."""
        t1_ns, t0_ns = time.time_ns(), self._t0_ns
        self._t0_ns = None
        if t0_ns is None:
            return
        started = time.perf_counter()
        self._closes += 1
        entries, lost = _window(self._torch, t0_ns, t1_ns, time.monotonic() + RETIRE_TIMEOUT_S)
        groups = _groups(self._dist)
        own = {name: _payload([e for e in entries if _group(e) == name]) for name in groups}
        peers = self._gather(own, groups)
        block = {"first_step": first_step, "steps": steps, "ms": round(ms, 4), **_waits(entries, peers, groups)}
        block["wait_ms"], block["comm_ms"] = round(block["wait_ms"], 4), round(block["comm_ms"], 4)
        block["gather_ms"] = round((time.perf_counter() - started) * 1e3, 3)
        if lost:
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
        doc["blocks"] = [{k: b[k] for k in ("first_step", "steps", "ms", "wait_ms", "comm_ms", "collectives",
                                            "gather_ms", "lost") if k in b} for b in self.blocks]
        doc["notes"] = list(self.notes)
        return doc

    # -- the exchange with the peers ------------------------------------------------------------------------------
    def _gather(self, own: dict[str, dict], groups: dict[str, tuple]) -> dict[str, dict]:
        """Per group: the minimum duration per collective and the latest arrival over the group's ranks."""
        result = {name: _reduce([own[name]]) for name, (_, ranks) in groups.items() if len(ranks) <= 1}
        store = self._store
        if store is None:
            return result
        prefix = f"{PREFIX}/{self._closes}"
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


def _enable_timing(dist) -> None:
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


def _window(torch, t0_ns: int, t1_ns: int, deadline: float) -> tuple[list[dict], bool]:
    """The entries created in [t0_ns, t1_ns), once NCCL's watchdog has timed them (or the deadline passed), and
    whether the buffer lost some of them."""
    while True:
        entries = _dump(torch)
        inside = [e for e in entries if t0_ns <= int(e.get("time_created_ns") or -1) < t1_ns]
        pending = [e for e in inside if _nccl(e) and "duration_ms" not in e and not e.get("retired")]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.005)
    lost = False
    if entries:
        oldest = min(entries, key=lambda e: int(e.get("time_created_ns") or 0))
        lost = int(oldest.get("record_id") or 0) > 0 and int(oldest.get("time_created_ns") or 0) >= t0_ns
    return inside, lost


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


def _waits(entries: list[dict], peers: dict[str, dict], groups: dict[str, tuple]) -> dict:
    """One block's sums (module docstring): wait and own duration, by kind of collective and by group."""
    out = {"wait_ms": 0.0, "comm_ms": 0.0, "collectives": len(entries), "untimed": 0, "unmatched": 0,
           "methods": set(), "by_kind": {}, "groups": {}}
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
        elif not _nccl(e) and not e.get("is_p2p"):
            out["methods"].add(ARRIVAL)
            last = reduced["arr"].get(key) if reduced else None
            if last is None:
                out["unmatched"] += 1
            else:
                wait = max(0.0, (last - int(e["time_created_ns"])) / 1e6)
        else:
            out["untimed"] += 1
        out["wait_ms"] += wait
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
    out["methods"] = sorted(out["methods"])
    return out
