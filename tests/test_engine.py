"""The engine on its own: suppressions, config, severities, exit codes, the catalog format."""
from __future__ import annotations

from pathlib import Path

import pytest

from tracelint.engine import (
    ConfigError,
    Finding,
    InputError,
    RunResult,
    Severity,
    SourceLocation,
    TraceLocation,
)
from tracelint.engine.catalog import CatalogError, parse_rule_file
from tracelint.engine.config import find_config, load_config_file
from tracelint.engine.suppress import is_suppressed


def _finding(code="TL101", path="train.py", severity=Severity.WARNING) -> Finding:
    return Finding(code, severity, "msg", SourceLocation(path, 3, 4))


@pytest.mark.parametrize(
    "line, code, expected",
    [
        ("x = loss.item()", "TL101", False),
        ("x = loss.item()  # noqa", "TL101", True),
        ("x = loss.item()  # noqa: TL101", "TL101", True),
        ("x = loss.item()  # noqa: TL202", "TL101", False),
        ("x = loss.item()  # noqa: TL202, TL101", "TL101", True),
        ("x = loss.item()  # NOQA:TL1", "TL101", True),
        ("x = loss.item()  # tracelint: ignore[TL101]", "TL101", True),
        ("x = loss.item()  # tracelint: ignore[TL102,TL103]", "TL101", False),
        ("x = loss.item()  # tracelint: ignore", "TL101", True),
        ("s = '# noqa: TL101'", "TL202", False),
    ],
)
def test_suppression_comments(line, code, expected):
    assert is_suppressed(line, code) is expected


def test_config_select_ignore_and_severity(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.tracelint]\nselect = ["TL1", "TL2"]\nignore = ["TL102"]\n'
        'severities = { TL101 = "error" }\nfail-on = "error"\n'
        'per-file-ignores = { "tests/*" = ["TL201"] }\n'
        "[tool.tracelint.trace]\nmin-gpu-busy-pct = 80\n"
    )
    (tmp_path / "pkg").mkdir()
    config = find_config((tmp_path / "pkg").resolve())
    assert config.root == tmp_path.resolve()
    assert config.fail_on is Severity.ERROR
    assert config.threshold("min-gpu-busy-pct") == 80.0
    assert config.apply(_finding("TL101", str(tmp_path / "a.py"))).severity is Severity.ERROR
    assert config.apply(_finding("TL102", str(tmp_path / "a.py"))) is None
    assert config.apply(_finding("TL301", str(tmp_path / "a.py"))) is None
    assert config.apply(_finding("TL201", str(tmp_path / "tests" / "t.py"))) is None
    assert config.apply(_finding("TL201", str(tmp_path / "src" / "t.py"))) is not None


def test_config_errors_are_one_line(tmp_path: Path):
    bad = tmp_path / "pyproject.toml"
    bad.write_text('[tool.tracelint]\nselcet = ["TL1"]\n')
    with pytest.raises(ConfigError, match="unknown .* selcet"):
        load_config_file(bad)
    bad.write_text('[tool.tracelint]\nfail-on = "loud"\n')
    with pytest.raises(ConfigError, match="unknown severity"):
        load_config_file(bad)
    bad.write_text("[tool.tracelint\n")
    with pytest.raises(ConfigError):
        load_config_file(bad)


def test_exit_codes():
    assert RunResult().exit_code() == 0
    assert RunResult(findings=[_finding(severity=Severity.INFO)]).exit_code() == 0
    assert RunResult(findings=[_finding()]).exit_code() == 1
    assert RunResult(findings=[_finding()]).exit_code(Severity.ERROR) == 0
    assert RunResult(findings=[_finding()]).exit_code(exit_zero=True) == 0
    assert RunResult(findings=[_finding()], errors=[InputError("x", "bad")]).exit_code(exit_zero=True) == 2


def test_finding_origin_and_source():
    src = SourceLocation("train.py", 42)
    trace = Finding("TL202", Severity.WARNING, "m", TraceLocation("t.json", rank=0, step=3, source=src))
    assert trace.origin == "trace" and trace.source == src and trace.path == "t.json"
    assert _finding().origin == "source"
    # the fingerprint ignores line moves
    moved = Finding("TL101", Severity.WARNING, "msg", SourceLocation("train.py", 30, 0))
    assert moved.fingerprint() == _finding().fingerprint()
    # a trace finding's message carries measured numbers: its fingerprint does not
    rerun = Finding("TL202", Severity.WARNING, "other numbers", TraceLocation("t.json", rank=0, step=7, source=src))
    assert rerun.fingerprint() == trace.fingerprint()
    assert rerun.fingerprint() != Finding("TL202", Severity.WARNING, "m", TraceLocation("t.json")).fingerprint()


def test_catalog_file_format_is_checked(tmp_path: Path):
    path = tmp_path / "TL999-x.md"
    path.write_text("# no front matter\n")
    with pytest.raises(CatalogError, match="front matter"):
        parse_rule_file(path)
    path.write_text("---\ncode: TL999\nname: x\nfamily: f\nseverity: warning\nimplemented-by: source\n---\n"
                    "## What it does\n")
    with pytest.raises(CatalogError, match="missing sections"):
        parse_rule_file(path)
    sections = "".join(f"## {s}\ntext\n" for s in ("What it does", "Why is this bad?", "Measured effect"))
    path.write_text(
        "---\ncode: TL999\nname: x\nfamily: f\nseverity: info\nimplemented-by: source, trace\n"
        "thresholds: min-a=3, max-b=0.5\n---\n" + sections
        + "## Example\n```python\nbad()\n```\n## Use instead\n```python\ngood()\n```\n"
    )
    doc = parse_rule_file(path)
    assert doc.severity is Severity.INFO and doc.implemented_by == {"source", "trace"}
    assert doc.bad_examples == ["bad()\n"] and doc.good_examples == ["good()\n"]
    assert doc.thresholds == {"min-a": 3.0, "max-b": 0.5}


def test_engine_modules_import_each_other_without_a_cycle():
    """Imports anywhere in a module (function-level ones included) form a DAG inside tracelint.engine."""
    import ast

    import tracelint.engine

    folder = Path(tracelint.engine.__file__).parent
    graph = {}
    for path in folder.glob("*.py"):
        if path.stem == "__init__":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[path.stem] = {
            node.module.rsplit(".", 1)[-1] for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tracelint.engine.")
        }
    state: dict[str, int] = {}

    def visit(name, trail):
        assert state.get(name) != 1, f"import cycle: {' -> '.join([*trail, name])}"
        if state.get(name) == 2:
            return
        state[name] = 1
        for dep in graph.get(name, ()):
            visit(dep, [*trail, name])
        state[name] = 2

    for name in graph:
        visit(name, [])
