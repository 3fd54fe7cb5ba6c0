"""End to end through `python -m tracelint check`: exit codes, output streams, --fix."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BAD = "import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader(ds, num_workers=4)\n"
CLEAN = ("import torch\nfrom torch.utils.data import DataLoader\n"
         "loader = DataLoader(ds, num_workers=4, pin_memory=True)\n")


def tracelint(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracelint", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_exit_codes(tmp_path):
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "clean.py").write_text(CLEAN)
    (tmp_path / "broken.py").write_text("import torch\nfrom torch.utils.data import DataLoader\nx = (\n")

    clean = tracelint("check", "clean.py", cwd=tmp_path)
    assert clean.returncode == 0, clean.stderr

    bad = tracelint("check", "bad.py", cwd=tmp_path)
    assert bad.returncode == 1
    assert "bad.py:3:" in bad.stdout and "TL202" in bad.stdout and bad.stderr == ""

    broken = tracelint("check", "broken.py", "bad.py", cwd=tmp_path)
    assert broken.returncode == 2
    assert "broken.py:3" in broken.stderr and "Traceback" not in broken.stderr
    assert "TL202" in broken.stdout  # the good file was still linted

    missing = tracelint("check", "nope.py", cwd=tmp_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr

    ignored = tracelint("check", "--ignore", "TL202", "bad.py", cwd=tmp_path)
    assert ignored.returncode == 0


def test_fix_end_to_end(tmp_path):
    (tmp_path / "bad.py").write_text(BAD)
    fixed = tracelint("check", "--fix", "bad.py", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert (tmp_path / "bad.py").read_text() == CLEAN
    again = tracelint("check", "bad.py", cwd=tmp_path)
    assert again.returncode == 0


def test_config_from_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.tracelint]\nseverities = { TL202 = "info" }\n')
    (tmp_path / "bad.py").write_text(BAD)
    assert tracelint("check", "bad.py", cwd=tmp_path).returncode == 0  # info is below the default fail-on
    assert tracelint("check", "--fail-on", "info", "bad.py", cwd=tmp_path).returncode == 1


def test_rule_command_prints_the_catalog_file(repo, tmp_path):
    out = tracelint("rule", "TL201", cwd=tmp_path)
    assert out.returncode == 0
    assert out.stdout.rstrip() == next((repo / "rules").glob("TL201-*.md")).read_text().rstrip()


def test_a_lone_file_that_does_not_parse_fails_the_run(tmp_path):
    # Issue #34: `tracelint s.py` said 'All checks passed.' and exited 0 (a pre-commit run with that file staged).
    (tmp_path / "s.py").write_text("import torch\ndef f(:\n  pass\n")
    text = tracelint("s.py", cwd=tmp_path)
    assert text.returncode == 2 and "All checks passed" not in text.stdout
    assert text.stderr.strip().splitlines() == ["error: s.py:2: syntax error: invalid syntax"]
    as_json = tracelint("--format", "json", "s.py", cwd=tmp_path)
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout)["errors"] == [{"path": "s.py", "message": "syntax error: invalid syntax",
                                                     "line": 2}]


PINNABLE = """import torch
from torch.utils.data import DataLoader

device = torch.device("cuda")


def train(model, ds):
    loader = DataLoader(ds, batch_size=32, num_workers=4)
    for x, y, w in loader:
        model(x.to(device), y.to(device), w.to(device))
"""


def test_fix_counts_the_findings_its_fixes_exposed_and_fixed(tmp_path):
    # Issue #34: pinning the loader exposed three blocking copies that the next pass fixed; the run said
    # '1 fixed, 0 remaining' over four changed calls, and --diff 'Would fix 1 finding' over a diff with all four.
    (tmp_path / "train.py").write_text(PINNABLE)
    would = tracelint("check", "--select", "TL2", "--diff", "train.py", cwd=tmp_path)
    assert would.stdout.count("non_blocking=True") == 3
    assert would.stderr.strip().splitlines()[-1] == "Would fix 1 finding, and 3 more that the fixes expose."
    fixed = tracelint("check", "--select", "TL2", "--fix", "train.py", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.strip().splitlines()[-1] == \
        "Found 1 finding (1 fixed, 0 remaining). The fixes exposed 3 more: 3 fixed."
    assert (tmp_path / "train.py").read_text().count("non_blocking=True") == 3


def test_statistics_in_json_and_a_refusal_where_a_format_has_no_counts(tmp_path):
    # Issue #34: `--statistics --format json` silently printed the findings as if --statistics was not given.
    (tmp_path / "a.py").write_text(BAD)
    (tmp_path / "b.py").write_text(BAD)
    counted = tracelint("check", "--statistics", "--format", "json", ".", cwd=tmp_path)
    assert counted.returncode == 1, counted.stderr
    assert json.loads(counted.stdout)["statistics"] == [
        {"code": "TL202", "name": "dataloader-without-pinned-memory", "count": 2, "fixable": True}]
    refused = tracelint("check", "--statistics", "--format", "sarif", ".", cwd=tmp_path)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "--statistics" in refused.stderr and "sarif" in refused.stderr and "Traceback" not in refused.stderr


def test_an_unknown_rule_says_what_it_may_have_meant_in_one_sentence():
    shown = tracelint("rule", "TL1010", cwd=Path.cwd())  # a typo: one key too many
    assert shown.returncode == 2
    assert shown.stderr.strip().splitlines()[-1] == \
        "Error: unknown rule 'TL1010'; did you mean 'TL101'? `tracelint rules` lists them all."
    named = tracelint("rule", "item-in-lop", cwd=Path.cwd())
    assert named.stderr.strip().splitlines()[-1] == \
        "Error: unknown rule 'item-in-lop'; did you mean 'item-in-loop'? `tracelint rules` lists them all."
    unknown = tracelint("rule", "QQ999", cwd=Path.cwd())  # like no code (TL999 is one digit from TL309)
    assert unknown.stderr.strip().splitlines()[-1] == "Error: unknown rule 'QQ999'; `tracelint rules` lists them all."


def test_the_top_level_help_names_every_way_in():
    shown = tracelint("--help", cwd=Path.cwd()).stdout
    for way in ("tracelint train.py", "tracelint trace.json.gz", "tracelint run train.py", "tracelint diff"):
        assert way in shown
