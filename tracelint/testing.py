"""Synthetic torch.profiler (Kineto) traces, for tests and for the trace scenarios of the rule catalog.

A ``TraceBuilder`` lays out what a profiled training loop leaves in a Chrome trace (``ProfilerStep#N`` spans, CPU
ops, launches joined to their GPU work by correlation, copies, host syncs, ``[memory]`` samples, Python frames);
``analyze`` runs the trace analyzer on it and returns its Report::

    from tracelint.testing import TraceBuilder, analyze

    trace = TraceBuilder().device_properties(name="NVIDIA H100", compute_major=9)
    for _ in trace.steps(3):
        trace.kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", gpu_us=900)
        trace.item()  # loss.item(): a device-to-host copy, then the host waits for the GPU
    assert [f.code for f in analyze(trace).findings] == ["TL101"]

Two levels. The loop level (``steps``, ``cpu``, ``span``, ``kernel``, ``item``, ``to_host``, ``nonzero``,
``synchronize``, ``to_device``, ``allocate``, ``idle``) advances a cursor, ``now``, on the main thread and models the
GPU as in-order streams: work starts when its launch reaches the device or when the stream is done with the work
queued before it, whichever is later, and a synchronize returns when the device is done. The event level (``op``,
``step``, ``runtime``, ``gpu``, ``launch``, ``memory``, ``frame``) places one event exactly where it is told, for
edge cases. Times are µs of the trace clock.
"""
from __future__ import annotations

import gzip
import json
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracelint.engine import Config
from tracelint.trace import Report, analyze_trace
from tracelint.trace.analyze import report_from_model
from tracelint.trace.build import build_model

__all__ = ["TraceBuilder", "analyze", "analyze_job", "pipeline_job"]

Event = dict[str, Any]

LAUNCH_DELAY_US = 5.0  # a launch reaches an idle GPU this long after the host call starts
LAUNCH_CALL_US = 4.0  # host time of one cudaLaunchKernel / cudaMemcpyAsync call
# Host-device copy rates (GB/s = bytes per ns): pageable memory is staged through a driver buffer.
PAGEABLE_GBPS, PINNED_GBPS, DTOH_GBPS = 10.0, 25.0, 20.0
_PYTHON_US = 1.0  # the interpreter's time between one op's end and the next call: ops never touch


