"""What fixing a trace finding buys (issue #38): an ``Estimate`` — the step time saved per step, of the step, and its
basis in words — from the finding's own measures and the trace's step, per rule family.

The step ``S`` is the step timed without the profiler when the trace has it (tracelint.profile, ``tracelint run``),
else the profiled step (``step_ms``: the profiler may have inflated a host-bound one; the basis says which). ``B`` is
the GPU's busy time per step (the union of its kernels, copies and memsets). Two kinds of fix:

- **Host-side** (a sync, an input wait, launch overhead, anomaly detection, blocking launches, compilation, a graph
  break): the fix removes host time ``T`` and the host runs ahead, but the GPU still has its work to do: the step
  after is ``max(S - T, B)``. What ``T`` is, per rule: the syncs' (TL101-TL106) the GPU idle time each sync leaves
  while the host catches up (``syncs_per_step × gpu_idle_us_each``; the host's own stall overlaps GPU work it was
  waiting for); TL201 the main thread's wait in ``DataLoader.__next__``; TL305 the host time of the allocator's
  ``cudaMalloc``/``cudaFree`` calls in the steps; TL204 the host's share of the step spent
  building tensors; TL501 the GPU idle time on launch overhead; TL605 (DataParallel) the step less each GPU's own
  work (one process per GPU drives its GPU alone); TL606 the exposed time of the reductions no_sync leaves out;
  TL503, TL504, TL701 and TL702 their own ``estimated_saving_us_per_step`` (each rule's doc gives its model).
- **Copies** (TL202, pageable): a synchronous copy from pageable memory holds the host and sits on the GPU's
  timeline; pinned and ``non_blocking`` it overlaps both: the step after is ``S - C``, ``C`` the pageable copies'
  time (no GPU floor: the copies' own time is part of ``B``).
- **GPU-side** (fp32 matmuls off the Tensor Cores, NCHW convolutions, unfused memory-bound kernels, zero-filled
  gradients, per-tensor optimizer kernels, unfused attention, off-tile GEMMs): the fix removes GPU time ``G`` from a
  GPU-bound step: the step after is ``S - G``; in a step the GPU does not set, no estimate (fewer GPU microseconds
  buy nothing there). ``G``, per rule: TL401 the fp32 GEMMs' time less what the same GEMMs take at the device's
  TF32 peak, at the same share of it (``t × (1 - fp32 peak / TF32 peak)``); TL405 and TL505 their
  ``estimated_saving_us_per_step``; TL301, TL303, TL402, TL404 the kernel time they measure (an upper bound).

Rules without a fix (notes, the profiler's own cost, memory headroom) get no estimate; nor does a finding whose
measure is missing. bench/gain_calibration.py checks every estimate against the fixes measured on the project's
GPU fixtures, and the rules' docs carry the table.
"""
from __future__ import annotations

from dataclasses import replace

from tracelint.engine import Estimate, Finding
from tracelint.engine import metrics as M
from tracelint.trace.device_analysis import TraceAnalysis
from tracelint.trace.flops import peak
from tracelint.trace.recording import gpu_busy_ms_per_step, step_basis_ms

HOST, GPU, COPY = "host", "gpu", "copy"
_GPU_BOUND_PCT = 80.0  # B over S at which the GPU sets the step (the verdict's gpu-bound-busy-pct default)


def _us(details: dict, *keys: str) -> float | None:
    values = [details.get(k) for k in keys]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return None
    out = 1.0
    for v in values:
        out *= float(v)
    return out


def _syncs(d: dict, S: float, B: float) -> tuple[float, str] | None:
    saved = _us(d, "syncs_per_step", "gpu_idle_us_each")
    return None if saved is None else (saved, "the GPU idle time each sync leaves while the host catches up, "
                                              f"{d['syncs_per_step']:g} per step")


def _from_detail(key: str, words: str):
    def model(d: dict, S: float, B: float) -> tuple[float, str] | None:
        saved = _us(d, key)
        return None if saved is None else (saved, words)
    return model


def _launch(d: dict, S: float, B: float) -> tuple[float, str] | None:
    share = _us(d, "gpu_idle_pct", "launch_idle_pct")
    return None if share is None else (share / 1e4 * S * 1000.0, "the GPU idle time on launch overhead (CUDA graphs "
                                                                 "or fewer, larger kernels remove it)")


def _host_share(d: dict, S: float, B: float) -> tuple[float, str] | None:
    share = _us(d, "host_pct_of_step")
    return None if share is None else (share / 100.0 * S * 1000.0, "the host time spent building the tensors")


def _pageable(d: dict, S: float, B: float) -> tuple[float, str] | None:
    share = _us(d, "pageable_pct_of_window")
    return None if share is None else (share / 100.0 * S * 1000.0, "the pageable copies' time: pinned and "
                                                                   "non_blocking, they overlap compute")


