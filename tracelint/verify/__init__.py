"""GPU verification: re-run flagged training code with and without each fix and report the measured effect.

``verify_script(path)`` lints one script, builds its variants (variants.py), runs the original and each variant in
its own subprocess under the timing harness (harness.py, run.py) and judges each against the original (stats.py).
``verify_rules(codes)`` does the same for the rule catalog's bad/good example pairs (pairs.py), and
``verify_against(path, fixed)`` for a script and its fix written by hand. ``run_result``
turns their Verifications into the engine's RunResult, which every format of ``tracelint.render`` shows. The
user's files are never written: patched copies live in a temporary folder. Only these functions run user code,
and only the harness subprocess imports torch.
"""
from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from pathlib import Path

from tracelint.engine import catalog
from tracelint.verify.harness_control import RunSettings
from tracelint.verify.measure import EnvironmentProblem, Progress, Row, Verification, measure, probe, run_result
from tracelint.verify.pairs import runnable_pair
from tracelint.verify.variants import Unmeasured, Variant, plan

DEFAULT_SETTINGS = RunSettings()  # frozen: one shared default is safe

__all__ = [
    "EnvironmentProblem", "Row", "RunSettings", "Unmeasured", "Verification", "run_result", "verify_against",
    "verify_rules", "verify_script",
]


@contextmanager
def _workdir(keep: Path | None):
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    path = Path(tempfile.mkdtemp(prefix="tracelint-verify-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def verify_script(path: Path, argv: Sequence[str] = (), settings: RunSettings = DEFAULT_SETTINGS, *,
                  precision: Iterable[str] | None = None, keep: Path | None = None,
                  progress: Progress | None = None, select: Iterable[str] | None = None) -> Verification:
    """Measure every fix the linter proposes for ``path`` (and the precision variants; ``precision`` None: when
    the script looks matmul-bound). ``keep``: write the patched copies and run logs there and keep them.
    ``select``: only the findings of these rules (code prefixes)."""
    device, torch_version = probe(settings.device)
    target, path = str(path), path.resolve()
    with _workdir(keep) as work:
        planned = plan(path, work / "lint", precision=precision, select=select)
        notes = []
        if planned.unmeasured:
            notes.append(f"{len(planned.unmeasured)} finding(s) could not be measured (no fix, and no device-side "
                         "rewrite could be built): see not-measured")
        if not planned.variants:
            return Verification(target, settings, device, torch_version, (), (), planned.findings,
                                planned.errors, (*notes, "nothing to measure: no finding with a fix or a "
                                                 "device-side rewrite, and the script does not look matmul-bound"),
                                planned.unmeasured)
        baseline_runs, rows = measure(path, planned.variants, argv, settings, work / "runs", progress=progress)
    return Verification(target, settings, device, torch_version, baseline_runs, rows, planned.findings,
                        planned.errors, tuple(notes), planned.unmeasured)


def verify_against(path: Path, fixed: Path, argv: Sequence[str] = (), settings: RunSettings = DEFAULT_SETTINGS, *,
                   keep: Path | None = None, progress: Progress | None = None) -> Verification:
    """Measure ``fixed``, a fix of ``path`` written by hand, against ``path``: both run as if they were ``path``
    (its folder, its argv), as a catalog pair does."""
    device, torch_version = probe(settings.device)
    target, path = str(path), path.resolve()
    variant = Variant("against", f"{fixed.name} (the fix written by hand)", True,
                      fixed.read_text(encoding="utf-8"))
    with _workdir(keep) as work:
        baseline_runs, rows = measure(path, [variant], argv, settings, work / "runs", progress=progress)
    return Verification(target, settings, device, torch_version, baseline_runs, rows)


def verify_rules(codes: Iterable[str] | None, settings: RunSettings = DEFAULT_SETTINGS, *, keep: Path | None = None,
                 progress: Progress | None = None) -> list[Verification]:
    """Measure the catalog's runnable bad/good pairs (all of them when ``codes`` is None)."""
    docs = catalog()
    wanted = sorted(docs) if codes is None else [c.upper() for c in codes]
    unknown = [c for c in wanted if c not in docs]
    if unknown:
        raise ValueError(f"unknown rule {', '.join(unknown)}; `tracelint rules` lists them")
    pairs = [p for p in (runnable_pair(docs[c]) for c in wanted) if p is not None]
    if codes is not None and len(pairs) < len(wanted):
        missing = sorted(set(wanted) - {p.code for p in pairs})
        raise ValueError(f"no runnable example pair for {', '.join(missing)} (see tracelint/verify/pairs.py for "
                         "the ```python verify convention)")
    if not pairs:
        return []
    device, torch_version = probe(settings.device)
    results = []
    with _workdir(keep) as work:
        for pair in pairs:
            folder = work / pair.code
            folder.mkdir(parents=True, exist_ok=True)
            bad = folder / f"{pair.code}_example.py"
            bad.write_text(pair.bad, encoding="utf-8")
            good = Variant(pair.code, "catalog 'Use instead' example", True, pair.good)
            if progress:
                progress(f"{pair.code}: bad vs good example")
            baseline_runs, rows = measure(bad, [good], (), settings, folder / "runs", progress=progress)
            results.append(Verification(f"catalog {pair.code}", settings, device, torch_version, baseline_runs,
                                        rows))
    return results
