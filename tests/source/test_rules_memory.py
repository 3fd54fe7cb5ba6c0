"""TL301: zero_grad that keeps zero-filled gradients."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("call, flagged", [
    ("optimizer.zero_grad(set_to_none=False)", True),
    ("optimizer.zero_grad(False)", True),
    ("model.zero_grad(set_to_none=False)", True),
    ("optimizer.zero_grad()", False),  # defaults to set_to_none=True since torch 2.0
    ("optimizer.zero_grad(set_to_none=True)", False),
    ("optimizer.zero_grad(set_to_none=keep)", False),  # non-literal
    ("optimizer.zero_grad(0)", False),  # not the literal False
])
def test_zero_grad_arguments(lint, call, flagged):
    result = lint(f"import torch\nfor x in loader:\n    {call}\n")
    assert result.codes() == ([("TL301", 3)] if flagged else [])


@pytest.mark.parametrize("mutation", [
    "p.grad += g", "p.grad.add_(g)", "p.grad.data.mul_(0.5)", "p.grad[mask] = 0", "p.grad[i] += 1",
])
def test_not_reported_where_grads_are_mutated_in_place(lint, mutation):
    result = lint(f"import torch\noptimizer.zero_grad(set_to_none=False)\nfor p, g in pairs:\n    {mutation}\n")
    assert result.codes() == []


def test_fix_drops_the_argument(lint):
    result = lint("import torch\nopt.zero_grad(set_to_none=False)\nmodel.zero_grad(False)\n")
    assert [f.fix.edits[0].text for f in result.findings] == ["", ""]  # the text between the parentheses goes
    assert all(f.fix.safe for f in result.findings)