def _data_parallel(d: dict, S: float, B: float) -> tuple[float, str] | None:
    work = _us(d, "gpu_work_us_per_step")
    return None if work is None else (S * 1000.0 - work, "with one process per GPU (DistributedDataParallel) the "
                                                        "step is each GPU's own work, not one process driving them "
                                                        "all")


# code -> (kind, model(details, S ms, B ms) -> (saved µs per step, words) | None)
MODELS = {
    **{code: (HOST, _syncs) for code in ("TL101", "TL102", "TL103", "TL105", "TL106")},
    "TL201": (HOST, _from_detail("data_wait_us_per_step", "the main thread's wait for batches in "
                                                          "DataLoader.__next__")),
    "TL305": (HOST, _from_detail("churn_host_us_per_step", "the host time of the caching allocator's cudaMalloc and "
                                                           "cudaFree calls in the steps (each free a device "
                                                           "synchronization)")),
    "TL204": (HOST, _host_share),
    "TL501": (HOST, _launch),
    "TL605": (HOST, _data_parallel),
    "TL606": (GPU, _from_detail("redundant_exposed_us_per_step", "the exposed time of the gradient reductions "
                                                                  "no_sync leaves out")),
    **{code: (HOST, _from_detail("estimated_saving_us_per_step", "the rule's own estimate (its doc)"))
       for code in ("TL503", "TL504")},
    # A debug mode slows every op on the host, and the profiler's own overhead in those paths hides part of it: on
    # the project's fixtures the fixes saved 1.7x (anomaly detection) and 2.6x (blocking launches) what the traces
    # show (docs/estimates.md)
    **{code: (HOST, _from_detail("estimated_saving_us_per_step", "the rule's own estimate (its doc), a lower bound: "
                                                                  "the debug mode's cost the trace shows"))
       for code in ("TL701", "TL702")},
    "TL202": (COPY, _pageable),
    **{code: (GPU, _from_detail("estimated_saving_us_per_step", "the rule's own estimate (its doc)"))
       for code in ("TL405", "TL505")},
    "TL301": (GPU, _from_detail("fill_gpu_us_per_step", "the fill kernels' time")),
    "TL303": (GPU, _from_detail("per_tensor_gpu_us_per_step", "the per-tensor optimizer kernels' time, an upper "
                                                              "bound")),
    "TL402": (GPU, _from_detail("softmax_us_per_step", "the unfused attention's softmax time, an upper bound")),
    "TL404": (GPU, _from_detail("off_tile_us_per_step", "the off-tile GEMMs' time, an upper bound")),
}


def _tf32(metrics: dict):
    def model(d: dict, S: float, B: float) -> tuple[float, str] | None:
        t = _us(d, "fp32_off_tc_us_per_step")
        device = M.DEVICE_NAME.of(metrics)
        fp32 = peak(device if isinstance(device, str) else None, "fp32")
        tf32 = peak(device if isinstance(device, str) else None, "tf32")
        if t is None or fp32 is None or tf32 is None:
            return None
        ratio = fp32[0] / tf32[0]
        return t * (1.0 - ratio), (f"the fp32 GEMMs' time less what they take at the TF32 peak ({fp32[0]:g} → "
                                   f"{tf32[0]:g} TFLOP/s on this device, at the same share of it)")
    return model


def estimate_of(code: str, details: dict, metrics: dict) -> Estimate | None:
    """The Estimate of a trace finding of rule ``code`` with ``details``, in a trace with ``metrics`` (its
    summary's: the JSON report's ``traces[].metrics``); None without a model or a measure."""
    kind, model = (GPU, _tf32(metrics)) if code == "TL401" else MODELS.get(code, (None, None))
    if model is None:
        return None
    S, unprofiled = step_basis_ms(metrics)
    S, B = S or 0.0, gpu_busy_ms_per_step(metrics) or 0.0
    if S <= 0:
        return None
    found = model(details, S, B)
    if found is None:
        return None
    saved_us, words = found
    saved = saved_us / 1000.0
    if kind == HOST:
        after = max(S - saved, min(B, S))
        floor = "; the GPU's own work per step is the floor" if S - saved < B else ""
    elif kind == COPY:  # the copy leaves the critical path of host and GPU alike (its time is in B: no floor)
        after, floor = max(S - saved, 0.0), ""
    else:
        if 100.0 * B / S < _GPU_BOUND_PCT:
            return None  # the GPU does not set this step: fewer GPU microseconds buy nothing
        after, floor = max(S - saved, 0.0), ""
    step = "unprofiled step" if unprofiled else "profiled step (no unprofiled record)"
    return Estimate(S - after, S, f"{words}, from the {step}{floor}")


def with_estimate(finding: Finding, analysis: TraceAnalysis) -> Finding:
    """``finding`` of ``analysis`` with its Estimate (module docstring), where there is one."""
    found = estimate_of(finding.code, dict(finding.details), analysis.metrics)
    return finding if found is None else replace(finding, estimate=found)
