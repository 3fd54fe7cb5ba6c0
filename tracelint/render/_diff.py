"""The text of a ``tracelint diff`` pair (a ``RunResult.diffs`` record, tracelint.diff.compare's
``TraceDiff.as_dict``): summary, gate, step time with its noise, metrics, kernels and findings. The text format
shows the block; the markdown and HTML formats share its gate, noise and change wording."""
from __future__ import annotations

from tracelint.engine.display import cut, format_metric, format_seconds
from tracelint.engine.metrics import unit as metric_unit

DIFF_KERNELS_SHOWN = 10  # the kernel table of a diff shows the ten whose time per step moved most


def diff_block(diff: dict) -> str:
    """One ``tracelint diff`` pair (a ``RunResult.diffs`` record, already escaped): the summary line, the gate, the
    step time with its noise, the verdicts, the metrics that moved, kernel time per step by class and by kernel,
    and the findings new and fixed."""
    from tabulate import tabulate

    rank = f" (rank {diff['rank']})" if diff["rank"] is not None else ""
    lines = [f"tracelint diff {diff['base']} → {diff['new']}{rank}", diff["summary"], f"gate: {diff_gate_line(diff)}"]
    lines.extend(f"  crossed {c}" for c in diff["gate"]["thresholds_crossed"])
    step, verdict = diff["step_ms"], diff["verdict"]
    lines += ["", f"  step time  {_diff_ms(step['base'])} → {_diff_ms(step['new'])}  "
                  f"{_signed_pct(step['change_pct'])}  {diff_noise_words(diff)}",
              f"  verdict    {verdict['base']} → {verdict['new']}"]
    moved = [m for m in diff["metrics"] if m["moved"]]
    if moved:
        rows = [(m["name"], format_metric(m["name"], m["base"]), format_metric(m["name"], m["new"]),
                 diff_delta(m["name"], m["delta"]), _signed_pct(m["delta_pct"])) for m in moved]
        lines += ["", f"  metrics that moved beyond the noise ({len(moved)} of {len(diff['metrics'])}):",
                  *_table(tabulate, rows, ("metric", "base", "new", "change", "%"))]
    else:
        lines += ["", f"  no metric moved beyond the noise (of {len(diff['metrics'])})"]
    classes = [k for k in diff["kernel_classes"] if k["delta_us_per_step"]]
    if classes:
        rows = [(k["name"], *_kernel_cells(k)) for k in classes]
        lines += ["", "  GPU time per step by class:", *_table(tabulate, rows, ("class", "base", "new", "change"))]
    kernels = [k for k in diff["kernels"] if k["delta_us_per_step"]][:DIFF_KERNELS_SHOWN]
    if kernels:
        names = diff["kernel_names"]
        rows = [(*_kernel_cells(k), k["class"], cut(k["name"], 70)) for k in kernels]
        lines += ["", f"  kernels whose time per step changed most ({names['both']} names on both sides, "
                      f"{names['appeared']} appeared, {names['vanished']} vanished):",
                  *_table(tabulate, rows, ("base", "new", "change", "class", "kernel"))]
    for kind in ("new", "fixed"):
        found = diff["findings"][kind]
        lines += ["", f"  findings {kind}: {len(found) or 'none'}"]
        lines.extend(line for f in found for line in diff_finding_lines(f))
    return "\n".join(lines)


def diff_gate_line(diff: dict) -> str:
    """``REGRESSION: 34.4% slower, over the 5% limit and the ±8.9% noise`` or ``ok: ...``."""
    step, gate = diff["step_ms"], diff["gate"]
    change, noise, limit = step["change_pct"], step["noise_pct"], gate["max_regression_pct"]
    if change is None:
        words = "the step time cannot be compared"
    elif change <= 0:
        words = f"{abs(change):.1f}% faster" if change else "same step time"
    else:
        over_noise = noise is None or change > noise
        if change > limit and over_noise:
            band = "(noise unknown)" if noise is None else f"and the ±{noise:.1f}% noise"
            words = f"{change:.1f}% slower, over the {limit:g}% limit {band}"
        elif change > limit:
            words = f"{change:.1f}% slower, over the {limit:g}% limit but within the ±{noise:.1f}% noise"
        else:
            words = f"{change:.1f}% slower, within the {limit:g}% limit"
    if diff["gate"]["thresholds_crossed"]:
        n = len(diff["gate"]["thresholds_crossed"])
        words += f"; {n} threshold{'s' if n > 1 else ''} crossed"
    return ("REGRESSION: " if diff["regression"] else "ok: ") + words


def diff_noise_words(diff: dict) -> str:
    """``noise ±8.9% (95% band from 3 and 3 steps)``, saying when few steps make the band wide."""
    steps, noise = diff["steps"], diff["step_ms"]["noise_pct"]
    if noise is None:
        return f"noise unknown ({steps['base']} and {steps['new']} steps: a spread needs two)"
    text = f"noise ±{noise:.1f}% (95% band from {steps['base']} and {steps['new']} steps"
    if steps["few"]:
        text += ": few steps, a wide band"
    return text + ")"


def diff_delta(key: str, delta: float | None) -> str:
    """A metric's change with its sign, in the metric's unit: +1, -23.2 ms, +147 MiB."""
    if delta is None:
        return "n/a"
    if metric_unit(key) == "pct":
        return f"{delta:+.1f} pts"  # a change of a percentage, in points (its relative change is beside it)
    return ("+" if delta > 0 else "") + format_metric(key, delta)


def diff_finding_lines(f: dict) -> list[str]:
    """A finding record of a diff (the JSON report's shape): ``TL101 warning message`` and its source line."""
    trace = f.get("trace") or {}
    where = ", ".join(p for p in (f"rank {trace['rank']}" if trace.get("rank") is not None else "",
                                  f"step {trace['step']}" if trace.get("step") is not None else "") if p)
    lines = [f"    {f['code']} {f['severity']} {f['message']}" + (f" ({where})" if where else "")]
    if f.get("source"):
        lines.append(f"      --> {f['source']['path']}:{f['source']['line']}")
    elif f.get("line") is not None:
        lines.append(f"      --> {f['path']}:{f['line']}")
    return lines


def _kernel_cells(k: dict) -> tuple[str, str, str]:
    return (format_metric("_us", k["base_us_per_step"]) if k["base_us_per_step"] is not None else "–",
            format_metric("_us", k["new_us_per_step"]) if k["new_us_per_step"] is not None else "–",
            diff_delta("_us", k["delta_us_per_step"]))


def _table(tabulate, rows, headers) -> list[str]:
    text = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
    return ["    " + line.rstrip() for line in text.splitlines()]


def _diff_ms(value: float | None) -> str:
    return "n/a" if value is None else format_seconds(value / 1e3)


def _signed_pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.1f}%"
