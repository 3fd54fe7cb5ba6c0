"""Applying fixes: edits to text (also used by the verify mode to write patched copies) and writing fixed files
without losing anyone's bytes (see ``write_atomic``)."""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tracelint.engine import Edit, Finding, Fix

_NEWLINE = re.compile(r"\r\n|\r|\n")  # Python's line breaks; str.splitlines also splits at \f, \x1c, \u2028...


def _offsets(text: str) -> list[int]:
    """Offset of the start of each line (1-based line n starts at offsets[n-1])."""
    return [0, *(m.end() for m in _NEWLINE.finditer(text)), len(text)]


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """``text`` with the edits applied (positions refer to the original text; edits must not overlap)."""
    starts = _offsets(text)

    def offset(line: int, column: int) -> int:
        if line > len(starts) - 1:  # a position at the very end of a file without a final newline
            return len(text)
        return starts[line - 1] + column - 1  # columns are 1-based

    spans = sorted(((offset(e.line, e.column), offset(e.end_line, e.end_column), e.text) for e in edits), reverse=True)
    previous_start = len(text) + 1
    for start, end, new in spans:
        if end > previous_start:
            raise ValueError(f"overlapping edits at offset {start}")
        text = text[:start] + new + text[end:]
        previous_start = start
    return text


def _key(edit: Edit) -> tuple[int, int, int, int]:
    return (edit.line, edit.column, edit.end_line, edit.end_column)


def choose_fixes(findings: Sequence[Finding], *, unsafe: bool) -> list[Fix]:
    """The fixes to apply in one pass: safe ones (and unsafe ones when asked), skipping any that overlap an earlier
    chosen fix (the next pass, on the fixed text, picks them up)."""
    chosen: list[Fix] = []
    taken: list[tuple[int, int, int, int]] = []
    seen: set[tuple] = set()
    for finding in findings:
        fix = finding.fix
        if fix is None or not fix.edits or (not fix.safe and not unsafe):
            continue
        keys = tuple(_key(e) for e in fix.edits)
        if (keys, tuple(e.text for e in fix.edits)) in seen:
            continue
        if any(_overlaps(k, t) for k in keys for t in taken):
            continue
        seen.add((keys, tuple(e.text for e in fix.edits)))
        taken.extend(keys)
        chosen.append(fix)
    return chosen


