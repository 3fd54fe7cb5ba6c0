"""Settings from ``[tool.tracelint]`` in pyproject.toml, with command-line overrides.

Source files take the nearest pyproject.toml that has a ``[tool.tracelint]`` table, looking up from the file;
traces take the one found from the working directory. Keys::

    [tool.tracelint]
    select = ["TL1", "TL201"]          # code prefixes (or "TL1,TL201", as on the command line); default: all
    ignore = ["TL104"]
    per-file-ignores = { "tests/*" = ["TL101"] }
    severities = { TL101 = "error" }
    fail-on = "warning"                # info | warning | error
    exclude = [".git", ".venv", ...]   # replaces the default directory excludes
    extend-exclude = ["legacy/"]
    file-time-limit = 20               # seconds one source file may take (then it is reported, not analysed)
    baseline = "tracelint-baseline.json"  # report only findings not in it (tracelint.engine.baseline); the path
                                       # is relative to this pyproject.toml; --baseline FILE overrides it

    [tool.tracelint.trace]             # thresholds (tracelint.engine.thresholds; `tracelint thresholds`)
    min-gpu-busy-pct = 80
    max-h2d-pct-of-gpu-busy = 10
    min-matmul-tensor-core-pct = 50

    [tool.tracelint.diff]              # the gate of `tracelint diff BASE NEW` (tracelint.diff.compare)
    max-regression-pct = 5             # fail when NEW's step is this much slower than BASE's (and beyond the noise)
    noise-floor-pct = 4                # the noise with one trace a side (default: measured, per measure)
    fail-on-new-findings = true        # a finding of NEW's at fail-on or above that BASE lacks fails the gate
    gate-measure = "time"              # "mfu": gate on MFU, not step time (a bigger batch is not a regression)
    max-syncs-per-step = 0             # TL010 gate keys: fail when NEW crosses one that BASE met

Codes and code prefixes are case-insensitive. A selector that matches no rule and a threshold key that is not
declared are errors (ConfigError, exit 2 on the command line) naming the closest valid one: a CI gate that passes
because of a typo is worse than none. So is every value of the wrong type or shape, naming the file and the key.
"""
from __future__ import annotations

import difflib
import fnmatch
import math
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path, PurePosixPath

import tomllib

from tracelint.engine.catalog import catalog
from tracelint.engine.finding import Finding, Severity
from tracelint.engine.thresholds import default as threshold_default
from tracelint.engine.thresholds import unknown_key_message

DEFAULT_EXCLUDE = (
    ".git", ".hg", ".svn", ".tox", ".nox", ".venv", "venv", "env", ".env", "__pycache__", "build", "dist",
    "site-packages", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tracelint_cache",
    ".ipynb_checkpoints", ".eggs", "*.egg-info",
)


class ConfigError(Exception):
    pass


# The per-file time limit of the source half (tracelint.source.lint). The slowest real files measured, torch's 1.3 MB
# common_methods_invocations.py and sympy's 40 kB generated sums, take 10 to 16 s to parse on a slow shared machine;
# a training script takes well under a second.
DEFAULT_FILE_TIME_LIMIT_S = 20.0
# `tracelint diff`: how much slower NEW's step may be than BASE's, in percent, before the gate fails.
DEFAULT_MAX_REGRESSION_PCT = 5.0
# `tracelint diff` with one trace a side: how far apart two runs of the same code land, in percent, per measure
# the gate compares (tracelint.diff.compare: step time, GPU time per step). Measured by bench/diff_noise_floor.py on
# three repeats of five fixture scenarios on one H100 (docs/ci.md, "The noise floor, measured"): the 95th
# percentile of the pairwise |change| between repeats of a scenario (step time: 30 pairs, every scenario; GPU time:
# 18 pairs, the GPU-bound ones), rounded up to 0.1 %.
STEP_TIME, GPU_TIME = "step_time", "gpu_time"
# `tracelint diff`'s gate-measure: "time" (step time, or GPU time per step when both sides are GPU-bound) or "mfu".
TIME, MFU = "time", "mfu"
DEFAULT_NOISE_FLOOR_PCT = {STEP_TIME: 16.8, GPU_TIME: 0.9}


