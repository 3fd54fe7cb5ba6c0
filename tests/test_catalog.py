"""The rule catalog (rules/*.md): every file parses with all sections, every rule in code has a file and every
file's implementations exist, and the examples of source rules are executable test cases (Fixit's VALID/INVALID)."""
from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest

from tracelint.engine import Finding, InputError, discover
from tracelint.engine.catalog import REQUIRED_SECTIONS, catalog, catalog_dir, parse_rule_file
from tracelint.source import lint_paths
from tracelint.source.rule import SourceRule

RULE_FILES = sorted(catalog_dir().glob("TL*.md"))
DOCS = catalog()


def implemented(half: str) -> set[str] | None:
    """Codes of the rule classes of one half, or None when that half has no rule package yet."""
    if half == "source":
        return {cls.code for cls in discover("tracelint.source.rules", SourceRule)}
    if importlib.util.find_spec("tracelint.trace.rule") is None or \
            importlib.util.find_spec("tracelint.trace.rules") is None:
        return None
    base = importlib.import_module("tracelint.trace.rule").TraceRule
    return {cls.code for cls in discover("tracelint.trace.rules", base)}


def test_there_are_rule_files():
    assert RULE_FILES


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_rule_file_parses_with_all_sections(path: Path):
    doc = parse_rule_file(path)
    assert path.name.startswith(f"{doc.code}-{doc.name}"), "file name must be CODE-name.md"
    for section in REQUIRED_SECTIONS:
        assert doc.sections[section].strip(), f"empty section {section!r}"
    assert doc.implemented_by <= {"source", "trace"} and doc.implemented_by
    assert doc.fix in ("none", "safe", "unsafe")
    if "source" in doc.implemented_by:
        assert doc.bad_examples and doc.good_examples, "a source rule needs python examples of both kinds"


@pytest.mark.parametrize("half", ["source", "trace"])
def test_every_rule_in_code_has_a_catalog_file_and_vice_versa(half):
    codes = implemented(half)
    if codes is None:
        pytest.skip(f"the {half} half has no rule package yet")
    documented = {code for code, doc in DOCS.items() if half in doc.implemented_by}
    assert codes - set(DOCS) == set(), "rule classes without a rules/ file"
    assert codes - documented == set(), "rule classes whose rules/ file does not name this half"
    assert documented - codes == set(), "rules/ files naming this half without an implementation"


def _lint_snippet(tmp_path: Path, code: str, index: int, text: str) -> list:
    path = tmp_path / f"{code.lower()}_{index}.py"
    path.write_text(text, encoding="utf-8")
    items = list(lint_paths([path]))
    errors = [i for i in items if isinstance(i, InputError)]
    assert not errors, f"example {index} of {code} does not lint: {errors}"
    return [i for i in items if isinstance(i, Finding)]


SOURCE_DOCS = [doc for doc in DOCS.values() if "source" in doc.implemented_by]


@pytest.mark.parametrize("doc", SOURCE_DOCS, ids=lambda d: d.code)
def test_bad_examples_fire_the_rule(doc, tmp_path):
    if doc.code not in (implemented("source") or set()):
        pytest.fail(f"{doc.code} is documented as a source rule but not implemented")
    for index, example in enumerate(doc.bad_examples):
        found = _lint_snippet(tmp_path, doc.code, index, example)
        assert doc.code in {f.code for f in found}, f"bad example {index} of {doc.code} does not fire:\n{example}"


@pytest.mark.parametrize("doc", SOURCE_DOCS, ids=lambda d: d.code)
def test_good_examples_do_not_fire_the_rule(doc, tmp_path):
    for index, example in enumerate(doc.good_examples):
        found = _lint_snippet(tmp_path, doc.code, 100 + index, example)
        assert doc.code not in {f.code for f in found}, f"good example {index} of {doc.code} fires:\n{example}"