def _overlaps(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    a_start, a_end, b_start, b_end = a[:2], a[2:], b[:2], b[2:]
    if a_start == a_end or b_start == b_end:  # insertions conflict only at the same point or strictly inside
        return a_start == b_start or (b_start < a_start < b_end) or (a_start < b_start < a_end)
    return a_start < b_end and b_start < a_end


# -- writing a fixed file ---------------------------------------------------------------------------------------
CHANGED = "changed while fixing: not written"
READ_ONLY = "read-only: fixes not written"

_OPEN = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


class Document(Protocol):
    """A document as read (``tracelint.source.document``): ``to_bytes()`` gives the bytes it was read from; a
    notebook (which has ``nb``) gives them only as far as its JSON formatting goes."""

    def to_bytes(self) -> bytes: ...


class NotWritten(OSError):
    """The fixes were not written, or an edit made meanwhile had to be kept in a file of its own: ``str()`` says which.
    An OSError, so that a caller reporting write errors reports this too."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A file as it was read: size, mtime and a hash of the bytes (``expected`` of ``write_atomic``)."""

    size: int
    mtime_ns: int
    sha256: bytes

    @classmethod
    def of(cls, path: Path) -> Snapshot | None:
        """The file now (through symlinks); None if it cannot be read. Take it *before* reading the file to fix:
        a change in between then reads as a change (fixes not written), never the other way round."""
        try:
            fd = os.open(path, _OPEN & ~getattr(os, "O_NOFOLLOW", 0))
            try:
                st = os.fstat(fd)
                data = _read_all(fd)
            finally:
                os.close(fd)
        except OSError:
            return None
        return cls(st.st_size, st.st_mtime_ns, hashlib.sha256(data).digest())


Expected = bytes | Snapshot | Document | None  # what the fixes were computed from (see write_atomic)


def write_atomic(path: Path, data: bytes, expected: Expected = None) -> None:
    """Write ``data`` as the new content of ``path``, losing nobody's bytes; NotWritten (an OSError) says why not.

    - ``expected`` is what the fixes were computed from: the bytes read, a ``Snapshot`` taken before reading, or the
      document as read (its ``to_bytes()``: exact for a .py file, as bytes.decode/str.encode round-trip; for a
      notebook, bytes that differ only in JSON formatting, which the fixed notebook's rewrite normalises anyway, also
      pass). Just before the file is replaced, it is read again and must hold exactly that (a Snapshot: the same
      size, mtime_ns and SHA-256) and keep still while read, else ``changed while fixing: not written`` (also when
      its mode, owner or group changed). None (the old two-argument call) checks only that it keeps still.
    - A symlink is followed: its target is written (atomically, in the target's folder) and the link stays a link.
    - A file whose mode bits deny writing (by its owner, group or others, whichever applies to us; for root: by
      anyone) is not written: ``read-only: fixes not written``. Root's ability to write anyway is not used.
    - A file with one name: the new content goes to a temp file in the same folder, which gets the file's mode and
      (where permitted: as root, or for the group when we are a member) its owner and group and is fsynced; then the
      file is checked as above, its (dev, ino, size, mtime_ns, ctime_ns) looked at once more by path, and the temp
      file renamed over it. After the rename the replaced inode, still open, is looked at again: if it grew or its
      mtime moved, someone wrote in between; its bytes are put back (by the same checked rename, if the fixed file
      is untouched) and the fixes count as not written, or, if that too raced, kept in ``<name>.*.tracelint-kept``
      beside the file, which the message names.
    - A file with several names (hard links, st_nlink > 1) cannot be renamed over without splitting the links: it
      is written in place, as Vim's 'backupcopy' does: checked as above, its content first copied to a hidden
      ``.<name>.*.tracelint`` backup, then overwritten from offset 0 (truncated if shorter, bytes appended during
      the write moved after it), fsynced and read back; the backup is removed when the file reads back as the fixed
      bytes (plus anything appended since), and named in the message otherwise.

    Races left (no lock binds other writers): the last look and the rename (or the in-place write) are separate
    system calls. On the rename path a write landing between them is still caught by the post-rename look when it
    changes the replaced inode's size or mtime (appends always do; a same-size overwrite within one timestamp tick
    does not). Not caught: a write to the replaced inode after that look by a process that opened the file before
    the rename (one that keeps it open, or opened it just before and writes just after), as with any editor that
    saves by rename; in place, a write landing between the last look and the write, or between reading what was
    appended during it and the truncation, can be overwritten unseen (microseconds; the backup holds the content
    before fixing only until the read-back passes). Mode bits are checked, not ACLs; extended attributes and ACLs
    are not copied to the renamed file.
    """
    target = Path(path).resolve(strict=True)
    st = os.stat(target)
    if not stat.S_ISREG(st.st_mode):
        raise NotWritten("not a regular file: fixes not written")
    if _read_only(st):
        raise NotWritten(READ_ONLY)
    if st.st_nlink > 1:
        _write_in_place(target, data, expected, st)
        return
    displaced = _replace(target, data, expected, st)
    if displaced is None:
        return
    # Someone wrote to the file in the window: put their version back, if nobody has touched the fixed file since.
    try:
        again = _replace(target, displaced, data, st, restoring=True)
    except OSError:  # the fixed file changed too (or the restore failed): leave it, keep the edit beside it
        raise NotWritten(f"changed while fixing: fixes written, but an edit made while writing them is kept in "
                         f"{_keep(target, displaced, st)}") from None
    if again is not None:  # the restore raced as well: what it displaced is the fixed file plus an edit
        raise NotWritten(f"{CHANGED}; an edit made meanwhile is kept in {_keep(target, again, st)}")
    raise NotWritten(CHANGED)


def _read_only(st: os.stat_result) -> bool:
    """The mode bits deny writing to us (root: to everyone); ACLs are not consulted."""
    geteuid = getattr(os, "geteuid", None)
    if geteuid is None:  # Windows: the read-only attribute shows as the missing write bits
        return not st.st_mode & stat.S_IWUSR
    uid = geteuid()
    if uid == 0:
        return not st.st_mode & 0o222
    if st.st_uid == uid:
        return not st.st_mode & stat.S_IWUSR
    if st.st_gid == os.getegid() or st.st_gid in os.getgroups():
        return not st.st_mode & stat.S_IWGRP
    return not st.st_mode & stat.S_IWOTH


def _sig(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _unchanged(fd: int, expected: Expected, st: os.stat_result | None) -> tuple[os.stat_result, bytes]:
    """The open file's stat and content, provided it holds ``expected`` and kept still while read (and, unless ``st``
    is None, still has the mode, owner and group of ``st``); else NotWritten."""
    before = os.fstat(fd)
    content = _read_all(fd)
    now = os.fstat(fd)
    same = _holds(content, now, expected)
    meta = st is None or (now.st_mode, now.st_uid, now.st_gid) == (st.st_mode, st.st_uid, st.st_gid)
    if not (same and meta and _sig(before) == _sig(now)):
        raise NotWritten(CHANGED)
    return now, content


def _holds(content: bytes, now: os.stat_result, expected: Expected) -> bool:
    if expected is None:
        return True
    if isinstance(expected, Snapshot):
        return (now.st_size, now.st_mtime_ns) == (expected.size, expected.mtime_ns) \
            and hashlib.sha256(content).digest() == expected.sha256
    if isinstance(expected, (bytes, bytearray, memoryview)):
        return content == expected
    if content == expected.to_bytes():
        return True
    nb = getattr(expected, "nb", None)  # a notebook re-serialised differently (key order, escapes): the same JSON?
    if nb is None:
        return False
    try:
        return json.loads(content.decode("utf-8-sig")) == nb
    except ValueError:
        return False


def _fill(fd: int, name: str, data: bytes, st: os.stat_result) -> None:
    """Write ``data`` to the new file ``fd`` (at ``name``) and give it the mode, owner and group of ``st``."""
    _write_all(fd, data)
    new = os.fstat(fd)
    if hasattr(os, "fchown") and (new.st_uid, new.st_gid) != (st.st_uid, st.st_gid):
        try:
            os.fchown(fd, st.st_uid, st.st_gid)
        except PermissionError:  # not root: the owner stays ours, the group is kept if we are a member of it
            try:
                os.fchown(fd, -1, st.st_gid)
            except PermissionError:
                pass
    os.chmod(name, stat.S_IMODE(st.st_mode))  # after chown, which clears the set-id bits
    os.fsync(fd)


def _keep(target: Path, data: bytes, st: os.stat_result, hidden: bool = False) -> Path:
    """``data`` in a new file beside ``target`` (with its mode and owner), or else in the temp folder; its path."""
    prefix = f".{target.name}." if hidden else f"{target.name}."
    suffix = ".tracelint" if hidden else ".tracelint-kept"
    try:
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=prefix, suffix=suffix)
    except OSError:
        if hidden:
            raise
        fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix)
    try:
        _fill(fd, name, data, st)
    finally:
        os.close(fd)
    return Path(name)