def _upper(codes: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(c.upper() for c in codes)


@dataclass(frozen=True)
class Config:
    root: Path = field(default_factory=Path.cwd)
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    severities: tuple[tuple[str, Severity], ...] = ()
    fail_on: Severity = Severity.WARNING
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    trace_thresholds: tuple[tuple[str, float], ...] = ()
    file_time_limit: float = DEFAULT_FILE_TIME_LIMIT_S  # seconds one source file may take
    diff_max_regression_pct: float = DEFAULT_MAX_REGRESSION_PCT  # [tool.tracelint.diff]
    diff_thresholds: tuple[tuple[str, float], ...] = ()  # TL010 gate keys the diff checks NEW against
    baseline: Path | None = None  # `baseline = "FILE"`, resolved against the config file's folder; for a run's
    # files the CLI sets the one the run applies (or None): --fix leaves the findings it holds alone
    diff_noise_floor_pct: float | None = None  # None: DEFAULT_NOISE_FLOOR_PCT of the gate's measure
    diff_fail_on_new_findings: bool = True  # a new finding at fail-on or above fails the diff's gate
    diff_gate_measure: str = TIME  # TIME | MFU: what the diff's timing gate compares (tracelint.diff.compare)
    cache_dir: Path | None = None  # the source half's on-disk cache (tracelint.source.cache) for a run's files, as
    # the CLI sets it (.tracelint_cache at the project root, --cache-dir, --no-cache); None: no cache

    def __post_init__(self) -> None:
        # Codes are case-insensitive however the Config was made (pyproject, command line or code).
        object.__setattr__(self, "select", _upper(self.select))
        object.__setattr__(self, "ignore", _upper(self.ignore))
        object.__setattr__(self, "per_file_ignores", tuple((p, _upper(c)) for p, c in self.per_file_ignores))
        object.__setattr__(self, "severities", tuple((c.upper(), s) for c, s in self.severities))

    def enabled(self, code: str) -> bool:
        if self.select and not any(code.startswith(p) for p in self.select):
            return False
        return not any(code.startswith(p) for p in self.ignore)

    def ignored_for(self, path: str, code: str) -> bool:
        if not self.per_file_ignores:
            return False
        rel = _relative(path, self.root)
        for pattern, codes in self.per_file_ignores:
            if (fnmatch.fnmatch(str(rel), pattern) or rel.match(pattern)) and any(code.startswith(c) for c in codes):
                return True
        return False

    def apply(self, finding: Finding) -> Finding | None:
        """The finding as this config reports it (severity override), or None when it is switched off."""
        if not self.enabled(finding.code) or self.ignored_for(finding.path, finding.code):
            return None
        for prefix, severity in self.severities:
            if finding.code.startswith(prefix):
                return finding.with_severity(severity)
        return finding

    def excluded(self, path: Path) -> bool:
        return any(fnmatch.fnmatch(path.name, pattern.rstrip("/")) for pattern in self.exclude)

    def threshold(self, key: str) -> float | None:
        """The user's value of a declared threshold key, else its declared default (None: a gate not set)."""
        value = dict(self.trace_thresholds).get(key)
        return threshold_default(key) if value is None else value

    def override(self, **changes) -> Config:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


@lru_cache(maxsize=1024)
def _relative(path: str, root: Path) -> PurePosixPath:
    """``path`` relative to ``root`` where it lies below it (asked once per finding: cached)."""
    try:
        return PurePosixPath(Path(path).resolve().relative_to(root.resolve()).as_posix())
    except (ValueError, OSError, RuntimeError):  # elsewhere, or a symlink loop
        return PurePosixPath(Path(path).as_posix())


def _kind(value: object) -> str:
    """What a TOML value is, in words (for messages)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return "a date or time"


def _strings(value, key: str, where: Path) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        what = _kind(value) if not isinstance(value, list) else \
            "an array holding " + _kind(next(v for v in value if not isinstance(v, str)))
        raise ConfigError(f"{where}: [tool.tracelint] {key} must be a list of strings, not {what}")
    return tuple(value)


def _codes(value, key: str, where: Path) -> tuple[str, ...]:
    """Codes as the command line takes them: a list of strings (or one), each possibly a comma list."""
    out: list[str] = []
    for item in _strings(value, key, where):
        parts = [part for part in item.split(",") if part.strip()]
        out.extend(parts or [""])  # nothing but commas or blanks: an empty code, which ``selectors`` refuses
    return tuple(out)


def _table(value, key: str, where: Path) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: [tool.tracelint] {key} must be a table, not {_kind(value)}")
    return value


def _severity(value, key: str, where: Path) -> Severity:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: [tool.tracelint] {key} must be one of \"info\", \"warning\", \"error\", "
                          f"not {_kind(value)}")
    try:
        return Severity.parse(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: [tool.tracelint] {key}: {exc}") from None


def _number(value, key: str, where: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where} {key} must be a number, not {_kind(value)}")
    number = float(value)
    if not math.isfinite(number) or (positive and number <= 0):
        raise ConfigError(f"{where} {key} must be a {'positive' if positive else 'finite'} number, not {value!r}")
    return number


def _pattern(pattern: str, where: Path) -> str:
    try:
        PurePosixPath("a/b.py").match(pattern)
    except ValueError as exc:
        raise ConfigError(f"{where}: [tool.tracelint] per-file-ignores: pattern {pattern!r}: {exc}") from None
    return pattern


def selectors(values, where: str) -> tuple[str, ...]:
    """Rule codes or code prefixes, upper-cased; ConfigError naming ``where`` for one that matches no rule."""
    codes = sorted(catalog())
    out = []
    for value in values:
        selector = value.strip().upper()
        if not selector:
            raise ConfigError(f"{where}: an empty code (it would match every rule)")
        if not any(code.startswith(selector) for code in codes):
            close = difflib.get_close_matches(selector, codes, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else "; `tracelint rules` lists the codes"
            raise ConfigError(f"{where}: {value!r} matches no rule{hint}")
        out.append(selector)
    return tuple(out)


def threshold_items(items, where: str) -> tuple[tuple[str, float], ...]:
    """(key, value) pairs of declared threshold keys; ConfigError naming ``where`` for an unknown key or a value
    that is not a finite number."""
    out = []
    for key, value in items:
        message = unknown_key_message(key)
        if message is not None:
            raise ConfigError(f"{where}: {message}")
        out.append((key, _number(value, key, where)))
    return tuple(out)


def diff_gate_items(items, where: str) -> tuple[tuple[str, float], ...]:
    """(key, value) pairs of TL010 gate keys (``max-syncs-per-step``, ``min-gpu-busy-pct``, ...: the metrics that
    name a ``gate`` in tracelint.engine.metrics), for the diff's gate; ConfigError naming ``where`` for another key
    or a value that is not a finite number."""
    from tracelint.engine.metrics import gates

    known = sorted(m.gate for m in gates())
    out = []
    for key, value in items:
        if key not in known:
            close = difflib.get_close_matches(key, [*known, *_DIFF_KEYS], n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join([*_DIFF_KEYS, *known])})"
            raise ConfigError(f"{where}: unknown key {key!r}{hint}")
        out.append((key, _number(value, key, where)))
    return tuple(out)


_DIFF_KEYS = ("max-regression-pct", "noise-floor-pct", "fail-on-new-findings", "gate-measure")


def _diff_section(table: dict, where: str) -> dict:
    """The Config fields of a ``[tool.tracelint.diff]`` table."""
    out = {}
    for key, field_name in (("max-regression-pct", "diff_max_regression_pct"),
                            ("noise-floor-pct", "diff_noise_floor_pct")):
        if key in table:
            value = _number(table[key], key, where)
            if value < 0:
                raise ConfigError(f"{where} {key} must not be negative, not {value:g}")
            out[field_name] = value
    if "fail-on-new-findings" in table:
        value = table["fail-on-new-findings"]
        if not isinstance(value, bool):
            raise ConfigError(f"{where} fail-on-new-findings must be true or false, not {_kind(value)}")
        out["diff_fail_on_new_findings"] = value
    if "gate-measure" in table:
        value = table["gate-measure"]
        if value not in (TIME, MFU):
            raise ConfigError(f"{where} gate-measure must be {TIME!r} or {MFU!r}, not {value!r}")
        out["diff_gate_measure"] = value
    out["diff_thresholds"] = diff_gate_items(((k, v) for k, v in table.items() if k not in _DIFF_KEYS), where)
    return out


KNOWN_KEYS = ("select", "ignore", "per-file-ignores", "severities", "fail-on", "exclude", "extend-exclude", "trace",
              "file-time-limit", "diff", "baseline")


def parse_config(table: dict, root: Path, where: Path) -> Config:
    """The Config of a ``[tool.tracelint]`` table; every wrong key, type or value is a ConfigError naming ``where``
    and the key."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: [tool.tracelint] must be a table, not {_kind(table)}")
    unknown = sorted(set(table) - set(KNOWN_KEYS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], KNOWN_KEYS, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(KNOWN_KEYS)})"
        raise ConfigError(f"{where}: unknown [tool.tracelint] keys: {', '.join(unknown)}{hint}")
    section = f"{where}: [tool.tracelint]"
    exclude = _strings(table.get("exclude", list(DEFAULT_EXCLUDE)), "exclude", where)
    exclude += _strings(table.get("extend-exclude", []), "extend-exclude", where)
    severities = tuple((code, _severity(value, f"severities.{code}", where))
                       for code, value in _table(table.get("severities", {}), "severities", where).items())
    severity_codes = selectors([k for k, _ in severities], f"{section} severities")
    severities = tuple(zip(severity_codes, (s for _, s in severities), strict=True))
    fail_on = _severity(table.get("fail-on", "warning"), "fail-on", where)
    trace = _table(table.get("trace", {}), "trace", where)
    thresholds = threshold_items(trace.items(), f"{where}: [tool.tracelint.trace]")
    pfi = tuple((_pattern(pattern, where), selectors(_codes(codes, f"per-file-ignores.{pattern!r}", where),
                                                     f"{section} per-file-ignores"))
                for pattern, codes in _table(table.get("per-file-ignores", {}), "per-file-ignores", where).items())
    limit = table.get("file-time-limit", DEFAULT_FILE_TIME_LIMIT_S)
    baseline = table.get("baseline")
    if baseline is not None and (not isinstance(baseline, str) or not baseline.strip()):
        raise ConfigError(f"{section} baseline must be a file name, not "
                          f"{_kind(baseline) if not isinstance(baseline, str) else 'an empty string'}")
    diff = _diff_section(_table(table.get("diff", {}), "diff", where), f"{where}: [tool.tracelint.diff]")
    return Config(
        root=root,
        select=selectors(_codes(table.get("select", []), "select", where), f"{section} select"),
        ignore=selectors(_codes(table.get("ignore", []), "ignore", where), f"{section} ignore"),
        per_file_ignores=pfi,
        severities=severities,
        fail_on=fail_on,
        exclude=exclude,
        trace_thresholds=thresholds,
        file_time_limit=_number(limit, "file-time-limit", section, positive=True),
        baseline=root / baseline if baseline is not None else None,
        **diff,
    )


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to read") from None


