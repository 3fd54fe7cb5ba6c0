"""Rules are named and placed alike in both halves: the class after the rule's name (``item-in-loop`` →
``ItemInLoop``), the module after the rule's family, the same module name in tracelint/source/rules/ and
tracelint/trace/rules/."""
from __future__ import annotations

import pytest

from tracelint.engine import discover
from tracelint.engine.catalog import catalog
from tracelint.source.lint import source_rules
from tracelint.trace.rule import TraceRule

RULES = [*source_rules(), *discover("tracelint.trace.rules", TraceRule)]


def _id(cls) -> str:
    return f"{cls.code}-{cls.__module__.split('.')[1]}"


@pytest.mark.parametrize("rule", RULES, ids=_id)
def test_class_is_named_after_the_rule(rule):
    name = catalog()[rule.code].name
    assert rule.__name__.lower() == name.replace("-", ""), f"{rule.code} {name}: class {rule.__name__}"


def test_a_family_lives_in_one_module_name_in_both_halves():
    modules: dict[str, set[str]] = {}
    for rule in RULES:
        modules.setdefault(rule.code[:3], set()).add(rule.__module__.rsplit(".", 1)[-1])
    assert {family: names for family, names in modules.items() if len(names) > 1} == {}
    assert modules["TL1"] == {"sync"} and modules["TL2"] == {"input"} and modules["TL3"] == {"memory"}
