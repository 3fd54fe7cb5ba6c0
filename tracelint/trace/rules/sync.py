"""Host-device synchronizations per step, read from the host timeline (trace twins of TL101, TL102, TL103, TL105,
TL106).

Every blocking runtime call made inside a step (cudaStreamSynchronize, cudaDeviceSynchronize, a blocking cudaMemcpy,
their hip/cu twins: ``model.SYNC_CALLS``) is attributed to the CPU ops enclosing it on its thread:
``aten::nonzero`` / ``masked_select`` → TL106, ``aten::is_nonzero`` (``Tensor.__bool__``: ``if`` / ``while`` /
``assert`` / ``bool()`` / ``max(t1, t2)`` on a tensor, which calls ``aten::item`` underneath) → TL103,
``aten::item`` / ``_local_scalar_dense`` → TL101, a copy op
(``aten::to`` / ``_to_copy`` / ``copy_``) that launched a device-to-host memcpy → TL102, and a bare synchronize
with no aten op around it → TL105. Starting from the sync call is what keeps ``.item()`` on CPU tensors (a
DataLoader in the main process) out: those have no copy and no synchronize underneath. A pageable host-to-device
copy also synchronizes, but that is TL202's finding, not a readback.

Sites are aggregated per source line (with_stack traces) or per op name, and reported when they sync in at least
``sync-min-steps-pct`` percent of the steps (a periodic ``if step % 100 == 0`` log is not reported).

What a sync costs is the GPU's idle time it causes, not how long the host waits: a readback queued behind busy work
keeps the host waiting while the GPU runs, which costs nothing. A site's cost is the length of the idle gaps
(tracelint.trace.device_analysis.Gap) of the launching thread that open while it is blocked in one of the site's calls,
or within 20 µs of its return, and that are charged mostly to the sync (``idle_host_sync``; not a DataLoader wait that
follows it) — the GPU drained its queue and waits for the host's next launch. A finding whose cost is
under ``sync-info-below-step-pct`` [1 %] of the step is ``info``: it is there, and harmless.
"""
from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from tracelint.engine import Config, Finding, Severity, SourceLocation
from tracelint.engine import metrics as M
from tracelint.trace.device_analysis import TraceAnalysis
from tracelint.trace.model import D2H, MEMCPY, SYNC_CALLS, GpuEvent, Op, RuntimeCall
from tracelint.trace.rule import TraceRule
from tracelint.trace.rules._common import finding, in_few_steps, ms, refine_source
from tracelint.trace.verdict import Verdict

_NONZERO = ("aten::nonzero", "aten::masked_select", "aten::nonzero_static")
# Tensor.__bool__ (if / while / assert / bool() on a tensor) calls aten::is_nonzero over aten::item. float(t), int(t),
# math.isnan(t) and a tensor used as an index call aten::item directly, as .item() does (torch 2.13, CPU profiler):
# only .item() has a python_function of its own around it (``<built-in method item of Tensor object at 0x...>``), a
# frame the model does not keep, so those stay TL101.
_TRUTH = "aten::is_nonzero"
_ITEM = ("aten::item", "aten::_local_scalar_dense")
_COPY = ("aten::to", "aten::_to_copy", "aten::copy_", "aten::cpu", "aten::tolist", "aten::numpy")
# What torch.cuda.synchronize() and Stream.synchronize() call. Event synchronizations are left out: they are how
# timing code reads events (DistributedDataParallel's logger calls cudaEventSynchronize every few steps).
_EXPLICIT = frozenset({"cudaDeviceSynchronize", "cudaStreamSynchronize", "cuCtxSynchronize", "cuStreamSynchronize",
                       "hipDeviceSynchronize", "hipStreamSynchronize"})
_SYNC_TOLERANCE_US = 20.0  # a gap opening this close to a sync call is the sync's
_MAX_SCAN = 4000  # how far back to look for enclosing ops (they nest, so the innermost are close)


@dataclass(slots=True)
class SyncSite:
    """The synchronizations of one kind at one place: a source line, or an op name when the trace has no stack."""

    code: str
    event: str
    source: SourceLocation | None
    first_call: RuntimeCall
    first_op: Op | None
    first_step: int | None
    count: int = 0
    stall_us: float = 0.0
    idle_us: float = 0.0  # GPU idle time the site's calls cause (module docstring)
    steps: set = field(default_factory=set)


