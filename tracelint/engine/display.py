"""How tracelint's values read as text, for every report and for ``str(finding)``: metric values with their units
(81.2%, 1.5 GiB, 812 µs), paths as reports give them, and the terminal's colors (or none)."""
from __future__ import annotations

import math
import os
from functools import lru_cache
from pathlib import Path

from tracelint.engine.escape import terminal
from tracelint.engine.metrics import unit as metric_unit
from tracelint.engine.severity import Severity


def format_metric(key: str, value: object) -> str:
    """A metric value for people: 81.2%, 1.5 GiB, 812 µs, 12.3 ms, 1,024; n/a for None and NaN."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        number = float(value)
        if math.isnan(number):
            return "n/a"
        if math.isinf(number):
            return "inf" if number > 0 else "-inf"
        unit = metric_unit(key)  # the registry's, or a finding detail's by its name
        if unit == "pct":
            return f"{number:.1f}%"
        if unit == "bytes":
            return format_bytes(number)
        if unit == "ratio":
            return f"{number:.2f}×"
        if unit == "tflops":
            return f"{sig3(number)} TFLOP/s"
        if unit in ("us", "ms", "s"):
            return format_seconds(number / {"us": 1e6, "ms": 1e3, "s": 1.0}[unit])
        if isinstance(value, int):
            return f"{value:,}"
        return sig3(number)
    if isinstance(value, (list, tuple)):
        return ", ".join(format_metric(key, v) for v in value)
    return terminal(str(value))


def verification_words(measured: dict) -> str:
    """What ``tracelint verify`` measured for a finding (its ``verification`` detail) in words: 'confirmed, 1.43×
    (CI 1.40–1.46; 10.10 → 7.05 ms/step)', 'small, 1.01× (CI 1.00–1.02; ...)', 'no effect larger than ±2.0% (...)'
    or 'failed (why)'; with several pairs of processes, the range of their speedups after the step times ('...;
    its 3 pairs of processes 1.43–1.56×')."""
    status, speedup = measured.get("status"), measured.get("speedup")
    if speedup is None:
        reason = measured.get("reason")
        return f"{status}" + (f" ({reason})" if reason else "")
    ms = f"{measured['baseline_ms']:.2f} → {measured['fixed_ms']:.2f} ms/step"
    pairs = measured.get("pair_speedups") or []
    if len(pairs) > 1:  # the spread between processes, beside the interval (issue #38 item 4)
        ms += f"; its {len(pairs)} pairs of processes {min(pairs):.2f}–{max(pairs):.2f}×"
    ci, bound = measured.get("ci95"), measured.get("bound_pct")
    if status == "no-effect" and bound is not None:
        return f"no effect larger than ±{bound:.1f}% ({ms})"
    if ci:
        return f"{status}, {speedup:.2f}× (CI {ci[0]:.2f}–{ci[1]:.2f}; {ms})"
    return f"{status}, {speedup:.2f}× ({ms})"


def format_bytes(n: float) -> str:
    if abs(n) < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if abs(n) < 1024 or unit == "TiB":
            return f"{sig3(n)} {unit}"
    raise AssertionError("unreachable")


def format_seconds(s: float) -> str:
    if abs(s) < 1e-3:
        return f"{sig3(s * 1e6)} µs"
    if abs(s) < 1:
        return f"{sig3(s * 1e3)} ms"
    return f"{sig3(s)} s"


def sig3(x: float) -> str:
    """About three significant digits, never in exponent notation."""
    size = abs(x)
    if x == int(x) and size < 1e15:
        return f"{int(x):,}"
    if size >= 1000:
        return f"{x:,.0f}"
    if size >= 100:
        return f"{x:.0f}"
    if size >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, ending in "…" when it was longer."""
    return text if len(text) <= width else text[: width - 1] + "…"


def report_path(path: str) -> str:
    """A path as people read it in a report: forward slashes, relative to the working directory when inside it (CI
    formats name files from the repository root: repo_path)."""
    return _report_path(path, os.getcwd())


@lru_cache(maxsize=4096)  # reports name the same few files many times; Path arithmetic dominated large reports
def _report_path(path: str, cwd: str) -> str:
    p = Path(path)
    if p.is_absolute():
        try:
            p = p.relative_to(cwd)
        except ValueError:
            return p.as_posix()
    return os.path.normpath(str(p)).replace("\\", "/")


def source_root() -> Path:
    """The folder CI formats name files from (SARIF's %SRCROOT%, GitLab's ``location.path``, GitHub annotations'
    ``file``): the repository tracelint runs in, the nearest folder at or above the working directory that holds
    ``.git`` (a folder, or a file in a worktree or submodule), else the working directory. Looked up once per working
    directory in a process."""
    return _source_root(os.getcwd())


@lru_cache(maxsize=8)
def _source_root(cwd: str) -> Path:
    here = Path(cwd)
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return here


def repo_path(path: str) -> str:
    """``path`` (as a finding names it: relative to the working directory, or absolute) as CI formats name it:
    relative to source_root() with forward slashes when it lies inside it (a run from a subfolder, ``cd ml &&
    tracelint check .``, still says ``ml/train.py``, as the checkout has it); else absolute."""
    return _repo_path(path, os.getcwd())


@lru_cache(maxsize=4096)  # reports name the same few files many times
def _repo_path(path: str, cwd: str) -> str:
    absolute = Path(os.path.normpath(os.path.join(cwd, path)))
    try:
        return absolute.relative_to(_source_root(cwd)).as_posix()
    except ValueError:
        return absolute.as_posix()


class Paint:
    """ANSI styles, or none at all."""

    CODES = {"bold": "1", "dim": "2", "red": "31", "yellow": "33", "blue": "34", "cyan": "36", "green": "32"}
    BY_SEVERITY = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "blue"}

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, *styles: str) -> str:
        if not self.enabled or not styles:
            return text
        return f"\x1b[{';'.join(self.CODES[s] for s in styles)}m{text}\x1b[0m"

    def code(self, code: str, severity: Severity) -> str:
        return self(code, "bold", self.BY_SEVERITY[severity])


def runs(numbers: list[int]) -> str:
    """``3``, ``3, 7``, ``2-127``: ranks or stages, runs of three or more consecutive numbers as ranges."""
    found: list[list[int]] = []
    for n in numbers:
        if found and n == found[-1][-1] + 1:
            found[-1].append(n)
        else:
            found.append([n])
    return ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in found)


def numbered(noun: str, numbers: list[int]) -> str:
    """``rank 3``, ``ranks 3, 7``, ``stages 0-2``."""
    return f"{noun if len(numbers) == 1 else noun + 's'} {runs(numbers)}"