class TraceBuilder:
    """Builds one trace (one rank) event by event; ``events`` and ``meta`` are the trace's JSON, as written."""

    def __init__(self, *, pid: int = 100, tid: int = 100, device: int = 0, legacy: bool = False) -> None:
        """``legacy``: PyTorch <= 1.9 categories (``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``)."""
        self.events: list[Event] = []
        self.meta: dict[str, Any] = {"schemaVersion": 1}
        self.pid, self.tid, self.device, self.legacy = pid, tid, device, legacy
        self.now = 0.0  # the main thread's host time (loop level)
        self.cut: float | None = None  # see truncate()
        self.clock_offset_us = 0.0  # see distributed()
        self.events_gpu_end = 0.0  # see gpu_end
        self._corr = 1000
        self._free: dict[tuple[int, int], float] = {}  # (device, stream) -> when its queued work ends
        self._allocated: dict[int, int] = {}  # device -> Total Allocated

    # --- trace level --------------------------------------------------------------------------------------------

    def device_properties(self, *, name: str = "NVIDIA H100 80GB HBM3", total_memory: int = 80 * 2**30,
                          compute_major: int = 9, sm_count: int = 132, device: int | None = None) -> TraceBuilder:
        """Set one device's ``deviceProperties`` entry (what Kineto writes from cudaGetDeviceProperties)."""
        device = self.device if device is None else device
        props = {"id": device, "name": name, "totalGlobalMem": total_memory, "computeMajor": compute_major,
                 "computeMinor": 0, "numSms": sm_count}
        others = [p for p in self.meta.get("deviceProperties", []) if p.get("id") != device]
        self.meta["deviceProperties"] = sorted([*others, props], key=lambda p: p["id"])
        return self

    def distributed(self, rank: int, world_size: int, *, clock_offset_us: float = 0.0) -> TraceBuilder:
        """Make this trace one rank of a job (``distributedInfo``); ``clock_offset_us`` shifts every timestamp as
        written, as a host whose clock runs ahead of the other ranks' would."""
        self.meta["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world_size}
        self.clock_offset_us = clock_offset_us
        return self

    def recorded(self, *, with_stack: bool = True, record_shapes: bool = True, profile_memory: bool = True,
                 unprofiled_step_ms: float | None = None, distributed: dict | None = None) -> TraceBuilder:
        """The profiler settings torch 2.x writes as top-level keys; ``unprofiled_step_ms``: the record
        ``tracelint.profile`` adds (the step time measured on the steps it did not record); ``distributed``: its
        per-rank record under torch.distributed (tracelint/profile/waits.py), e.g. ``{"rank": 0, "world_size": 2,
        "step_ms": 60.0, "wait_ms": 30.0, "method": "flight_recorder_timing"}``."""
        self.meta.update(with_stack=int(with_stack), record_shapes=int(record_shapes),
                         profile_memory=int(profile_memory))
        if unprofiled_step_ms is not None or distributed is not None:
            self.meta["tracelint"] = {"version": 1, "source": "tracelint.profile"}
        if unprofiled_step_ms is not None:
            self.meta["tracelint"]["unprofiled"] = {"steps": 7, "step_ms": unprofiled_step_ms}
        if distributed is not None:
            self.meta["tracelint"]["distributed"] = {"version": 1, "steps": 7, **distributed}
        return self

    def truncate(self, fraction: float = 0.6) -> TraceBuilder:
        """Write only the first ``fraction`` of the file's bytes, as when a job is killed while the trace is written."""
        self.cut = fraction
        return self

    # --- loop level: a cursor on the main thread, GPU streams as queues ------------------------------------------

    def steps(self, count: int, *, step_us: float | None = None, first: int = 1) -> Iterator[int]:
        """Lay out ``count`` ``ProfilerStep#N`` spans (N from ``first``) one after another, yielding 0, 1, ... while
        the loop body adds the step's work; a step lasts as long as its body, at least ``step_us``."""
        for index in range(count):
            start = self.now
            yield index
            end = max(self.now, start + (step_us or 0.0), start + 1.0)
            self.step(first + index, start, end - start)
            self.now = end

    def idle(self, us: float) -> float:
        """The host runs no profiled op for ``us`` (Python between ops, sleep); returns the new ``now``."""
        self.now += us
        return self.now

    def cpu(self, name: str, us: float, *, cat: str | None = None) -> float:
        """A CPU op of ``us`` that launches nothing (``enumerate(DataLoader)#...__next__``, Python-side work)."""
        self.op(name, self.now, us, cat=cat or self._cat(name))
        self.now += us + _PYTHON_US
        return self.now

    @contextmanager
    def span(self, name: str, *, cat: str | None = None) -> Iterator[None]:
        """A CPU op around the work added inside the ``with`` block (``Optimizer.zero_grad#AdamW.zero_grad``)."""
        start = self.now
        self.now += 1.0
        yield
        self.now += 1.0
        self.op(name, start, self.now - start, cat=cat or self._cat(name))
        self.now += _PYTHON_US

    def kernel(self, name: str, *, gpu_us: float, op: str | None = None, host_us: float = 10.0, stream: int = 7,
               api: str = "cudaLaunchKernel", op_args: Mapping[str, Any] | None = None, **args: Any) -> float:
        """Launch a kernel that runs ``gpu_us`` on the device; the host spends ``host_us`` on it, inside a CPU op
        ``op`` when given (``aten::add``), whose args are ``op_args`` (record_shapes: ``{"Input Dims": [[8192, 768],
        [768, 50257]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}``). ``cuLaunchKernel`` (Triton's launch) is
        a driver call. Returns ``now``."""
        start = self.now
        at = start + 1.0 if op is not None else start  # the launch call, inside the op
        corr = self.runtime(api, at, LAUNCH_CALL_US)
        self._queue(name, corr, at + LAUNCH_DELAY_US, gpu_us, stream=stream, **args)
        self.now = max(start + host_us, at + LAUNCH_CALL_US + 1.0)
        if op is not None:
            self.op(op, start, self.now - start, cat=self._cat(op), **(op_args or {}))
            self.now += _PYTHON_US
        return self.now

    @property
    def gpu_end(self) -> float:
        """When the GPU work added last ends (device time): for ``collective(until=...)`` on another rank."""
        return self.events_gpu_end

    def collective(self, name: str = "all_reduce", *, gpu_us: float | None = None, until: float | None = None,
                   nelems: int = 1 << 20, group: str = "0", stream: int = 20, after_stream: int = 7,
                   blocking: bool = True) -> float:
        """Launch an NCCL collective (``all_reduce``, ``all_gather``, ``reduce_scatter``, ``broadcast``) on the
        communication stream ``stream``, with the args torch 2.x writes on its kernel. As ProcessGroupNCCL does, it
        waits for the work queued so far on ``after_stream`` (the compute stream), then runs ``gpu_us`` — waiting
        for the other ranks included — beside whatever is queued on the compute stream after it. ``blocking``: the
        compute stream then waits for it (a synchronous ``all_reduce``; DDP before the optimizer step); with
        ``blocking=False`` (a bucket's all-reduce during backward) later compute runs beside it. ``until`` instead
        of ``gpu_us``: it ends at that device time, as a rank that arrives first ends with the last one (another
        rank's ``gpu_end``). Returns ``now``."""
        size = (self.meta.get("distributedInfo") or {}).get("world_size", 2)
        kernel = "ncclDevKernel_{}_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)".format(
            "".join(part.capitalize() for part in name.split("_")))
        args = {"Collective name": name.replace("_", ""), "Process Group Name": group, "In msg nelems": nelems,
                "Out msg nelems": nelems, "Group size": size, "dtype": "Float"}
        start = self.now
        at = start + 1.0
        corr = self.runtime("cudaLaunchKernel", at, LAUNCH_CALL_US)
        ready = max(at + LAUNCH_DELAY_US, self._free.get((self.device, after_stream), 0.0),
                    self._free.get((self.device, stream), 0.0))
        if (gpu_us is None) == (until is None):
            raise ValueError("collective() takes gpu_us or until")
        end = self._queue(kernel, corr, ready, gpu_us if until is None else max(1.0, until - ready),
                          stream=stream, **args)
        if blocking:
            key = (self.device, after_stream)
            self._free[key] = max(self._free.get(key, end), end)
        self.now = at + LAUNCH_CALL_US + 1.0
        self.op("record_param_comms", start, self.now - start)
        self.now += _PYTHON_US
        return self.now

    def p2p(self, kind: str, peer: int, launch_ts: float, gpu_ts: float, gpu_dur: float, *, nelems: int = 1 << 24,
            group: str = "0", stream: int = 20) -> Event:
        """A ``send`` (``kind="send"``) to or ``recv`` from ``peer`` (a global rank of the default group), as torch
        2.x records it: a ``record_param_comms`` op with ``Collective name``, ``Dst Rank``/``Src Rank`` and the
        group's ranks just before the launch, and an ``ncclDevKernel_SendRecv`` kernel whose own args carry none of
        it (event level: the kernel runs at ``gpu_ts`` for ``gpu_dur``, waiting for its peer included)."""
        size = (self.meta.get("distributedInfo") or {}).get("world_size", 2)
        args = {"Collective name": kind, "Dst Rank" if kind == "send" else "Src Rank": peer,
                "Process Group Name": group, "Process Group Ranks": str(list(range(size))),
                "Process Group Description": "default_pg", "In msg nelems": nelems, "dtype": "BFloat16"}
        self.op("record_param_comms", launch_ts - 3.0, 2.0, **args)
        return self.launch("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", launch_ts, gpu_ts, gpu_dur,
                           api="cuLaunchKernelEx", stream=stream)

    def item(self) -> float:
        """``tensor.item()`` on a CUDA tensor: a 4-byte device-to-host copy queued behind the stream's work, and a
        ``cudaStreamSynchronize`` that waits for it."""
        with self.span("aten::item"), self.span("aten::_local_scalar_dense"):
            self._readback(4)
        return self.now

    def to_host(self, nbytes: int) -> float:
        """``tensor.cpu()`` / ``.tolist()`` / ``.numpy()`` of a CUDA tensor: a copy to pageable memory, then a sync."""
        with self.span("aten::to"), self.span("aten::_to_copy"), self.span("aten::copy_"):
            self._readback(nbytes)
        return self.now

    def nonzero(self) -> float:
        """``torch.nonzero`` / ``x[mask]``: a counting kernel, whose result the host reads (copy + sync) to size
        the output, then the kernel that writes the indices."""
        with self.span("aten::nonzero"):
            self.kernel("void at_cuda_detail::cub::DeviceReduceSingleTileKernel<...>", gpu_us=3.0)
            self._readback(8)
            self.kernel("void at_cuda_detail::cub::DeviceSelectSweepKernel<...>", gpu_us=3.0)
        return self.now

    def synchronize(self) -> float:
        """``torch.cuda.synchronize()``: ``cudaDeviceSynchronize``, which returns when every stream is done."""
        done = max((end for (dev, _), end in self._free.items() if dev == self.device), default=self.now)
        end = max(done + 2.0, self.now + 3.0)
        self.runtime("cudaDeviceSynchronize", self.now, end - self.now)
        self.now = end + _PYTHON_US
        return self.now

    def to_device(self, nbytes: int, *, pinned: bool = False, stream: int = 7) -> float:
        """``batch.to("cuda")`` of a host tensor. From pageable memory the driver stages the copy and the host call
        returns when it is done; from pinned memory (``non_blocking=True``) the host goes on at once."""
        with self.span("aten::to"), self.span("aten::_to_copy"), self.span("aten::copy_"):
            source = "Pinned" if pinned else "Pageable"
            rate = PINNED_GBPS if pinned else PAGEABLE_GBPS
            corr = self._next_corr()
            end = self._queue(f"Memcpy HtoD ({source} -> Device)", corr, self.now + LAUNCH_DELAY_US,
                              nbytes / (rate * 1e3), kind="gpu_memcpy", stream=stream, bytes=nbytes)
            call_end = self.now + LAUNCH_CALL_US if pinned else end + 2.0
            self.runtime("cudaMemcpyAsync", self.now, call_end - self.now, corr=corr)
            self.now = call_end
        return self.now

    def allocate(self, nbytes: int, *, device: int | None = None) -> None:
        """A ``[memory]`` sample of the device allocator at ``now`` (profile_memory=True); negative ``nbytes`` frees."""
        device = self.device if device is None else device
        self.memory(self.now, nbytes, self._allocated.get(device, 0) + nbytes, device=device)

    # --- event level: one event, exactly where it is told ---------------------------------------------------------

    def op(self, name: str, ts: float, dur: float, *, tid: Any = None, cat: str | None = None, **args: Any) -> Event:
        """A CPU op or annotation (``cpu_op``; ``Operator`` in legacy traces)."""
        cat = cat or ("Operator" if self.legacy else "cpu_op")
        event = {"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": self.tid if tid is None else tid,
                 "ts": ts, "dur": dur, "args": args}
        self.events.append(event)
        return event

    def step(self, number: int, ts: float, dur: float) -> Event:
        """A ``ProfilerStep#N`` span (a ``user_annotation``)."""
        return self.op(f"ProfilerStep#{number}", ts, dur, cat=None if self.legacy else "user_annotation")

    def runtime(self, name: str, ts: float, dur: float, *, tid: Any = None, cat: str | None = None,
                corr: int | None = None) -> int:
        """A CUDA runtime call (``cu*`` names, as Triton's ``cuLaunchKernel``, are driver calls); returns its
        correlation id, a fresh one unless ``corr`` is given."""
        if cat is None:
            driver = name.startswith("cu") and not name.startswith("cuda")
            cat = "Runtime" if self.legacy else "cuda_driver" if driver else "cuda_runtime"
        corr = self._next_corr() if corr is None else corr
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": self.tid if tid is None
                            else tid, "ts": ts, "dur": dur, "args": {"correlation": corr}})
        return corr

    def gpu(self, name: str, ts: float, dur: float, *, corr: int | None, kind: str = "kernel",
            device: int | None = None, stream: int = 7, **args: Any) -> Event:
        """GPU work (``kind``: ``kernel``, ``gpu_memcpy``, ``gpu_memset``) joined to its launch by ``corr``."""
        cats = {"kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"} if self.legacy else {}
        device = self.device if device is None else device
        event = {"ph": "X", "cat": cats.get(kind, kind), "name": name, "pid": device, "tid": stream, "ts": ts,
                 "dur": dur, "args": {"device": device, "stream": stream, **args}}
        if corr is not None:
            event["args"]["correlation"] = corr
        self.events.append(event)
        self.events_gpu_end = ts + dur
        key = (device, stream)
        self._free[key] = max(self._free.get(key, ts + dur), ts + dur)
        return event

    def launch(self, name: str, launch_ts: float, gpu_ts: float, gpu_dur: float, *, kind: str = "kernel",
               api: str = "cudaLaunchKernel", api_cat: str | None = None, tid: Any = None, device: int | None = None,
               **args: Any) -> Event:
        """A 5 µs launch call at ``launch_ts`` and the GPU work it launched at ``gpu_ts``."""
        corr = self.runtime(api, launch_ts, 5.0, tid=tid, cat=api_cat)
        return self.gpu(name, gpu_ts, gpu_dur, corr=corr, kind=kind, device=device, **args)

    def memory(self, ts: float, nbytes: int, total: int, *, device: int | None = None) -> None:
        """A ``[memory]`` instant of the device allocator: ``nbytes`` allocated (< 0: freed), ``total`` after it."""
        device = self.device if device is None else device
        self._allocated[device] = total
        self.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": self.pid,
                            "tid": self.tid, "ts": ts, "args": {"Device Type": 1, "Device Id": device, "Bytes": nbytes,
                                                                "Total Allocated": total}})

    def frame(self, name: str, ts: float, dur: float, *, tid: Any = None) -> None:
        """A ``python_function`` frame (with_stack=True), e.g. ``train.py(42): step``."""
        self.events.append({"ph": "X", "cat": "python_function", "name": name, "pid": self.pid,
                            "tid": self.tid if tid is None else tid, "ts": ts, "dur": dur, "args": {}})

    # --- output ---------------------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The trace as Kineto writes it: the top-level keys, then ``traceEvents``."""
        events = self.events
        if self.clock_offset_us:
            events = [{**e, "ts": e["ts"] + self.clock_offset_us} for e in events]
        return {**self.meta, "traceEvents": events}

    def to_bytes(self) -> bytes:
        """The JSON file's bytes (cut short after ``truncate``)."""
        data = json.dumps(self.to_dict()).encode()
        return data if self.cut is None else data[: int(len(data) * self.cut)]

    def write(self, path: str | Path, *, gz: bool | None = None) -> Path:
        """Write the trace to ``path``, gzip'd when ``gz`` (default: when the name ends in ``.gz``)."""
        path = Path(path)
        data = self.to_bytes()
        path.write_bytes(gzip.compress(data) if (path.name.endswith(".gz") if gz is None else gz) else data)
        return path

    # --- internals ------------------------------------------------------------------------------------------------

    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def _cat(self, name: str) -> str:
        # Kineto writes record_function ranges (ProfilerStep#, Optimizer.step#, enumerate(DataLoader)#) as
        # user_annotation and ATen ops as cpu_op; the legacy format has one category for both.
        return "Operator" if self.legacy else "user_annotation" if "#" in name else "cpu_op"

    def _queue(self, name: str, corr: int, ready: float, dur: float, *, kind: str = "kernel", stream: int = 7,
               **args: Any) -> float:
        """Put work on a stream: it starts at ``ready`` or when the stream is free; returns its end."""
        start = max(ready, self._free.get((self.device, stream), ready))
        self.gpu(name, start, dur, corr=corr, kind=kind, stream=stream, **args)
        return start + dur

    def _readback(self, nbytes: int) -> None:
        """A device-to-host copy behind the stream's work and the ``cudaStreamSynchronize`` that waits for it."""
        corr = self.runtime("cudaMemcpyAsync", self.now, LAUNCH_CALL_US)
        end = self._queue("Memcpy DtoH (Device -> Pageable)", corr, self.now + LAUNCH_DELAY_US,
                          max(2.0, nbytes / (DTOH_GBPS * 1e3)), kind="gpu_memcpy", bytes=nbytes)
        self.now += LAUNCH_CALL_US + _PYTHON_US
        sync_end = max(end + 3.0, self.now + 2.0)
        self.runtime("cudaStreamSynchronize", self.now, sync_end - self.now)
        self.now = sync_end + _PYTHON_US


