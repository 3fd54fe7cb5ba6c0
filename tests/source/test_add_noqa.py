"""`tracelint check --add-noqa` (issue #28 item 2): a `# noqa: TLxxx` on each flagged line, where the suppression
check reads it, so that a plain run afterwards reports none of those findings; files keep their encoding, BOM, line
breaks and notebook layout, still parse, and are written only under the flag."""
from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tracelint.engine import Finding, Severity, SourceLocation
from tracelint.source.noqa import add_noqa

ADDED = re.compile(r"Added (\d+) noqa comments? in (\d+) files?\.")


def tracelint(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracelint", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def report(*args: str, cwd: Path) -> list[dict]:
    proc = tracelint("check", *args, "--format", "json", cwd=cwd)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)["findings"]


def added(proc: subprocess.CompletedProcess) -> tuple[int, int]:
    match = ADDED.search(proc.stderr)
    assert match, proc.stderr
    return int(match.group(1)), int(match.group(2))


def snapshot(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_add_noqa_on_the_fixtures_then_a_plain_run_reports_nothing(tmp_path: Path):
    for name in ("examples", "scenarios"):
        shutil.copytree(FIXTURES / name, tmp_path / name)
    before = report("examples", "scenarios", cwd=tmp_path)
    assert before
    untouched = snapshot(tmp_path)
    assert tracelint("check", "examples", "scenarios", cwd=tmp_path).returncode == 1
    assert snapshot(tmp_path) == untouched  # nothing is written without the flag

    proc = tracelint("check", "--add-noqa", "examples", "scenarios", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    lines = {(f["path"], f["line"]) for f in before}
    assert added(proc) == (len(lines), len({f["path"] for f in before}))
    assert report("examples", "scenarios", cwd=tmp_path) == []
    for path in (tmp_path / "examples").rglob("*.py"):
        ast.parse(path.read_text(encoding="utf-8"))
    for path in (tmp_path / "scenarios").rglob("*.py"):
        ast.parse(path.read_text(encoding="utf-8"))
    # each changed line is the flagged line plus its comment: nothing else moved
    for finding in before:
        path = tmp_path / finding["path"]
        original = untouched[path].decode().splitlines()[finding["line"] - 1]
        now = path.read_text(encoding="utf-8").splitlines()[finding["line"] - 1]
        assert now.startswith(original.rstrip()) and re.search(rf"# noqa: .*{finding['code']}", now)
    again = tracelint("check", "--add-noqa", "examples", "scenarios", cwd=tmp_path)
    assert again.returncode == 0 and added(again) == (0, 0)


LOOP = "import torch\nmodel = torch.nn.Linear(4, 4).cuda()\nfor step in range(10):\n" \
       "    loss = model(torch.ones(4, device='cuda')).sum()\n"


def test_crlf_bom_and_encoding_are_kept(tmp_path: Path):
    crlf = tmp_path / "crlf.py"
    crlf.write_bytes((LOOP + "    print(loss.item())\n").replace("\n", "\r\n").encode())
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + (LOOP + "    total = loss.item()\n").encode())
    latin = tmp_path / "latin.py"
    latin.write_bytes(("# -*- coding: latin-1 -*-\n" + LOOP + "    total = loss.item()  # caf\xe9\n")
                      .encode("latin-1"))
    proc = tracelint("check", "--add-noqa", "crlf.py", "bom.py", "latin.py", cwd=tmp_path)
    assert proc.returncode == 0 and added(proc) == (3, 3), proc.stderr
    assert crlf.read_bytes() == (LOOP + "    print(loss.item())  # noqa: TL101\n").replace("\n", "\r\n").encode()
    assert bom.read_bytes() == b"\xef\xbb\xbf" + (LOOP + "    total = loss.item()  # noqa: TL101\n").encode()
    assert latin.read_bytes() == ("# -*- coding: latin-1 -*-\n" + LOOP +
                                  "    total = loss.item()  # caf\xe9  # noqa: TL101\n").encode("latin-1")
    assert report("crlf.py", "bom.py", "latin.py", cwd=tmp_path) == []


def test_an_existing_noqa_gets_the_codes_merged_sorted_once(tmp_path: Path):
    path = tmp_path / "t.py"
    path.write_text(LOOP + "    a = loss.item()  # noqa: ZZ100\n    b = loss.item()  # noqa:E501,  why\n")
    proc = tracelint("check", "--add-noqa", "t.py", cwd=tmp_path)
    assert proc.returncode == 0 and added(proc) == (2, 1)
    assert path.read_text().endswith("    a = loss.item()  # noqa: TL101, ZZ100\n"
                                      "    b = loss.item()  # noqa:E501, TL101,  why\n")
    assert report("t.py", cwd=tmp_path) == []


def test_a_bare_noqa_stays_as_it_is(tmp_path: Path):
    path = tmp_path / "t.py"
    text = LOOP + "    a = loss.item()  # noqa\n"
    path.write_text(text)
    finding = Finding("TL101", Severity.WARNING, "m", SourceLocation(str(path), 5, 9))
    done = add_noqa([finding])
    assert (done.comments, done.files, done.skipped, done.errors) == (0, 0, [], [])
    assert path.read_text() == text


MULTILINE = LOOP + '''\
    print("loss",
          loss)
    print("""loss
""", loss)
    msg = f"""step
{loss.item()} done
"""
    x = loss.item() + \\
        1.0
'''


def test_multiline_statements_take_the_comment_where_suppression_reads_it(tmp_path: Path):
    path = tmp_path / "t.py"
    path.write_text(MULTILINE)
    before = report("t.py", cwd=tmp_path)
    proc = tracelint("check", "--add-noqa", "t.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = path.read_text().splitlines()
    ast.parse(path.read_text())
    assert lines[4] == '    print("loss",  # noqa: TL104'  # the first line of the call
    assert lines[7] == '""", loss)  # noqa: TL104'  # its first line ends inside a string: the last one
    assert lines[9] == "{loss.item()} done"  # never inside a string literal: skipped and said
    assert lines[11] == "    x = loss.item() + \\"  # nor after a line continuation
    skipped = [f for f in before if f["line"] in (10, 12)]
    assert len(skipped) == 2
    for finding in skipped:
        assert f"t.py:{finding['line']}:{finding['column']}: {finding['code']} not suppressed" in proc.stderr
    assert added(proc) == (2, 1)
    assert [(f["line"], f["code"]) for f in report("t.py", cwd=tmp_path)] == \
        [(f["line"], f["code"]) for f in skipped]


def notebook_text(cells: list, indent: int = 1) -> str:
    nb = {"cells": cells, "metadata": {"kernelspec": {"language": "python", "name": "python3"},
                                       "language_info": {"name": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=indent, ensure_ascii=False) + "\n"


def code_cell(source) -> dict:
    return {"cell_type": "code", "execution_count": None, "id": "x", "metadata": {}, "outputs": [], "source": source}


# nbformat writes indent 1 and a cell's source as a list of lines; other tools a string, or indent 2
@pytest.mark.parametrize(("indent", "as_list"), [(1, True), (2, False)])
def test_notebook_cells_are_edited_and_the_json_keeps_its_layout(tmp_path: Path, indent: int, as_list: bool):
    def source(text: str):
        return text.splitlines(keepends=True) if as_list else text

    loop = ("for step in range(10):\n    loss = model(torch.ones(4, device='cuda')).sum()\n"
            "    total = loss.item()  # noqa: E501\n    print(loss)")
    done = ("for step in range(10):\n    loss = model(torch.ones(4, device='cuda')).sum()\n"
            "    total = loss.item()  # noqa: E501, TL101\n    print(loss)  # noqa: TL104")
    cells = [
        {"cell_type": "markdown", "id": "m", "metadata": {}, "source": ["# Training \u00e9\n"]},
        code_cell(["%matplotlib inline\n", "import torch\n", "model = torch.nn.Linear(4, 4).cuda()"]),
        code_cell(source(loop)),
    ]
    path = tmp_path / "nb.ipynb"
    path.write_text(notebook_text(cells, indent), encoding="utf-8")
    before = report(path.name, cwd=tmp_path)
    assert {(f["cell"], f["code"]) for f in before} == {(3, "TL101"), (3, "TL104")}
    proc = tracelint("check", "--add-noqa", path.name, cwd=tmp_path)
    assert proc.returncode == 0 and added(proc) == (2, 1), proc.stderr
    expected = json.loads(json.dumps(cells))
    expected[2]["source"] = source(done)
    assert path.read_text(encoding="utf-8") == notebook_text(expected, indent)
    assert report(path.name, cwd=tmp_path) == []


def test_add_noqa_refuses_options_that_would_write_something_else(tmp_path: Path):
    path = tmp_path / "t.py"
    path.write_text(LOOP + "    total = loss.item()\n")
    for extra in (["--fix"], ["--diff"], ["--write-baseline", "b.json"]):
        proc = tracelint("check", "--add-noqa", *extra, "t.py", cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, extra
    assert path.read_text() == LOOP + "    total = loss.item()\n" and not (tmp_path / "b.json").exists()
