"""The pre-commit hook (.pre-commit-hooks.yaml) works from a git repository: it fails on a bad file and passes on
a clean one. Builds the hook's environment with pip (about a minute); nothing is installed outside tmp_path."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BAD = "import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader(ds, num_workers=4)\n"
CLEAN = ("import torch\nfrom torch.utils.data import DataLoader\n"
         "loader = DataLoader(ds, num_workers=4, pin_memory=True)\n")
HOOK_REPO_CONTENT = ("tracelint", "rules", "pyproject.toml", "README.md", ".pre-commit-hooks.yaml")


def git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def hook_repo(repo: Path, tmp_path: Path) -> tuple[Path, str]:
    """A committed copy of the working tree (the lead commits on its own schedule; uncommitted files count)."""
    if shutil.which("git") is None or importlib.util.find_spec("pre_commit") is None:
        pytest.skip("needs git and the pre-commit package (pip install -e '.[test]')")
    copy = tmp_path / "hook-repo"
    copy.mkdir()
    for name in HOOK_REPO_CONTENT:
        source = repo / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, copy / name)
    git("init", "-q", cwd=copy)
    git("add", ".", cwd=copy)
    git("commit", "-q", "-m", "hook", cwd=copy)
    return copy, git("rev-parse", "HEAD", cwd=copy).strip()


def test_hook_fails_on_bad_file_and_passes_on_clean_one(hook_repo, tmp_path):
    hook_path, sha = hook_repo
    project = tmp_path / "project"
    project.mkdir()
    git("init", "-q", cwd=project)
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {hook_path}\n    rev: {sha}\n    hooks:\n      - id: tracelint\n")
    (project / "train.py").write_text(BAD)
    (project / "README.txt").write_text("not python\n")
    git("add", ".", cwd=project)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-cache")}

    def pre_commit() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=600)

    failed = pre_commit()
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "train.py:3:" in failed.stdout and "TL202" in failed.stdout

    (project / "train.py").write_text(CLEAN)
    git("add", ".", cwd=project)
    passed = pre_commit()
    assert passed.returncode == 0, passed.stdout + passed.stderr
