"""Markdown (``--format markdown``), GitHub-flavoured: for a pull-request comment or ``$GITHUB_STEP_SUMMARY``.

A ``tracelint diff`` result: per pair a heading (BASE → NEW), the summary line in bold, the gate's outcome, a table
of the step time (with its noise), MFU, the verdicts and the metrics that moved beyond the noise, a table of GPU time
per step by kernel class and one of the kernels whose time changed most, then the findings new and fixed. Any other
result: a table of the traces' verdicts with their evidence, each trace's metrics in a collapsed ``<details>``
table, a table of the findings, and the inputs that could not be read.

Text from traces and source files is data: control characters, ANSI escapes and bidi controls in it are shown as
escapes, as in the text format (tracelint.engine.escape.terminal); the characters Markdown and HTML act on
(``\\ ` * _ [ ] < > | ~ # ! &``) are backslash-escaped (``&`` as ``&amp;``), so a kernel or file name can neither
break a table nor become a link or a tag; and no line starts a GitHub Actions workflow command.
"""
from __future__ import annotations

import re

from tracelint.engine.display import Paint, format_metric
from tracelint.engine.escape import no_commands, terminal
from tracelint.engine.finding import SourceLocation, TraceLocation
from tracelint.engine.location import trace_context
from tracelint.engine.result import RunResult
from tracelint.render._common import measured_message, verdict_line
from tracelint.render._diff import (
    DIFF_KERNELS_SHOWN,
    diff_delta,
    diff_gate_line,
    diff_measure,
    diff_measures,
    diff_mfu_cells,
    diff_noise_words,
    diff_pct,
    diff_side,
)
from tracelint.render.text import count_line, ordered_metrics

_SPECIAL = re.compile(r"([\\`*_\[\]<>|~#!])")


def md(text: object) -> str:
    """Text as Markdown shows it literally, on one line."""
    return _SPECIAL.sub(r"\\\1", terminal(str(text)).replace("&", "&amp;"))


def table(headers: tuple[str, ...], rows: list[tuple]) -> list[str]:
    """A pipe table; cells are given already escaped."""
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out.extend("| " + " | ".join(str(c) for c in row) + " |" for row in rows)
    return out


def render(result: RunResult) -> str:
    if result.diffs is not None:
        blocks = [_diff(d) for d in result.diffs]
    else:
        blocks = [_report(result)]
    if result.errors:
        blocks.append("\n".join(["**Could not be read:**", "",
                                 *(f"- {md(e.path)}: {md(e.message)}" for e in result.errors)]))
    return no_commands("\n\n".join(b for b in blocks if b) + "\n")


# --- tracelint diff ----------------------------------------------------------------------------------------------

