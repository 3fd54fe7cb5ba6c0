"""The HTML report's page: the object that collects its charts (each a placeholder and an ECharts option) and
writes the self-contained document around them (inlined ECharts, styles, script, Content-Security-Policy), the
escaping of text for HTML, and the chart pieces every section shares (titles, colors, zoom). tracelint.render.html
lays out the sections."""
from __future__ import annotations

import html
from functools import lru_cache
from pathlib import Path

from tracelint.engine.escape import no_commands, terminal
from tracelint.engine.version import __version__
from tracelint.render._common import dumps

ASSETS = Path(__file__).with_name("_assets")
MAX_CHART_BUCKETS = 4000  # timeline points over all the traces of one report (keeps a job's report small)

ZOOM = [{"type": "inside"}, {"type": "slider", "height": 18, "bottom": 10}]
COLORS = {
    "busy": "#2f9e62", "data_wait": "#f08c00", "host_sync": "#e03131", "allocator": "#9c36b5",
    "autotune": "#8d6e63", "launch_overhead": "#f5c518", "other": "#868e96", "short_gap": "#ced4da",
    "data": "#f08c00", "forward": "#4c6ef5", "backward": "#15aabf", "optimizer": "#ae3ec9",
    "pageable": "#e8590c", "pinned": "#1c7ed6", "base": "#adb5bd", "new": "#4c6ef5",
}


class Page:
    """The charts of one page: each a placeholder ``<div>`` and an ECharts option, drawn by the page's script."""

    def __init__(self) -> None:
        self.charts: list[dict] = []
        self.rules: set[str] = set()
        self.buckets = MAX_CHART_BUCKETS

    def chart(self, option: dict, *, unit: str | None = None, x_unit: str | None = None, height: int = 260,
              label: str = "") -> str:
        """A chart's placeholder; ``unit``: how its values read in tooltips and on the value axis (us, ms, pct,
        bytes), ``x_unit`` the same for a value x axis."""
        cid = f"chart-{len(self.charts)}"
        self.charts.append({"id": cid, "option": option, "unit": unit, "x_unit": x_unit})
        return f"<div class='chart' id='{cid}' style='height:{height}px' role='img' aria-label='{h(label)}'></div>"

    def document(self, title: str, body: str) -> str:
        data = dumps({"charts": self.charts}, indent=False)
        # Outside strings JSON has no <, > or &: escaping them inside strings keeps the data the same and no text
        # can close the script element.
        data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        page = (
            "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; script-src 'unsafe-inline'; "
            "style-src 'unsafe-inline'; img-src data:\">\n"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>\n"
            f"<title>{h(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
            f"<header><h1>{h(title)}</h1></header>\n{body}\n"
            f"<footer>tracelint {h(__version__)} · charts by Apache ECharts {h(echarts_version())} (Apache-2.0), "
            "inlined: this file needs no network</footer>\n</main>\n"
            f"<script type='application/json' id='tl-data'>{data}</script>\n"
            f"<script>{echarts()}</script>\n<script>{SCRIPT}</script>\n</body>\n</html>\n"
        )
        return no_commands(page)


@lru_cache(maxsize=1)
def echarts() -> str:
    return (ASSETS / "echarts.min.js").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def echarts_version() -> str:
    import re

    found = re.search(r'version\s*=\s*"(\d+\.\d+\.\d+)"', echarts()) or re.search(r'"(\d+\.\d+\.\d+)"', echarts())
    return found.group(1) if found else ""


def h(value: object, *, keep_lines: bool = False) -> str:
    """Text for HTML: control and bidi characters shown as escapes, then HTML-escaped."""
    return html.escape(terminal(str(value), keep="\n" if keep_lines else ""), quote=True)


def area(name: str, data: list, color: str) -> dict:
    return {"type": "line", "name": name, "stack": "window", "step": "start", "symbol": "none", "data": data,
            "lineStyle": {"width": 0}, "areaStyle": {"opacity": 0.9}, "itemStyle": {"color": color},
            "sampling": None}


