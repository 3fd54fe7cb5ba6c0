"""Settings from ``[tool.tracelint]`` in pyproject.toml, with command-line overrides.

Source files take the nearest pyproject.toml that has a ``[tool.tracelint]`` table, looking up from the file;
traces take the one found from the working directory. Keys::

    [tool.tracelint]
    select = ["TL1", "TL201"]          # code prefixes; default: every rule
    ignore = ["TL104"]
    per-file-ignores = { "tests/*" = ["TL101"] }
    severities = { TL101 = "error" }
    fail-on = "warning"                # info | warning | error
    exclude = [".git", ".venv", ...]   # replaces the default directory excludes
    extend-exclude = ["legacy/"]

    [tool.tracelint.trace]             # thresholds (tracelint.engine.thresholds; `tracelint thresholds`)
    min-gpu-busy-pct = 80
    max-h2d-pct-of-gpu-busy = 10
    min-matmul-tensor-core-pct = 50

Codes and code prefixes are case-insensitive. A selector that matches no rule and a threshold key that is not
declared are errors (ConfigError, exit 2 on the command line) naming the closest valid one: a CI gate that passes
because of a typo is worse than none.
"""
from __future__ import annotations

import difflib
import fnmatch
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
    "site-packages", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints",
    ".eggs", "*.egg-info",
)


class ConfigError(Exception):
    pass


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

    def enabled(self, code: str) -> bool:
        if self.select and not any(code.startswith(p) for p in self.select):
            return False
        return not any(code.startswith(p) for p in self.ignore)

    def ignored_for(self, path: str, code: str) -> bool:
        try:
            rel = PurePosixPath(Path(path).resolve().relative_to(self.root.resolve()).as_posix())
        except ValueError:
            rel = PurePosixPath(Path(path).as_posix())
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


def _strings(value, key: str, where: Path) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: [tool.tracelint] {key} must be a list of strings")
    return tuple(value)


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
    """(key, value) pairs of declared threshold keys; ConfigError naming ``where`` for an unknown key."""
    out = []
    for key, value in items:
        message = unknown_key_message(key)
        if message is not None:
            raise ConfigError(f"{where}: {message}")
        out.append((key, value))
    return tuple(out)


def parse_config(table: dict, root: Path, where: Path) -> Config:
    known = {"select", "ignore", "per-file-ignores", "severities", "fail-on", "exclude", "extend-exclude", "trace"}
    unknown = set(table) - known
    if unknown:
        raise ConfigError(f"{where}: unknown [tool.tracelint] keys: {', '.join(sorted(unknown))}")
    exclude = _strings(table.get("exclude", list(DEFAULT_EXCLUDE)), "exclude", where)
    exclude += _strings(table.get("extend-exclude", []), "extend-exclude", where)
    try:
        severities = tuple((k, Severity.parse(v)) for k, v in table.get("severities", {}).items())
        fail_on = Severity.parse(table.get("fail-on", "warning"))
        thresholds = tuple((k, float(v)) for k, v in table.get("trace", {}).items())
        pfi_table = table.get("per-file-ignores", {})
        pfi_items = list(pfi_table.items())
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    section = f"{where}: [tool.tracelint]"
    thresholds = threshold_items(thresholds, f"{where}: [tool.tracelint.trace]")
    severity_codes = selectors([k for k, _ in severities], f"{section} severities")
    severities = tuple(zip(severity_codes, (s for _, s in severities), strict=True))
    pfi = tuple((pat, selectors(_strings(codes, "per-file-ignores", where), f"{section} per-file-ignores"))
                for pat, codes in pfi_items)
    return Config(
        root=root,
        select=selectors(_strings(table.get("select", []), "select", where), f"{section} select"),
        ignore=selectors(_strings(table.get("ignore", []), "ignore", where), f"{section} ignore"),
        per_file_ignores=pfi,
        severities=severities,
        fail_on=fail_on,
        exclude=exclude,
        trace_thresholds=thresholds,
    )


def load_config_file(path: Path) -> Config:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return parse_config(data.get("tool", {}).get("tracelint", {}), path.parent, path)


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
            if "[tool.tracelint" in text:
                return load_config_file(candidate)
    return Config(root=directory)