def _replace(target: Path, data: bytes, expected: Expected, st: os.stat_result, *,
             restoring: bool = False) -> bytes | None:
    """Rename a temp file holding ``data`` (mode and owner of ``st``) over ``target`` once it is checked to hold
    ``expected``. Returns None, or the bytes of the replaced inode when it was written to after the check (they are
    no longer at ``target``). ``restoring``: ``target`` is our own fixed file, whose owner may not be ``st``'s."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tracelint")
    try:
        try:
            _fill(fd, tmp, data, st)  # all the slow work before the check
        finally:
            os.close(fd)
        old = os.open(target, _OPEN)
        try:
            seen, _ = _unchanged(old, expected, None if restoring else st)
            if _sig(os.stat(target, follow_symlinks=False)) != _sig(seen):  # the last look, by path
                raise NotWritten(CHANGED)
            if os.name == "nt":  # Windows cannot rename over an open file: no look afterwards
                os.close(old)
                old = -1
            os.replace(tmp, target)
            tmp = None
            if old < 0:
                return None
            after = os.fstat(old)  # the replaced inode (the rename moved its ctime: not compared)
            if (after.st_size, after.st_mtime_ns) == (seen.st_size, seen.st_mtime_ns):
                return None
            return _read_all(old)
        finally:
            if old >= 0:
                os.close(old)
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _write_in_place(target: Path, data: bytes, expected: Expected, st: os.stat_result) -> None:
    """Overwrite a hard-linked file's inode with ``data`` (see ``write_atomic``)."""
    fd = os.open(target, _OPEN | os.O_RDWR)  # O_RDONLY is 0
    try:
        seen, content = _unchanged(fd, expected, st)
        backup = _keep(target, content, st, hidden=True)
        if _sig(os.stat(target, follow_symlinks=False)) != _sig(seen):  # the last look, by path
            backup.unlink()
            raise NotWritten(CHANGED)
        try:
            _overwrite(fd, data, len(content))
        except OSError as exc:  # a disk full midway, say: put the content back
            try:
                _overwrite(fd, content, os.fstat(fd).st_size)
            except OSError:
                raise NotWritten(f"cannot write the fixed file: {exc}; its content before fixing is kept in "
                                 f"{backup}") from exc
            backup.unlink()
            raise
        if not _read_all(fd).startswith(data):  # (bytes after it were appended since the write: theirs, kept)
            raise NotWritten(f"changed while fixing: the file changed while the fixes were written into it (it has "
                             f"other names, so it is written in place); its content before fixing is kept in {backup}")
        backup.unlink()
    finally:
        os.close(fd)


def _overwrite(fd: int, data: bytes, size: int) -> None:
    """Write ``data`` over the ``size`` bytes of the open file; bytes appended meanwhile are moved to follow it."""
    os.lseek(fd, 0, os.SEEK_SET)
    _write_all(fd, data)
    if len(data) < size:  # truncation only when shrinking: it would cut off what was appended during the write
        os.lseek(fd, size, os.SEEK_SET)
        appended = b"".join(iter(lambda: os.read(fd, 1 << 20), b""))
        os.ftruncate(fd, len(data))
        if appended:
            os.lseek(fd, len(data), os.SEEK_SET)
            _write_all(fd, appended)
    os.fsync(fd)
