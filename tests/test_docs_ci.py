"""docs/ci.md runs as written: every command of its ```sh blocks, in order, in a folder laid out as the page says
(src/, traces/main/, traces/pr/, runs/), with `tracelint` on PATH. A trailing `# exit N` is the exit code expected
(none: 0); `# needs: gpu | network | noise-data` skips with the reason."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shared import REPO

DOC = REPO / "docs" / "ci.md"
FIXTURES = REPO / "fixtures"
_BLOCK = re.compile(r"^[ \t]*```sh[ \t]*\n(.*?)^[ \t]*```", re.MULTILINE | re.DOTALL)
_COMMENT = re.compile(r"\s+#\s*(.*)$")


def commands(text: str) -> list[tuple[int, str, str]]:
    """(line number, command, trailing comment) of every command in the page's ```sh blocks; a line ending in a
    backslash continues on the next."""
    out = []
    for block in _BLOCK.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        pending, start = "", first
        for offset, raw in enumerate(block.group(1).splitlines()):
            line = raw.strip()
            if not pending:
                start = first + offset
            if not line or (line.startswith("#") and not pending):
                continue
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            full = pending + line
            pending = ""
            match = _COMMENT.search(full)
            comment = match.group(1) if match else ""
            out.append((start, full[: match.start()] if match else full, comment))
    return out


COMMANDS = commands(DOC.read_text(encoding="utf-8"))
_FILE_BLOCK = re.compile(r"^```\w*\n# file: (\S+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def files(text: str) -> dict[str, str]:
    """The page's files: a fenced block whose first line is ``# file: NAME`` is written to NAME before the commands
    run (the pre-commit config of section 1)."""
    return {m.group(1): m.group(2) for m in _FILE_BLOCK.finditer(text)}


SKIPS = {"gpu": "needs a CUDA GPU (CI has none)", "network": "needs the network (CI runs the tests offline)",
         "noise-data": "needs the recorded GPU repeats, which are not in the repository (tests/diff/test_gate.py "
                       "runs the same script on fixture copies)"}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> tuple[Path, dict]:
    """The layout docs/ci.md describes, and the environment its commands run in."""
    root = tmp_path_factory.mktemp("ci-project")
    (root / "src").mkdir()
    shutil.copy(FIXTURES / "examples" / "train.py", root / "src" / "train.py")
    traces = FIXTURES / "traces"
    for folder, name in (("traces/main", "item_per_step_fixed"), ("traces/pr", "item_per_step"),
                         ("runs/main/1", "item_per_step_fixed"), ("runs/main/2", "item_per_step_fixed"),
                         ("runs/pr/1", "item_per_step"), ("runs/pr/2", "item_per_step")):
        (root / folder).mkdir(parents=True)
        shutil.copy(traces / f"{name}.pt.trace.json.gz", root / folder / "train.pt.trace.json.gz")
    for name, text in files(DOC.read_text(encoding="utf-8")).items():  # the files the page shows, as it shows them
        (root / name).write_text(text, encoding="utf-8")
    bin_dir = root / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "tracelint"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m tracelint \"$@\"\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(REPO),
           "GITHUB_STEP_SUMMARY": str(root / "step-summary.md")}
    env.pop("GITHUB_ACTIONS", None)
    return root, env


def test_the_page_has_commands_and_the_readme_links_it():
    assert len(COMMANDS) >= 10
    assert "docs/ci.md" in (REPO / "README.md").read_text(encoding="utf-8")


def _skip_reason(comment: str) -> str | None:
    needs = re.search(r"needs:\s*([\w-]+)", comment)
    if not needs:
        return None
    need = needs.group(1)
    return SKIPS.get(need, f"needs {need}")


@pytest.fixture(scope="module")
def ran(project) -> dict[int, subprocess.CompletedProcess | str]:
    """Every command of the page, run in order in the project (one after the other: later ones read what earlier
    ones wrote), by line; a skipped one as its reason."""
    root, env = project
    out: dict[int, subprocess.CompletedProcess | str] = {}
    for line, command, comment in COMMANDS:
        reason = _skip_reason(comment)
        out[line] = reason if reason else subprocess.run(["bash", "-c", command], cwd=root, env=env,
                                                         capture_output=True, text=True, timeout=300)
    return out


@pytest.mark.parametrize(("line", "command", "comment"), COMMANDS,
                         ids=[f"L{line}:{cmd.split()[1] if len(cmd.split()) > 1 else cmd}" for line, cmd, _ in
                              COMMANDS])
def test_command(ran, line, command, comment):
    proc = ran[line]
    if isinstance(proc, str):
        pytest.skip(proc)
    expected = re.search(r"\bexit (\d+)", comment)
    assert proc.returncode == (int(expected.group(1)) if expected else 0), (
        f"docs/ci.md:{line}: {command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    assert "Traceback" not in proc.stderr


def test_what_the_commands_wrote(project, ran):
    """The SARIF files the page's commands wrote are valid, and the step summary is the markdown report."""
    from tests.render.test_sarif import assert_valid_sarif

    root, _ = project
    written = [cmd for _, cmd, _ in COMMANDS if "-o tracelint" in cmd and "--format sarif" in cmd]
    assert written
    for name in ("tracelint.sarif", "tracelint-trace.sarif"):
        log = json.loads((root / name).read_text(encoding="utf-8"))
        assert_valid_sarif(log)
        assert log["runs"][0]["results"]
    hook = next(ran[line] for line, cmd, _ in COMMANDS if cmd.strip() == "pre-commit run tracelint")
    assert "tracelint" in hook.stdout and "Failed" in hook.stdout  # the hook ran, on the staged file, and failed
    assert sum(line.startswith("src/train.py:") for line in hook.stdout.splitlines()) == 4, hook.stdout
    summary = (root / "step-summary.md").read_text(encoding="utf-8")
    assert summary.startswith("### tracelint diff: ") and "new finding: TL101" in summary
