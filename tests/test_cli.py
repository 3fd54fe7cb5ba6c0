"""The command line contract: dispatch, exit codes (0 clean, 1 findings, 2 errors), streams."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def tracelint(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracelint", *args], capture_output=True, text=True, cwd=cwd, env=env)


def test_usage_errors_exit_2_without_traceback(tmp_path: Path):
    for args in (["check", "--no-such-flag", "x.py"], ["rule", "TL999"], ["check"], ["check", "--format", "xml", "a.py"]):
        proc = tracelint(*args, cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert proc.stdout == ""


def test_missing_path_is_an_input_error(tmp_path: Path):
    proc = tracelint("missing.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert "missing.py: no such file or directory" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_config_is_a_usage_error(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("[tool.tracelint]\nfail-on = 3\n")
    (tmp_path / "a.py").write_text("x = 1\n")
    proc = tracelint("check", "a.py", cwd=tmp_path)
    assert proc.returncode == 2 and "pyproject.toml" in proc.stderr and "Traceback" not in proc.stderr


def test_rule_prints_catalog_file(repo: Path):
    docs = sorted((repo / "rules").glob("TL*.md"))
    if not docs:
        pytest.skip("no rule files yet")
    code = docs[0].name.split("-")[0]
    proc = tracelint("rule", code.lower())
    assert proc.returncode == 0
    assert proc.stdout.strip() == docs[0].read_text(encoding="utf-8").strip()
    listing = tracelint("rules")
    assert listing.returncode == 0
    assert all(d.name.split("-")[0] in listing.stdout for d in docs)


def test_version():
    proc = tracelint("--version")
    assert proc.returncode == 0 and "tracelint" in proc.stdout
