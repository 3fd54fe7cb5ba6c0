"""The text of a ``tracelint diff`` pair (a ``RunResult.diffs`` record, tracelint.diff.compare's
``TraceDiff.as_dict``): summary, gate, step time with its noise, MFU, metrics, kernels and findings. The text format
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
    lines = [f"tracelint diff {diff_side(diff, 'base')} → {diff_side(diff, 'new')}{rank}", diff["summary"],
             f"gate: {diff_gate_line(diff)}"]
    lines.extend(f"  crossed {c}" for c in diff["gate"]["thresholds_crossed"])
    verdict = diff["verdict"]
    lines += [""]
    for label, block in diff_measures(diff):
        gated = "  [gate]" if block is diff_measure(diff) else ""
        lines.append(f"  {label:<9}  {_diff_ms(block['base'])} → {_diff_ms(block['new'])}  "
                     f"{_signed_pct(block['change_pct'])}  {diff_noise_words(diff, block)}{gated}")
    mfu = diff_mfu_cells(diff)
    if mfu:
        base, new, moved, words = mfu
        gated = "  [gate]" if diff["gate"]["measure"] == "mfu" else ""
        lines.append("  ".join(filter(None, (f"  {'MFU':<9}", f"{base} → {new}", moved, words))) + gated)
    lines.append(f"  verdict    {verdict['base']} → {verdict['new']}")
    moved = [m for m in diff["metrics"] if m["moved"]]
    if moved:
        rows = [(m["name"], format_metric(m["name"], m["base"]), format_metric(m["name"], m["new"]),
                 diff_delta(m["name"], m["delta"]), diff_pct(m)) for m in moved]
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


def diff_side(diff: dict, side: str) -> str:
    """A side's first trace, and how many runs it has when several: ``main/1/train.pt.trace.json.gz (+2 runs)``."""
    more = len(diff["runs"][side]) - 1
    return diff[side] + (f" (+{more} run{'s' if more > 1 else ''})" if more > 0 else "")


def diff_gate_line(diff: dict) -> str:
    """``REGRESSION: new finding TL101 item-in-loop at train.py:54; 34.4% slower, within the 100% limit`` or
    ``ok: ...``: the new findings that fail it first, then the gate's measure against the limit and its noise."""
    gate = diff["gate"]
    measure = diff_measure(diff)
    change, noise, limit = measure["change_pct"], measure["noise_pct"], gate["max_regression_pct"]
    what = "GPU time per step " if gate["measure"] == "gpu_time" else ""
    if gate["measure"] == "mfu":
        words = _mfu_gate_words(measure, limit)
    elif change is None:
        words = "the step time cannot be compared"
    elif change <= 0:
        words = f"{what}{abs(change):.1f}% faster" if change else f"same {what or 'step time'}".rstrip()
    else:
        over_noise = noise is None or change > noise
        band = "(noise unknown)" if noise is None else f"and the ±{noise:.1f}% {_noise_name(measure)}"
        if change > limit and over_noise:
            words = f"{what}{change:.1f}% slower, over the {limit:g}% limit {band}"
        elif change > limit:
            words = f"{what}{change:.1f}% slower, over the {limit:g}% limit but within the ±{noise:.1f}% " \
                    f"{_noise_name(measure)}"
        else:
            words = f"{what}{change:.1f}% slower, within the {limit:g}% limit"
    found = gate["new_findings"]
    if found:
        listed = ", ".join(found[:2]) + (f" (+{len(found) - 2} more)" if len(found) > 2 else "")
        head = f"new finding{'s' if len(found) > 1 else ''} {listed}"
        words = f"{head}; {words}" if gate["fail_on_new_findings"] else \
            f"{words}; {head} (not gated: fail-on-new-findings is off)"
    if gate.get("note"):
        words += f"; {gate['note']}"
    if gate["thresholds_crossed"]:
        n = len(gate["thresholds_crossed"])
        words += f"; {n} threshold{'s' if n > 1 else ''} crossed"
    return ("REGRESSION: " if diff["regression"] else "ok: ") + words


def diff_measures(diff: dict) -> list[tuple[str, dict]]:
    """(label, block) of each timing measure a diff has: step time, and GPU time per step when both sides
    have profiled steps."""
    out = [("step time", diff["step_ms"])]
    if diff.get("gpu_ms"):
        out.append(("GPU time", diff["gpu_ms"]))
    return out


def diff_measure(diff: dict) -> dict:
    """The block (``step_ms``, ``gpu_ms`` or ``mfu``) of the measure the timing gate compared."""
    if diff["gate"]["measure"] == "mfu" and diff.get("mfu"):
        return diff["mfu"]
    return diff["gpu_ms"] if diff["gate"]["measure"] == "gpu_time" and diff["gpu_ms"] else diff["step_ms"]


