"""Markdown summary of the JSON reports gpu_run.sh collected: `python3 tests/verify/gpu_summary.py DIR > verify.md`."""
from __future__ import annotations

import json
import sys
from pathlib import Path


def _cell(ms, spread) -> str:
    if ms is None:
        return "—"
    return f"{ms:.2f} ({spread[0]:.2f}–{spread[1]:.2f})" if spread else f"{ms:.2f}"


def target_markdown(t: dict) -> list[str]:
    b = t["baseline"]
    lines = [f"### {t['target']}", "",
             f"{t['device']} · torch {t['torch']} · {t['settings']['warmup']} warm-up steps, then baseline and "
             f"variant alternate blocks of {t['settings']['steps']} steps, at least {t['settings']['blocks']} rounds",
             ""]
    if b["status"] == "ok":
        runs = " / ".join(f"{sorted(r)[len(r) // 2]:.2f}" for r in b["runs_ms"] if r)
        lines += [f"baseline {_cell(b['median_ms'], b['spread'])} ms/step; medians of its processes {runs}; "
                  f"block-to-block noise ±{b['noise_pct']:.1f}%", ""]
    else:
        lines += [f"baseline {b['status']}: {b['reason']}", "", "```", b.get("stderr_tail") or "", "```", ""]
    lines += ["| location | rule | fix | baseline ms | fixed ms | speedup (95% CI) | status |",
              "|---|---|---|---|---|---|---|"]
    for e in t["variants"]:
        v = e["verification"]
        safety = "unsafe: changes numerics" if v["precision"] else ("safe" if v["safe"] else "unsafe")
        ci = v.get("ci95")
        speedup = f"{v['speedup']:.2f}× ({ci[0]:.2f}–{ci[1]:.2f})" if v["speedup"] and ci else "—"
        baseline, fixed = _cell(v["baseline_ms"], v["spread"]["baseline"]), _cell(v["fixed_ms"], v["spread"]["fixed"])
        lines.append(f"| {e['location'] or '—'} | {e['rule']} | {v['fix']} ({safety}) | {baseline} | {fixed}"
                     f" | {speedup} | {v.get('summary') or v['status']} |")
    for e in t["variants"]:
        v = e["verification"]
        if v["status"] == "failed":
            lines += ["", f"{e['key']} failed: {v['reason']}", "", "```", v.get("stderr_tail") or "", "```"]
    for e in t.get("not_measured", []):
        lines += ["", f"{e['location'] or e['rule']} {e['rule']} not measured: {e['reason']}"]
    for note in t.get("notes", []):
        lines += ["", f"note: {note}"]
    return lines + [""]


def main(folder: Path) -> str:
    lines = ["# tracelint verify on the fixture scenarios", ""]
    for log in sorted(folder.glob("*.log")):
        if not log.with_suffix(".json").exists():
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            lines += [f"### {log.stem}: no report", "", "```", *tail, "```", ""]
    for path in sorted(folder.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            lines += [f"### {path.stem}", "", "no readable report (see its .log)", ""]
            continue
        for target in doc.get("verify", []):
            lines += target_markdown(target)
    return "\n".join(lines)


if __name__ == "__main__":
    print(main(Path(sys.argv[1])))
