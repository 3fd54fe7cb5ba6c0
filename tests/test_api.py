"""The Python API as a user meets it: what ``print(finding)`` shows, where columns count from, what ``dir`` lists."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import tracelint
from tracelint import lint_paths
from tracelint.engine import Config

ROOT = Path(__file__).resolve().parents[1]

LOOP = ("import torch\n\nmodel = torch.nn.Linear(8, 1).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x in loader:\n    loss = model(x.cuda()).sum()\n    loss.backward()\n    opt.step()\n"
        "    total += loss.item()\n")


def _findings(tmp_path: Path) -> list:
    path = tmp_path / "train.py"
    path.write_text(LOOP, encoding="utf-8")
    config = Config(root=tmp_path)
    return [f for f in lint_paths([path], config_for=lambda _p: config) if hasattr(f, "code")]


def test_print_finding_shows_the_report_line(tmp_path):
    (finding,) = _findings(tmp_path)
    text = str(finding)
    assert text.startswith(f"{tmp_path / 'train.py'}:9:14: TL101 warning ")
    assert "`loss.item()`" in text and "dataclass" not in text and "Finding(" not in text


def test_columns_are_one_based_in_the_api_the_cli_and_json(tmp_path):
    (finding,) = _findings(tmp_path)
    loc = finding.location
    line = LOOP.splitlines()[loc.line - 1]
    assert line[loc.column - 1:loc.end_column - 1] == "loss.item()"  # 1-based start, exclusive 1-based end
    cli = subprocess.run([sys.executable, "-m", "tracelint", "check", "--format", "json", str(tmp_path / "train.py")],
                         capture_output=True, text=True, cwd=tmp_path)
    (record,) = json.loads(cli.stdout)["findings"]
    assert (record["line"], record["column"], record["end_column"]) == (loc.line, loc.column, loc.end_column)
    text = subprocess.run([sys.executable, "-m", "tracelint", "check", str(tmp_path / "train.py")],
                          capture_output=True, text=True, cwd=tmp_path).stdout
    assert f"train.py:{loc.line}:{loc.column}: TL101" in text
    if finding.fix is not None:  # the fix's edits count columns the same way
        for edit in finding.fix.edits:
            assert edit.column >= 1


def test_dir_lists_the_public_api():
    listed = dir(tracelint)
    for name in ("analyze_trace", "lint_paths", "on_trace_ready", "profile", "__version__"):
        assert name in listed
    assert callable(tracelint.analyze_trace) and callable(tracelint.on_trace_ready)


def test_unknown_attribute_says_its_name():
    try:
        tracelint.analyse_trace  # noqa: B018 - the misspelling a user makes
    except AttributeError as exc:
        assert "analyse_trace" in str(exc)
    else:
        raise AssertionError("no AttributeError")


def test_type_hints_ship_with_the_package():
    assert (ROOT / "tracelint" / "py.typed").is_file()
