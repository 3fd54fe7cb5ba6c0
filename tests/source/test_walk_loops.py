"""A folder walk never stops on a symlink loop or a dangling link: they are no source files, and the rest is linted."""
from __future__ import annotations

from tracelint.engine import FileChecked, InputError
from tracelint.source import lint_paths


def test_symlink_loop_in_a_folder_is_skipped(tmp_path):
    (tmp_path / "a.py").symlink_to(tmp_path / "b.py")
    (tmp_path / "b.py").symlink_to(tmp_path / "a.py")
    (tmp_path / "gone.py").symlink_to(tmp_path / "missing.py")
    (tmp_path / "ok.py").write_text("import torch\nx = torch.zeros(1)\n")
    results = list(lint_paths([tmp_path]))
    assert not [r for r in results if isinstance(r, InputError)]
    assert [r.path for r in results if isinstance(r, FileChecked)] == [str(tmp_path / "ok.py")]
