"""Measure `tracelint diff`'s noise floor: how far apart repeated runs of the same code land, per measure.

Run from the repository root on a folder of repeats (no GPU needed: the traces were recorded before):

    PYTHONPATH=. python bench/diff_noise_floor.py /work/notes/noise [--json out.json]

The folder holds ``rep1/``, ``rep2/``, ... each with the same scenario traces (``<name>.pt.trace.json.gz``, as
fixtures/make_traces.py records them: run it once per repeat on the same machine) and its ``manifest.json`` (the
unprofiled truth of each scenario: ``traces.<name>.ground_truth.median_ms``).

For every scenario and measure it prints the value of each repeat and the pairwise run-to-run changes: for every
ordered pair of repeats (i, j), i ≠ j, |Δ%| = |v_j − v_i| / v_i × 100, which is the |change_pct| a `tracelint diff`
of run i against run j reads when nothing changed. The measures:

- ``step_time``: tracelint's step time of the trace, the mean over its profiled steps of the longer of the CPU span
  and the GPU span of each step (tracelint.diff.compare);
- ``gpu_time``: GPU time per step, the mean over the profiled steps of the summed duration of the kernels, copies
  and memsets launched in the step, communication kernels left out (tracelint.diff.compare);
- ``unprofiled``: the manifest's unprofiled median ms per step (context: what the run did without the profiler).

The floor of a measure is the 95th percentile (linear interpolation between closest ranks, numpy's default) of its
pairwise |Δ%| over every scenario where the gate uses that measure: all scenarios for step time; for GPU time the
scenarios whose every repeat is gpu-bound (the gate compares GPU time only when both sides are); rounded up to
0.1 %. Those two are tracelint.engine.config.DEFAULT_NOISE_FLOOR_PCT. The 95th percentile of all scenarios is
printed for GPU time too, for comparison. With one trace a side, a diff of two runs of the same code then passes
the gate 95 times in 100 (at the default 5 % limit, more often).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from itertools import permutations
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tracelint.diff.compare import measure  # noqa: E402
from tracelint.engine import Config  # noqa: E402
from tracelint.engine.config import DEFAULT_NOISE_FLOOR_PCT, GPU_TIME, STEP_TIME  # noqa: E402

UNPROFILED = "unprofiled"
MEASURES = (STEP_TIME, GPU_TIME, UNPROFILED)
SUFFIX = ".pt.trace.json.gz"


def repeats(folder: Path) -> list[Path]:
    """rep1, rep2, ... in numeric order."""
    reps = [p for p in folder.iterdir() if p.is_dir() and p.name.startswith("rep")]
    return sorted(reps, key=lambda p: (int("".join(c for c in p.name if c.isdigit()) or 0), p.name))


def truth(manifest: dict, name: str) -> float | None:
    """The unprofiled median of a scenario (a ``_tlprofile`` trace takes its twin's, as make_traces.py does)."""
    traces = manifest.get("traces", {})
    entry = traces.get(name) or traces.get(name.removesuffix("_tlprofile")) or {}
    value = (entry.get("ground_truth") or {}).get("median_ms")
    return float(value) if isinstance(value, (int, float)) else None


def read_repeat(rep: Path, config: Config) -> dict[str, dict]:
    """scenario -> {measure: ms, "verdict": str} for one repeat folder."""
    manifest_path = rep / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    out = {}
    for trace in sorted(rep.glob(f"*{SUFFIX}")):
        name = trace.name.removesuffix(SUFFIX)
        sides, errors = measure(trace, config)
        if errors or len(sides) != 1:
            print(f"note: {trace}: left out ({errors[0] if errors else f'{len(sides)} ranks'})", file=sys.stderr)
            continue
        side = sides[0]
        out[name] = {
            STEP_TIME: statistics.fmean(side.step_us) / 1000 if side.step_us else None,
            GPU_TIME: statistics.fmean(side.gpu_us) / 1000 if side.gpu_us else None,
            UNPROFILED: truth(manifest, name),
            "verdict": side.verdict,
        }
    return out


def pairwise_pct(values: list[float]) -> list[float]:
    """|v_j − v_i| / v_i × 100 for every ordered pair of distinct repeats."""
    return [abs(b - a) / a * 100 for a, b in permutations(values, 2) if a]


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile, linear interpolation between closest ranks (numpy's default method)."""
    if not values:
        return None
    data = sorted(values)
    pos = (len(data) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def round_up(x: float | None, step: float = 0.1) -> float | None:
    return None if x is None else math.ceil(round(x / step, 9)) * step


def analyze(folder: Path) -> dict:
    config = Config()
    reps = repeats(folder)
    if len(reps) < 2:
        raise SystemExit(f"{folder}: needs at least two rep*/ folders, found {len(reps)}")
    runs = [read_repeat(rep, config) for rep in reps]
    names = sorted(set.intersection(*(set(r) for r in runs)))
    scenarios = {}
    for name in names:
        row = {"verdicts": [r[name]["verdict"] for r in runs]}
        for m in MEASURES:
            values = [r[name][m] for r in runs]
            if any(v is None for v in values):
                row[m] = None
                continue
            diffs = pairwise_pct(values)
            row[m] = {"values_ms": [round(v, 4) for v in values], "pairwise_abs_pct": [round(d, 3) for d in diffs],
                      "max_abs_pct": round(max(diffs), 3), "median_abs_pct": round(statistics.median(diffs), 3)}
        scenarios[name] = row

    def pooled(m: str, gpu_bound_only: bool) -> list[float]:
        return [d for row in scenarios.values() if row[m] is not None
                and (not gpu_bound_only or all(v == "gpu-bound" for v in row["verdicts"]))
                for d in row[m]["pairwise_abs_pct"]]

    floors = {}
    for m, only in ((STEP_TIME, False), (GPU_TIME, True), (UNPROFILED, False)):
        values = pooled(m, only)
        p95 = percentile(values, 95)
        floors[m] = {"pairs": len(values), "scenarios": "gpu-bound" if only else "all",
                     "p95_abs_pct": None if p95 is None else round(p95, 3), "floor_pct": round_up(p95),
                     "max_abs_pct": round(max(values), 3) if values else None}
    all_gpu = pooled(GPU_TIME, False)
    floors[f"{GPU_TIME}_all_scenarios"] = {"pairs": len(all_gpu), "scenarios": "all",
                                           "p95_abs_pct": round(percentile(all_gpu, 95) or 0, 3),
                                           "max_abs_pct": round(max(all_gpu), 3) if all_gpu else None}
    return {"folder": str(folder), "repeats": [r.name for r in reps], "scenarios": scenarios, "floors": floors,
            "defaults_now": dict(DEFAULT_NOISE_FLOOR_PCT), "gate": gate_on_repeats(reps, names)}


def gate_on_repeats(reps: list[Path], names: list[str]) -> dict:
    """`tracelint diff` at its defaults of every ordered pair of repeats of each scenario (nothing changed between
    them): how many pairs fail the gate, and why."""
    from tracelint.diff import diff_traces

    rows = []
    for name in names:
        for a, b in permutations(reps, 2):
            report = diff_traces(a / f"{name}{SUFFIX}", b / f"{name}{SUFFIX}")
            for d in report.diffs:
                timed = d.gpu if d.gate.measure == GPU_TIME else d.step
                rows.append({"scenario": name, "base": a.name, "new": b.name, "measure": d.gate.measure,
                             "change_pct": timed.change_pct, "noise_pct": timed.noise_pct,
                             "failed": d.regression, "slower": d.gate.slower,
                             "new_findings": [f.code for f in d.new_findings], "summary": d.summary})
    return {"pairs": len(rows), "failed": sum(r["failed"] for r in rows),
            "failed_on_timing": sum(r["slower"] for r in rows), "rows": rows}


def show(result: dict) -> None:
    print(f"{result['folder']}: {len(result['repeats'])} repeats ({', '.join(result['repeats'])}), "
          f"{len(result['scenarios'])} scenarios")
    print(f"{'scenario':<22} {'verdicts':<20} {'measure':<11} {'ms per repeat':<34} {'max |Δ%|':>8} {'med |Δ%|':>8}")
    for name, row in result["scenarios"].items():
        verdicts = ",".join(sorted(set(row["verdicts"])))
        for m in MEASURES:
            cell = row[m]
            if cell is None:
                continue
            values = " ".join(f"{v:.3f}" for v in cell["values_ms"])
            print(f"{name:<22} {verdicts:<20} {m:<11} {values:<34} {cell['max_abs_pct']:>8.2f} "
                  f"{cell['median_abs_pct']:>8.2f}")
    print()
    print("floor = 95th percentile of the pairwise |Δ%| (ordered pairs of repeats), rounded up to 0.1 %:")
    for m, f in result["floors"].items():
        floor = f" -> floor {f['floor_pct']:.1f} %" if f.get("floor_pct") is not None else ""
        print(f"  {m:<24} over {f['scenarios']:<9} scenarios, {f['pairs']:>4} pairs: p95 {f['p95_abs_pct']} %, "
              f"max {f['max_abs_pct']} %{floor}")
    print(f"  (tracelint.engine.config.DEFAULT_NOISE_FLOOR_PCT now: {result['defaults_now']})")
    gate = result["gate"]
    print()
    print(f"`tracelint diff` at its defaults on every ordered pair of repeats (nothing changed): {gate['failed']} of "
          f"{gate['pairs']} fail the gate ({gate['failed_on_timing']} on timing)")
    for r in gate["rows"]:
        if r["failed"]:
            print(f"  {r['scenario']} {r['base']} → {r['new']}: {r['summary']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the folder of rep1/, rep2/, ... repeats")
    parser.add_argument("--json", type=Path, default=None, help="also write every number here")
    args = parser.parse_args()
    result = analyze(args.folder)
    show(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