def chart_title(text: str, sub: str = "") -> dict:
    return {"text": text, "subtext": sub, "left": 0, "textStyle": {"fontSize": 14},
            "subtextStyle": {"fontSize": 11}}


def no_chart(text: str) -> str:
    return f"<div class='chart empty'><p>{h(text)}</p></div>"


CSS = """
:root{--fg:#1f2328;--muted:#656d76;--line:#d0d7de;--bg:#f6f8fa;--card:#fff}
*{box-sizing:border-box}body{margin:0;background:var(--bg);color:var(--fg);
font:14px/1.45 -apple-system,BlinkMacSystemFont,"Segoe UI",Helvetica,Arial,sans-serif}
main{max-width:1280px;margin:0 auto;padding:20px}
header h1{font-size:20px;margin:0 0 12px}
h2{font-size:16px;margin:0 0 6px;word-break:break-all}h3{font-size:14px;margin:18px 0 8px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:16px;margin:0 0 16px}
.verdict{border-radius:8px;padding:14px 18px;margin:0 0 16px;background:#e7f5ff;border-left:6px solid #1c7ed6}
.verdict p{margin:4px 0;font-size:15px}.verdict-word{font-weight:700;font-size:22px;text-transform:uppercase}
.verdict.v-input{background:#fff4e6;border-color:#f08c00}.verdict.v-cpu{background:#fff9db;border-color:#f5c518}
.verdict.v-gpu{background:#ebfbee;border-color:#2f9e62}.verdict.v-comm{background:#f3f0ff;border-color:#7048e8}
.verdict.regression{background:#fff5f5;border-color:#e03131}.gate{font-weight:600}
.badge{font-size:12px;font-weight:600;padding:2px 8px;border-radius:10px;background:#e7f5ff;vertical-align:middle}
.badge.v-input{background:#ffe8cc}.badge.v-cpu{background:#fff3bf}.badge.v-gpu{background:#d3f9d8}
.badge.v-comm{background:#e5dbff}
.evidence{color:var(--muted);margin:0 0 10px}.note{color:var(--muted);font-size:12px;margin:4px 0}
.tiles{display:grid;grid-template-columns:repeat(auto-fill,minmax(190px,1fr));gap:8px;margin:8px 0}
.tile{border:1px solid var(--line);border-radius:6px;padding:6px 10px}
.tile .k{font-size:11px;color:var(--muted);word-break:break-all}.tile .v{font-size:16px;font-weight:600}
.chart{width:100%;margin:14px 0}.chart.empty{display:flex;align-items:center;justify-content:center;
color:var(--muted);border:1px dashed var(--line);border-radius:6px;min-height:120px}
.grid2{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:18px;align-items:start}
@media (max-width:900px){.grid2{grid-template-columns:1fr}}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{padding:4px 8px;border-bottom:1px solid #eaeef2;
text-align:left;vertical-align:top}thead th{background:var(--bg)}td.num{text-align:right;
font-variant-numeric:tabular-nums;white-space:nowrap}
td.name{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;max-width:0;width:100%;
overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.tag{font:11px -apple-system,Segoe UI,sans-serif;background:#edf2ff;color:#364fc7;border-radius:8px;padding:0 6px}
td.up{color:#c92a2a}td.down{color:#2b8a3e}tr.straggler td{background:#fff5f5;font-weight:600}
table.metrics th{font-weight:400;font-family:ui-monospace,Menlo,monospace;font-size:12px}
.finding{border:1px solid var(--line);border-left:4px solid #1c7ed6;border-radius:6px;padding:8px 12px;margin:8px 0}
.finding.sev-warning{border-left-color:#f08c00}.finding.sev-error{border-left-color:#e03131}
.fhead .code{font-weight:700;font-family:ui-monospace,Menlo,monospace;text-decoration:none;color:inherit}
.fhead .sev{font-size:12px;color:var(--muted)}.where,.facts{color:var(--muted);font-size:12px;word-break:break-all}
.evidence{font-size:13px;margin-top:2px}
pre{white-space:pre-wrap;word-break:break-word;font:12px/1.5 ui-monospace,SFMono-Regular,Menlo,monospace}
pre.snippet{background:var(--bg);border-radius:4px;padding:6px 0;margin:6px 0 0}
pre.snippet span{display:block;padding:0 10px}pre.snippet span.hit{background:#fff3bf}
pre.snippet i{display:inline-block;width:3.5em;color:var(--muted);font-style:normal;user-select:none}
pre.doc{background:var(--bg);padding:10px;border-radius:4px}
details>summary{cursor:pointer;color:var(--muted);margin:6px 0}details.rank{background:var(--card);
border:1px solid var(--line);border-radius:8px;padding:6px 14px;margin:0 0 10px}
details.rank[open]>summary{margin-bottom:10px}details.rank .card{border:0;padding:0}
.count{color:var(--muted)}footer{color:var(--muted);font-size:12px;margin:24px 0}
"""

