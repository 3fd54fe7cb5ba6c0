"""Building the trace model: the records of the event chunks (read_events.py), read in one process or in parts in
several, joined in file order, with the top-level facts (devices, ranks) and GPU work joined to its launches.

Devices are numbered as HIP/CUDA number them (the ids of deviceProperties): a roctracer trace's HSA agent indices
are mapped to them (``_hip_ordinals``).
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from itertools import compress, islice, repeat
from operator import eq, itemgetter

from tracelint.trace.fields import by_start, int64
from tracelint.trace.model import (
    CollectiveArgs,
    CommOp,
    DeviceProps,
    Frame,
    GpuEvent,
    MemorySample,
    Op,
    ProcessGroup,
    RuntimeCall,
    ShapedOp,
    Step,
    SyncEvent,
    TraceModel,
)
from tracelint.trace.read_events import read_events
from tracelint.trace.readers import EventRecords


def build_model(chunks: Iterable[list[dict]], meta_source=None) -> TraceModel:
    """Stream event chunks into a TraceModel; ``meta_source()`` returns the top-level keys once chunks are read.

    A loader stream that can be split (``map_parts``, see load.py) reads parts of a big trace in worker processes:
    each part gives the same plain-tuple records a serial read would, and they are joined in file order.
    """
    map_parts = getattr(chunks, "map_parts", None)
    records = _joined(map_parts(read_events) if map_parts is not None else [read_events(chunks)])
    model = TraceModel()
    model.problems = records.problems
    meta = meta_source() if meta_source else {}
    meta = meta if isinstance(meta, dict) else {}
    _read_meta(model, meta)
    model.skipped_events = sum(count for (_, dropped), (count, _) in model.problems.items() if dropped)
    ordinals = _hip_ordinals(model, meta, records.runtime, records.gpu, records.memory)
    if ordinals:
        records.gpu = [(kind, name, ordinals[device], *rest) for kind, name, device, *rest in records.gpu]
        records.syncs = [(name, ordinals.get(device, device), *rest) for name, device, *rest in records.syncs]
        model.device_agents = {ordinal: agent for agent, ordinal in ordinals.items()}
    _finish(model, records)
    model.collectives = {c[0]: CollectiveArgs(*c[1:]) for c in records.collectives if c[0] is not None}
    records.comm_ops.sort(key=itemgetter(1))
    model.comm_ops = _records(CommOp, records.comm_ops)
    model.pipelining_frames = records.pipelining
    records.empty_cache.sort(key=itemgetter(1))
    model.empty_cache_calls = records.empty_cache
    model.annotations = frozenset(records.annotations)
    records.shaped.sort(key=by_start)
    model.shaped_ops = _records(ShapedOp, records.shaped)
    model.profiler_ranges = len(records.ranges)
    model.range_counters = tuple(sorted({name for counters in set(records.ranges) for name in counters}))
    model.meta_problems.extend(_missing_memory_size(model))
    return model


# ROCm's roctracer (what Kineto used before rocprofiler-sdk) writes the `device` (and pid) of GPU events as an HSA
# agent index, and HSA numbers the CPU agents first: on a two-socket host the GPUs are agents 2-9, while HIP, and so
# deviceProperties, `[memory]` samples and torch.cuda, call them 0-7 (pytorch/kineto#926, ROCm/roctracer#98; the
# public MI250 and MI300X traces run on agent 2 beside deviceProperties ids 0-3 and 0-7). Kineto's rocprofiler-sdk
# path writes GPU indices instead (``logical_node_type_id``) and says so with a ``rocprofiler-sdk_version`` key.
_HIP_PROBE_CALLS = 1000  # a ROCm trace's runtime calls are all hip*: its first ones tell
_MAX_CPU_AGENTS = 8  # CPU sockets of one host (Kineto's own bound: "8 CPU sockets + 8 GPUs")


def _hip_ordinals(model: TraceModel, meta: dict, runtime: list, gpu_raw: list, memory: list) -> dict[int, int]:
    """{agent index: HIP ordinal} for the GPU events of a roctracer trace; {} when its ids are ordinals already.

    The trace does not say how many CPU agents come first, so the ordinal of the lowest agent in use is inferred:
    the lowest device of the allocator's ``[memory]`` samples (they carry the ordinal), else, for a rank of a job on
    a host whose GPUs deviceProperties lists, ``rank % GPUs`` (one GPU per rank, as torchrun's local rank), else 0
    (a single process uses its first GPU). Agents keep their order. A mapping that would leave no CPU agent (or
    more than 8) before the GPUs, or name an ordinal deviceProperties does not list, is not applied.
    """
    if not gpu_raw or "rocprofiler-sdk_version" in meta:
        return {}
    if "roctracer_version" not in meta and not any(
            call[0].startswith("hip") for call in islice(runtime, _HIP_PROBE_CALLS)):
        return {}  # a CUDA trace: its device ids are CUDA ordinals
    agents = sorted({g[2] for g in gpu_raw})
    allocator = sorted({s[1] for s in memory})
    listed = model.devices
    if allocator:
        first = allocator[0]
    elif model.rank is not None and (model.world_size or 0) > 1 and len(listed) > 1:
        first = model.rank % len(listed)
    else:
        first = 0
    offset = agents[0] - first
    if not 1 <= offset <= _MAX_CPU_AGENTS or (listed and any(agent - offset not in listed for agent in agents)):
        return {}
    return {agent: agent - offset for agent in agents}


def _missing_memory_size(model: TraceModel) -> list[str]:
    """Why peak_memory_pct is missing for a device whose allocator peak the trace has: its memory size is unknown."""
    sampled = {s.device for s in model.memory if s.total_allocated is not None}
    unsized = [d for d in sorted(sampled) if not (d in model.devices and model.devices[d].total_memory_bytes)]
    if not unsized:
        return []
    active = set(model.devices_with_activity())
    notes = []
    for device in unsized:
        if device not in active:
            continue  # no report of its own
        props = model.devices.get(device)
        if not model.devices:
            why = "the trace has no `deviceProperties`"
        elif props is None:
            why = f"`deviceProperties` has no entry for it (it lists {_id_list(model.devices)})"
        else:
            why = "its `deviceProperties` entry has no `totalGlobalMem`"
        notes.append(f"no peak_memory_pct for GPU {device}: its memory size is unknown ({why})")
    return notes


def _id_list(ids) -> str:
    ids = sorted(ids)
    if len(ids) > 2 and ids == list(range(ids[0], ids[-1] + 1)):
        return f"GPUs {ids[0]}-{ids[-1]}"
    return f"GPU{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}"


def problem_warnings(model: TraceModel) -> list[str]:
    """One warning per reason: ``1,204 events skipped: `ts` not a number (first at event #5,120)``."""
    out = list(model.meta_problems)
    for (reason, dropped), (count, first) in sorted(model.problems.items(), key=lambda item: item[1][1]):
        what = f"{count:,} event{'s' if count != 1 else ''}"
        if dropped:
            out.append(f"{what} skipped: {reason} (first at event #{first:,})")
        else:
            out.append(f"{what}: {reason}, ignored (first at event #{first:,})")
    return out


def _read_meta(model: TraceModel, meta: dict) -> None:
    """The top-level facts; a field of the wrong shape is ignored with a note in ``model.meta_problems``."""
    problems = model.meta_problems
    props_list = meta.get("deviceProperties")
    if props_list is not None and not isinstance(props_list, list):
        problems.append(f"ignored `deviceProperties`: a {_json_type(props_list)}, not an array")
        props_list = None
    odd = 0
    for i, props in enumerate(props_list or ()):
        if not isinstance(props, dict):
            odd += 1
            continue
        dev = int64(props.get("id", i))
        dev = i if dev is None else dev
        name = props.get("name")
        model.devices[dev] = DeviceProps(
            id=dev,
            name=(name.strip() or None) if isinstance(name, str) else None,  # "" is no name
            total_memory_bytes=int64(props.get("totalGlobalMem")),
            compute_major=int64(props.get("computeMajor")),
            sm_count=int64(props.get("numSms")),
        )
    if odd:
        problems.append(f"ignored {odd} `deviceProperties` entries that are not objects")
    dist = meta.get("distributedInfo")
    if isinstance(dist, dict):
        model.rank = _count(dist.get("rank"), problems, "distributedInfo.rank")
        model.world_size = _count(dist.get("world_size"), problems, "distributedInfo.world_size")
        model.process_groups = _process_groups(dist.get("pg_config"))
    elif dist is not None:
        problems.append(f"ignored `distributedInfo`: a {_json_type(dist)}, not an object")
    model.base_time_ns = int64(meta.get("baseTimeNanoseconds"))
    model.meta_settings = {key: meta[key] for key in ("with_stack", "record_shapes", "profile_memory", "with_flops",
                                                      "with_modules") if key in meta}
    record = meta.get("tracelint")
    if isinstance(record, dict):
        record = dict(record)
        unprofiled = record.get("unprofiled")
        if isinstance(unprofiled, dict) and "steps" in unprofiled and int64(unprofiled["steps"]) is None:
            record["unprofiled"] = {k: v for k, v in unprofiled.items() if k != "steps"}
        if "source" in record and not isinstance(record["source"], str):
            del record["source"]
        model.tracelint_record = record
    elif record is not None:
        problems.append(f"ignored `tracelint`: a {_json_type(record)}, not an object")


def _process_groups(config) -> dict[str, ProcessGroup]:
    """``distributedInfo.pg_config``: ``[{"pg_name": "1", "pg_desc": "mesh_dp", "ranks": [0, 2], ...}]``; entries
    of another shape are left out (the groups are also named on each collective)."""
    groups: dict[str, ProcessGroup] = {}
    for entry in config if isinstance(config, list) else ():
        if not isinstance(entry, dict):
            continue
        name, desc, ranks = entry.get("pg_name"), entry.get("pg_desc"), entry.get("ranks")
        name = name if isinstance(name, str) else None if int64(name) is None else str(int64(name))
        if name is None or not isinstance(ranks, list) or len(ranks) > 1 << 20:
            continue
        ranks = tuple(int64(r) for r in ranks)
        if None in ranks:
            continue
        groups[name] = ProcessGroup(name, desc if isinstance(desc, str) else None, ranks)
    return groups


def _count(value, problems: list[str], field: str) -> int | None:
    """A rank or a world size: an integer from 0 to 2^31, else None (noted unless absent)."""
    number = int64(value)
    if number is not None and 0 <= number < 1 << 31:
        return number
    if value is not None:
        problems.append(f"ignored `{field}`: not an integer from 0 to 2^31")
    return None


def _json_type(value) -> str:
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object",
            type(None): "null"}.get(type(value), type(value).__name__)


_correlation_of = itemgetter(4)  # a RuntimeCall's


def _records(cls, items: list) -> list:
    """Plain tuples as records of ``cls`` (C-level all the way: no Python ``__new__`` per item)."""
    return list(map(tuple.__new__, repeat(cls), items))


_FEW_THREADS = 16  # up to this many, a thread's records are picked by C-level passes, one per thread


def _by_thread(records: list, tid_at: int, start_at: int) -> dict[object, tuple[list[float], list]]:
    """{tid: (starts, records)} of records sorted by start, each thread's in that order, threads in the order they
    first appear."""
    tids = list(map(itemgetter(tid_at), records))
    threads = list(dict.fromkeys(tids))
    if len(threads) <= _FEW_THREADS:
        by_tid = {}
        for tid in threads:
            items = records if len(threads) == 1 else list(compress(records, map(eq, tids, repeat(tid))))
            by_tid[tid] = (list(map(itemgetter(start_at), items)), items if len(threads) > 1 else list(items))
        return by_tid
    by_tid = {}
    for record in records:
        entry = by_tid.get(record[tid_at])
        if entry is None:
            entry = by_tid[record[tid_at]] = ([], [])
        entry[0].append(record[start_at])
        entry[1].append(record)
    return by_tid


def _joined(parts: list[EventRecords]) -> EventRecords:
    """The records of consecutive parts of a trace's events as one read would give them: each list in file order,
    each problem counted over the parts with its first event numbered across them."""
    whole = parts[0]
    offset = whole.events
    for part in parts[1:]:
        for name in _RECORD_LISTS:
            getattr(whole, name).extend(getattr(part, name))
        whole.annotations |= part.annotations
        whole.pipelining += part.pipelining
        for key, (count, first) in part.problems.items():
            if key in whole.problems:
                whole.problems[key] = (whole.problems[key][0] + count, whole.problems[key][1])
            else:
                whole.problems[key] = (count, first + offset)
        offset += part.events
        whole.events += part.events
    return whole


_RECORD_LISTS = ("steps", "ops", "runtime", "gpu", "syncs", "frames", "memory", "collectives", "ranges", "shaped",
                 "comm_ops", "empty_cache")


def _finish(model: TraceModel, records: EventRecords) -> None:
    steps, ops, runtime, gpu_raw = records.steps, records.ops, records.runtime, records.gpu
    syncs, frames, memory = records.syncs, records.frames, records.memory
    # Steps: keep one span per step number (a trace may repeat a step on another thread) ordered by start.
    seen: dict[int, Step] = {}
    for step in sorted(_records(Step, steps), key=lambda s: s.start):
        seen.setdefault(step.number, step)
    model.steps = sorted(seen.values(), key=lambda s: s.start)
    model.step_starts = [s.start for s in model.steps]

    ops.sort(key=by_start)
    runtime.sort(key=by_start)
    ops, runtime = _records(Op, ops), _records(RuntimeCall, runtime)
    model.ops, model.runtime = ops, runtime
    model.syncs = sorted(_records(SyncEvent, syncs), key=by_start)
    memory.sort(key=itemgetter(0))
    model.memory = _records(MemorySample, memory)

    model.ops_by_tid = _by_thread(ops, 1, 2)

    frames.sort(key=itemgetter(1))
    frames = _records(Frame, frames)
    model.frames, model.frames_by_tid = frames, _by_thread(frames, 0, 1)

    with_corr = [call for call in runtime if call.correlation is not None]
    launches = dict(zip(map(_correlation_of, with_corr), with_corr, strict=True))
    repeated = len(with_corr) - len(launches)
    if repeated:  # the last call of an id is its launch
        model.meta_problems.append(
            f"{repeated:,} runtime call{' repeats' if repeated == 1 else 's repeat'} the correlation id of another (a "
            "merged or duplicated trace?): GPU work is joined to the last of them")
    new = tuple.__new__
    has_steps = model.has_steps
    step_starts, step_list = model.step_starts, model.steps
    gpu = []
    for kind, name, device, stream, start, end, corr, nbytes in gpu_raw:
        launch = launches.get(corr) if corr is not None else None
        if launch is not None:
            # model.step_at(launch.start), inlined: it runs once per GPU event
            if has_steps:
                at = launch[2]
                i = bisect_right(step_starts, at) - 1
                step = i if i >= 0 and at <= step_list[i].end else None
            else:
                step = 0
        else:
            # Work whose launch the trace lacks has no step of its own; without steps everything is the window.
            step = None if has_steps else 0
        gpu.append(new(GpuEvent, (kind, name, device, stream, start, end, corr, nbytes, launch, step)))
    gpu.sort(key=itemgetter(4))
    model.gpu = gpu
