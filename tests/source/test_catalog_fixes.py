"""A safe fix writes what the rule's doc recommends: applied to each *Example* of a ``fix: safe`` source rule, it
gives one of the doc's *Use instead* examples (trailing whitespace aside)."""
from __future__ import annotations

import pytest

from tracelint.engine import Config
from tracelint.engine.catalog import catalog
from tracelint.source import lint_paths

CASES = [(doc, index, bad) for doc in catalog().values() if "source" in doc.implemented_by and doc.fix == "safe"
         for index, bad in enumerate(doc.bad_examples)]


def normalised(code: str) -> str:
    return "\n".join(line.rstrip() for line in code.rstrip().splitlines())


def test_there_are_safe_fixes_to_check():
    assert {doc.code for doc, _, _ in CASES} >= {"TL202", "TL203", "TL301"}


@pytest.mark.parametrize("doc,index,bad", CASES, ids=lambda v: getattr(v, "code", str(v)[:8]))
def test_safe_fix_writes_a_use_instead_example(doc, index, bad, tmp_path):
    path = tmp_path / "example.py"
    path.write_text(bad, encoding="utf-8")
    only_this_rule = Config(root=tmp_path, select=(doc.code,))
    list(lint_paths([path], config_for=lambda _: only_this_rule, fix=True))
    fixed = normalised(path.read_text(encoding="utf-8"))
    assert fixed != normalised(bad), f"{doc.code} Example #{index + 1}: the fix changed nothing"
    good = [normalised(code) for code in doc.good_examples]
    assert fixed in good, (f"{doc.path.name}: the fix of Example #{index + 1} writes\n{fixed}\n"
                           f"which is none of the Use instead examples")