# Lays the charts out: each placeholder gets its ECharts option; the unit names how values read on hover and on the
# value axes. ``data-charts`` on <body> says how many were drawn (what the browser tests read).
SCRIPT = """
(function () {
  "use strict";
  function sig(x) { var a = Math.abs(x); return a >= 100 ? x.toFixed(0) : a >= 10 ? x.toFixed(1) : x.toFixed(2); }
  function ms(v) { return v === 0 ? "0" : Math.abs(v) < 1 ? sig(v * 1000) + " \\u00b5s"
                 : Math.abs(v) < 1000 ? sig(v) + " ms" : sig(v / 1000) + " s"; }
  function bytes(v) { var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
                      while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
                      return (i ? sig(v) : v.toFixed(0)) + " " + u[i]; }
  var FORMAT = {ms: ms, us: function (v) { return ms(v / 1000); }, bytes: bytes,
                pct: function (v) { return v.toFixed(v % 1 ? 1 : 0) + "%"; }};
  function shown(f) { return function (v) {
    if (Array.isArray(v)) { v = v[v.length - 1]; }
    return v === null || v === undefined || v === "-" ? "n/a" : f(Number(v)); }; }
  function axes(option, key, unit) {
    var f = FORMAT[unit]; if (!f || !option[key]) { return; }
    [].concat(option[key]).forEach(function (axis) {
      if (axis.type === "value") { axis.axisLabel = Object.assign({formatter: f}, axis.axisLabel || {}); } });
  }
  var data = JSON.parse(document.getElementById("tl-data").textContent);
  var drawn = [];
  function draw(c) {
    var option = c.option;
    var horizontal = option.yAxis && option.yAxis.type === "category";
    if (c.unit && FORMAT[c.unit]) {
      option.tooltip = Object.assign({valueFormatter: shown(FORMAT[c.unit])}, option.tooltip || {});
      axes(option, horizontal ? "xAxis" : "yAxis", c.unit);
      (option.series || []).forEach(function (s) {
        if (s.label && s.label.show) { s.label.formatter = function (p) { return shown(FORMAT[c.unit])(p.value); }; }
      });
    }
    if (!horizontal) { axes(option, "xAxis", c.x_unit); }
    option.animation = false;
    var chart = echarts.init(document.getElementById(c.id), null, {renderer: "svg"});
    chart.setOption(option);
    drawn.push(chart);
    document.body.setAttribute("data-charts", String(drawn.length));
  }
  // A chart in a folded section (a rank of a job) is drawn when it opens: a hidden element has no size.
  data.charts.forEach(function (c) {
    var folded = document.getElementById(c.id).closest("details:not([open])");
    if (!folded) { draw(c); return; }
    folded.addEventListener("toggle", function once() {
      folded.removeEventListener("toggle", once); draw(c); });
  });
  document.body.setAttribute("data-charts", String(drawn.length));
  document.body.setAttribute("data-charts-total", String(data.charts.length));
  window.addEventListener("resize", function () { drawn.forEach(function (c) { c.resize(); }); });
})();
"""
