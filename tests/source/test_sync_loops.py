"""semantic/steps.py and semantic/values.py on their own: per-step loops, guards and the local tensor-ness guess,
asked of parsed snippets."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from tracelint.source.rule import run_rules
from tracelint.source.semantic.model import FileContext
from tracelint.source.semantic.steps import facts, guard_polarity
from tracelint.source.semantic.values import Kind, words


def parsed(source: str) -> FileContext:
    source = textwrap.dedent(source)
    ctx = FileContext("t.py", source, cst.parse_module(source))
    run_rules(ctx, [])  # the framework's traversal records every node's parent
    return ctx


def find(ctx: FileContext, code: str, kind: type = cst.CSTNode) -> cst.CSTNode:
    """The first node of type ``kind`` whose source text is ``code``."""
    for node in ctx.parents:
        if isinstance(node, kind) and ctx.code_for(node).strip() == code:
            return node
    raise LookupError(code)


def test_words():
    assert words("train_loader") == {"train", "loader"}
    assert words("trainLoader.nextBatch") == {"train", "loader", "next", "batch"}
    assert words("NUM_STEPS") == {"num", "steps"}


@pytest.mark.parametrize("test, polarity", [
    ("step % 10 == 0", 1), ("(i + 1) % args.log_interval == 0", 1), ("step % 10 != 0", -1), ("step % 10", -1),
    ("not step % 10", 1), ("step == 0", 1), ("i == len(loader) - 1", 1), ("args.verbose", 1), ("debug", 1),
    ("last_batch or i % 5 == 0", 1), ("rank == 0", 0), ("master_process", 0), ("is_main_process()", 0),
    ("master_process and step % 10 == 0", 1), ("(i + 1) % accum_steps == 0", 0), ("loss > 3", 0),
    ("x is None", 0),
])
def test_guard_polarity(test, polarity):
    ctx = parsed(f"if {test}:\n    pass\n")
    assert guard_polarity(ctx.module.body[0].test, ctx) == polarity


def test_hot_loop_and_its_description():
    ctx = parsed("""\
        for epoch in range(n_epochs):
            for x, y in train_loader:
                a = 1
            b = 2
    """)
    f = facts(ctx)
    inner = f.hot_loop(find(ctx, "a = 1", cst.SimpleStatementLine))
    assert inner is not None and inner.description == "the loop over `train_loader`"
    assert f.hot_loop(find(ctx, "b = 2", cst.SimpleStatementLine)) is None


def test_kind_follows_the_nearest_binding():
    ctx = parsed("""\
        import torch
        import numpy as np
        def step(model, x, device):
            out = model(x)
            a = out
            out = out.item()
            b = out
            arr = np.zeros(3)
            c = arr
            t = torch.tensor([1.0])
            d = t
            g = torch.zeros(3, device=device)
            e = g
            h, w = x.shape
            f = h
            y = x.to(device)
            z = y
    """)
    f = facts(ctx)

    def kind(name: str) -> Kind:
        for node in ctx.parents:
            if isinstance(node, cst.Assign) and ctx.code_for(node.targets[0].target) == name:
                return f.kind(node.value)
        raise LookupError(name)

    assert kind("a") is Kind.TENSOR   # model output
    assert kind("b") is Kind.HOST     # rebound to .item()
    assert kind("c") is Kind.HOST     # numpy
    assert kind("d") is Kind.HOST     # CPU tensor from a list
    assert kind("e") is Kind.TENSOR   # created on the device
    assert kind("f") is Kind.HOST     # a shape
    assert kind("z") is Kind.TENSOR   # moved to the device


def test_unknown_parameters_stay_unknown():
    ctx = parsed("def f(x):\n    y = x\n")
    f = facts(ctx)
    assign = next(n for n in ctx.parents if isinstance(n, cst.Assign))
    assert f.kind(assign.value) is Kind.UNKNOWN