def _tracelint_table(data: dict, path: Path) -> dict | None:
    """The ``[tool.tracelint]`` table of a parsed pyproject.toml (None: there is none)."""
    tool = data.get("tool")
    if tool is None:
        return None
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: `tool` must be a table, not {_kind(tool)}")
    return tool.get("tracelint")


# A pyproject.toml that may configure tracelint: [tool.tracelint], [tool] tracelint = ..., tool.tracelint.x = ...
_MENTIONS = re.compile(r"^[ \t]*(?:\[[ \t]*tool[ \t]*\.[ \t]*[\"']?tracelint\b|tool[ \t]*\.[ \t]*[\"']?tracelint\b"
                       r"|[\"']?tracelint[\"']?[ \t]*[.=])", re.MULTILINE)


def load_config_file(path: Path) -> Config:
    table = _tracelint_table(_read_toml(path), path)
    return parse_config({} if table is None else table, path.parent, path)


@lru_cache(maxsize=256)
def find_config(directory: Path) -> Config:
    """The config of the nearest pyproject.toml with a [tool.tracelint] table at or above ``directory``."""
    for folder in (directory, *directory.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                text = candidate.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if _MENTIONS.search(text):
                table = _tracelint_table(_read_toml(candidate), candidate)
                if table is not None:
                    return parse_config(table, folder, candidate)
    return Config(root=directory)
