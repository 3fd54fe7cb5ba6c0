"""Rules are named and placed alike in both halves: the class after the rule's name (``item-in-loop`` →
``ItemInLoop``), the module after the rule's family, the same module name in tracelint/source/rules/ and
tracelint/trace/rules/."""
from __future__ import annotations

import pytest

from tracelint.engine import discover
from tracelint.engine.catalog import catalog
from tracelint.source.lint import source_rules
from tracelint.trace.rule import TraceRule

FAMILY_MODULES = {"TL0": "notes", "TL1": "sync", "TL2": "input", "TL3": "memory", "TL4": "precision",
                  "TL5": "launch"}
RULES = [*source_rules(), *discover("tracelint.trace.rules", TraceRule)]


def _id(cls) -> str:
    return f"{cls.code}-{cls.__module__.split('.')[1]}"


@pytest.mark.parametrize("rule", RULES, ids=_id)
def test_class_is_named_after_the_rule(rule):
    name = catalog()[rule.code].name
    assert rule.__name__.lower() == name.replace("-", ""), f"{rule.code} {name}: class {rule.__name__}"


@pytest.mark.parametrize("rule", RULES, ids=_id)
def test_module_is_named_after_the_family(rule):
    module = rule.__module__.rsplit(".", 1)[-1]
    assert module == FAMILY_MODULES[rule.code[:3]], f"{rule.code} lives in {rule.__module__}"
