#!/usr/bin/env python3
"""Fetch the labeled corpus's files into a cache directory outside the repository.

The corpus is public training code; only the list of sources (``sources.json``: repo, commit, paths), the labels
and these scripts are kept in the project. The code itself goes to the cache directory, laid out as
``CACHE/<owner>+<name>/<path>`` at the recorded commit.

Two ways to get a repository:

* with internet access (default): ``git init --bare`` in a temporary directory, ``git fetch --depth 1 origin COMMIT``
  from ``https://github.com/OWNER/NAME`` (GitHub serves a commit by its id), then ``git show COMMIT:PATH`` for each
  listed path;
* from an existing git directory (a bare mirror or a clone that contains the commit): ``--mirror-root DIR``, where
  the repository is looked up as ``DIR/<owner>+<name>/repo`` (or ``.../repo/.git``), ``DIR/<owner>+<name>``,
  ``DIR/<owner>/<name>`` or ``DIR/<name>``, e.g. ``--mirror-root /work/.mirror``.

Usage::

    python bench/corpus/fetch.py                                   # clone from GitHub into /tmp/tracelint-corpus
    python bench/corpus/fetch.py --mirror-root /work/.mirror       # read existing git dirs, no network
    python bench/corpus/fetch.py --cache DIR                       # or TRACELINT_CORPUS_CACHE=DIR
    python bench/corpus/fetch.py --set heldout --mirror-root /work/.mirror   # the held-out set (heldout/sources.json)

Every file is checked out at the recorded commit; a repository whose mirror does not hold that commit is an error.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = os.environ.get("TRACELINT_CORPUS_CACHE", "/tmp/tracelint-corpus")
# the labeled sets: the corpus the rules were tuned on, and the held-out set labeled before the changes of issue #29
SETS = {"main": HERE, "heldout": HERE / "heldout"}


def set_dir(name: str) -> Path:
    """The folder holding a set's ``sources.json`` and ``labels.csv``."""
    return SETS[name]


def load_sources(path: Path = HERE / "sources.json") -> list[dict]:
    return json.loads(path.read_text())["sources"]


def repo_dir(repo: str) -> str:
    return repo.replace("/", "+")


def _git(gitdir: Path, *args: str) -> bytes:
    return subprocess.check_output(["git", "--git-dir", str(gitdir), *args], stderr=subprocess.PIPE)


def find_mirror(root: Path, repo: str) -> Path | None:
    owner, name = repo.split("/")
    for cand in (root / f"{owner}+{name}" / "repo" / ".git", root / f"{owner}+{name}" / "repo",
                 root / f"{owner}+{name}", root / owner / name / ".git", root / owner / name,
                 root / name / ".git", root / name):
        if (cand / "HEAD").is_file() and (cand / "objects").is_dir():
            return cand
    return None


def clone(repo: str, commit: str, workdir: Path) -> Path:
    gitdir = workdir / repo_dir(repo)
    url = f"https://github.com/{repo}"
    subprocess.check_call(["git", "init", "--bare", "-q", str(gitdir)])
    subprocess.check_call(["git", "--git-dir", str(gitdir), "remote", "add", "origin", url])
    subprocess.check_call(["git", "--git-dir", str(gitdir), "fetch", "-q", "--depth", "1", "origin", commit])
    return gitdir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=DEFAULT_CACHE, help="where the files go (default %(default)s)")
    ap.add_argument("--mirror-root", help="read repositories from existing git dirs under this folder")
    ap.add_argument("--set", choices=sorted(SETS), default="main",
                    help="which labeled set's sources to fetch (default %(default)s; heldout: heldout/sources.json)")
    ap.add_argument("--sources", help="a sources.json to fetch instead of the set's")
    args = ap.parse_args(argv)
    sources = Path(args.sources) if args.sources else set_dir(args.set) / "sources.json"
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    n = 0
    with tempfile.TemporaryDirectory() as tmp:
        for src in load_sources(sources):
            repo, commit = src["repo"], src["commit"]
            if args.mirror_root:
                gitdir = find_mirror(Path(args.mirror_root), repo)
                if gitdir is None:
                    print(f"error: no git dir for {repo} under {args.mirror_root}", file=sys.stderr)
                    return 1
            else:
                gitdir = clone(repo, commit, Path(tmp))
            for p in src["paths"]:
                try:
                    data = _git(gitdir, "show", f"{commit}:{p}")
                except subprocess.CalledProcessError as e:
                    print(f"error: {repo}@{commit[:10]}:{p}: {e.stderr.decode().strip()}", file=sys.stderr)
                    return 1
                dest = cache / repo_dir(repo) / p
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
                n += 1
            (cache / repo_dir(repo) / ".commit").write_text(commit + "\n")
    print(f"{n} files in {cache}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
