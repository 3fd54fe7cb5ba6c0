"""Fixes: edit application, --fix writing files atomically, idempotence, safety, notebooks."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import libcst as cst
import pytest

from tracelint.engine import Config, Edit, FileChecked, Finding, Fix, InputError
from tracelint.source import lint_paths
from tracelint.source.fix import apply_edits

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


def run(path: Path, **options) -> list:
    config = Config(root=path.parent)
    return list(lint_paths([path], config_for=lambda _p: config, **options))


def test_apply_edits_reverse_order_and_multiline():
    text = "ab\ncd\nef"
    edits = [Edit(1, 2, 1, 2, "X"), Edit(2, 1, 3, 2, "Y"), Edit(3, 3, 3, 3, "!")]  # 1-based columns
    assert apply_edits(text, edits) == "aXb\nYf!"


def test_apply_edits_rejects_overlaps():
    with pytest.raises(ValueError):
        apply_edits("abcdef", [Edit(1, 1, 1, 4, "x"), Edit(1, 3, 1, 5, "y")])


def test_fix_writes_safe_fixes_keeps_mode_and_reports_only_what_remains(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    os.chmod(path, 0o751)
    items = run(path, fix=True)
    fixed = path.read_text()
    cst.parse_module(fixed)
    assert "    batch_size=32,\n    pin_memory=True,\n)" in fixed
    assert "optimizer.zero_grad()" in fixed
    assert "num_workers" not in fixed  # TL201's fix is unsafe
    # Once pinned, the loop's copy becomes a TL203 finding, fixed in the next pass.
    assert "x.to(device, non_blocking=True)" in fixed
    assert [(i.code, i.location.line) for i in items if isinstance(i, Finding)] == [("TL201", 4)]
    # 3 fixes: 2 resolve findings a plain run reports, 1 the TL203 the first pass exposed; none new is left
    assert [i for i in items if isinstance(i, FileChecked)] == [FileChecked(str(path), fixed=3, resolved=2,
                                                                            exposed_fixed=1)]
    assert stat.S_IMODE(path.stat().st_mode) == 0o751
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]  # no temp file left


def test_fix_is_idempotent(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    run(path, fix=True)
    once = path.read_text()
    mtime = path.stat().st_mtime_ns
    items = run(path, fix=True)
    assert path.read_text() == once
    assert path.stat().st_mtime_ns == mtime  # nothing to do: not rewritten
    assert [i for i in items if isinstance(i, FileChecked)] == [FileChecked(str(path), fixed=0)]


def test_unsafe_fixes_only_when_asked(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    run(path, fix=True, unsafe_fixes=True)
    fixed = path.read_text()
    assert "num_workers=4," in fixed and "pin_memory=True," in fixed
    assert [i for i in run(path) if isinstance(i, Finding)] == []


def test_without_fix_nothing_is_written(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    items = run(path, unsafe_fixes=True)
    assert path.read_text() == SCRIPT
    assert {i.code for i in items if isinstance(i, Finding)} == {"TL201", "TL202", "TL301"}


def test_fix_that_would_not_parse_is_not_written(tmp_path, monkeypatch):
    from tracelint.source.rules import input as input_rules

    report = input_rules.DataLoaderWithoutPinnedMemory.report

    def broken(self, node, message, *, fix=None, **options):  # the rule's fix, whatever builds it, breaks the file
        report(self, node, message, fix=Fix(fix.title, (self.edit(node, "DataLoader(ds,,"),)), **options)

    monkeypatch.setattr(input_rules.DataLoaderWithoutPinnedMemory, "report", broken)
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    items = run(path, fix=True)
    assert path.read_text() == SCRIPT
    errors = [i for i in items if isinstance(i, InputError)]
    assert len(errors) == 1 and "would not parse" in errors[0].message
    assert "TL202" in {i.code for i in items if isinstance(i, Finding)}


def test_fix_keeps_encoding_bom_and_crlf(tmp_path):
    path = tmp_path / "train.py"
    raw = b"\xef\xbb\xbf" + "# caf\u00e9\r\nimport torch\r\nopt.zero_grad(set_to_none=False)\r\n".encode()
    path.write_bytes(raw)
    run(path, fix=True)
    assert path.read_bytes() == b"\xef\xbb\xbf" + "# caf\u00e9\r\nimport torch\r\nopt.zero_grad()\r\n".encode()


def test_fix_latin1_file(tmp_path):
    path = tmp_path / "train.py"
    path.write_bytes("# -*- coding: latin-1 -*-\n# caf\xe9\nimport torch\nopt.zero_grad(False)\n".encode("latin-1"))
    run(path, fix=True)
    fixed = "# -*- coding: latin-1 -*-\n# caf\xe9\nimport torch\nopt.zero_grad()\n"
    assert path.read_bytes() == fixed.encode("latin-1")


def test_fix_notebook_cells_keep_json_layout(tmp_path):
    nb = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
             "source": ["%matplotlib inline\n", "import torch\n", "from torch.utils.data import DataLoader"]},
            {"cell_type": "markdown", "metadata": {}, "source": ["text \u00e9"]},
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
             "source": ["loader = DataLoader(ds, num_workers=2)\n", "opt.zero_grad(set_to_none=False)"]},
        ],
        "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5,
    }
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    items = run(path, fix=True)
    assert [i for i in items if isinstance(i, Finding)] == []
    expected = json.loads(json.dumps(nb))
    expected["cells"][2]["source"] = ["loader = DataLoader(ds, num_workers=2, pin_memory=True)\n", "opt.zero_grad()"]
    assert path.read_text(encoding="utf-8") == json.dumps(expected, indent=1, ensure_ascii=False) + "\n"


def test_apply_edits_counts_only_python_line_breaks():
    # A form feed is not a line break for Python (or libcst), though str.splitlines splits there.
    text = "a = 1\n\x0cb = 2\r\nc = 3"
    assert apply_edits(text, [Edit(3, 1, 3, 2, "C")]) == "a = 1\n\x0cb = 2\r\nC = 3"
