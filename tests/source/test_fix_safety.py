"""--fix never loses a byte (issue #11): a file edited while it is being fixed keeps the edit, a read-only file is
reported, a symlink's target is fixed and the link kept, hard links stay one inode, mode, owner and group stay."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tracelint.engine import Config, FileChecked, InputError
from tracelint.source import fix as fix_module
from tracelint.source import lint_paths
from tracelint.source.document import read_document
from tracelint.source.fix import CHANGED, READ_ONLY, NotWritten, Snapshot, write_atomic

# Three safe fixes in two passes: TL202 pin_memory and TL301 zero_grad, then TL203 non_blocking on the pinned batch.
SCRIPT = """\
import torch
from torch.utils.data import DataLoader

loader = DataLoader(
    ds,
    batch_size=32,
)
for x, y in loader:
    x = x.to(device)
    optimizer.zero_grad(set_to_none=False)
"""


def is_fixed(text: str) -> bool:
    return "pin_memory=True" in text and "optimizer.zero_grad()" in text and "non_blocking=True" in text


def run(path: Path) -> tuple[list[str], int]:
    """Fix ``path`` through the public API: (error messages, fixes written)."""
    config = Config(root=path.parent)
    items = list(lint_paths([path], config_for=lambda _p: config, fix=True))
    return [i.message for i in items if isinstance(i, InputError)], sum(i.fixed for i in items
                                                                        if isinstance(i, FileChecked))


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tracelint" in p.name)


LINE = "# appended by someone else\n"
NOT_WRITTEN, WRITTEN, RACE = "kept, fixes not written", "kept, fixes written", "a race write_atomic leaves open"


class Interleaved:
    """Stands for ``os`` in tracelint.source.fix: another writer's line lands just before the fixer's system call
    number ``at`` (from 0) and nowhere else, as if that writer had run exactly then. ``calls`` names the calls made;
    the stat by path that ends the checks before the rename or the in-place write is called "last look"."""

    def __init__(self, at: int, append) -> None:
        self.at, self.append, self.calls = at, append, []

    def __getattr__(self, name: str):
        real = getattr(os, name)
        if not callable(real):
            return real

        def call(*args, **kwargs):
            if len(self.calls) == self.at:
                self.append()
            self.calls.append("last look" if name == "stat" and kwargs.get("follow_symlinks") is False else name)
            return real(*args, **kwargs)

        return call


def promised(writer: str, done: list[str]) -> str:
    """What write_atomic's docstring promises for a line appended after the fixer's system calls ``done``."""
    if writer == "hard-linked":  # written in place
        if "last look" not in done:
            return NOT_WRITTEN
        # between the last look and the write the line "can be overwritten unseen"; after the write it follows it
        return WRITTEN if "write" in done[done.index("last look"):] else RACE
    if "replace" not in done:  # seen by a look before the rename, or by the one after it in the replaced inode
        return NOT_WRITTEN
    if writer == "kept-open":  # into the replaced inode: caught by the look after the rename, "not caught" after it
        return RACE if "fstat" in done[done.index("replace"):] else NOT_WRITTEN
    return WRITTEN  # opened by name after the rename: the fixed file


@pytest.mark.parametrize("writer", ["open-per-line", "kept-open", "hard-linked"])
def test_a_line_appended_between_any_two_system_calls_of_the_fix_is_kept(tmp_path, monkeypatch, writer):
    """Another writer appends a line between two of the fixer's system calls (or after the last one): once for
    every such point, each on a file of its own. The line is kept at every point but in the two races write_atomic's
    docstring names, and the fixes are written or not as it promises. (This was a thread appending while 20 fixes
    ran, which needed it to have run during each: on a busy machine it sometimes had not.)"""

    def trial(folder: Path, at: int) -> tuple[Interleaved, str, list[str], int]:
        folder.mkdir()
        path = folder / "train.py"
        path.write_text(SCRIPT, encoding="utf-8")
        if writer == "hard-linked":  # written in place rather than renamed over
            os.link(path, folder / "link.py")
        handle = open(path, "a", encoding="utf-8") if writer == "kept-open" else None  # noqa: SIM115

        def append() -> None:
            if handle is not None:
                handle.write(LINE)
                handle.flush()
            else:
                with open(path, "a", encoding="utf-8") as f:
                    f.write(LINE)

        calls = Interleaved(at, append)
        try:
            with monkeypatch.context() as m:
                m.setattr(fix_module, "os", calls)
                errors, fixed = run(path)
            if at >= len(calls.calls):  # after the last call
                append()
        finally:
            if handle is not None:
                handle.close()
        assert leftovers(folder) == []
        return calls, path.read_text(encoding="utf-8"), errors, fixed

    reference, text, errors, fixed = trial(tmp_path / "undisturbed", -1)
    assert is_fixed(text) and not errors and fixed == 3
    outcomes = []
    for at in range(len(reference.calls) + 1):
        done = reference.calls[:at]
        calls, new_text, errors, fixed = trial(tmp_path / f"at_{at}", at)
        assert calls.calls[:at] == done
        outcomes.append(promised(writer, done))
        where = f"a line appended after {done}: {outcomes[-1]}? {errors}"
        if outcomes[-1] == NOT_WRITTEN:
            assert new_text == SCRIPT + LINE and fixed == 0 and len(errors) == 1 and CHANGED in errors[0], where
        elif outcomes[-1] == WRITTEN:
            assert new_text == text + LINE and fixed == 3 and not errors, where
        else:
            assert new_text.startswith(text) and fixed == 3 and not errors, where
    assert NOT_WRITTEN in outcomes and set(outcomes) - {NOT_WRITTEN}, outcomes  # the checks fire; fixes get written


def late_edits(monkeypatch, path: Path, count: int) -> None:
    """The next ``count`` renames onto ``path`` find a line appended after the fixer's last look (a write that lands
    in the window between the check and the rename)."""
    real_replace, left = os.replace, [count]

    def replace(src, dst):
        if Path(dst) == path and left[0]:
            with open(path, "a", encoding="utf-8") as f:
                f.write(f"# late edit {count - left[0] + 1}\n")
            left[0] -= 1
        real_replace(src, dst)

    monkeypatch.setattr(fix_module.os, "replace", replace)


def test_a_write_between_the_last_check_and_the_rename_is_put_back(tmp_path, monkeypatch):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT, encoding="utf-8")
    late_edits(monkeypatch, path, 1)
    errors, fixed = run(path)
    assert path.read_text(encoding="utf-8") == SCRIPT + "# late edit 1\n"
    assert fixed == 0 and len(errors) == 1 and CHANGED in errors[0]
    assert leftovers(tmp_path) == []


def test_when_putting_it_back_races_too_the_edit_is_kept_beside_the_file(tmp_path, monkeypatch):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT, encoding="utf-8")
    late_edits(monkeypatch, path, 2)
    errors, fixed = run(path)
    assert path.read_text(encoding="utf-8") == SCRIPT + "# late edit 1\n"
    [kept] = leftovers(tmp_path)
    assert kept.startswith("train.py.") and kept.endswith(".tracelint-kept") and kept in errors[0]
    assert fixed == 0 and CHANGED in errors[0]
    kept_text = (tmp_path / kept).read_text(encoding="utf-8")
    assert is_fixed(kept_text) and kept_text.endswith("# late edit 2\n")  # the fixed file, edited in the window


def test_write_atomic_checks_the_bytes_and_the_snapshot(tmp_path):
    path = tmp_path / "a.py"
    path.write_bytes(b"old\n")
    snapshot = Snapshot.of(path)
    with open(path, "ab") as f:
        f.write(b"edit\n")
    for expected in (b"old\n", snapshot):
        with pytest.raises(NotWritten, match=CHANGED):
            write_atomic(path, b"new\n", expected)
        assert path.read_bytes() == b"old\nedit\n"
    write_atomic(path, b"new\n", Snapshot.of(path))
    assert path.read_bytes() == b"new\n"
    write_atomic(path, b"newer\n", b"new\n")
    write_atomic(path, b"newest\n")  # the two-argument call still works
    assert path.read_bytes() == b"newest\n"
    assert leftovers(tmp_path) == []


def notebook(source: str) -> dict:
    return {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                       "source": source.splitlines(keepends=True)}],
            "metadata": {"kernelspec": {"language": "python", "name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}


def test_write_atomic_checks_a_document_as_read(tmp_path):
    path = tmp_path / "a.py"
    path.write_bytes("# -*- coding: latin-1 -*-\n# caf\xe9\n".encode("latin-1"))
    doc = read_document(path)
    with open(path, "ab") as f:
        f.write(b"# edit\n")
    with pytest.raises(NotWritten, match=CHANGED):
        write_atomic(path, b"new\n", doc)
    write_atomic(path, b"new\n", read_document(path))
    assert path.read_bytes() == b"new\n"

    nb_path = tmp_path / "a.ipynb"
    nb_path.write_text(json.dumps(notebook("x = 'caf\xe9'\n"), indent=1), encoding="utf-8")  # escaped: not canonical
    doc = read_document(nb_path)
    assert doc.to_bytes() != nb_path.read_bytes()
    nb_path.write_text(json.dumps(notebook("x = 'caf\xe9'\n"), indent=2), encoding="utf-8")  # reformatted only
    write_atomic(nb_path, b"{}\n", doc)
    assert nb_path.read_bytes() == b"{}\n"
    nb_path.write_text(json.dumps(notebook("x = 1\n"), indent=1), encoding="utf-8")
    doc = read_document(nb_path)
    nb_path.write_text(json.dumps(notebook("x = 1\ny = 2\n"), indent=1), encoding="utf-8")  # a cell edited
    with pytest.raises(NotWritten, match=CHANGED):
        write_atomic(nb_path, b"{}\n", doc)
    assert leftovers(tmp_path) == []


def test_notebook_in_another_json_formatting_is_still_fixed(tmp_path):
    path = tmp_path / "train.ipynb"
    path.write_text(json.dumps(notebook(SCRIPT + "# caf\xe9\n"), indent=1), encoding="utf-8")  # ensure_ascii escapes
    errors, fixed = run(path)
    assert not errors and fixed == 3
    cell = "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"])
    assert is_fixed(cell) and cell.endswith("# caf\xe9\n")


def test_read_only_file_is_reported_and_left_alone(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT, encoding="utf-8")
    os.chmod(path, 0o444)
    inode = path.stat().st_ino
    errors, fixed = run(path)  # root could write it; the mode bits say no, so the tool does not
    assert fixed == 0 and len(errors) == 1 and READ_ONLY in errors[0]
    assert path.read_text(encoding="utf-8") == SCRIPT
    assert stat.S_IMODE(path.stat().st_mode) == 0o444 and path.stat().st_ino == inode
    assert leftovers(tmp_path) == []


def test_symlink_target_is_fixed_and_the_link_stays_a_link(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "train.py"
    target.write_text(SCRIPT, encoding="utf-8")
    link = tmp_path / "train.py"
    link.symlink_to(os.path.join("real", "train.py"))
    errors, fixed = run(link)
    assert not errors and fixed == 3
    assert link.is_symlink() and os.readlink(link) == os.path.join("real", "train.py")
    assert is_fixed(target.read_text(encoding="utf-8"))
    assert leftovers(tmp_path) == [] and leftovers(tmp_path / "real") == []


def test_hard_links_stay_one_inode_with_the_fixed_content(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT, encoding="utf-8")
    other = tmp_path / "other_name.py"
    os.link(path, other)
    inode = path.stat().st_ino
    errors, fixed = run(path)
    assert not errors and fixed == 3
    assert path.stat().st_ino == other.stat().st_ino == inode and path.stat().st_nlink == 2
    assert is_fixed(path.read_text(encoding="utf-8")) and is_fixed(other.read_text(encoding="utf-8"))
    assert leftovers(tmp_path) == []  # the backup is gone once the write is verified


def test_hard_linked_file_changed_while_fixing_is_not_written(tmp_path):
    path = tmp_path / "a.py"
    path.write_bytes(b"old\n")
    os.link(path, tmp_path / "b.py")
    with open(path, "ab") as f:
        f.write(b"edit\n")
    with pytest.raises(NotWritten, match=CHANGED):
        write_atomic(path, b"new\n", b"old\n")
    assert (tmp_path / "b.py").read_bytes() == b"old\nedit\n"
    assert leftovers(tmp_path) == []


def test_mode_owner_and_group_are_kept(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT, encoding="utf-8")
    os.chmod(path, 0o640)
    owner = (path.stat().st_uid, path.stat().st_gid)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        owner = (1234, 5678)  # someone else's file, as root fixes it
        os.chown(path, *owner)
    errors, fixed = run(path)
    assert not errors and fixed == 3 and is_fixed(path.read_text(encoding="utf-8"))
    st = path.stat()
    assert (st.st_uid, st.st_gid) == owner and stat.S_IMODE(st.st_mode) == 0o640
    assert leftovers(tmp_path) == []
