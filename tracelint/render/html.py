"""The HTML report (``--format html -o report.html``): one self-contained file with interactive charts.

Top to bottom: the verdict line and its evidence; per trace (and rank) its headline metrics, a timeline strip of the
GPU window (busy vs idle by cause, zoomable), the idle causes, the step breakdown, GPU time by kernel class and the
top kernels, the roofline of the GEMMs, convolutions and attention with their top op shapes (the summary's roofline
record, tracelint.trace.roofline), host-to-device copies (pageable vs pinned) and device memory over the trace
(allocated and reserved, the steps' boundaries and the peak; from the timeline record, tracelint.trace.timeline); for
a job the rank table, its stages and groups, a chart of step time and communication wait per rank and a pipeline's
schedule of one step per stage; for ``tracelint diff`` the step time and kernel time per class before and after, and
the kernel delta table; every finding with its message, its source lines when the file is at hand, and its rule's
documentation. A ``tracelint run`` report opens with what ran, and each finding's card also shows the trace's
evidence of it (or that the profiled steps did not show it) and what ``--verify`` measured.

Charts are drawn by Apache ECharts, inlined from ``_assets/echarts.min.js`` (Apache-2.0, its LICENSE and NOTICE
beside it): the file opens from disk with no network, and its Content-Security-Policy forbids any request. The page
lays the charts out from data; no chart is drawn by hand.

Text from traces and source files is data: it is shown with control and bidi characters as escapes
(``escape.terminal``) and HTML-escaped; the charts' data travels as JSON in a ``<script type="application/json">``
block with ``<``, ``>`` and ``&`` escaped, read with ``JSON.parse``: no trace string can end the block or become
markup. Chart labels are tracelint's own words and numbers.
"""
from __future__ import annotations

import html
import math
from collections import Counter
from pathlib import Path

from tracelint.engine import metrics as M
from tracelint.engine.display import format_bytes, format_metric, verification_words
from tracelint.engine.finding import VERIFICATION, Finding, SourceLocation, TraceLocation
from tracelint.engine.location import trace_context
from tracelint.engine.metrics import IDLE_CAUSES, STEP_PARTS
from tracelint.engine.result import RunResult, TraceSummary
from tracelint.engine.sourcelines import source_line
from tracelint.render._common import is_rank_summary, verdict_line
from tracelint.render._diff import (
    diff_delta,
    diff_gate_line,
    diff_measures,
    diff_mfu_cells,
    diff_noise_words,
    diff_pct,
    diff_side,
)
from tracelint.render._page import (
    COLORS,
    MAX_CHART_BUCKETS,
    ZOOM,
    Page,
    area,
    chart_title,
    h,
    no_chart,
)
from tracelint.render._verify import verify_block
from tracelint.render.text import (
    GROUP_COLUMNS,
    RANK_COLUMNS,
    STAGE_COLUMNS,
    View,
    count_line,
    findings_by_trace,
    group_rows,
    headline,
    ordered_metrics,
    rank_rows,
    shown_metrics,
    stage_rows,
)

SNIPPET_CONTEXT = 2  # source lines shown above and below a finding's line
SNIPPETS_SHOWN = 200  # findings beyond this many are listed without their source lines

_CAUSE_WORDS = {
    "data_wait": "DataLoader wait", "host_sync": "host sync", "allocator": "allocator frees",
    "autotune": "algorithm search", "launch_overhead": "launch overhead", "other": "host outside ops",
    "short_gap": "short gaps",
}
_VERDICT_CLASS = {"input-bound": "v-input", "cpu-bound": "v-cpu", "gpu-bound": "v-gpu", "comm-bound": "v-comm",
                  "pipeline-bound": "v-comm"}


def render(result: RunResult) -> str:
    page = Page()
    if result.verifications:
        body = "".join(f"<section class='card'><pre>{h(_verify_text(t), keep_lines=True)}</pre></section>"
                       for t in result.verifications)
        return page.document("tracelint verify", body)
    if result.diffs is not None:
        body = "".join(_diff_section(page, d) for d in result.diffs) or "<p>Nothing to compare.</p>"
        return page.document("tracelint diff", body + _errors(result) + _rule_docs(page))
    return page.document("tracelint report", _report(page, result))


def notebook_frame(summaries: list[TraceSummary], findings: list[Finding]) -> str:
    """A Report's HTML for Jupyter: the whole page in an iframe, so that its script, styles and element ids stay
    apart from the notebook's and from other reports'."""
    page = render(RunResult(findings=list(findings), traces=list(summaries)))
    return (f"<iframe srcdoc=\"{html.escape(page, quote=True)}\" style=\"width:100%;height:900px;border:0\" "
            "sandbox=\"allow-scripts\"></iframe>")


# --- a trace report ----------------------------------------------------------------------------------------------

