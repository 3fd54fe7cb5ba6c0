"""The precision settings of a file (rules/precision_settings.py) on libcst: read at most once per file content,
whether a rule asks on its tree or the run asks with the text."""
from __future__ import annotations

import libcst as cst

from tracelint.source.rules import precision_settings as settings
from tracelint.source.semantic.model import FileContext


def test_a_file_is_parsed_once_whoever_asks(monkeypatch):
    source = "import torch\nmodel = Net().half()\nclass Net2:\n    pass\n# 1 (a text no other test reads)\n"
    ctx = FileContext("t.py", source, cst.parse_module(source))
    assert settings.file_settings(ctx) == {settings.REDUCED}
    parsed: list[str] = []
    monkeypatch.setattr(settings.cst, "parse_module", lambda text: parsed.append(text))
    assert settings.precision_settings(source) == {settings.REDUCED}
    assert settings.precision_settings(source.encode()) == {settings.REDUCED}
    assert parsed == []


def test_a_text_without_a_precision_word_is_not_parsed(monkeypatch):
    parsed: list[str] = []
    monkeypatch.setattr(settings.cst, "parse_module", lambda text: parsed.append(text))
    assert settings.precision_settings("import torch\nx = torch.zeros(3)  # 2\n") == frozenset()
    assert parsed == []


def test_a_text_libcst_does_not_take_sets_nothing():
    assert settings.precision_settings("import torch\nmodel.half(\n# 3\n") == frozenset()