def diff_mfu_cells(diff: dict) -> tuple[str, str, str, str] | None:
    """MFU's base, new, change and words (its noise, or why it is not comparable), for the line or row a diff shows
    when a side has an MFU: ``14.2%``, ``9.5%``, ``-4.7 pts (-33.0%)``, ``noise ±14.4% (the step time's ±16.8%, as
    an MFU drop)``; None when neither side has one."""
    m = diff.get("mfu")
    if not m or (m["base"] is None and m["new"] is None):
        return None
    moved = "" if m["change_pts"] is None else f"{diff_delta('mfu_pct', m['change_pts'])}"
    if m["change_pct"] is not None:
        moved += f" ({m['change_pct']:+.1f}%)"
    if not m["comparable"]:
        words = m["why"] if m["why"].startswith("no MFU") else f"not comparable: {m['why']}"
    elif m["noise_pct"] is None:
        words = "noise unknown"
    else:
        source = m.get("noise_from", "step_ms")
        what = "GPU time per step's" if source == "gpu_ms" else "step time's"
        words = f"noise ±{m['noise_pct']:.1f}% (the {what} ±{diff[source]['noise_pct']:.1f}%, as an MFU drop)"
    return format_metric("mfu_pct", m["base"]), format_metric("mfu_pct", m["new"]), moved, words


def _mfu_gate_words(m: dict, limit: float) -> str:
    """The gate's words when it compares MFU: ``MFU 33.0% lower, over the 4.76% limit (a 5% slower step) and the
    ±14.4% noise``."""
    change, noise, drop_limit = m["change_pct"], m["noise_pct"], m["drop_limit_pct"]
    if change is None:
        return "MFU cannot be compared"
    if change >= 0:
        return f"MFU {change:.1f}% higher" if change else "same MFU"
    slower = "GPU time per step" if m.get("noise_from") == "gpu_ms" else "step"
    limit_words = f"the {drop_limit:g}% limit (a {limit:g}% slower {slower})"
    if m["dropped"]:
        band = "(noise unknown)" if noise is None else f"and the ±{noise:.1f}% noise"
        return f"MFU {-change:.1f}% lower, over {limit_words} {band}"
    if -change > drop_limit:
        return f"MFU {-change:.1f}% lower, over {limit_words} but within the ±{noise:.1f}% noise"
    return f"MFU {-change:.1f}% lower, within {limit_words}"


def _noise_name(measure: dict) -> str:
    return {"runs": "run-to-run noise", "floor": "noise floor"}.get(measure["noise_source"], "noise")


def diff_noise_words(diff: dict, measure: dict | None = None) -> str:
    """Where a measure's noise comes from: ``noise ±3.1% (95% band of 3 and 3 runs' means)``, ``noise ±2.0%
    (95% band from 12 and 12 steps)`` or ``noise ±10.0% (noise floor: one trace a side, and its 3 and 3 steps are
    too few for their ±8.9% spread band to be trusted)``."""
    m = measure or diff["step_ms"]
    steps, runs, noise = diff["steps"], diff["runs"], m["noise_pct"]
    if noise is None:
        return "noise unknown"
    text = f"noise ±{noise:.1f}% "
    if m["noise_source"] == "runs":
        return text + f"(95% band of {len(runs['base'])} and {len(runs['new'])} runs' means)"
    if m["noise_source"] == "steps":
        return text + f"(95% band from {steps['base']} and {steps['new']} steps)"
    band = m["band_pct"]
    if band is None:
        why = f"{steps['base']} and {steps['new']} steps have no spread"
    elif steps["few"]:
        why = f"{steps['base']} and {steps['new']} steps are too few for their ±{band:.1f}% band to be trusted"
    else:
        why = f"the ±{band:.1f}% band of its steps misses run-to-run noise"
    return text + f"(noise floor: one trace a side, and {why})"


def diff_delta(key: str, delta: float | None) -> str:
    """A metric's change with its sign, in the metric's unit: +1, -23.2 ms, +147 MiB."""
    if delta is None:
        return "n/a"
    if metric_unit(key) == "pct":
        return f"{delta:+.1f} pts"  # a change of a percentage, in points (its relative change is beside it)
    return ("+" if delta > 0 else "") + format_metric(key, delta)


FACTOR_FROM_PCT = 1000.0  # a metric that grew this many percent or more reads as a factor: ×2,824, not +282301.9%


def diff_pct(m: dict) -> str:
    """A moved metric's relative change (a ``metrics`` record of a diff): ``+19.5%``; ``×2,824`` where it grew
    tenfold or more (from next to nothing, mostly: 5.30 µs of idle to 15.0 ms); ``new`` where BASE had none."""
    base, new, pct = m["base"], m["new"], m["delta_pct"]
    if pct is None:
        return "new" if base == 0 and isinstance(new, (int, float)) and new > 0 else ""
    if pct >= FACTOR_FROM_PCT and base > 0:
        ratio = new / base
        return f"×{ratio:,.0f}" if ratio >= 100 else f"×{ratio:.1f}"
    return f"{pct:+.1f}%"


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
