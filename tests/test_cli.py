"""The command line contract: dispatch, exit codes (0 clean, 1 findings, 2 errors), streams."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def tracelint(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracelint", *args], capture_output=True, text=True, cwd=cwd, env=env)


def test_usage_errors_exit_2_without_traceback(tmp_path: Path):
    usage_errors = (["check", "--no-such-flag", "x.py"], ["rule", "TL999"], ["check"],
                    ["check", "--format", "xml", "a.py"], ["verify", "--format", "xml", "a.py"])
    for args in usage_errors:
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


def test_output_file_and_formats_are_shared_by_lint_and_verify(tmp_path: Path):
    """`--format` and `-o` are one definition (tracelint.cli.format_option / output_option / emit) for every command."""
    from tracelint.render import formats

    (tmp_path / "a.py").write_text("x = 1\n")
    proc = tracelint("check", "a.py", "--format", "json", "-o", "out.json", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == ""
    assert (tmp_path / "out.json").read_text().startswith("{")
    for command in ("check", "verify"):
        shown = tracelint(command, "--help")
        assert shown.returncode == 0 and f"[{'|'.join(formats())}]" in shown.stdout.replace("\n", " ")
