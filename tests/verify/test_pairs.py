"""Catalog example pairs as micro-benchmarks: the ```python verify marker, and one pair run on the CPU."""
from __future__ import annotations

import pytest

import tracelint.verify as verify
from tests.verify.conftest import CPU
from tracelint.engine import Finding, catalog
from tracelint.engine.catalog import parse_rule_file
from tracelint.source import lint_paths
from tracelint.verify.pairs import runnable_pair

LOOP = """\
import torch
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10**6):
    opt.zero_grad({arg})
    model(torch.randn(16, 8)).sum().backward()
    opt.step()
"""

RULE = """\
---
code: TL301
name: zero-grad-keeps-grads
family: optimizer and memory
severity: warning
implemented-by: source
---

## What it does
x

## Why is this bad?
x

## Example

```python
optimizer.zero_grad(set_to_none=False)
```

```python verify
{bad}```

## Use instead

```python verify
{good}```

## Measured effect
x
"""


@pytest.fixture
def rule_doc(tmp_path):
    path = tmp_path / "TL301-zero-grad-keeps-grads.md"
    path.write_text(RULE.format(bad=LOOP.format(arg="set_to_none=False"), good=LOOP.format(arg="")))
    return parse_rule_file(path)


def test_marked_blocks_form_the_pair_and_stay_lint_examples(rule_doc):
    pair = runnable_pair(rule_doc)
    assert pair is not None and "set_to_none=False" in pair.bad and "set_to_none" not in pair.good
    # The catalog still reads the marked blocks as python examples (the lint tests keep running them).
    assert len(rule_doc.bad_examples) == 2 and rule_doc.good_examples == [pair.good]


def test_unmarked_catalog_rules_have_no_runnable_pair():
    unmarked = [doc for doc in catalog().values() if "```python verify" not in doc.text]
    assert all(runnable_pair(doc) is None for doc in unmarked)


def test_a_rule_without_a_pair_is_a_usage_error():
    code = next((c for c, doc in catalog().items() if runnable_pair(doc) is None), None)
    if code is None:
        pytest.skip("every rule has a runnable pair")
    with pytest.raises(ValueError, match="no runnable example pair"):
        verify.verify_rules([code], CPU)


@pytest.mark.slow
def test_pair_runs_bad_against_good_on_the_cpu(rule_doc, monkeypatch):
    monkeypatch.setattr(verify, "catalog", lambda: {"TL301": rule_doc})
    (result,) = verify.verify_rules(["TL301"], CPU)
    assert result.target == "catalog TL301" and result.baseline is not None
    (row,) = result.rows
    assert row.variant.key == "TL301" and row.verdict.status in ("confirmed", "small", "no-effect", "slower")
    rounds = row.verdict.interval.rounds
    assert rounds >= CPU.blocks and len(row.verdict.fixed.block_ms) == len(row.verdict.baseline.block_ms) == rounds


def _runnable_docs():
    return [doc for doc in catalog().values() if runnable_pair(doc)]


def test_catalog_has_runnable_pairs():
    assert {"TL101", "TL301"} <= {doc.code for doc in _runnable_docs()}


@pytest.mark.parametrize("doc", _runnable_docs(), ids=lambda d: d.code)
def test_catalog_pairs_are_measured_through_the_rules_fix(doc, tmp_path):
    pair = runnable_pair(doc)
    if "source" not in doc.implemented_by:
        return  # a trace-only rule (TL405, TL50x, TL70x until their source twins): no lint finding to fix
    bad, good = tmp_path / "bad.py", tmp_path / "good.py"
    bad.write_text(pair.bad)
    good.write_text(pair.good)
    codes = lambda path: {f.code for f in lint_paths([path]) if isinstance(f, Finding)}  # noqa: E731
    assert doc.code in codes(bad) and doc.code not in codes(good)
    if doc.fix == "none":
        return  # no fix to measure through (a vocabulary size, say): the pair is bad against the doc's Use instead
    fixable = [f for f in lint_paths([bad]) if isinstance(f, Finding) and f.code == doc.code and f.fix]
    assert fixable, "verify measures a bad script through the rule's fix"
