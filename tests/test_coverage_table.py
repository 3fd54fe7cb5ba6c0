"""rules/README.md's coverage table stays honest: every rule code it names is in the catalog, every rule in the
catalog is placed in it at least once (a new rule must be placed), and a code in a Source or Trace column names a
rule that its rule file says that half implements."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tracelint.engine.catalog import catalog

README = Path(__file__).resolve().parents[1] / "rules" / "README.md"
CODE = re.compile(r"\bTL\d{3}\b")


def _text() -> str:
    return README.read_text(encoding="utf-8")


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _column_codes() -> list[tuple[str, str, str]]:
    """(half, code, row) for each code in a Source or Trace column of the Markdown tables."""
    found, header = [], None
    for line in _text().splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = [cell.lower() for cell in cells]
            continue
        if set("".join(cells)) <= set("-: "):
            continue  # the separator row
        for half in ("source", "trace"):
            if half in header:
                for code in CODE.findall(cells[header.index(half)]):
                    found.append((half, code, cells[0]))
    return found


def test_the_table_exists_and_names_rules():
    assert CODE.search(_text())


def test_every_code_in_the_table_is_in_the_catalog():
    assert set(CODE.findall(_text())) - set(catalog()) == set(), "codes in rules/README.md without a rule file"


def test_every_rule_is_placed_in_the_table():
    assert set(catalog()) - set(CODE.findall(_text())) == set(), \
        "rules missing from rules/README.md's coverage table: place each in a row (or under the input rules)"


@pytest.mark.parametrize("half", ["source", "trace"])
def test_a_code_in_a_half_column_implements_that_half(half):
    docs = catalog()
    wrong = {(code, row) for h, code, row in _column_codes() if h == half and half not in docs[code].implemented_by}
    assert not wrong, f"codes in the {half.title()} column whose rule file does not implement {half}: {sorted(wrong)}"


def test_the_column_check_reads_the_tables():
    halves = {half for half, _, _ in _column_codes()}
    assert halves == {"source", "trace"}