def analyze_job(ranks: list[TraceBuilder], *, config: Config | None = None,
                thresholds: Mapping[str, float] | None = None) -> list[Report]:
    """The Reports of ``tracelint.trace.analyze_paths`` on the ranks of one job, written as one folder: one per
    rank, then the job summary (its findings are the job rules')."""
    from tracelint.trace import analyze_paths

    config = _with_thresholds(config or Config(), thresholds)
    with tempfile.TemporaryDirectory(prefix="tracelint-") as tmp:
        for trace in ranks:
            rank = (trace.meta.get("distributedInfo") or {}).get("rank")
            trace.write(Path(tmp) / f"rank{rank}.pt.trace.json")
        results = list(analyze_paths([tmp], config=config))
    reports = [r for r in results if isinstance(r, Report)]
    assert len(reports) == len(results), f"unreadable synthetic traces: {results}"
    return reports


def pipeline_job(stage_us: list[float], microbatches: int, *, steps: int = 3, transfer_us: float = 20.0,
                 nelems: int = 1 << 24) -> list[TraceBuilder]:
    """The ranks of a GPipe pipeline, one stage each: stage ``s`` computes ``stage_us[s]`` per microbatch (a third
    forward, the rest backward); every microbatch's activation goes down the chain and its gradient back up, as a
    send and a recv that wait for each other and then take ``transfer_us``. Each rank's host launches a step's work
    in a short CPU step and runs ahead; each device starts a step as soon as it is done with the last one, as in a
    GPU-bound torch.distributed.pipelining run. Simulated exactly: stage ``s`` computes ``microbatches *
    stage_us[s]`` per step."""
    p = len(stage_us)
    ranks = [TraceBuilder().device_properties().distributed(r, p) for r in range(p)]
    for trace in ranks:
        trace.meta["distributedInfo"]["pg_config"] = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": p,
                                                       "ranks": list(range(p))}]
    gemm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas"
    launches = 2 * microbatches * 3  # a step's launches per rank, at most: compute, send and recv per pass
    free = [5.0 * (launches + 2)] * p  # when each device is done with what it was given: first, the first launches
    start = 0.0
    for number in range(1, steps + 1):
        work = _gpipe_step(stage_us, microbatches, free, transfer_us)
        end = start + 5.0 * (max(len(events) for events in work) + 1)
        for trace, events in zip(ranks, work, strict=True):
            at = start
            for kind, gpu_start, gpu_end, peer in events:
                at += 5.0
                if kind == "kernel":
                    trace.launch(gemm, at, gpu_start, gpu_end - gpu_start)
                else:
                    trace.p2p(kind, peer, at, gpu_start, gpu_end - gpu_start, nelems=nelems)
            trace.step(number, start, end - start)
        start = end + 5.0
    return ranks


