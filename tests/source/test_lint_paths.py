"""lint_paths: discovery, reading (encodings, notebooks), bad input, suppressions and config."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracelint.engine import Config, FileChecked, Finding, InputError, Severity
from tracelint.engine.config import parse_config
from tracelint.source import lint_paths

BAD = "import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader(ds, num_workers=4)\n"


def run(paths, config: Config | None = None, **options) -> list:
    cfg = config or Config()
    return list(lint_paths(paths, config_for=lambda _p: cfg, **options))


def findings(items) -> list[tuple[str, str, int]]:
    return [(Path(i.path).name, i.code, i.location.line) for i in items if isinstance(i, Finding)]


@pytest.mark.parametrize("comment, reported", [
    ("", True),
    ("  # noqa: TL202", False),
    ("  # noqa:TL202,TL101", False),
    ("  # noqa", False),
    ("  # tracelint: ignore[TL202]", False),
    ("  # tracelint: ignore", False),
    ("  # noqa: TL201", True),
    ("  # tracelint: ignore[TL2]", False),  # a prefix
])
def test_suppressions_on_the_finding_line(lint, comment, reported):
    result = lint(BAD.rstrip("\n") + comment + "\n")
    assert result.codes() == ([("TL202", 3)] if reported else [])


def test_suppression_on_last_line_of_multiline_call(lint):
    result = lint(BAD.replace("loader = DataLoader(ds, num_workers=4)",
                              "loader = DataLoader(\n    ds, num_workers=4,\n)  # noqa: TL202"))
    assert result.codes() == []


def test_config_select_ignore_severity_and_per_file_ignores(tmp_path):
    (tmp_path / "a.py").write_text(BAD.replace(", num_workers=4", ""))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "b.py").write_text(BAD.replace(", num_workers=4", ""))
    table = {"select": ["TL2"], "ignore": ["TL201"], "severities": {"TL202": "error"},
             "per-file-ignores": {"tests/*": ["TL202"]}}
    config = parse_config(table, tmp_path, tmp_path / "pyproject.toml")
    items = run([tmp_path], config)
    got = [i for i in items if isinstance(i, Finding)]
    assert [(Path(f.path).name, f.code, f.severity) for f in got] == [("a.py", "TL202", Severity.ERROR)]
    assert sum(isinstance(i, FileChecked) for i in items) == 2


def test_config_found_from_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.tracelint]\nignore = ["TL202"]\n')
    (tmp_path / "a.py").write_text(BAD)
    assert findings(lint_paths([tmp_path / "a.py"])) == []


def test_directory_walk_excludes_and_suffixes(tmp_path):
    for rel in ["pkg/a.py", "pkg/b.pyi", ".venv/lib/c.py", "build/d.py", "node_modules/e.py", "pkg/f.txt",
                "x.egg-info/g.py", "pkg/__pycache__/h.py"]:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(BAD)
    items = run([tmp_path])
    assert sorted({name for name, _, _ in findings(items)}) == ["a.py", "b.pyi"]
    assert not [i for i in items if isinstance(i, InputError)]


def test_explicit_non_python_file_and_missing_path_are_input_errors(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "a.py").write_text(BAD)
    items = run([tmp_path / "notes.txt", tmp_path / "missing.py", tmp_path / "a.py"])
    errors = [i for i in items if isinstance(i, InputError)]
    assert [Path(e.path).name for e in errors] == ["notes.txt", "missing.py"]
    assert findings(items) == [("a.py", "TL202", 3)]


def test_explicit_file_in_excluded_dir_is_linted(tmp_path):
    path = tmp_path / "build" / "a.py"
    path.parent.mkdir()
    path.write_text(BAD)
    assert findings(run([path])) == [("a.py", "TL202", 3)]


def test_syntax_error_among_good_files(tmp_path):
    (tmp_path / "a.py").write_text(BAD)
    (tmp_path / "b.py").write_text("import torch\nfrom torch.utils.data import DataLoader\ndef f(:\n    pass\n")
    (tmp_path / "c.py").write_text(BAD)
    items = run([tmp_path])
    errors = [i for i in items if isinstance(i, InputError)]
    assert len(errors) == 1 and Path(errors[0].path).name == "b.py" and errors[0].line == 3
    assert "syntax error" in errors[0].message and "\n" not in str(errors[0])
    assert [name for name, _, _ in findings(items)] == ["a.py", "c.py"]


BROKEN = "import torch\ndef f(:\n  pass\n"  # issue #34: alone, this file once passed ('All checks passed.')


@pytest.mark.parametrize("text, config", [
    (BROKEN, Config()),  # no site any rule reports on: the screen's fast path
    (BROKEN, Config(select=("TL2",))),  # no enabled rule wants the file
    ("def f(:\n  pass\n", Config()),  # does not mention torch
    ("import torch\nfor b in loader:\n    loss = model(b)\n    print(loss.item()\n", Config()),  # a site, then
])
def test_a_file_that_does_not_parse_is_an_error_alone_or_among_others(tmp_path, text, config):
    # A pre-commit run with only that file staged must not let it through: the same error on every path.
    (tmp_path / "s.py").write_text(text)
    alone = run([tmp_path / "s.py"], config)
    (tmp_path / "ok.py").write_text(BAD)
    among = run([tmp_path], config)
    for items in (alone, among):
        errors = [i for i in items if isinstance(i, InputError)]
        assert [(Path(e.path).name, e.message.split(":")[0]) for e in errors] == [("s.py", "syntax error")]
        with pytest.raises(SyntaxError) as python:
            compile(text, "s.py", "exec")
        assert errors[0].line == python.value.lineno


def test_a_file_that_does_not_parse_is_an_error_in_worker_processes(tmp_path, monkeypatch):
    import tracelint.source as source

    monkeypatch.setattr(source, "PARALLEL_MIN_FILES", 2)
    for n in range(4):
        (tmp_path / f"ok{n}.py").write_text("x = 1\n")
    (tmp_path / "s.py").write_text(BROKEN)
    errors = [i for i in run([tmp_path]) if isinstance(i, InputError)]
    assert [(Path(e.path).name, e.line) for e in errors] == [("s.py", 2)]


def test_a_notebook_cell_that_does_not_parse_is_an_error(tmp_path):
    cells = [{"cell_type": "code", "source": ["import torch\n"], "metadata": {}, "outputs": [],
              "execution_count": None},
             {"cell_type": "code", "source": ["def f(:\n", "  pass\n"], "metadata": {}, "outputs": [],
              "execution_count": None}]
    (tmp_path / "n.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                                  "nbformat_minor": 5}))
    errors = [i for i in run([tmp_path / "n.ipynb"]) if isinstance(i, InputError)]
    assert [(e.message, e.line) for e in errors] == [("cell 2: syntax error: invalid syntax", 1)]


def test_empty_file_and_file_without_torch(tmp_path):
    (tmp_path / "empty.py").write_bytes(b"")
    (tmp_path / "plain.py").write_text("def f(x):\n    return x\n")  # not parsed by libcst: no torch in it
    items = run([tmp_path])
    assert [type(i).__name__ for i in items] == ["FileChecked", "FileChecked"]


def test_latin1_coding_cookie(tmp_path):
    text = "# -*- coding: latin-1 -*-\nimport torch\n# caf\xe9\n" + BAD.split("\n", 1)[1]
    (tmp_path / "a.py").write_bytes(text.encode("latin-1"))
    assert findings(run([tmp_path / "a.py"])) == [("a.py", "TL202", 5)]


def test_utf8_bom_and_crlf(tmp_path):
    (tmp_path / "a.py").write_bytes(b"\xef\xbb\xbf" + BAD.replace("\n", "\r\n").encode())
    assert findings(run([tmp_path / "a.py"])) == [("a.py", "TL202", 3)]


@pytest.mark.parametrize("data, expected", [
    (b"import torch\nx = '\xff\xfe'\n",
     ("cannot decode as utf-8 (byte 0xff in column 6) and no coding declaration names another encoding", 2)),
    # not UTF-8 in the first two lines: tokenize says 'invalid or missing encoding declaration', which hides where
    (b"x = '\xe9'\nimport torch\n",
     ("cannot decode as utf-8 (byte 0xe9 in column 6) and no coding declaration names another encoding", 1)),
    (b"# coding: ascii\nimport torch\nx = '\xe9'\n", ("cannot decode as ascii (byte 0xe9 in column 6)", 3)),
    (b"\x7fELF\x02\x01\x01\x00\x03\x00\xb7\x00torch", ("a binary file, not Python source (it holds NUL bytes)", None)),
    (b"\x1f\x8b\x08\x00torch\x00", ("a binary file, not Python source (it holds NUL bytes)", None)),
])
def test_a_file_that_cannot_be_decoded_is_one_error_saying_where(tmp_path, data, expected):
    (tmp_path / "a.py").write_bytes(data)
    errors = [i for i in run([tmp_path / "a.py"]) if isinstance(i, InputError)]
    assert [(e.message, e.line) for e in errors] == [expected]


def notebook(cells: list[tuple[str, str]], language: str = "python") -> str:
    return json.dumps({
        "cells": [{"cell_type": kind, "metadata": {}, "source": src.splitlines(keepends=True),
                   **({"outputs": [], "execution_count": None} if kind == "code" else {})} for kind, src in cells],
        "metadata": {"kernelspec": {"language": language, "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5,
    }, indent=1) + "\n"


NB_CELLS = [
    ("markdown", "# Training\nsome text"),
    ("code", "%matplotlib inline\nimport torch\nfrom torch.utils.data import DataLoader\n!pip install foo"),
    ("code", "%%bash\necho hi\nfor x in"),
    ("code", "x = 1\nloader = DataLoader(ds, num_workers=4)\nfiles = !ls\nloader?"),
]


def test_notebook_findings_report_cell_and_line(tmp_path):
    path = tmp_path / "train.ipynb"
    path.write_text(notebook(NB_CELLS))
    items = run([path])
    got = [(i.code, i.location.cell, i.location.line) for i in items if isinstance(i, Finding)]
    assert got == [("TL202", 4, 2)]
    assert not [i for i in items if isinstance(i, InputError)]


def test_notebook_suppression_and_syntax_error_cell(tmp_path):
    cells = [c if c[0] != "code" or "loader" not in c[1] else ("code", c[1].replace("=4)", "=4)  # noqa"))
             for c in NB_CELLS]
    (tmp_path / "a.ipynb").write_text(notebook(cells))
    (tmp_path / "b.ipynb").write_text(notebook([("code", "import torch"), ("code", "x = DataLoader(\n")]))
    items = run([tmp_path])
    assert findings(items) == []
    errors = [i for i in items if isinstance(i, InputError)]
    assert len(errors) == 1 and "cell 2" in errors[0].message


def test_non_python_notebook_and_invalid_json(tmp_path):
    (tmp_path / "r.ipynb").write_text(notebook([("code", "library(torch)\nx <- 1")], language="R"))
    (tmp_path / "bad.ipynb").write_text("{not json")
    items = run([tmp_path])
    errors = [i for i in items if isinstance(i, InputError)]
    assert [Path(e.path).name for e in errors] == ["bad.ipynb"]


def test_many_files_use_workers_and_keep_order(tmp_path):
    for i in range(40):
        (tmp_path / f"m{i:02d}.py").write_text(BAD if i % 2 else "import torch\n")
    items = run([tmp_path])
    assert [name for name, _, _ in findings(items)] == [f"m{i:02d}.py" for i in range(1, 40, 2)]
    assert sum(isinstance(i, FileChecked) for i in items) == 40


def test_rule_crash_is_an_input_error_not_a_traceback(tmp_path, monkeypatch):
    from tracelint.source.rules import input as input_rules

    def boom(self, node):
        raise RuntimeError("boom")

    monkeypatch.setattr(input_rules.DataLoaderWithoutWorkers, "visit_Call", boom)
    (tmp_path / "a.py").write_text(BAD)
    items = run([tmp_path / "a.py"])
    assert any(isinstance(i, InputError) and "boom" in i.message for i in items)


def test_deeply_nested_expression_is_linted_or_reported_in_one_line(tmp_path):
    # 1200 nested BinaryOperations: deeper than Python's recursion limit for a recursive walk.
    path = tmp_path / "deep.py"
    path.write_text("import torch\nfrom torch.utils.data import DataLoader\nx = " + " + ".join(["a"] * 1200)
                    + "\nloader = DataLoader(ds, num_workers=2)\n")
    items = run([path])
    assert findings(items) == [("deep.py", "TL202", 4)] or \
        [i.message for i in items if isinstance(i, InputError)] == ["code nested too deeply to analyse"]
