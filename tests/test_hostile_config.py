"""A hostile or mistaken ``[tool.tracelint]`` (issue #11): every wrong type or shape is a config error naming the
file and the key (exit 2, never "internal error"), and selectors behave as on the command line."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tracelint.engine import Config, ConfigError
from tracelint.engine.config import find_config, load_config_file

TRAIN = "import torch\nfor b in loader:\n    y = b.cuda().item()\n    print(y)\n"


def write(folder: Path, body: str) -> Path:
    path = folder / "pyproject.toml"
    path.write_text(body, encoding="utf-8")
    return path


@pytest.mark.parametrize("body, key, says", [
    ('per-file-ignores = ["tests/*"]', "per-file-ignores", "must be a table, not an array"),
    ('per-file-ignores = { "tests/*" = 5 }', "per-file-ignores.'tests/*'", "must be a list of strings, not a number"),
    ('per-file-ignores = { "" = ["TL101"] }', "per-file-ignores", "empty pattern"),
    ('per-file-ignores = { "a" = ["TL9"] }', "per-file-ignores", "'TL9' matches no rule"),
    ('select = [[[["TL1"]]]]', "select", "must be a list of strings, not an array holding an array"),
    ("select = 5", "select", "must be a list of strings, not a number"),
    ('select = ["TL9"]', "select", "'TL9' matches no rule"),
    ('select = ["TL10l"]', "select", "did you mean 'TL1"),
    ('select = [" "]', "select", "an empty code"),
    ('ignore = [1]', "ignore", "not an array holding a number"),
    ('severities = ["TL101"]', "severities", "must be a table, not an array"),
    ("severities = { TL101 = 5 }", "severities.TL101", 'must be one of "info", "warning", "error", not a number'),
    ('severities = { TL101 = "fatal" }', "severities.TL101", "unknown severity 'fatal'"),
    ("fail-on = 5", "fail-on", "not a number"),
    ('fail-on = ["error"]', "fail-on", "not an array"),
    ("exclude = 5", "exclude", "must be a list of strings"),
    ("extend-exclude = { a = 1 }", "extend-exclude", "not a table"),
    ("trace = 5", "trace", "must be a table, not a number"),
    ("trace = { min-gpu-busy-pct = [1] }", "min-gpu-busy-pct", "must be a number, not an array"),
    ("trace = { min-gpu-busy-pct = true }", "min-gpu-busy-pct", "must be a number, not a boolean"),
    ('trace = { min-gpu-busy-pct = "80" }', "min-gpu-busy-pct", "must be a number, not a string"),
    ("trace = { min-gpu-busy-pct = nan }", "min-gpu-busy-pct", "must be a finite number"),
    ("trace = { min-gpu-busy-pct = inf }", "min-gpu-busy-pct", "must be a finite number"),
    ("trace = { no-such-key = 1 }", "[tool.tracelint.trace]", "unknown threshold 'no-such-key'"),
    ("trace = { x = { y = 1 } }", "[tool.tracelint.trace]", "unknown threshold 'x'"),
    ("file-time-limit = 0", "file-time-limit", "must be a positive number"),
    ('file-time-limit = "1m"', "file-time-limit", "must be a number, not a string"),
    ("selct = []", "selct", "did you mean 'select'?"),
    ("when = 1979-05-27", "when", "unknown [tool.tracelint] keys"),
])
def test_each_wrong_value_is_a_config_error_naming_file_and_key(tmp_path, body, key, says):
    path = write(tmp_path, f"[tool.tracelint]\n{body}\n")
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    message = str(caught.value)
    assert message.startswith(str(path)) and key in message and says in message, message
    assert "\n" not in message


@pytest.mark.parametrize("body, says", [
    ("tool = 5\ntracelint = 1\n", "`tool` must be a table, not a number"),
    ("[tool]\ntracelint = 5\n", "[tool.tracelint] must be a table, not a number"),
    ('[tool]\ntracelint = ["TL1"]\n', "[tool.tracelint] must be a table, not an array"),
    ("[tool.tracelint]\nselect = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply to read"),
    ("[tool.tracelint\nselect = 1\n", "Expected ']'"),
    ("[tool.tracelint]\nselect = [\"TL1\"]\n[tool.tracelint]\n", "Cannot declare"),
])
def test_a_broken_file_or_table_is_a_config_error(tmp_path, body, says):
    path = write(tmp_path, body)
    for load in (lambda: load_config_file(path), lambda: find_config(tmp_path)):
        find_config.cache_clear()
        with pytest.raises(ConfigError) as caught:
            load()
        assert str(caught.value).startswith(str(path)) and says in str(caught.value), str(caught.value)


def test_a_pyproject_without_tracelint_is_passed_over(tmp_path):
    write(tmp_path, 'tool = 5\n# [tool.tracelint] is mentioned in a comment only\n')
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", '[project]\nname = "x"\ndependencies = ["tracelint"]\n')
    find_config.cache_clear()
    assert find_config(tmp_path / "sub") == Config(root=tmp_path / "sub")


@pytest.mark.parametrize("body", [
    '[tool.tracelint]\nselect = ["tl1"]\n',
    '[tool]\ntracelint = { select = ["tl1"] }\n',
    'tool.tracelint.select = ["Tl1"]\n',
])
def test_selectors_are_case_insensitive_prefixes_however_the_table_is_written(tmp_path, body):
    write(tmp_path, body)
    find_config.cache_clear()
    config = find_config(tmp_path)
    assert config.select == ("TL1",)
    assert config.enabled("TL101") and config.enabled("TL104") and not config.enabled("TL202")


def test_comma_lists_as_on_the_command_line(tmp_path):
    config = load_config_file(write(tmp_path, '[tool.tracelint]\nselect = "tl1, TL201,"\nignore = ["TL104,tl105"]\n'))
    assert config.select == ("TL1", "TL201") and config.ignore == ("TL104", "TL105")
    with pytest.raises(ConfigError, match="an empty code"):
        load_config_file(write(tmp_path, '[tool.tracelint]\nselect = [" , "]\n'))


def test_lower_case_codes_everywhere(tmp_path):
    path = write(tmp_path, '[tool.tracelint]\nignore = ["tl104"]\nper-file-ignores = { "t.py" = ["tl101"] }\n'
                           'severities = { tl1 = "error" }\n')
    config = load_config_file(path)
    assert config.ignore == ("TL104",) and config.per_file_ignores == (("t.py", ("TL101",)),)
    assert config.severities[0][0] == "TL1"
    # Made in code, too (the API): codes are upper-cased.
    made = Config(select=("tl1",), ignore=("tl104",), per_file_ignores=(("*", ("tl2",)),))
    assert made.enabled("TL101") and not made.enabled("TL104") and made.ignored_for("x.py", "TL202")


def run_cli(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracelint", *args], cwd=folder, capture_output=True, text=True,
                          timeout=120)


def test_command_line_exit_2_with_the_file_and_key_never_internal_error(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    for body, key in [('per-file-ignores = ["a"]', "per-file-ignores"), ("trace = 5", "trace"),
                      ("select = " + "[" * 3000 + "]" * 3000, "nested too deeply")]:
        path = write(tmp_path, f"[tool.tracelint]\n{body}\n")
        proc = run_cli(tmp_path, "check", "train.py")
        assert proc.returncode == 2, proc.stderr
        assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
        assert str(path) in proc.stderr and key in proc.stderr, proc.stderr


def test_command_line_selects_as_pyproject_does(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    write(tmp_path, '[tool.tracelint]\nselect = ["tl1"]\n')
    from_file = run_cli(tmp_path, "check", "train.py", "--format", "json")
    write(tmp_path, "[tool.tracelint]\n")
    from_cli = run_cli(tmp_path, "check", "train.py", "--format", "json", "--select", "tl1")
    assert from_file.returncode == from_cli.returncode == 1
    assert from_file.stdout == from_cli.stdout and '"TL101"' in from_file.stdout
