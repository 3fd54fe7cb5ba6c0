"""The HTML report (issue #15): one self-contained file, charts drawn from the timeline record, opened as a person
would, in a real headless Chromium with the network blocked.

The browser tests drive the system's Chromium (Debian's ``chromium`` package, ``.ci/run`` installs it) through
Playwright for Python, never a downloaded browser; they skip where either is missing.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

import tracelint
from tests.conftest import FIXTURE_TRACES
from tests.shared import PUBLIC_TRACES, shared_path
from tracelint.engine import Finding, RunResult, Severity, TraceLocation, TraceSummary
from tracelint.engine import metrics as M
from tracelint.engine.metrics import IDLE_CAUSES
from tracelint.render import render
from tracelint.trace.analyze import analyze_trace
from tracelint.trace.timeline import MAX_BUCKETS, timeline_of

ITEM = FIXTURE_TRACES / "item_per_step.pt.trace.json.gz"
ITEM_FIXED = FIXTURE_TRACES / "item_per_step_fixed.pt.trace.json.gz"
PAGEABLE = FIXTURE_TRACES / "pageable_copies.pt.trace.json.gz"
DLRM = PUBLIC_TRACES / "param-dlrm-8rank"  # PARAM's 8-rank job, in ../shared (absent in a fresh clone)
MAX_BYTES = 3 * 2**20
EVIL = "</script><script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">\u202e"


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracelint", *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    """The reports the browser tests open: a fixture trace and a diff."""
    out = tmp_path_factory.mktemp("html")
    made = {"trace": out / "trace.html", "diff": out / "diff.html"}
    assert _cli("trace", str(ITEM), "--format", "html", "-o", str(made["trace"])).returncode == 1  # TL101 fires
    assert _cli("diff", str(ITEM_FIXED), str(ITEM), "--format", "html", "-o", str(made["diff"])).returncode == 1
    return made


@pytest.fixture(scope="module")
def job_page(tmp_path_factory) -> Path:
    """The report of PARAM's 8-rank DLRM job (../shared: the test skips in a fresh clone)."""
    page = tmp_path_factory.mktemp("html-job") / "job.html"
    assert _cli("trace", str(shared_path(DLRM)), "--format", "html", "-o", str(page)).returncode in (0, 1)
    return page


# --- the timeline record -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("trace", [ITEM, PAGEABLE, FIXTURE_TRACES / "gpt_compiled.pt.trace.json.gz"])
def test_timeline_buckets_add_up_to_the_metrics(trace):
    """The strip's busy and idle time per bucket sum to the window, busy to gpu_busy_us, each cause's gaps to at
    most its metric (a gap is charged to its main cause), short gaps to the rest."""
    report = analyze_trace(trace, timelines=True)
    analysis, summary = report.analyses[0], report.summaries[0]
    t = summary.timeline
    m = summary.metrics
    assert t == timeline_of(analysis)
    n = len(t["busy_us"])
    assert 0 < n <= MAX_BUCKETS
    window = t["window_us"][1] - t["window_us"][0]
    assert window == pytest.approx(M.GPU_WINDOW_US.of(m), abs=0.1)
    idle = {c: sum(v) for c, v in t["idle_us"].items()}
    assert sum(t["busy_us"]) == pytest.approx(M.GPU_BUSY_US.of(m), rel=1e-3, abs=n * 0.05)
    assert sum(t["busy_us"]) + sum(idle.values()) == pytest.approx(window, rel=1e-3, abs=n * 0.1)
    assert sum(idle.values()) == pytest.approx(M.GPU_IDLE_US.of(m), rel=1e-3, abs=n * 0.1)
    assert sum(idle.get(c, 0.0) for c in IDLE_CAUSES[:-1]) == pytest.approx(
        sum(g.end - g.start for g in analysis.gaps), rel=1e-3, abs=n * 0.05)
    assert len(t["steps"]) == len(analysis.steps)
    assert sum(t["class_us"].values()) == pytest.approx(t["gpu_event_time_us"], rel=1e-3)
    h2d = sum(sum(v) for v in t["h2d_bytes"].values())
    assert h2d == (M.H2D_PAGEABLE_BYTES.of(m) or 0) + (M.H2D_PINNED_BYTES.of(m) or 0)
    if t["memory"]:  # the chart's highest point is the peak, marked where it happens
        memory = t["memory"]
        assert max(b for _, b in memory["allocated"]) == memory["peak"][1] == M.PEAK_MEMORY_BYTES.of(m)
        assert max(b for _, b in memory["reserved"]) == M.PEAK_RESERVED_BYTES.of(m)
        assert len(memory["steps"]) == len(analysis.steps)