def _report(page: Page, result: RunResult) -> str:
    parts: list[str] = []
    overall = [s for s in result.traces if is_rank_summary(s, result.traces)]
    ranks = [s for s in result.traces if not any(s is o for o in overall)]
    if result.run is not None:  # `tracelint run`: what ran; its findings in one list, by measured cost, below
        parts.append(f"<section class='card'><pre>{h(chr(10).join(result.run['summary']), keep_lines=True)}</pre>"
                     "</section>")
    if result.traces:
        heads = overall or ranks
        line = headline(heads, _NoPaint()) if len(heads) > 1 else verdict_line(heads[0])
        parts.append(f"<section class='verdict {_VERDICT_CLASS.get(heads[0].verdict, '')}'>"
                     f"<div class='verdict-word'>{h(heads[0].verdict if len(heads) == 1 else 'verdict')}</div>"
                     f"<p>{h(line)}</p></section>")
    placed: set[int] = set()
    with_timeline = [s for s in result.traces if s.timeline]
    page.buckets = max(100, MAX_CHART_BUCKETS // max(1, len(with_timeline)))
    for summary in overall:
        members = [s for s in ranks if Path(summary.path) in Path(s.path).parents]
        mine = [f for f in result.findings if isinstance(f.location, TraceLocation) and f.location.path == summary.path
                and f.location.rank is None and result.run is None]
        placed.update(id(f) for f in mine)
        parts.append(_job_section(page, summary, members, mine))
    blocks = findings_by_trace(result.findings, ranks) if result.run is None else {}
    for i, summary in enumerate(ranks):
        mine = [f for f in blocks.get(i, []) if id(f) not in placed]
        placed.update(id(f) for f in mine)
        parts.append(_trace_section(page, summary, mine, in_job=bool(overall)))
    rest = [f for f in result.findings if id(f) not in placed]
    if rest:
        parts.append("<section class='card'><h2>Findings</h2>" + _findings(page, rest) + "</section>")
    parts.append(_errors(result))
    parts.append(f"<p class='count'>{h(count_line(result, _NoPaint()))}</p>")
    parts.append(_rule_docs(page))
    return "\n".join(parts)


class _NoPaint:
    """text.py's painter, off: the HTML has its own styles."""

    enabled = False

    def __call__(self, text: str, *styles: str) -> str:
        return text


def _title(summary: TraceSummary) -> str:
    return f"{summary.path} (rank {summary.rank})" if summary.rank is not None else summary.path


def _trace_section(page: Page, summary: TraceSummary, findings: list[Finding], *, in_job: bool) -> str:
    out = [f"<section class='card trace'><h2>{h(_title(summary))} <span class='badge "
           f"{_VERDICT_CLASS.get(summary.verdict, '')}'>{h(summary.verdict)}</span></h2>",
           f"<p class='evidence'>{h(verdict_line(summary))}</p>"]
    out.append(_metric_tiles(summary))
    out.extend(f"<p class='note'>note: {h(w)}</p>" for w in summary.warnings)
    timeline = summary.timeline
    if timeline:
        out.append(_timeline_charts(page, summary, timeline))
    if findings:
        out.append(f"<h3>Findings ({len(findings)})</h3>" + _findings(page, findings))
    out.append("</section>")
    if in_job:  # a job's ranks: folded, the job's table says how each did
        return (f"<details class='rank'><summary>{h(_title(summary))}: {h(summary.verdict)}"
                f"{f' · {len(findings)} findings' if findings else ''}</summary>{''.join(out)}</details>")
    return "".join(out)


def _metric_tiles(summary: TraceSummary) -> str:
    shown = ordered_metrics(shown_metrics(summary, View()))
    tiles = "".join(f"<div class='tile'><div class='k'>{h(k)}</div><div class='v'>{h(v)}</div></div>"
                    for k, v in shown)
    rows = "".join(f"<tr><th>{h(k)}</th><td>{h(v)}</td></tr>" for k, v in ordered_metrics(summary.metrics))
    return (f"<div class='tiles'>{tiles}</div>"
            f"<details><summary>all metrics</summary><table class='metrics'>{rows}</table></details>")


def _coarse(values: list[float], k: int) -> list[float]:
    return values if k <= 1 else [sum(values[i:i + k]) for i in range(0, len(values), k)]


def _timeline_charts(page: Page, summary: TraceSummary, t: dict) -> str:
    m = summary.metrics
    n = len(t["busy_us"])
    k = max(1, math.ceil(n / page.buckets))
    width = t["bucket_us"] * k
    x = [round(i * width / 1000, 4) for i in range(math.ceil(n / k))]
    total = [width] * len(x)
    if x:
        total[-1] = t["bucket_us"] * (n - (len(x) - 1) * k) or width

    def share(values: list[float]) -> list:
        # at most 100: the timeline's times are rounded to 0.1 µs, the bucket's width is not ('GPU busy 100.1%')
        return [[xi, min(100.0, round(100 * v / w, 1))] for xi, v, w in zip(x, _coarse(values, k), total,
                                                                            strict=True)]

    series = [area("GPU busy", share(t["busy_us"]), COLORS["busy"])]
    for cause in IDLE_CAUSES:
        if cause in t["idle_us"]:
            series.append(area(f"idle: {_CAUSE_WORDS[cause]}", share(t["idle_us"][cause]), COLORS[cause]))
    bands = [[{"xAxis": s["gpu_start_us"] / 1000}, {"xAxis": s["gpu_end_us"] / 1000}]
             for s in t["steps"][::2] if s["gpu_start_us"] is not None][:300]
    if bands:
        series[0]["markArea"] = {"silent": True, "itemStyle": {"color": "rgba(76,110,245,0.07)"}, "data": bands}
    strip = page.chart({
        "title": chart_title("GPU timeline: busy vs idle by cause",
                              f"{format_metric('gpu_window_us', t['window_us'][1] - t['window_us'][0])} window, "
                              f"{len(x)} buckets; shaded: every other step's GPU span; drag or scroll to zoom"),
        "tooltip": {"trigger": "axis"}, "legend": {"top": 44, "type": "scroll"},
        "grid": {"left": 50, "right": 20, "top": 80, "bottom": 60},
        "xAxis": {"type": "value", "min": 0, "max": "dataMax"},
        "yAxis": {"type": "value", "max": 100},
        "dataZoom": ZOOM,
        "series": series,
    }, unit="pct", x_unit="ms", height=340, label="GPU busy and idle time over the window")

    idle_rows = [(c, M.IDLE_US[c].of(m)) for c in IDLE_CAUSES]
    idle_rows = [(c, v) for c, v in idle_rows if v]
    idle = page.chart({
        "title": chart_title("Where the GPU idle time went",
                              f"{format_metric('gpu_idle_us', M.GPU_IDLE_US.of(m))} idle of "
                              f"{format_metric('gpu_window_us', M.GPU_WINDOW_US.of(m))}"),
        "tooltip": {"trigger": "item"}, "grid": {"left": 130, "right": 60, "top": 60, "bottom": 30},
        "xAxis": {"type": "value"}, "yAxis": {"type": "category", "inverse": True,
                                              "data": [_CAUSE_WORDS[c] for c, _ in idle_rows]},
        "series": [{"type": "bar", "name": "idle", "label": {"show": True, "position": "right"},
                    "data": [{"value": round(v / 1000, 3), "itemStyle": {"color": COLORS[c]}} for c, v in idle_rows]}],
    }, unit="ms", x_unit="ms", label="GPU idle time by cause") if idle_rows else no_chart("No GPU idle time.")

    steps = t["steps"]
    step_names = [str(s["number"]) if s["number"] is not None else "trace" for s in steps]
    step_series = [{"type": "bar", "stack": "host", "name": part, "itemStyle": {"color": COLORS.get(part, "#dee2e6")},
                    "data": [round(s["breakdown_us"][part] / 1000, 3) for s in steps]} for part in STEP_PARTS]
    step_series.append({"type": "line", "name": "GPU span", "symbolSize": 5, "itemStyle": {"color": "#212529"},
                        "data": [None if s["gpu_span_us"] is None else round(s["gpu_span_us"] / 1000, 3)
                                 for s in steps]})
    step = page.chart({
        "title": chart_title("Step breakdown (host time)",
                              "data, forward, backward, optimizer per step; the line: the GPU span of its work"),
        "tooltip": {"trigger": "axis"}, "legend": {"top": 44},
        "grid": {"left": 55, "right": 20, "top": 80, "bottom": 60 if len(steps) > 30 else 35},
        "xAxis": {"type": "category", "name": "step", "data": step_names},
        "yAxis": {"type": "value"},
        **({"dataZoom": ZOOM} if len(steps) > 30 else {}),
        "series": step_series,
    }, unit="ms", height=300, label="Host time per step by part") if steps else no_chart("No steps.")

    out = ["<div class='full'>", strip, "</div><div class='grid2'>", idle, step, "</div>"]
    out.append("<div class='grid2'>" + _kernel_charts(page, summary, t) + "</div>")
    if summary.roofline:
        out.append("<div class='grid2'>" + _roofline(page, summary.roofline) + "</div>")
    out.append("<div class='grid2'>" + _copy_chart(page, summary, t, x, k) + _memory_chart(page, summary, t)
               + "</div>")
    return "".join(out)


def _class_words(group: str) -> str:
    from tracelint.trace.kernels import KERNEL_GROUPS

    return KERNEL_GROUPS.get(group, group)


def _kernel_charts(page: Page, summary: TraceSummary, t: dict) -> str:
    steps = M.STEPS.of(summary.metrics) or 1
    classes = [(g, us) for g, us in t["class_us"].items() if us > 0]
    chart = page.chart({
        "title": chart_title("GPU time per step by kernel class",
                              f"{format_metric('kernel_count', t['kernels'])} kernels; Tensor Core share of matmul: "
                              f"{format_metric('_pct', M.MATMUL_TENSOR_CORE_PCT.of(summary.metrics))}"
                              f"{_family_speeds(summary.roofline)}"),
        "tooltip": {"trigger": "item"}, "grid": {"left": 190, "right": 70, "top": 60, "bottom": 30},
        "xAxis": {"type": "value"},
        "yAxis": {"type": "category", "inverse": True, "data": [_class_words(g) for g, _ in classes]},
        "series": [{"type": "bar", "name": "per step", "label": {"show": True, "position": "right"},
                    "itemStyle": {"color": "#4c6ef5"},
                    "data": [round(us / steps / 1000, 3) for _, us in classes]}],
    }, unit="ms", x_unit="ms", height=max(200, 70 + 34 * len(classes)),
        label="GPU time per step by kernel class") if classes else no_chart("No GPU work in the steps.")
    total = t["gpu_event_time_us"] or 1.0
    rows = "".join(
        f"<tr><td class='num'>{h(format_metric('_us', k['total_us'] / steps))}</td>"
        f"<td class='num'>{k['total_us'] / total * 100:.1f}%</td><td class='num'>{k['count']:,}</td>"
        f"<td class='num'>{h(format_metric('_us', k['total_us'] / k['count']))}</td>"
        f"<td class='name' title='{h(k['name'])}'><span class='tag'>{h(k['class'])}</span> {h(k['name'])}</td></tr>"
        for k in t["top_kernels"])
    table = ("<div class='panel'><h3>Top kernels (GPU time per step)</h3><table class='kernels'><thead><tr>"
             "<th>per step</th><th>share</th><th>launches</th><th>mean</th><th>class · kernel</th></tr></thead>"
             f"<tbody>{rows}</tbody></table></div>") if rows else ""
    return chart + table


_FAMILY_WORDS = {"gemm": "GEMM", "convolution": "convolution", "attention": "attention"}
_ROOF_COLORS = ("#212529", "#868e96", "#adb5bd")


def _family_speeds(roofline: dict | None) -> str:
    """'; GEMM 705 TFLOP/s (71.3% of peak), attention …' for the kernel-class chart's subtitle."""
    rows = [r for r in (roofline or {}).get("families", ()) if r["dtype"] is None and r["tflops"] is not None]
    return "".join(f"; {_FAMILY_WORDS[r['family']]} {format_metric('gemm_tflops', r['tflops'])}"
                   + (f" ({format_metric('_pct', r['peak_pct'])} of peak)" if r["peak_pct"] is not None else "")
                   for r in rows)


def _roofline(page: Page, r: dict) -> str:
    """The roofline (log-log: FLOP per byte on x, achieved TFLOP/s on y) with the device's roof per dtype seen,
    min(peak, bandwidth × intensity), the families per dtype and the top op shapes as points; beside it the top op
    shapes as a table."""
    families = [f for f in r["families"] if f["dtype"] is not None and f["tflops"] and f["flop_per_byte"]]
    ops = [o for o in r["top_ops"] if o["tflops"] and o["flop_per_byte"]]
    peaks = r["peak_tflops"] or {}
    bandwidth = r["bandwidth_gbs"]
    roofs = [(d, peaks[d]) for d in dict.fromkeys(f["dtype"] for f in families) if d in peaks]
    xs = [p["flop_per_byte"] for p in families + ops] + [top * 1000 / bandwidth for _, top in roofs if bandwidth]
    lo, hi = (10 ** math.floor(math.log10(min(xs) / 3)), 10 ** math.ceil(math.log10(max(xs) * 3))) if xs else (1, 1)
    series = []
    for (dtype, top), color in zip(roofs, _ROOF_COLORS, strict=False):
        ridge = top * 1000 / bandwidth if bandwidth else None
        line = ([[lo, bandwidth * lo / 1000], [ridge, top], [hi, top]] if ridge and lo < ridge < hi else
                [[lo, min(top, bandwidth * lo / 1000) if bandwidth else top], [hi, top]])
        series.append({"type": "line", "name": f"{dtype} roof ({top:g} TFLOP/s)", "symbol": "none", "data": line,
                       "lineStyle": {"type": "dashed", "width": 1.5}, "itemStyle": {"color": color},
                       "tooltip": {"show": False}})
    series.append({"type": "scatter", "name": "families", "symbolSize": 16, "itemStyle": {"color": "#4c6ef5"},
                   "data": [{"name": f"{_FAMILY_WORDS[f['family']]} {f['dtype']}",
                             "value": [f["flop_per_byte"], f["tflops"]]} for f in families]})
    series.append({"type": "scatter", "name": "top ops", "symbolSize": 8, "itemStyle": {"color": "#e8590c"},
                   "data": [{"name": f"{o['name']} {o['shape']} {o['dtype']}",
                             "value": [o["flop_per_byte"], o["tflops"]]} for o in ops]})
    ys = [v["value"][1] for s in series[len(roofs):] for v in s["data"]] + [top for _, top in roofs]
    sub = (f"{r['device']}: " + ", ".join(f"{d} dense peak {top:g} TFLOP/s" for d, top in roofs)
           + (f", memory {bandwidth / 1000:g} TB/s" if bandwidth else ", memory bandwidth not in the table")
           if roofs else (r["note"] or "no peak for these dtypes"))
    chart = page.chart({
        "title": chart_title("Roofline: achieved TFLOP/s by arithmetic intensity", sub),
        "tooltip": {"trigger": "item"}, "legend": {"top": 44, "type": "scroll"},
        "grid": {"left": 60, "right": 30, "top": 80, "bottom": 50},
        "xAxis": {"type": "log", "name": "FLOP per byte", "nameLocation": "middle", "nameGap": 28,
                  "min": lo, "max": hi},
        "yAxis": {"type": "log", "name": "TFLOP/s", "min": 10 ** math.floor(math.log10(min(ys) / 2)),
                  "max": 10 ** math.ceil(math.log10(max(ys) * 1.5))},
        "series": series,
    }, height=360, label="Achieved TFLOP/s against arithmetic intensity, under the device's roof") \
        if families else no_chart("No GEMM, convolution or attention kernels with known FLOPs in the steps.")
    rows = "".join(
        f"<tr><td class='num'>{h(format_metric('_ms', o['kernel_ms_per_step']))}</td>"
        f"<td class='num'>{h(format_metric('gemm_tflops', o['tflops']))}</td>"
        f"<td class='num'>{h(format_metric('_pct', o['peak_pct']))}</td>"
        f"<td class='num'>{h(o['flop_per_byte'])}</td>"
        f"<td class='name' title='{h(o['name'])} {h(o['shape'])}'><span class='tag'>{h(o['dtype'])}</span> "
        f"{h(o['name'])} {h(o['shape'])}{' (recomputed)' if o['recomputed'] else ''}</td></tr>"
        for o in r["top_ops"])
    memory = r["memory_bound"]["why"]
    table = ("<div class='panel'><h3>Top ops by kernel time (per step)</h3><table class='kernels'><thead><tr>"
             "<th>per step</th><th>achieved</th><th>of peak</th><th>FLOP/byte</th><th>dtype · op · shapes</th>"
             f"</tr></thead><tbody>{rows}</tbody></table><p class='note'>memory-bound kernels: no GB/s ({h(memory)})"
             "</p></div>")
    return chart + table


def _copy_chart(page: Page, summary: TraceSummary, t: dict, x: list, k: int) -> str:
    m = summary.metrics
    if not M.H2D_COUNT.of(m):
        return no_chart("No host-to-device copies in the steps.")
    sub = (f"pageable {format_bytes(M.H2D_PAGEABLE_BYTES.of(m) or 0)} in "
           f"{format_metric('_us', M.H2D_PAGEABLE_TIME_US.of(m) or 0)}, pinned "
           f"{format_bytes(M.H2D_PINNED_BYTES.of(m) or 0)} in {format_metric('_us', M.H2D_PINNED_TIME_US.of(m) or 0)}"
           f"; {format_metric('h2d_pct_of_gpu_busy', M.H2D_PCT_OF_GPU_BUSY.of(m))} of GPU busy time")
    series = [{"type": "bar", "stack": "h2d", "name": f"{kind} → device", "barMinWidth": 2, "large": True,
               "itemStyle": {"color": COLORS[kind]},
               "data": [[xi, v] for xi, v in zip(x, _coarse(t["h2d_bytes"][kind], k), strict=True) if v]}
              for kind in ("pageable", "pinned") if kind in t["h2d_bytes"]]
    return page.chart({
        "title": chart_title("Host-to-device copies", sub), "tooltip": {"trigger": "axis"},
        "legend": {"top": 44}, "grid": {"left": 70, "right": 20, "top": 80, "bottom": 60},
        "xAxis": {"type": "value", "min": 0, "max": x[-1] if x else 1},
        "yAxis": {"type": "value"},
        "dataZoom": ZOOM, "series": series,
    }, unit="bytes", x_unit="ms", height=300, label="Host-to-device bytes over the window")


def _memory_chart(page: Page, summary: TraceSummary, t: dict) -> str:
    """Allocated and reserved device memory over the trace (the timeline record's ``memory``), the host's step
    boundaries as dashed lines, the peak marked."""
    mem = t["memory"]
    if not mem:
        return no_chart("No device memory samples (profile_memory=True records them).")
    m = summary.metrics
    total = M.DEVICE_MEMORY_BYTES.of(m)
    sub = f"peak {format_bytes(M.PEAK_MEMORY_BYTES.of(m) or 0)}"
    if total:
        sub += f" of {format_bytes(total)} ({format_metric('peak_memory_pct', M.PEAK_MEMORY_PCT.of(m))})"
    if M.MEMORY_PEAK_PHASE.of(m):
        sub += f" in {M.MEMORY_PEAK_PHASE.of(m)}"
    growth = M.MEMORY_GROWTH_BYTES_PER_STEP.of(m)
    if growth is not None:
        sub += f"; {'+' if growth >= 0 else '-'}{format_bytes(abs(growth))} per step"
    peak_us, peak_bytes = mem["peak"]
    boundaries = [[f"step {number}", start] for number, start in mem["steps"]]
    if mem["end"] is not None:
        boundaries.append(["end", mem["end"]])
    lo = min(mem["allocated"][0][0], *(start for _, start in boundaries[:1]))
    hi = max(mem["allocated"][-1][0], *(start for _, start in boundaries[-1:]))
    pad = 0.02 * (hi - lo) or 1.0
    series = [
        {"type": "line", "name": "allocated", "symbol": "none", "step": "end", "areaStyle": {"opacity": 0.25},
         "itemStyle": {"color": "#1c7ed6"}, "data": [[round(ts / 1000, 4), b] for ts, b in mem["allocated"]],
         "markPoint": {"symbol": "pin", "symbolSize": 36, "itemStyle": {"color": "#e03131"},
                       "label": {"formatter": "peak", "fontSize": 10},
                       "data": [{"name": "peak", "coord": [round(peak_us / 1000, 4), peak_bytes]}]},
         "markLine": {"silent": True, "symbol": "none", "lineStyle": {"type": "dashed", "color": "#868e96"},
                      "label": {"position": "insideEndTop", "formatter": "{b}", "fontSize": 10},
                      "data": [{"name": name, "xAxis": round(start / 1000, 4)} for name, start in boundaries]}},
        {"type": "line", "name": "reserved", "symbol": "none", "step": "end", "itemStyle": {"color": "#f08c00"},
         "lineStyle": {"width": 1.5}, "data": [[round(ts / 1000, 4), b] for ts, b in mem["reserved"]]},
    ]
    return page.chart({
        "title": chart_title("Device memory allocated and reserved", sub), "tooltip": {"trigger": "axis"},
        "legend": {"top": 44},
        "grid": {"left": 70, "right": 20, "top": 80, "bottom": 60},
        # the axis spans the samples and the step boundaries, with a margin (a mark line does not widen an axis,
        # and one on its edge is hidden behind it)
        "xAxis": {"type": "value", "min": round((lo - pad) / 1000, 4), "max": round((hi + pad) / 1000, 4)},
        "yAxis": {"type": "value", "min": 0},
        "dataZoom": ZOOM,
        "series": series if mem["reserved"] else series[:1],
    }, unit="bytes", x_unit="ms", height=320, label="Device memory allocated and reserved over the trace")


# --- a job -----------------------------------------------------------------------------------------------------

def _job_section(page: Page, summary: TraceSummary, ranks: list[TraceSummary], findings: list[Finding]) -> str:
    ordered = sorted(ranks, key=lambda s: (s.rank is None, s.rank))
    head = "".join(f"<th>{h(c)}</th>" for c in RANK_COLUMNS)
    straggler = M.STRAGGLER_RANK.of(summary.metrics)
    body = "".join(
        f"<tr{' class=straggler' if row[0] == straggler and straggler is not None else ''}>"
        + "".join(f"<td class='{'num' if i != 1 else ''}'>{h(c)}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in rank_rows(ordered))

    def per_step(s: TraceSummary, metric: M.Metric) -> float | None:
        value = metric.of(s.metrics)
        return None if value is None else round(value / max(1, M.STEPS.of(s.metrics) or 1) / 1000, 3)

    labels = [f"rank {s.rank}" for s in ordered]
    series = [
        {"type": "bar", "name": "step time", "itemStyle": {"color": "#4c6ef5"},
         "data": [round(max(M.STEP_CPU_US_MEAN.of(s.metrics) or 0, M.STEP_GPU_SPAN_US_MEAN.of(s.metrics) or 0)
                        / 1000, 3) for s in ordered]},
        {"type": "bar", "name": "communication wait per step", "itemStyle": {"color": "#e03131"},
         "data": [None if M.COMM_WAIT_US.of(s.metrics) is None else round(M.COMM_WAIT_US.of(s.metrics) / 1000, 3)
                  for s in ordered]},
        {"type": "bar", "name": "exposed communication per step", "itemStyle": {"color": "#f08c00"},
         "data": [per_step(s, M.EXPOSED_COMM_US) for s in ordered]},
    ]
    chart = page.chart({
        "title": chart_title("Step time and communication wait per rank",
                              f"straggler: rank {straggler}" if straggler is not None else "no straggler"),
        "tooltip": {"trigger": "axis"}, "legend": {"top": 44},
        "grid": {"left": 55, "right": 20, "top": 80, "bottom": 30},
        "xAxis": {"type": "category", "data": labels}, "yAxis": {"type": "value"}, "series": series,
    }, unit="ms", height=320, label="Step time and communication wait per rank")
    out = [f"<section class='card job'><h2>{h(summary.path)} — job of {len(ranks)} ranks <span class='badge "
           f"{_VERDICT_CLASS.get(summary.verdict, '')}'>{h(summary.verdict)}</span></h2>",
           f"<p class='evidence'>{h(verdict_line(summary))}</p>", _metric_tiles(summary),
           f"<table class='ranks'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>",
           _plain_table("Pipeline stages", STAGE_COLUMNS, stage_rows(ordered)),
           _plain_table("Process groups", GROUP_COLUMNS, group_rows(ordered)), chart, _schedule_chart(page, ordered)]
    out.extend(f"<p class='note'>note: {h(w)}</p>" for w in summary.warnings)
    if findings:
        out.append(f"<h3>Findings ({len(findings)})</h3>" + _findings(page, findings))
    out.append("</section>")
    return "".join(out)


_SCHEDULE_COLORS = {"forward": "#4c6ef5", "backward": "#15aabf", "send/recv": "#e03131", "communication": "#f08c00"}


def _schedule_chart(page: Page, ranks: list[TraceSummary]) -> str:
    """A pipeline's schedule of one step, the diagram people draw by hand: a row per stage (by the stage the job
    gave each rank), its forward and backward compute, its sends and recvs (mostly waiting for a neighbour) and,
    blank, its idle time, on the trace clock from the step's first GPU start of any stage (tracelint.trace.timeline's
    ``schedule``). Empty for a job that is not a pipeline."""
    found = [(s, s.timeline["schedule"]) for s in ranks if s.timeline and s.timeline.get("schedule")]
    steps = Counter(sched["step"] for _, sched in found)
    if len(found) < 2 or not steps:
        return ""
    step = steps.most_common(1)[0][0]
    rows = sorted(((M.PIPELINE_STAGE.of(s.metrics), s.rank, sched) for s, sched in found if sched["step"] == step),
                  key=lambda row: (row[0] is None, row[0], row[1]))
    origin = min(sched["start_us"] for _, _, sched in rows)
    pieces: list[list] = []  # per row: (length ms, kind or None for idle), laid end to end
    for _, _, sched in rows:
        at, row = origin, []
        for a, b, kind in sched["segments"]:
            a, b = max(sched["start_us"] + a, at), sched["start_us"] + b
            if b <= a:
                continue  # hidden under the segment before it (another stream)
            row += [(round((a - at) / 1000, 3), None), (round((b - a) / 1000, 3), kind)]
            at = b
        pieces.append(row)
    series = [{"type": "bar", "stack": "schedule", "barWidth": "60%", "name": "", "data": [
        ({"value": row[k][0], "name": row[k][1] or "idle",
          "itemStyle": {"color": _SCHEDULE_COLORS.get(row[k][1], "rgba(0,0,0,0)")}} if k < len(row) else None)
        for row in pieces]} for k in range(max(map(len, pieces)))]
    labels = [f"stage {stage} (rank {rank})" if stage is not None else f"rank {rank}" for stage, rank, _ in rows]
    key = " · ".join(f"{kind}: {color}" for kind, color in (("forward", "blue"), ("backward", "teal"),
                                                              ("send/recv", "red"), ("idle", "blank")))
    return page.chart({
        "title": chart_title(f"Pipeline schedule of step {step}", key),
        "tooltip": {"trigger": "item"}, "grid": {"left": 130, "right": 20, "top": 60, "bottom": 40},
        "xAxis": {"type": "value", "name": "ms"}, "yAxis": {"type": "category", "inverse": True, "data": labels},
        "series": series,
    }, unit="ms", x_unit="ms", height=90 + 45 * len(rows), label=f"Pipeline schedule of step {step} per stage")


def _plain_table(title: str, columns: tuple[str, ...], rows: list[tuple]) -> str:
    """A titled table of text rows (empty when there are none): a job's stages, its process groups per rank."""
    if not rows:
        return ""
    head = "".join(f"<th>{h(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td class='num'>{h(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<h3>{h(title)}</h3><table class='detail'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# --- findings and rule docs --------------------------------------------------------------------------------------

def _findings(page: Page, findings: list[Finding]) -> str:
    out = []
    for n, f in enumerate(findings):
        page.rules.add(f.code)
        loc = f.location
        if isinstance(loc, SourceLocation):
            where = str(loc)
        else:
            context = trace_context(loc)
            where = f"{loc.path}" + (f" ({context})" if context else "") + (f" · {loc.event}" if loc.event else "")
        src = f.source
        lines = [f"<div class='finding sev-{h(f.severity)}'><div class='fhead'><a class='code' "
                 f"href='#rule-{h(f.code)}'>{h(f.code)}</a> <span class='sev'>{h(f.severity)}</span> "
                 f"<span class='msg'>{h(f.message)}</span></div><div class='where'>{h(where)}</div>"]
        if isinstance(loc, TraceLocation) and src is not None:
            lines.append(f"<div class='where'>→ {h(src.path)}:{h(src.line)}</div>")
        facts = [(k, v) for k, v in f.details if k != VERIFICATION]
        if facts:
            lines.append(f"<div class='facts'>{h(', '.join(f'{k}: {format_metric(k, v)}' for k, v in facts))}</div>")
        if f.estimate is not None:  # what the fix buys (issue #38)
            lines.append(f"<div class='estimate'>fix: {h(f.estimate.words())}; {h(f.estimate.basis)}</div>")
        evidence = f.evidence
        if evidence is not None and evidence.source is not None:  # `tracelint run`: the trace's side of it
            lines.append(f"<div class='evidence'>{h(evidence.words())}</div>")
            if evidence.trace is not None and evidence.trace.details:
                facts_text = ", ".join(f"{k}: {format_metric(k, v)}" for k, v in evidence.trace.details)
                lines.append(f"<div class='facts'>{h(facts_text)}</div>")
        measured = dict(f.details).get(VERIFICATION)
        if isinstance(measured, dict):
            lines.append(f"<div class='evidence'>verify: {h(verification_words(measured))}</div>")
        if src is not None and n < SNIPPETS_SHOWN:
            lines.append(_snippet(src))
        lines.append("</div>")
        out.append("".join(lines))
    return "".join(out)


def _snippet(src: SourceLocation) -> str:
    if not isinstance(src.line, int) or src.line < 1:
        return ""
    rows = []
    for number in range(max(1, src.line - SNIPPET_CONTEXT), src.line + SNIPPET_CONTEXT + 1):
        text = source_line(src.path, number, src.cell)
        if text is None:
            if number >= src.line:
                break
            continue
        mark = " class='hit'" if number == src.line else ""
        rows.append(f"<span{mark}><i>{number}</i>{h(text.expandtabs(4))}</span>")
    return f"<pre class='snippet'>{''.join(rows)}</pre>" if rows else ""


def _rule_docs(page: Page) -> str:
    if not page.rules:
        return ""
    from tracelint.engine import catalog

    docs = catalog()
    out = ["<section class='card rules'><h2>Rules</h2>"]
    for code in sorted(page.rules):
        doc = docs.get(code)
        if doc is None:
            continue
        out.append(f"<details id='rule-{h(code)}'><summary><b>{h(code)}</b> {h(doc.name)}</summary>"
                   f"<pre class='doc'>{h(doc.text.strip(), keep_lines=True)}</pre></details>")
    out.append("</section>")
    return "".join(out)


def _errors(result: RunResult) -> str:
    if not result.errors:
        return ""
    items = "".join(f"<li>{h(e)}</li>" for e in result.errors)
    return f"<section class='card errors'><h2>Inputs that could not be read</h2><ul>{items}</ul></section>"


def _verify_text(target: dict) -> str:

    return verify_block(target)


# --- tracelint diff ----------------------------------------------------------------------------------------------

def _diff_section(page: Page, d: dict) -> str:
    step, verdict = d["step_ms"], d["verdict"]
    rank = f" (rank {d['rank']})" if d["rank"] is not None else ""
    bad = " regression" if d["regression"] else ""
    out = [f"<section class='verdict{bad}'><div class='verdict-word'>{'regression' if d['regression'] else 'ok'}"
           f"</div><p>{h(d['summary'])}</p><p class='gate'>gate: {h(diff_gate_line(d))}</p></section>",
           f"<section class='card'><h2>{h(diff_side(d, 'base'))} → {h(diff_side(d, 'new'))}{h(rank)}</h2>",
           f"<p class='evidence'>verdict {h(verdict['base'])} → {h(verdict['new'])}; "
           f"{'; '.join(h(f'{label} {diff_noise_words(d, block)}') for label, block in diff_measures(d))}</p>"]
    mfu = diff_mfu_cells(d)
    if mfu:
        gated = " [gate]" if d["gate"]["measure"] == "mfu" else ""
        out.append(f"<p class='evidence'>MFU {h('  '.join(filter(None, (f'{mfu[0]} → {mfu[1]}', *mfu[2:]))))}"
                   f"{h(gated)}</p>")
    steps = page.chart({
        "title": chart_title("Step time", f"{_signed(step['change_pct'])}; {diff_noise_words(d)}"),
        "tooltip": {"trigger": "axis"}, "grid": {"left": 60, "right": 20, "top": 70, "bottom": 30},
        "xAxis": {"type": "category", "data": ["base", "new"]}, "yAxis": {"type": "value"},
        "series": [{"type": "bar", "name": "step time", "barWidth": "40%", "label": {"show": True, "position": "top"},
                    "data": [{"value": step["base"], "itemStyle": {"color": COLORS["base"]}},
                             {"value": step["new"], "itemStyle": {"color": "#e03131" if d["regression"]
                                                                  else COLORS["new"]}}]}],
    }, unit="ms", height=300, label="Step time before and after")
    classes = [k for k in d["kernel_classes"] if (k["base_us_per_step"] or 0) or (k["new_us_per_step"] or 0)]
    per_class = page.chart({
        "title": chart_title("GPU time per step by kernel class", "base vs new"),
        "tooltip": {"trigger": "axis"}, "legend": {"top": 44},
        "grid": {"left": 190, "right": 30, "top": 80, "bottom": 30},
        "xAxis": {"type": "value"},
        "yAxis": {"type": "category", "inverse": True, "data": [_class_words(k["name"]) for k in classes]},
        "series": [{"type": "bar", "name": side, "itemStyle": {"color": COLORS[side]},
                    "data": [None if k[f"{side}_us_per_step"] is None else round(k[f"{side}_us_per_step"] / 1000, 3)
                             for k in classes]} for side in ("base", "new")],
    }, unit="ms", x_unit="ms", height=max(240, 90 + 40 * len(classes)),
        label="GPU time per step by class, before and after") if classes else no_chart("No kernel time on either side.")
    out.append(f"<div class='grid2'>{steps}{per_class}</div>")
    moved = [m for m in d["metrics"] if m["moved"]]
    if moved:
        rows = "".join(f"<tr><th>{h(m['name'])}</th><td class='num'>{h(format_metric(m['name'], m['base']))}</td>"
                       f"<td class='num'>{h(format_metric(m['name'], m['new']))}</td>"
                       f"<td class='num'>{h(diff_delta(m['name'], m['delta']))}</td>"
                       f"<td class='num'>{h(diff_pct(m))}</td></tr>" for m in moved)
        out.append(f"<h3>Metrics that moved beyond the noise ({len(moved)} of {len(d['metrics'])})</h3>"
                   "<table class='metrics'><thead><tr><th>metric</th><th>base</th><th>new</th><th>change</th>"
                   f"<th>%</th></tr></thead><tbody>{rows}</tbody></table>")
    kernels = [k for k in d["kernels"] if k["delta_us_per_step"]]
    if kernels:
        names = d["kernel_names"]
        rows = "".join(
            f"<tr><td class='num'>{h(_us(k['base_us_per_step']))}</td><td class='num'>{h(_us(k['new_us_per_step']))}"
            f"</td><td class='num {'up' if k['delta_us_per_step'] > 0 else 'down'}'>"
            f"{h(diff_delta('_us', k['delta_us_per_step']))}</td><td class='name' title='{h(k['name'])}'>"
            f"<span class='tag'>{h(k['class'])}</span> {h(k['name'])}</td></tr>" for k in kernels)
        out.append(f"<h3>Kernels whose time per step changed most</h3><p class='note'>{names['both']} names on both "
                   f"sides, {names['appeared']} appeared, {names['vanished']} vanished</p>"
                   "<table class='kernels'><thead><tr><th>base</th><th>new</th><th>change</th>"
                   f"<th>class · kernel</th></tr></thead><tbody>{rows}</tbody></table>")
    for kind in ("new", "fixed"):
        found = d["findings"][kind]
        out.append(f"<h3>Findings {kind}: {len(found) or 'none'}</h3>")
        for f in found:
            page.rules.add(f["code"])
            trace = f.get("trace") or {}
            where = ", ".join(p for p in (f"rank {trace['rank']}" if trace.get("rank") is not None else "",
                                          f"step {trace['step']}" if trace.get("step") is not None else "") if p)
            src = f.get("source")
            where += f" → {src['path']}:{src['line']}" if src else ""
            out.append(f"<div class='finding sev-{h(f['severity'])}'><div class='fhead'><a class='code' "
                       f"href='#rule-{h(f['code'])}'>{h(f['code'])}</a> <span class='sev'>{h(f['severity'])}</span> "
                       f"<span class='msg'>{h(f['message'])}</span></div>"
                       f"<div class='where'>{h(where)}</div></div>")
    out.append("</section>")
    return "".join(out)


def _signed(value: float | None) -> str:
    return "" if value is None else f"{value:+.1f}%"


def _us(value: float | None) -> str:
    return "–" if value is None else format_metric("_us", value)


