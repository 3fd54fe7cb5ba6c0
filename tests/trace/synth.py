"""A small generator of synthetic Kineto traces for edge cases (real traces cover the normal ones)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path


class Synth:
    """Builds a trace event by event: CPU ops, launches joined to GPU work by correlation, steps, memory."""

    def __init__(self, *, pid: int = 100, tid: int = 100, device: int = 0, legacy: bool = False):
        self.events: list[dict] = []
        self.meta: dict = {"schemaVersion": 1}
        self.pid, self.tid, self.device, self.legacy = pid, tid, device, legacy
        self._corr = 1000

    def op(self, name: str, ts: float, dur: float, *, tid=None, cat: str | None = None, **args) -> dict:
        cat = cat or ("Operator" if self.legacy else "cpu_op")
        event = {"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": self.tid if tid is None else tid,
                 "ts": ts, "dur": dur, "args": args}
        self.events.append(event)
        return event

    def step(self, number: int, ts: float, dur: float) -> dict:
        return self.op(f"ProfilerStep#{number}", ts, dur, cat=None if self.legacy else "user_annotation")

    def runtime(self, name: str, ts: float, dur: float, *, tid=None, cat: str | None = None) -> int:
        self._corr += 1
        self.events.append({"ph": "X", "cat": cat or ("Runtime" if self.legacy else "cuda_runtime"), "name": name,
                            "pid": self.pid, "tid": self.tid if tid is None else tid, "ts": ts, "dur": dur,
                            "args": {"correlation": self._corr}})
        return self._corr

    def gpu(self, name: str, ts: float, dur: float, *, corr: int | None, kind: str = "kernel", device=None,
            stream: int = 7, **args) -> dict:
        cats = {"kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"} if self.legacy else {}
        device = self.device if device is None else device
        event = {"ph": "X", "cat": cats.get(kind, kind), "name": name, "pid": device, "tid": stream, "ts": ts,
                 "dur": dur, "args": {"device": device, "stream": stream, **args}}
        if corr is not None:
            event["args"]["correlation"] = corr
        self.events.append(event)
        return event

    def launch(self, name: str, launch_ts: float, gpu_ts: float, gpu_dur: float, *, kind: str = "kernel",
               api: str = "cudaLaunchKernel", api_cat: str | None = None, tid=None, device=None, **args) -> dict:
        corr = self.runtime(api, launch_ts, 5.0, tid=tid, cat=api_cat)
        return self.gpu(name, gpu_ts, gpu_dur, corr=corr, kind=kind, device=device, **args)

    def memory(self, ts: float, nbytes: int, total: int, *, device=None) -> None:
        self.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": self.pid,
                            "tid": self.tid, "ts": ts, "args": {"Device Type": 1, "Device Id": self.device
                                                                if device is None else device, "Bytes": nbytes,
                                                                "Total Allocated": total}})

    def frame(self, name: str, ts: float, dur: float, *, tid=None) -> None:
        self.events.append({"ph": "X", "cat": "python_function", "name": name, "pid": self.pid,
                            "tid": self.tid if tid is None else tid, "ts": ts, "dur": dur, "args": {}})

    def write(self, path: Path, *, gz: bool = True) -> Path:
        data = json.dumps({**self.meta, "traceEvents": self.events}).encode()
        if gz:
            path.write_bytes(gzip.compress(data))
        else:
            path.write_bytes(data)
        return path