def test_timeline_stays_bounded_whatever_the_bucket_count():
    analysis = analyze_trace(ITEM).analyses[0]
    small = timeline_of(analysis, buckets=50)
    assert len(small["busy_us"]) == 50 and all(len(v) == 50 for v in small["idle_us"].values())
    assert 0 < len(small["memory"]["allocated"]) <= 50 and len(small["memory"]["reserved"]) <= 50
    assert sum(small["busy_us"]) == pytest.approx(sum(timeline_of(analysis)["busy_us"]), rel=1e-3)


def test_the_json_report_keeps_its_contract():
    result = RunResult(traces=analyze_trace(ITEM, timelines=True).summaries)
    assert "timeline" not in json.loads(render(result, "json"))["traces"][0]


# --- the page, without a browser ---------------------------------------------------------------------------------

class _Scripts(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict] = []
        self.external: list[str] = []
        self.text: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.add(tag)
        if tag == "script":
            self.scripts.append(attrs)
        if tag in ("script", "img", "iframe", "link") and (attrs.get("src") or attrs.get("href")):
            self.external.append(f"{tag} {attrs}")

    def handle_data(self, data):
        self.text.append(data)


def _parsed(page: str) -> _Scripts:
    parser = _Scripts()
    parser.feed(page)
    return parser


def test_a_fixture_report_is_one_small_self_contained_file(pages):
    page = pages["trace"].read_text(encoding="utf-8")
    assert len(page.encode()) <= MAX_BYTES
    parsed = _parsed(page)
    assert parsed.external == []
    assert [s.get("type") for s in parsed.scripts] == ["application/json", None, None]
    assert "default-src 'none'" in page  # the page itself forbids any request
    text = "".join(parsed.text)
    assert "cpu-bound: GPU idle" in text and "TL101" in text and "item-in-loop" in text
    assert "running_loss += loss.item()" in text  # the finding's source line, from fixtures/scenarios
    data = json.loads(re.search(r"id='tl-data'>(.*?)</script>", page, re.S).group(1))
    titles = [c["option"]["title"]["text"] for c in data["charts"]]
    assert titles[0] == "GPU timeline: busy vs idle by cause"
    assert {"Where the GPU idle time went", "Step breakdown (host time)", "GPU time per step by kernel class",
            "Host-to-device copies", "Device memory allocated and reserved"} <= set(titles)
    memory = next(c["option"] for c in data["charts"] if c["option"]["title"]["text"].startswith("Device memory"))
    allocated = memory["series"][0]
    assert [s["name"] for s in memory["series"]] == ["allocated", "reserved"]
    assert allocated["markPoint"]["data"][0]["coord"][1] == max(b for _, b in allocated["data"])  # the peak, marked
    steps = [f"step {s.number}" for s in analyze_trace(ITEM).analyses[0].model.steps]
    assert [d["name"] for d in allocated["markLine"]["data"]] == [*steps, "end"]  # the steps' boundaries


def test_trace_strings_never_become_markup():
    """A message, path, metric and kernel name that try to close the script and inject elements stay text."""
    report = analyze_trace(ITEM, timelines=True)
    summary = report.summaries[0]
    timeline = dict(summary.timeline)
    timeline["top_kernels"] = [dict(timeline["top_kernels"][0], name=EVIL)] + timeline["top_kernels"][1:]
    evil = TraceSummary(f"{EVIL}.json", "cpu-bound", f"GPU idle {EVIL}", {**summary.metrics, EVIL: 1},
                        warnings=(EVIL,), timeline=timeline)
    finding = Finding("TL101", Severity.WARNING, EVIL, TraceLocation(f"{EVIL}.json", event=EVIL, start_us=1.0))
    page = render(RunResult(findings=[finding], traces=[evil]), "html")
    parsed = _parsed(page)
    assert [s.get("type") for s in parsed.scripts] == ["application/json", None, None]
    assert parsed.external == [] and "img" not in parsed.tags
    assert "\u202e" not in page and "\\u202e" in page  # bidi controls shown as escapes
    assert EVIL.replace("\u202e", "\\u202e") in "".join(parsed.text)  # shown as the text it is