def _gpipe_step(stage_us: list[float], microbatches: int, free: list[float], transfer_us: float) -> list[list[tuple]]:
    """One GPipe step on the devices, each starting when it is ``free`` (updated): per stage its (kind, gpu start,
    gpu end, peer) in order."""
    p = len(stage_us)
    work: list[list[tuple]] = [[] for _ in range(p)]

    def compute(s: int, us: float) -> None:
        work[s].append(("kernel", free[s], free[s] + us, None))
        free[s] += us

    def exchange(src: int, dst: int) -> None:
        begin = max(free[src], free[dst])  # both sides there: the later start
        work[src].append(("send", free[src], begin + transfer_us, dst))
        work[dst].append(("recv", free[dst], begin + transfer_us, src))
        free[src] = free[dst] = begin + transfer_us

    for _ in range(microbatches):
        for s in range(p):
            compute(s, stage_us[s] / 3)
            if s < p - 1:
                exchange(s, s + 1)
    for _ in range(microbatches):
        for s in reversed(range(p)):
            compute(s, stage_us[s] * 2 / 3)
            if s > 0:
                exchange(s, s - 1)
    return work


def _with_thresholds(config: Config, thresholds: Mapping[str, float] | None) -> Config:
    if not thresholds:
        return config
    return replace(config, trace_thresholds=(*config.trace_thresholds,
                                             *((key, float(value)) for key, value in thresholds.items())))


def analyze(trace: TraceBuilder, *, config: Config | None = None,
            thresholds: Mapping[str, float] | None = None) -> Report:
    """The Report of ``tracelint.trace.analyze_trace`` on the built trace; ``thresholds`` (``[tool.tracelint.trace]``
    keys such as ``{"min-gpu-busy-pct": 80}``) are added to ``config``.

    The trace is analyzed in memory; a truncated one is written to a temporary file, since detecting the cut is
    the trace reader's job."""
    config = _with_thresholds(config or Config(), thresholds)
    name = "synthetic.pt.trace.json"
    if trace.cut is None:
        return report_from_model(name, build_model([trace.to_dict()["traceEvents"]], lambda: trace.meta),
                                 config=config)
    with tempfile.TemporaryDirectory(prefix="tracelint-") as tmp:
        return analyze_trace(trace.write(Path(tmp) / name), config=config)