def _diff(d: dict) -> str:
    verdict = d["verdict"]
    rank = f" (rank {d['rank']})" if d["rank"] is not None else ""
    mark = ":x:" if d["regression"] else ":white_check_mark:"
    lines = [f"### tracelint diff: {md(diff_side(d, 'base'))} → {md(diff_side(d, 'new'))}{rank}", "",
             f"**{md(d['summary'])}**", "", f"{mark} {md(diff_gate_line(d))}"]
    lines.extend(f"- crossed {md(c)}" for c in d["gate"]["thresholds_crossed"])
    gated = diff_measure(d)
    rows = [(label + (" (gate)" if block is gated else ""), _ms(block["base"]), _ms(block["new"]),
             f"{block['change_pct']:+.1f}%" if block["change_pct"] is not None else "n/a",
             md(diff_noise_words(d, block))) for label, block in diff_measures(d)]
    mfu = diff_mfu_cells(d)
    if mfu:
        rows.append(("MFU" + (" (gate)" if d["gate"]["measure"] == "mfu" else ""), *map(md, mfu)))
    rows.append(("verdict", md(verdict["base"]), md(verdict["new"]), "", ""))
    rows += [(f"{md(m['name'])}", md(format_metric(m["name"], m["base"])), md(format_metric(m["name"], m["new"])),
              md(diff_delta(m["name"], m["delta"])), diff_pct(m))
             for m in d["metrics"] if m["moved"]]
    lines += ["", *table(("", "base", "new", "change", ""), rows)]
    classes = [k for k in d["kernel_classes"] if k["delta_us_per_step"]]
    if classes:
        lines += ["", "GPU time per step by class:", "",
                  *table(("class", "base", "new", "change"), [(md(k["name"]), *_kernel_cells(k)) for k in classes])]
    kernels = [k for k in d["kernels"] if k["delta_us_per_step"]][:DIFF_KERNELS_SHOWN]
    if kernels:
        names = d["kernel_names"]
        lines += ["", f"<details><summary>Kernels whose time per step changed most ({names['appeared']} appeared, "
                      f"{names['vanished']} vanished)</summary>", "",
                  *table(("kernel", "class", "base", "new", "change"),
                         [(f"{md(k['name'])}", md(k["class"]), *_kernel_cells(k)) for k in kernels]),
                  "", "</details>"]
    for kind in ("new", "fixed"):
        found = d["findings"][kind]
        lines += ["", f"Findings {kind}: {len(found) or 'none'}"]
        if found:
            lines += ["", *table(("rule", "severity", "where", "message"),
                                 [(f["code"], f["severity"], _where(f), md(f["message"])) for f in found])]
    return "\n".join(lines)


def _kernel_cells(k: dict) -> tuple[str, str, str]:
    def us(value) -> str:
        return "–" if value is None else md(format_metric("_us", value))

    return us(k["base_us_per_step"]), us(k["new_us_per_step"]), md(diff_delta("_us", k["delta_us_per_step"]))


def _where(f: dict) -> str:
    if f.get("source"):
        return f"{md(f['source']['path'])}:{f['source']['line']}"
    return f"{md(f['path'])}" + (f":{f['line']}" if f.get("line") is not None else "")


def _ms(value: float | None) -> str:
    return "n/a" if value is None else md(format_metric("_ms", value))


# --- any other result --------------------------------------------------------------------------------------------

def _report(result: RunResult) -> str:
    lines: list[str] = []
    if result.run is not None:  # `tracelint run`: what ran, as the text report opens
        lines += ["### tracelint run", "", *(f"- {md(line.strip())}" for line in result.run["summary"]), ""]
    if result.traces:
        lines += ["### tracelint: trace verdicts", "",
                  *table(("trace", "rank", "verdict", "evidence"),
                         [(f"{md(s.path)}", "" if s.rank is None else s.rank, f"**{md(s.verdict)}**",
                           md(verdict_line(s).removeprefix(s.verdict).removeprefix(":").strip()))
                          for s in result.traces])]
        for s in result.traces:
            rows = [(f"{md(k)}", md(v)) for k, v in ordered_metrics(s.metrics)]
            if rows:
                rank = f" (rank {s.rank})" if s.rank is not None else ""
                lines += ["", f"<details><summary>Metrics of {md(s.path)}{rank}</summary>", "",
                          *table(("metric", "value"), rows), "", "</details>"]
    if result.findings:
        rows = []
        for f in result.findings:
            loc = f.location
            if isinstance(loc, SourceLocation):
                where = f"{md(loc)}"
            else:
                context = trace_context(loc) if isinstance(loc, TraceLocation) else ""
                where = f"{md(loc.path)}" + (f" ({md(context)})" if context else "")
                if loc.source is not None:
                    where += f" → {md(loc.source.path)}:{loc.source.line}"
            fix = md(f.estimate.words()) if f.estimate is not None else ""  # what the fix buys (issue #38)
            rows.append((f.code, str(f.severity), where, md(measured_message(f, "")), fix))
        lines += ["", "### tracelint: findings", "",
                  *table(("rule", "severity", "where", "message", "fix buys"), rows)]
    lines += ["", md(count_line(result, Paint(False)))]
    return "\n".join(lines).lstrip("\n")
