"""Helpers for source-rule tests: lint a snippet written to a temp file and look at what came back."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tracelint.engine import Config, FileChecked, Finding, InputError
from tracelint.source import lint_paths


class Linted:
    def __init__(self, items: list) -> None:
        self.items = items
        self.findings = [i for i in items if isinstance(i, Finding)]
        self.errors = [i for i in items if isinstance(i, InputError)]
        self.checked = [i for i in items if isinstance(i, FileChecked)]

    def codes(self, code: str | None = None) -> list[tuple[str, int]]:
        """(code, line) pairs, in order, optionally of one code only."""
        return [(f.code, f.location.line) for f in self.findings if code is None or f.code == code]


@pytest.fixture
def lint(tmp_path: Path):
    """lint(source, name="t.py", config=None, **lint_paths options) -> Linted (source is dedented)."""

    def run(source: str, name: str = "t.py", config: Config | None = None, **options) -> Linted:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        cfg = config or Config(root=tmp_path)
        return Linted(list(lint_paths([path], config_for=lambda _p: cfg, **options)))

    return run