def enclosing_ops(analysis: TraceAnalysis, tid: object, ts: float) -> list[Op]:
    """The CPU ops on ``tid`` that contain host time ``ts``, innermost first."""
    starts, ops = analysis.model.ops_on(tid)
    out = []
    for j in range(bisect_right(starts, ts) - 1, max(-1, bisect_right(starts, ts) - 1 - _MAX_SCAN), -1):
        if ops[j].end >= ts:
            out.append(ops[j])
    out.sort(key=lambda o: (-(o.start), o.end))  # innermost = latest start
    return out


def _copies_by_tid(analysis: TraceAnalysis) -> dict[object, tuple[list[float], list[GpuEvent]]]:
    """Memcpys of any device, indexed by the thread and start time of the host call that launched them."""
    by_tid: dict[object, list[GpuEvent]] = {}
    for g in analysis.model.gpu:
        if g.kind == MEMCPY and g.launch is not None:
            by_tid.setdefault(g.launch.tid, []).append(g)
    out = {}
    for tid, items in by_tid.items():
        items.sort(key=lambda g: g.launch.start)
        out[tid] = ([g.launch.start for g in items], items)
    return out


def _classify(chain: list[Op], call: RuntimeCall, copies) -> tuple[str, str, Op | None] | None:
    """(code, event name, op) of one sync call given its enclosing ops, or None when it is not a readback."""
    names = [o.name for o in chain]
    for op in chain:
        if op.name in _NONZERO:
            return "TL106", op.name, op
    for op in chain:
        if op.name == _TRUTH:
            return "TL103", op.name, op
    for op in chain:
        if op.name in _ITEM:
            # report the user-facing op (aten::item) when it is there
            outer = next((o for o in chain if o.name == "aten::item"), op)
            return "TL101", outer.name, outer
    copy_ops = [o for o in chain if o.name in _COPY]
    if copy_ops:
        outer = copy_ops[-1]
        starts, items = copies
        lo = bisect_right(starts, outer.start - 1e-3)
        hi = bisect_right(starts, call.end)
        if any(g.direction == D2H for g in items[lo:hi]):
            return "TL102", outer.name, outer
        return None
    if call.name in _EXPLICIT and not any(n.startswith("aten::") for n in names):
        return "TL105", call.name, None
    return None


def sync_sites(analysis: TraceAnalysis) -> list[SyncSite]:
    """Every readback/synchronize site of the trace's steps (computed once per analysis, shared by the 5 rules)."""
    return analysis.memo("sync_sites", _sync_sites)


def _sync_sites(analysis: TraceAnalysis) -> list[SyncSite]:
    model = analysis.model
    copies = _copies_by_tid(analysis)
    sites: dict[tuple, SyncSite] = {}
    gaps_by_tid: dict[object, tuple[list[float], list]] = {}
    for gap in analysis.gaps:  # in start order
        starts, items = gaps_by_tid.setdefault(gap.tid, ([], []))
        starts.append(gap.start)
        items.append(gap)
    for call in model.runtime:
        if call.name not in SYNC_CALLS:
            continue
        step = model.step_at(call.start)
        if step is None:
            continue
        chain = enclosing_ops(analysis, call.tid, call.start)
        kind = _classify(chain, call, copies.get(call.tid, ([], [])))
        if kind is None:
            continue
        code, event, op = kind
        source = analysis.source_at(call.tid, call.start, op)
        key = (code, source.path, source.line) if source else (code, event)
        site = sites.get(key)
        if site is None:
            site = sites[key] = SyncSite(code, event, source, call, op, step)
        site.count += 1
        site.stall_us += call.end - call.start
        site.steps.add(step)
        starts, items = gaps_by_tid.get(call.tid, ([], []))
        lo = bisect_left(starts, call.start - _SYNC_TOLERANCE_US)
        hi = bisect_right(starts, call.end + _SYNC_TOLERANCE_US)
        site.idle_us += sum(g.end - g.start for g in items[lo:hi] if g.cause == "host_sync")
    return sorted(sites.values(), key=lambda s: (s.code, -s.count))