def test_report_shows_itself_in_jupyter():
    """The public API's Report shows the HTML report; the trace half's own has no look of its own (Jupyter falls
    back to its repr): the output layer hands the frame down, the trace half never imports it."""
    assert analyze_trace(ITEM)._repr_html_() is None
    shown = tracelint.analyze_trace(ITEM)._repr_html_()
    assert shown.startswith("<iframe srcdoc=\"&lt;!DOCTYPE html&gt;") and 'sandbox="allow-scripts"' in shown
    assert "cpu-bound" in shown


def test_every_input_kind_renders(full_result):
    page = render(full_result, "html")
    assert page.endswith("</html>\n") and "broken.json" in page and "TL202" in page


@pytest.mark.slow
def test_a_big_trace_gives_a_small_report(tmp_path):
    """A trace many times the fixture's size: the report's size does not grow with it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from bench_trace import build_big

    big = tmp_path / "big.json"
    build_big(ITEM, big, 40)
    out = tmp_path / "big.html"
    assert _cli("trace", str(big), "--format", "html", "-o", str(out)).returncode in (0, 1)
    assert out.stat().st_size <= MAX_BYTES
    small = tmp_path / "small.html"
    _cli("trace", str(ITEM), "--format", "html", "-o", str(small))
    assert out.stat().st_size < 1.5 * small.stat().st_size


# --- in a browser ------------------------------------------------------------------------------------------------

def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.fixture(scope="module")
def browser():
    executable = _chromium()
    # CI (.ci/run) installs Chromium and sets TRACELINT_REQUIRE_BROWSER: there a missing browser is a failure
    missing = pytest.fail if os.environ.get("TRACELINT_REQUIRE_BROWSER") else pytest.skip
    if executable is None:
        missing("no Chromium installed (apt-get install chromium)")
    try:
        from playwright import sync_api
    except ImportError:
        missing("playwright (the test extra) not installed")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-gpu", "--no-first-run",
                                                                 "--disable-background-networking",
                                                                 "--disable-component-update", "--disable-sync"])
        yield b
        b.close()


def _open(browser, path: Path, shots: Path | None = None):
    """The page opened offline: every request other than the file itself is refused and recorded."""
    url = path.resolve().as_uri()
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    problems, requests = [], []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))

    def route(r):
        requests.append(r.request.url)
        if r.request.url == url:
            r.continue_()
        else:
            r.abort()

    page.route("**/*", route)
    page.goto(url)
    page.wait_for_function("document.body.dataset.charts !== undefined", timeout=15000)
    return page, problems, requests


def _png_colors(png: bytes) -> int:
    """How many distinct pixel byte values the image's rows hold (a blank page has a handful)."""
    pos, idat = 8, b""
    while pos < len(png):
        (length,), kind = struct.unpack(">I", png[pos:pos + 4]), png[pos + 4:pos + 8]
        if kind == b"IDAT":
            idat += png[pos + 8:pos + 8 + length]
        pos += 12 + length
    return len(set(zlib.decompress(idat)))


def _check_page(browser, path: Path, min_charts: int, shot: Path):
    page, problems, requests = _open(browser, path)
    try:
        assert problems == [], problems
        assert requests == [path.resolve().as_uri()]
        drawn = int(page.evaluate("document.body.dataset.charts"))
        assert drawn >= min_charts
        # every drawn chart is an SVG with shapes in it
        shapes = page.evaluate("Array.from(document.querySelectorAll('.chart[id]'))"
                               ".filter(e => !e.closest('details:not([open])'))"
                               ".map(e => e.querySelectorAll('svg path, svg rect').length)")
        assert len(shapes) == drawn and all(n > 5 for n in shapes), shapes
        assert page.evaluate("window.pwned") is None
        png = page.screenshot(path=str(shot), full_page=True)
        assert _png_colors(png) > 50
        return page
    except BaseException:
        page.close()
        raise


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


def test_fixture_report_in_a_browser(browser, pages, shots):
    page = _check_page(browser, pages["trace"], 6, shots / "trace.png")
    try:
        # hovering the timeline gives numbers: a tooltip with a share after a series' name (the legend names the
        # series and the axis has percentages, but nothing puts a number after "GPU busy" before the hover); waited
        # for as an element (ECharts draws it on a later frame, later still on a busy machine), not for a fixed time
        busy = re.compile(r"GPU busy\s*\d+(\.\d)?%")
        tip = page.locator("#chart-0 div", has_text=busy).first
        assert tip.count() == 0
        box = page.locator("#chart-0").bounding_box()
        page.mouse.move(box["x"] + box["width"] * 0.4, box["y"] + box["height"] * 0.5)
        tip.wait_for(state="visible")
        assert busy.search(tip.inner_text()), tip.inner_text()
    finally:
        page.close()


