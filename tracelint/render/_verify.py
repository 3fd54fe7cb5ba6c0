"""The text of a ``tracelint verify`` target (a ``RunResult.verifications`` record, tracelint.verify.measure's
``target_dict``): settings, baseline, the table of measured fixes and the legend the record carries. The text and
HTML formats show it."""
from __future__ import annotations

from tracelint.engine.display import cut

VERIFY_FIX_WIDTH = 60  # the fix column of the verify table; longer titles end in "…"


def verify_block(target: dict) -> str:
    """One ``tracelint verify`` target (a ``RunResult.verifications`` record): settings, baseline, the table of
    measured fixes (under --trace with the analyzer's verdict before → after each fix) and the findings that
    could not be measured, then failures, reasons and the details of the traces."""
    from tabulate import tabulate

    s, baseline = target["settings"], target["baseline"]
    lines = [f"tracelint verify {target['target']}",
             f"{target['device']} · torch {target['torch']} · {s['warmup']} warm-up steps, then the baseline and "
             f"each variant alternate blocks of {s['steps']} steps",
             f"(one device synchronize per block), at least {s['blocks']} rounds{_per_pair(s)}, until the 95% "
             f"interval is within ±{s.get('target_pct', 3):g}% or {s.get('budget_s', 0):g} s are spent"]
    if s.get("method"):
        lines.append(f"method: {s['method']}; minimum effect {s.get('min_effect_pct', 2):g}%")
    if not target["timing_claims"]:
        lines.append("note: timings on the CPU are not claims about a GPU (--device cpu is for testing the harness)")
    if baseline["status"] == "ok":
        count = sum(len(r) for r in baseline["runs_ms"])
        between = baseline.get("between_process_pct")
        processes = f"; between its {len(baseline['runs_ms'])} processes {between:.1f}%" if between is not None \
            else ""
        lines.append(f"baseline: {_timing_cell(baseline['median_ms'], baseline['spread'])} ms/step over {count} "
                     f"blocks; block-to-block noise ±{baseline['noise_pct']:.1f}%{processes}")
    elif baseline["reason"] is not None:
        lines.append(f"baseline failed: {baseline['reason']}")
        lines.extend(_indented(baseline["stderr_tail"]))
    lines.extend(f"note: {n}" for n in target["notes"])
    variants, skipped = target["variants"], target.get("not_measured", [])
    if not variants and not skipped:
        return "\n".join(lines)
    traced = "trace" in baseline
    headers = ["location", "rule", "fix", "baseline ms", "fixed ms", "speedup (95% CI)", "rounds", "status"]
    if traced:
        headers.append("trace before → after")
    table = []
    for entry in variants:
        m = entry["verification"]
        row = [entry["location"] or "—", entry["rule"], cut(_fix_label(m), VERIFY_FIX_WIDTH),
               _timing_cell(m["baseline_ms"], m["spread"]["baseline"]),
               _timing_cell(m["fixed_ms"], m["spread"]["fixed"]), _speedup_cell(m), _rounds_cell(m), _status_cell(m)]
        if traced:
            row.append(f"{_verdict_of(m.get('trace_before'))} → {_verdict_of(m.get('trace'))}")
        table.append(row)
    for entry in skipped:
        row = [entry["location"] or "—", entry["rule"], "— (see below)", "—", "—", "—", "—", "not-measured"]
        if traced:
            row.append("—")
        table.append(row)
    lines += ["", tabulate(table, headers=headers, tablefmt="simple", disable_numparse=True)]
    for entry in variants:
        follow_ups = entry["verification"]["follow_ups"]
        if follow_ups:
            lines.append(f"  {entry['key']} also applies the fixes it exposes: {', '.join(follow_ups)}")
    for entry in skipped:
        lines.append(f"  {entry['location'] or entry['rule']} {entry['rule']} not measured: {entry['reason']}")
    for entry in variants:
        pairs = entry["verification"].get("pair_speedups") or []
        if len(pairs) > 1:  # issue #38 item 4: the spread between processes beside the interval
            lines.append(f"  {entry['key']}: its {len(pairs)} pairs of processes measured "
                         f"{', '.join(f'{x:.2f}×' for x in pairs)}")
    for entry in variants:
        waited = _waited(entry["verification"].get("idle"))
        if waited:
            lines.append(f"  {entry['key']}: {waited}")
    for entry in variants:
        m = entry["verification"]
        if m["stderr_tail"] is not None:  # a run that failed (a variant not run for a failed baseline has none)
            lines += ["", f"{entry['key']} failed: {m['reason']}", *_indented(m["stderr_tail"])]
    if traced:
        lines += ["", *_verify_trace_lines(target)]
    lines += ["", target["legend"]]
    return "\n".join(lines)


def _per_pair(settings: dict) -> str:
    pairs = settings.get("pairs") or 1
    return f" in each of {pairs} pairs of processes" if pairs > 1 else ""


def _speedup_cell(m: dict) -> str:
    if not m.get("speedup"):
        return "—"
    ci = m.get("ci95")
    return f"{m['speedup']:.2f}× ({ci[0]:.2f}–{ci[1]:.2f})" if ci else f"{m['speedup']:.2f}×"


def _rounds_cell(m: dict) -> str:
    """``24 (budget)``, or with several pairs of processes ``24 in 3 pairs (budget)``."""
    if not m.get("rounds"):
        return "—"
    text = f"{m['rounds']} in {m['pairs']} pairs" if (m.get("pairs") or 1) > 1 else str(m["rounds"])
    return f"{text} ({m['stopped']})" if m.get("stopped") else text


def _waited(idle: dict | None) -> str:
    """What each side's process group used while it waited for the other side's blocks (CPU ms per second)."""
    if not idle or not idle.get("baseline") or not idle.get("variant"):
        return ""
    rates = [idle[side].get("cpu_ms_per_s") for side in ("baseline", "variant")]
    if any(r is None for r in rates):
        return ""
    return (f"while waiting for the other side's block, the baseline used {rates[0]:.1f} ms of CPU per second, "
            f"the variant {rates[1]:.1f}")


def _status_cell(m: dict) -> str:
    if m["status"] == "no-effect" and m.get("bound_pct") is not None:
        return f"no-effect: none larger than ±{m['bound_pct']:.1f}%"
    return m["status"]


def _verdict_of(trace: dict | None) -> str:
    if not trace:
        return "—"
    return trace["verdict"] if trace.get("status") == "ok" else "failed"


def _verify_trace_lines(target: dict) -> list[str]:
    """--trace: the analyzer's verdict on the profiled steps, baseline → each variant."""
    lines = ["trace analysis (a few steps profiled after the timed blocks):"]
    lines.extend(f"  {entry['key']}: trace: {entry['trace_change']}" for entry in target["variants"])
    return lines


def _fix_label(measured: dict) -> str:
    if measured["precision"]:
        return f"{measured['fix']} (unsafe: changes numerics)"
    return f"{measured['fix']} ({'safe' if measured['safe'] else 'unsafe'})"


def _timing_cell(median: float | None, spread: list | None) -> str:
    if median is None:
        return "—"
    return f"{median:.2f} ({spread[0]:.2f}–{spread[1]:.2f})" if spread else f"{median:.2f}"


def _indented(text: str | None) -> list[str]:
    return [f"  | {line}" for line in text.splitlines()] if text else []
