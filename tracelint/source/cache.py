"""The source half's on-disk cache (issue #35): what a file's analysis gave, keyed by everything it depends on, so that
a run on unchanged files neither parses them nor imports libcst.

Laid out as ruff's: a folder (``.tracelint_cache`` at the project root, or ``--cache-dir``) holding a ``.gitignore``
that ignores it all and a CACHEDIR.TAG; inside, one folder per build of tracelint (``fingerprint``: its version and a
hash of its own source, the rule catalog, Python's and libcst's versions: a change in any of them starts afresh),
and one file per entry, named by the digest of its key (``key``). An entry is written to a temporary file and renamed
into place; an entry that cannot be read, or holds anything but what was written, is a miss, never an error.
Nothing is written beside the user's files.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import pickle
import sys
from functools import lru_cache
from pathlib import Path

FOLDER = ".tracelint_cache"
_MAGIC = b"tracelint-cache 1\n"
_GITIGNORE = "# Created by tracelint: everything here is a cache.\n*\n"
_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
        "# This file is a cache directory tag created by tracelint.\n"
        "# For information about cache directory tags see https://bford.info/cachedir/\n")


def default_folder(cwd: Path | None = None) -> Path:
    """``.tracelint_cache`` in the project the command runs in: the nearest folder at or above the working directory
    holding a pyproject.toml or .git, else the working directory (ruff's rule for ``.ruff_cache``)."""
    cwd = (cwd or Path.cwd()).resolve()
    for folder in (cwd, *cwd.parents):
        if (folder / "pyproject.toml").is_file() or (folder / ".git").exists():
            return folder / FOLDER
    return cwd / FOLDER


@lru_cache(maxsize=1)
def fingerprint() -> str:
    """The build of tracelint (and of what its results depend on) the entries were made by."""
    from tracelint.engine.catalog import catalog_dir
    from tracelint.engine.version import __version__

    digest = hashlib.blake2b(digest_size=12)
    digest.update(sys.version.encode())
    package = Path(__file__).resolve().parent.parent
    files = sorted(package.rglob("*.py"))
    files += sorted(catalog_dir().glob("*.md"))
    spec = importlib.util.find_spec("libcst")  # finds it without importing it
    if spec is not None and spec.origin:
        files.append(Path(spec.origin).parent / "_version.py")
    for file in files:
        try:
            data = file.read_bytes()
        except OSError:
            data = b"(unreadable)"
        digest.update(f"{file.name}:{len(data)}:".encode())
        digest.update(data)
    return f"{__version__}-{digest.hexdigest()}"


def canonical(value: object) -> str:
    """``value`` as text that is the same in every process for equal values: sets and dicts sorted (the order of a
    set of strings changes with each process's hash seed), dataclasses field by field."""
    if isinstance(value, dict):
        return "{" + ",".join(sorted(f"{canonical(k)}:{canonical(v)}" for k, v in value.items())) + "}"
    if isinstance(value, (set, frozenset)):
        return "<" + ",".join(sorted(canonical(v) for v in value)) + ">"
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(canonical(v) for v in value) + ")"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ",".join(f"{f.name}={canonical(getattr(value, f.name))}" for f in dataclasses.fields(value))
        return f"{type(value).__name__}({fields})"
    return repr(value)


def content_digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=20).hexdigest()


def key(*parts: object) -> str:
    """The digest naming the entry for ``parts`` (anything ``canonical`` writes)."""
    return hashlib.blake2b(canonical(parts).encode("utf-8", "surrogatepass"), digest_size=20).hexdigest()


class Cache:
    """The entries of this build of tracelint under ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._build = self.folder / fingerprint()
        self._ready = False

    def __reduce__(self):  # to a worker process: the folder only
        return (Cache, (self.folder,))

    def _path(self, digest: str) -> Path:
        return self._build / digest[:2] / digest[2:]

    def get(self, digest: str) -> object | None:
        """The value stored under ``digest``; None when there is none or it cannot be read."""
        try:
            with open(self._path(digest), "rb") as file:
                data = file.read()
        except OSError:
            return None
        if not data.startswith(_MAGIC):
            return None
        try:
            return pickle.loads(memoryview(data)[len(_MAGIC):])
        except Exception:  # noqa: BLE001 - a damaged or foreign entry is a miss
            return None

    def put(self, digest: str, value: object) -> None:
        """Store ``value`` (picklable) under ``digest``; a cache that cannot be written is left alone, silently."""
        try:
            data = _MAGIC + pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - not picklable (a deeply nested value): not cached
            return
        path = self._path(digest)
        try:
            self._prepare()
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(path, data)
        except OSError:
            pass

    def _prepare(self) -> None:
        """The folder, its .gitignore and its CACHEDIR.TAG, made once."""
        if self._ready:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        for name, text in ((".gitignore", _GITIGNORE), ("CACHEDIR.TAG", _TAG)):
            if not (self.folder / name).exists():
                _write_atomic(self.folder / name, text.encode("ascii"))
        self._ready = True


def _write_atomic(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` or what it held: written beside it under a name no other writer uses, then renamed
    over it (the mode the umask gives, as any file the user's tools write)."""
    tmp = path.with_name(f".tmp-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        with open(tmp, "xb") as file:
            file.write(data)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
