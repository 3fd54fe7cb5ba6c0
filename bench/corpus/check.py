#!/usr/bin/env python3
"""Precision and recall of the source linter on the labeled corpus (bench/corpus/labels.csv).

Runs ``python -m tracelint check FILES --format json`` with the tracelint package of this working tree (``PYTHONPATH``
is set to the repository root) over the files listed in ``sources.json``, fetched beforehand by ``fetch.py`` into the
cache directory, and joins the findings with the labels.

Join: a finding matches a label when (repo, path, line, rule) are equal, the line **exactly** (a tolerance of ±0
lines: ``--line-tolerance N`` widens it for experiments, the default and the published figures use 0). Several
findings of one rule on one line (``d_loss.item(), g_loss.item()``) are one site. Per label:

* ``tp`` row reported  -> TP;   ``tp`` row not reported -> FN (a regression: the linter used to find it)
* ``fn`` row reported  -> TP;   ``fn`` row not reported -> FN (a known miss)
* ``fp`` row reported  -> FP;   ``fp`` row not reported -> fixed false alarm (counted as a true negative)
* a finding with no label -> listed as "unlabeled" (not counted): label it and add a row to labels.csv.

Usage::

    python bench/corpus/fetch.py [--mirror-root DIR]      # once
    python bench/corpus/check.py [--cache DIR] [--json OUT] [--show fp,fn,unlabeled] [--tracelint-root DIR]
    python bench/corpus/check.py --set heldout              # the held-out set (heldout/sources.json, labels.csv)

Runs: the main set is linted in one run of all its files (as its published figures were). The held-out set is
linted one run per repository (``--per-repo``), as a user lints their own project: in one run of all files,
``from utils import ...`` or ``from models import *`` of one repository can resolve to another repository's
``utils.py`` and bring its facts (a matmul, a device) into a program they are no part of.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
from fetch import DEFAULT_CACHE, SETS, load_sources, repo_dir, set_dir  # noqa: E402


def load_labels(path: Path = HERE / "labels.csv") -> list[dict]:
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    seen = set()
    for r in rows:
        r["line"] = int(r["line"])
        key = (r["repo"], r["path"], r["line"], r["rule"])
        if r["label"] not in ("tp", "fp", "fn"):
            raise SystemExit(f"{path.name}: bad label {r['label']!r} in {key}")
        if key in seen:
            raise SystemExit(f"{path.name}: duplicate row {key}")
        seen.add(key)
    return rows


def run_linter(cache: Path, files: list[str], root: Path = REPO) -> tuple[list[dict], float]:
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tracelint", "check", *files, "--format", "json"],
                          cwd=cache, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-4000:])
        raise SystemExit(f"tracelint exited {proc.returncode} without JSON output") from None
    if out.get("errors"):
        print(f"warning: tracelint reported errors: {out['errors']}", file=sys.stderr)
    return out["findings"], dt


def run_per_repo(cache: Path, sources: list[dict], root: Path = REPO) -> tuple[list[dict], float]:
    """One linter run per repository (its listed files), the findings of all runs together."""
    findings, total = [], 0.0
    for s in sources:
        found, dt = run_linter(cache, [f"{repo_dir(s['repo'])}/{p}" for p in s["paths"]], root)
        findings += found
        total += dt
    return findings, total


def ratio(a: int, b: int) -> float | None:
    return a / b if b else None


def fmt(x: float | None) -> str:
    return "  -  " if x is None else f"{x:.3f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=sorted(SETS), default="main",
                    help="which labeled set (default %(default)s; heldout: heldout/sources.json and labels.csv)")
    ap.add_argument("--per-repo", action=argparse.BooleanOptionalAction, default=None,
                    help="one linter run per repository (default: on for heldout, off for main)")
    ap.add_argument("--cache", default=DEFAULT_CACHE, help="where fetch.py put the files (default %(default)s)")
    ap.add_argument("--line-tolerance", type=int, default=0,
                    help="match a finding to a label up to N lines away (default 0: exact line)")
    ap.add_argument("--show", default="fp,fn,unlabeled",
                    help="comma-separated lists to print: tp, fp, fn, unlabeled (default %(default)s)")
    ap.add_argument("--rules", help="only these rules: comma-separated codes or prefixes (TL1,TL201,TL202,TL203: the "
                                    "rules the main set labels); labels and findings of other rules are left out")
    ap.add_argument("--json", help="also write the per-rule table and the site lists to this file")
    ap.add_argument("--tracelint-root", default=str(REPO),
                    help="directory holding the tracelint package to run (default: this working tree, %(default)s); "
                         "e.g. a `git archive COMMIT tracelint | tar -x -C DIR` export to measure a commit")
    args = ap.parse_args(argv)
    cache = Path(args.cache)

    folder = set_dir(args.set)
    sources = load_sources(folder / "sources.json")
    by_dir = {repo_dir(s["repo"]): s["repo"] for s in sources}
    files = [f"{repo_dir(s['repo'])}/{p}" for s in sources for p in s["paths"]]
    missing = [f for f in files if not (cache / f).is_file()]
    if missing:
        raise SystemExit(f"{len(missing)} corpus files missing under {cache} (first: {missing[0]}); "
                         f"run fetch.py --set {args.set}")
    labels = load_labels(folder / "labels.csv")
    wanted = tuple(r.strip() for r in args.rules.split(",") if r.strip()) if args.rules else ()
    if wanted:
        labels = [r for r in labels if r["rule"].startswith(wanted)]

    per_repo = args.per_repo if args.per_repo is not None else args.set == "heldout"
    if per_repo:
        findings, dt = run_per_repo(cache, sources, Path(args.tracelint_root))
    else:
        findings, dt = run_linter(cache, files, Path(args.tracelint_root))
    if wanted:
        findings = [f for f in findings if f["code"].startswith(wanted)]
    reported: dict[tuple, dict] = {}
    for f in findings:
        d, path = f["path"].split("/", 1)
        key = (by_dir.get(d, d), path, f["line"], f["code"])
        reported.setdefault(key, f)  # one site per (repo, path, line, rule)

    tol = args.line_tolerance
    used: set[tuple] = set()
    per_rule: dict[str, dict[str, int]] = defaultdict(lambda: {"TP": 0, "FP": 0, "FN": 0, "TN": 0})
    lists: dict[str, list] = {"tp": [], "fp": [], "fn": [], "unlabeled": [], "fixed_fp": []}
    for r in labels:
        hit = None
        for dl in sorted(range(-tol, tol + 1), key=abs):
            k = (r["repo"], r["path"], r["line"] + dl, r["rule"])
            if k in reported and k not in used:
                hit = k
                break
        if hit:
            used.add(hit)
        c = per_rule[r["rule"]]
        site = {**r, "reported": bool(hit), "message": reported[hit]["message"] if hit else None}
        if r["label"] in ("tp", "fn"):
            c["TP" if hit else "FN"] += 1
            lists["tp" if hit else "fn"].append(site)
        else:
            c["FP" if hit else "TN"] += 1
            lists["fp" if hit else "fixed_fp"].append(site)
    for k, f in reported.items():
        if k not in used:
            lists["unlabeled"].append({"repo": k[0], "path": k[1], "line": k[2], "rule": k[3], "message": f["message"]})
            per_rule[k[3]]  # show the rule in the table

    runs = f"{len(sources)} runs (one per repository)" if per_repo else "one run"
    print(f"set {args.set}: tracelint check on {len(files)} files, {runs}, in {dt:.1f} s: {len(findings)} findings at "
          f"{len(reported)} sites; {len(labels)} labeled sites; line tolerance ±{tol}")
    print()
    hdr = f"{'rule':<7} {'TP':>4} {'FP':>4} {'FN':>4} {'fixedFP':>7} {'unlab':>5} {'precision':>9} {'recall':>7}"
    print(hdr)
    print("-" * len(hdr))
    unl = defaultdict(int)
    for u in lists["unlabeled"]:
        unl[u["rule"]] += 1
    tot = {"TP": 0, "FP": 0, "FN": 0, "TN": 0}
    table = {}
    for rule in sorted(per_rule):
        c = per_rule[rule]
        for k in tot:
            tot[k] += c[k]
        p, rc = ratio(c["TP"], c["TP"] + c["FP"]), ratio(c["TP"], c["TP"] + c["FN"])
        table[rule] = {**c, "unlabeled": unl[rule], "precision": p, "recall": rc}
        print(f"{rule:<7} {c['TP']:>4} {c['FP']:>4} {c['FN']:>4} {c['TN']:>7} {unl[rule]:>5} {fmt(p):>9} {fmt(rc):>7}")
    print("-" * len(hdr))
    p, rc = ratio(tot["TP"], tot["TP"] + tot["FP"]), ratio(tot["TP"], tot["TP"] + tot["FN"])
    table["overall"] = {**tot, "unlabeled": len(lists["unlabeled"]), "precision": p, "recall": rc}
    print(f"{'overall':<7} {tot['TP']:>4} {tot['FP']:>4} {tot['FN']:>4} {tot['TN']:>7} {len(lists['unlabeled']):>5} "
          f"{fmt(p):>9} {fmt(rc):>7}")
    sync = [r for r in per_rule if r.startswith("TL1")]
    st = {k: sum(per_rule[r][k] for r in sync) for k in ("TP", "FP", "FN")}
    print(f"{'TL1xx':<7} {st['TP']:>4} {st['FP']:>4} {st['FN']:>4} {'':>7} {'':>5} "
          f"{fmt(ratio(st['TP'], st['TP'] + st['FP'])):>9} {fmt(ratio(st['TP'], st['TP'] + st['FN'])):>7}")

    for name in ("fp", "fn"):
        by = defaultdict(int)
        for site in lists[name]:
            by[site.get("cause") or "?"] += 1
        if by:
            print(f"\n{name.upper()} by cause (labels.csv 'cause'): "
                  + ", ".join(f"{c} {n}" for c, n in sorted(by.items(), key=lambda kv: -kv[1])))

    for name in [s.strip() for s in args.show.split(",") if s.strip()]:
        items = lists.get(name, [])
        print(f"\n{name} ({len(items)}):")
        for s in items:
            why = s.get("reason") or s.get("message") or ""
            tag = f"[{s['cause']}] " if s.get("cause") else ""
            print(f"  {s['repo']}:{s['path']}:{s['line']} {s['rule']}  {tag}{why[:150]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"table": table, **lists}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