class _SyncRule(TraceRule):
    code = ""
    what = ""
    pattern: re.Pattern[str] | None = None  # how the op is spelled in user code (to find the statement)
    pattern_is_loose = False  # the pattern also matches statements that do not sync: move to a line it alone matches

    def check(self, analysis: TraceAnalysis, verdict: Verdict, config: Config) -> Iterable[Finding]:
        n_steps = len(analysis.model.steps) or 1
        min_steps_pct = config.threshold("sync-min-steps-pct")
        step_us = M.STEP_CPU_US_MEAN.of(analysis.metrics)
        for site in sync_sites(analysis):
            if site.code != self.code:
                continue
            if in_few_steps(analysis, site.steps, min_steps_pct):
                continue
            if not analysis.has_steps and site.count < 2:  # one window: only a repeated sync is a pattern
                continue
            per_step = site.count / n_steps
            each = site.stall_us / site.count
            source = refine_source(site.source, analysis.path, self.pattern, only_one=self.pattern_is_loose)
            where = f" at {_short(source)}" if source else ""
            if analysis.has_steps:
                count = (f"{per_step:.3g} time{'s' if per_step != 1 else ''} per step "
                         f"({len(site.steps)} of {n_steps} steps)")
            else:
                count = f"{site.count} times in the trace (no ProfilerStep: whole trace)"
            idle_each = site.idle_us / site.count
            cost = 100.0 * site.idle_us / n_steps / step_us if step_us else None
            share = ""
            if cost is not None:
                share = f", {cost:.1f} % of the step" if cost >= 0.1 else ", under 0.1 % of the step"
            message = (f"{self.what} makes the host wait for the GPU {count}{where}; "
                       f"the host stalls {ms(each)} each and the GPU idles {ms(idle_each)} each{share}")
            call = site.first_call
            loc = analysis.location(step=site.first_step, start=call.start, end=call.end,
                                    event=site.event, tid=call.tid, op=site.first_op)
            loc = replace(loc, source=source)
            result = finding(self, message, loc, syncs_per_step=round(per_step, 3), stall_us_each=round(each, 1),
                             gpu_idle_us_each=round(idle_each, 1),
                             cost_pct_of_step=None if cost is None else round(cost, 2),
                             steps_with_sync=len(site.steps), steps=n_steps)
            if cost is not None and cost < config.threshold("sync-info-below-step-pct"):
                result = replace(result, severity=Severity.INFO)  # there, and harmless: never fails CI
            yield result


def _short(source: SourceLocation) -> str:
    return f"{source.path.replace(chr(92), '/').rsplit('/', 1)[-1]}:{source.line}"


class ItemInLoop(_SyncRule):
    code = "TL101"
    what = "`.item()` (aten::item: a device-to-host copy and a stream synchronize)"
    pattern = re.compile(r"\.item\(\)")


class DeviceToHostCopyInLoop(_SyncRule):
    code = "TL102"
    what = "A device-to-host copy (`.cpu()` / `.tolist()` / `.to('cpu')`)"
    pattern = re.compile(r"\.(?:cpu|tolist|numpy)\(|\.to\(\s*['\"]cpu")


class TensorToPythonScalarInLoop(_SyncRule):
    code = "TL103"
    what = "A tensor's truth value (`if` / `while` / `assert` / `bool()` on a tensor: aten::is_nonzero, an `.item()`)"
    # A test with a comparison, a torch call or .any()/.all(), and none of what marks a host value: None and type
    # checks, membership, periodic guards (%), shapes and sizes, strings, config attributes, ranks and devices,
    # counters (step, epoch, i), values already converted (.item(), float(), int()). Even so it matches tests of
    # Python numbers (`if acc > best:`), hence pattern_is_loose: a line the pattern matches alone in its function.
    pattern = re.compile(
        r"^\s*(?:(?:el)?if|while|assert)\b"
        r"(?!.*(?:\bis\b|\bin\b|%|['\"]|__name__|\b(?:isinstance|hasattr|getattr|callable|len|float|int|str)\("
        r"|\bis_\w+\(|\.(?:shape|ndim|size\(|dim\(|numel\(|item\()|\b(?:args|cfg|config|hparams|opts?)\."
        r"|rank|world_size|device|dtype|\b(?:\w*(?:step|epoch|iter|idx|count)\w*|[ijkn])\s*(?:[<>]=?|[=!]=)))"
        r"(?=.*(?:[<>]=?|[=!]=|\.(?:any|all)\(|\btorch\.))"
        r"|\bbool\(")
    pattern_is_loose = True


class CudaSynchronizeInLoop(_SyncRule):
    code = "TL105"
    what = "An explicit synchronize (`torch.cuda.synchronize()`)"
    pattern = re.compile(r"synchronize\(")


class NonzeroInLoop(_SyncRule):
    code = "TL106"
    what = "`nonzero` (boolean-mask indexing, masked_select or 1-argument torch.where)"
    pattern = re.compile(r"\.nonzero\(|masked_select\(|torch\.where\([^,()]*\)|\[[^\]]*mask[^\]]*\]")
