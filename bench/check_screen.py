#!/usr/bin/env python3
"""Soundness of the source screen on a real corpus: python bench/check_screen.py DIR...

For every *.py under DIR that mentions torch, runs every source rule directly (no screen) and checks that the
screen (tracelint/source/screen.py, with the ``sites`` of each rule's catalog doc) lets each reporting rule
through. Prints each file it would wrongly hold back
("UNSOUND") and a summary: files, files with findings, files screened out entirely. Exit 1 when any is unsound.
"""
import sys
from pathlib import Path

import libcst as cst

from tracelint.source.lint import source_rules
from tracelint.source.rule import run_rules
from tracelint.source.screen import may_report, sites
from tracelint.source.semantic.model import FileContext

rules = source_rules()
files = [p for root in sys.argv[1:] for p in Path(root).rglob("*.py")]
n = torch_files = screened_out = with_findings = bad = 0
for p in files:
    try:
        text = p.read_text(encoding="utf-8")
    except Exception:
        continue
    n += 1
    if "torch" not in text:
        continue
    torch_files += 1
    found = sites(text)
    try:
        ctx = FileContext(str(p), text, cst.parse_module(text))
        codes = {f.code for f in run_rules(ctx, [c(ctx) for c in rules])}
    except Exception:  # not parseable by libcst: reported as an error by the linter, nothing to compare
        continue
    if codes:
        with_findings += 1
    if found is not None and not any(may_report(c, found) for c in (r.code for r in rules)):
        screened_out += 1
    missed = {c for c in codes if not may_report(c, found)}
    if missed:
        bad += 1
        print("UNSOUND", p, missed, sorted(found or ()))
print(f"files {n}, mention torch {torch_files}, with findings {with_findings}, "
      f"screened out entirely {screened_out}, unsound {bad}")
sys.exit(1 if bad else 0)