def test_diff_report_in_a_browser(browser, pages, shots):
    page = _check_page(browser, pages["diff"], 2, shots / "diff.png")
    try:
        text = page.inner_text("body")
        assert "REGRESSION" in text and "Kernels whose time per step changed most" in text
    finally:
        page.close()


@pytest.mark.shared(DLRM)
def test_job_report_in_a_browser(browser, job_page, shots):
    page = _check_page(browser, job_page, 1, shots / "job.png")
    try:
        assert page.locator("table.ranks tbody tr").count() == 8
        before = int(page.evaluate("document.body.dataset.charts"))
        page.locator("details.rank > summary").first.click()  # a rank's charts are drawn when it opens
        page.wait_for_function(f"Number(document.body.dataset.charts) > {before}")
        assert page.evaluate("Array.from(document.querySelectorAll('details.rank[open] .chart svg')).length") > 0
    finally:
        page.close()


def test_only_the_html_report_pays_for_the_timeline(tmp_path):
    """The timeline is built when the HTML format asks for it (it costs about a tenth of the analysis), and a
    Report without one still shows its charts in Jupyter."""
    assert analyze_trace(ITEM).summaries[0].timeline is None
    from tracelint.dispatch import run_paths

    assert run_paths([ITEM], mode="trace").traces[0].timeline is None
    assert run_paths([ITEM], mode="trace", timelines=True).traces[0].timeline is not None
    assert "GPU timeline" in tracelint.analyze_trace(ITEM)._repr_html_()


@pytest.mark.parametrize("name", ["item_per_step", "item_no_effect_fixed", "compiled"])
def test_the_timeline_never_shows_a_share_above_100_percent(name):
    # The helper of #34.11 saw 'GPU busy 100.1%' on a fully busy stretch: the timeline's times are rounded to
    # 0.1 µs, the bucket width is not (these fixtures have fully busy buckets that read 100.04-100.08 %).
    report = analyze_trace(FIXTURE_TRACES / f"{name}.pt.trace.json.gz", timelines=True)
    page = render(RunResult(traces=report.summaries), "html")
    data = json.loads(re.search(r"id='tl-data'>(.*?)</script>", page, re.S).group(1))
    strip = next(c for c in data["charts"] if c["option"]["title"]["text"] == "GPU timeline: busy vs idle by cause")
    shares = [y for series in strip["option"]["series"] for _, y in series["data"]]
    assert shares and max(shares) == 100.0 and min(shares) >= 0.0


def test_roofline_chart_and_top_ops_in_a_browser(browser, tmp_path, shots):
    """An eager bf16 GPT step (H200): the roofline is drawn offline on log axes, with the bf16 roof and a point per
    family and per top op shape, and the top-ops table lists the LM head's GEMM; the kernel-class chart says the
    families' TFLOP/s."""
    path = tmp_path / "gpt.html"
    assert _cli("trace", str(FIXTURE_TRACES / "gpt_eager_bf16.pt.trace.json.gz"), "--format", "html", "-o",
                str(path)).returncode in (0, 1)
    data = json.loads(re.search(r"id='tl-data'>(.*?)</script>", path.read_text(), re.S).group(1))
    (option,) = [c["option"] for c in data["charts"] if c["option"]["title"]["text"].startswith("Roofline")]
    assert option["xAxis"]["type"] == option["yAxis"]["type"] == "log"
    roof, families, ops = option["series"]
    assert roof["name"] == "bf16 roof (989.4 TFLOP/s)" and [p[1] for p in roof["data"]][-1] == 989.4
    assert {p["name"] for p in families["data"]} == {"GEMM bf16", "attention bf16"} and len(ops["data"]) == 10
    page = _check_page(browser, path, 6, shots / "roofline.png")
    try:
        chart = page.locator("[aria-label^='Achieved TFLOP/s']")
        assert chart.locator("svg path").count() > 10
        text = page.inner_text("body")
        assert "aten::mm [12288, 768] x [768, 50304]" in text and "GEMM 705 TFLOP/s (71.3% of peak)" in text
    finally:
        page.close()
