"""Name resolution through imports and aliases (context.FileContext.qualified_name)."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from tracelint.source.semantic.model import FileContext


def resolved_calls(source: str) -> list[str | None]:
    """qualified_name of the function of every call, in source order."""
    source = textwrap.dedent(source)
    module = cst.parse_module(source)
    ctx = FileContext("t.py", source, module)
    calls: list[cst.Call] = []

    class Collect(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            calls.append(node)

    module.visit(Collect())
    return [ctx.qualified_name(c.func) for c in calls]


@pytest.mark.parametrize("source, expected", [
    ("import torch\ntorch.cuda.synchronize()\n", "torch.cuda.synchronize"),
    ("import torch.utils.data as tud\ntud.DataLoader(ds)\n", "torch.utils.data.DataLoader"),
    ("from torch.utils.data import DataLoader as DL\nDL(ds)\n", "torch.utils.data.DataLoader"),
    ("from torch.utils.data import DataLoader\nDataLoader(ds)\n", "torch.utils.data.DataLoader"),
    ("from torch.utils import data\ndata.DataLoader(ds)\n", "torch.utils.data.DataLoader"),
    ("import torch.utils.data\ntorch.utils.data.DataLoader(ds)\n", "torch.utils.data.DataLoader"),
    ("import torch as T\nT.cuda.synchronize()\n", "torch.cuda.synchronize"),
    ("from torch import cuda\ncuda.synchronize()\n", "torch.cuda.synchronize"),
    ("import torch\nDL = torch.utils.data.DataLoader\nDL(ds)\n", "torch.utils.data.DataLoader"),
    ("print(x)\n", "builtins.print"),
])
def test_resolves_through_imports_and_aliases(source, expected):
    assert resolved_calls(source)[-1] == expected


def test_imports_inside_functions_count():
    assert resolved_calls("""
        def main():
            from torch.utils.data import DataLoader
            return DataLoader(ds)
    """) == ["torch.utils.data.DataLoader"]


@pytest.mark.parametrize("source", [
    # a class of the file's own is not torch's, even with the same name
    "class DataLoader:\n    pass\nDataLoader(ds)\n",
    "def DataLoader(ds):\n    return ds\nDataLoader(ds)\n",
    # an unknown name: not guessed
    "DataLoader(ds)\n",
    "from mylib import loaders\nloaders.DataLoader(ds)\n",
    # a builtin shadowed by the file
    "def print(*a):\n    pass\nprint(x)\n",
    # a parameter of the same name
    "def f(DataLoader):\n    return DataLoader(ds)\n",
])
def test_local_definitions_and_unknown_names_resolve_to_none_or_not_torch(source):
    name = resolved_calls(source)[-1]
    assert name is None or not name.startswith(("torch", "builtins"))


def test_alias_assigned_twice_is_not_trusted():
    assert resolved_calls("""
        import torch
        DL = torch.utils.data.DataLoader
        DL = make_loader
        DL(ds)
    """)[-1] is None


def test_relative_import_is_not_torch():
    assert resolved_calls("from .data import DataLoader\nDataLoader(ds)\n") == [".data.DataLoader"]


def test_parents_and_positions_during_traversal():
    from tracelint.source.rule import SourceRule, run_rules

    source = "import torch\nfor x in loader:\n    y = x.item()\n"
    module = cst.parse_module(source)
    ctx = FileContext("t.py", source, module)
    seen = []

    class Probe(SourceRule):
        code = "TL999"

        def visit_Call(self, node):
            seen.append(([type(a).__name__ for a in self.ctx.ancestors(node)], list(self.ctx.stack)))
            self.report(node, "probe")

    findings = run_rules(ctx, [Probe(ctx)])
    ancestors, stack = seen[0]
    assert ancestors[-1] == "Module" and "For" in ancestors
    assert [type(n).__name__ for n in reversed(stack)] == ancestors
    assert (findings[0].location.line, findings[0].location.column) == (3, 9)  # 1-based


def test_iter_descendants_matches_libcst_traversal_without_layout_nodes():
    from tracelint.source.semantic.model import SKIP_NODES, iter_descendants

    source = "import torch\nfor i, (x, y) in enumerate(loader):\n    z = {k: v.to(d) for k, v in x.items()}\n"
    module = cst.parse_module(source)
    expected: list[str] = []

    class Collect(cst.CSTVisitor):
        def on_visit(self, node):
            if isinstance(node, SKIP_NODES):
                return False
            expected.append(type(node).__name__)
            return True

    module.visit(Collect())
    got = [type(n).__name__ for n in iter_descendants(module)]
    assert sorted(got) == sorted(expected[1:])
    assert got[:4] == ["SimpleStatementLine", "Import", "ImportAlias", "Name"]
