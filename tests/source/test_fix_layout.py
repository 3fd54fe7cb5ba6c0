"""Fixes keep the layout (issue #12, item 7): a keyword a fix adds goes where a person would put it, in the style of
the call it edits, and a value it sets or an argument it removes changes only that text. Exact bytes for a table of
layouts, each in a file and inside an indented block, with LF and CRLF line breaks; every result parses, has no
trailing whitespace, and fixing it again changes nothing."""
from __future__ import annotations

import json
import subprocess
import sys

import libcst as cst
import pytest

from tracelint.engine import Config, FileChecked, Finding
from tracelint.source import lint_paths
from tracelint.source.fix import apply_edits
from tracelint.source.semantic.calls import remove_argument, set_keyword
from tracelint.source.semantic.model import FileContext, dotted_name, iter_descendants

# (layout, DataLoader call as written, the call once pin_memory=True is added)
ADD = [
    ("one line", "DataLoader(ds, batch_size=8)", "DataLoader(ds, batch_size=8, pin_memory=True)"),
    ("one line, trailing comma", "DataLoader(ds, batch_size=8,)", "DataLoader(ds, batch_size=8, pin_memory=True,)"),
    ("one line, no space after commas", "DataLoader(ds,batch_size=8)", "DataLoader(ds,batch_size=8,pin_memory=True)"),
    ("one line, spaces inside the parentheses", "DataLoader( ds )", "DataLoader( ds, pin_memory=True )"),
    ("keywords written name = value", "DataLoader(ds, batch_size = 8)",
     "DataLoader(ds, batch_size = 8, pin_memory = True)"),
    ("no arguments", "DataLoader()", "DataLoader(pin_memory=True)"),
    ("no arguments, a comment inside", "DataLoader(  # set below\n)",
     "DataLoader(  # set below\n    pin_memory=True\n)"),
    ("each argument on its own line, trailing comma",
     "DataLoader(\n    ds,\n    batch_size=8,\n)",
     "DataLoader(\n    ds,\n    batch_size=8,\n    pin_memory=True,\n)"),
    ("each argument on its own line, no trailing comma",
     "DataLoader(\n    ds,\n    batch_size=8\n)",
     "DataLoader(\n    ds,\n    batch_size=8,\n    pin_memory=True\n)"),
    ("the issue's call: hanging indent, one argument line, trailing comma, ')' on its own line",
     "DataLoader(\n    ds, batch_size=8, num_workers=2,\n)",
     "DataLoader(\n    ds, batch_size=8, num_workers=2, pin_memory=True,\n)"),
    ("hanging indent, one argument line, no trailing comma",
     "DataLoader(\n    ds, batch_size=8, num_workers=2\n)",
     "DataLoader(\n    ds, batch_size=8, num_workers=2, pin_memory=True\n)"),
    ("hanging indent, the last of two argument lines",
     "DataLoader(\n    ds, batch_size=8,\n    shuffle=True, num_workers=2,\n)",
     "DataLoader(\n    ds, batch_size=8,\n    shuffle=True, num_workers=2, pin_memory=True,\n)"),
    ("a single argument on its own line",
     "DataLoader(\n    ds\n)",
     "DataLoader(\n    ds,\n    pin_memory=True\n)"),
    ("aligned with the opening parenthesis",
     "DataLoader(ds,\n           batch_size=8,\n           num_workers=2)",
     "DataLoader(ds,\n           batch_size=8,\n           num_workers=2,\n           pin_memory=True)"),
    ("aligned, trailing comma, ')' aligned too",
     "DataLoader(ds,\n           batch_size=8,\n           )",
     "DataLoader(ds,\n           batch_size=8,\n           pin_memory=True,\n           )"),
    ("comments after arguments, trailing comma",
     "DataLoader(\n    ds,  # the dataset\n    batch_size=8,  # small\n)",
     "DataLoader(\n    ds,  # the dataset\n    batch_size=8,  # small\n    pin_memory=True,\n)"),
    ("comments after arguments, no trailing comma",
     "DataLoader(\n    ds,  # the dataset\n    batch_size=8  # small\n)",
     "DataLoader(\n    ds,  # the dataset\n    batch_size=8,  # small\n    pin_memory=True\n)"),
    ("a commented-out argument before ')'",
     "DataLoader(\n    ds,\n    batch_size=8,\n    # num_workers=2,\n)",
     "DataLoader(\n    ds,\n    batch_size=8,\n    pin_memory=True,\n    # num_workers=2,\n)"),
    ("an argument spanning lines",
     "DataLoader(\n    ds,\n    collate_fn=partial(\n        pad, value=0),\n)",
     "DataLoader(\n    ds,\n    collate_fn=partial(\n        pad, value=0),\n    pin_memory=True,\n)"),
    ("**kwargs, one line", "DataLoader(ds, **loader_kwargs)", "DataLoader(ds, **loader_kwargs, pin_memory=True)"),
    ("**kwargs on its own line, trailing comma",
     "DataLoader(\n    ds,\n    **loader_kwargs,\n)",
     "DataLoader(\n    ds,\n    **loader_kwargs,\n    pin_memory=True,\n)"),
    ("**kwargs on its own line, no trailing comma",
     "DataLoader(\n    ds,\n    **loader_kwargs\n)",
     "DataLoader(\n    ds,\n    **loader_kwargs,\n    pin_memory=True\n)"),
]

# (layout, call as written, the call once pin_memory is True): a value given is replaced, nothing else moves
SET = [
    ("keyword, one line", "DataLoader(ds, pin_memory=False)", "DataLoader(ds, pin_memory=True)"),
    ("keyword on its own line, comment after it",
     "DataLoader(\n    ds,\n    pin_memory=False,  # no pinning\n    num_workers=2,\n)",
     "DataLoader(\n    ds,\n    pin_memory=True,  # no pinning\n    num_workers=2,\n)"),
    ("keyword written name = value", "DataLoader(ds, pin_memory = False)", "DataLoader(ds, pin_memory = True)"),
    ("parenthesized value", "DataLoader(ds, pin_memory=(False))", "DataLoader(ds, pin_memory=(True))"),
    ("eighth positional argument",
     "DataLoader(\n    ds, 8, False, None,\n    None, 0, None, False,\n)",
     "DataLoader(\n    ds, 8, False, None,\n    None, 0, None, True,\n)"),
]

# (layout, source with one optimizer.zero_grad call, the source once its first argument is removed)
REMOVE = [
    ("keyword", "opt.zero_grad(set_to_none=False)", "opt.zero_grad()"),
    ("positional", "opt.zero_grad(False)", "opt.zero_grad()"),
    ("spaces inside the parentheses", "opt.zero_grad( set_to_none=False )", "opt.zero_grad()"),
    ("on its own line, trailing comma", "opt.zero_grad(\n    set_to_none=False,\n)", "opt.zero_grad()"),
    ("on its own line with a comment", "opt.zero_grad(\n    set_to_none=False  # keep the buffers\n)",
     "opt.zero_grad()"),
    ("a comment on the '(' line stays", "opt.zero_grad(  # see the docs\n    set_to_none=False,\n)",
     "opt.zero_grad(  # see the docs\n)"),
]

# (layout, call of f, index of the argument to remove, the call without it)
REMOVE_OF_MANY = [
    ("last, one line", "f(a, b)", 1, "f(a)"),
    ("first, one line", "f(a, b)", 0, "f(b)"),
    ("middle, one line", "f(a, b, c)", 1, "f(a, c)"),
    ("last, one line, trailing comma", "f(a, b,)", 1, "f(a,)"),
    ("last, own lines, trailing comma", "f(\n    a,\n    b,\n)", 1, "f(\n    a,\n)"),
    ("last, own lines, no trailing comma", "f(\n    a,\n    b\n)", 1, "f(\n    a\n)"),
    ("first, own lines", "f(\n    a,\n    b,\n)", 0, "f(\n    b,\n)"),
    ("last, own lines, comments", "f(\n    a,  # why a\n    b  # why b\n)", 1, "f(\n    a  # why a\n)"),
    ("last of a shared line", "f(\n    a, b,\n)", 1, "f(\n    a,\n)"),
    ("before a later argument on its line", "f(a,\n  b, c)", 1, "f(a,\n  c)"),
    ("aligned, last", "f(a,\n  b)", 1, "f(a)"),
]


def in_file(call: str) -> str:
    return f"loader = {call}\n"


def in_block(call: str) -> str:
    """The call inside a function body (its continuation lines indented along with it)."""
    return f"def make(ds):\n    loader = {call.replace(chr(10), chr(10) + '    ')}\n    return loader\n"


def crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


PLACES = [pytest.param(in_file, id="file"), pytest.param(in_block, id="block"),
          pytest.param(lambda call: crlf(in_file(call)), id="file-crlf"),
          pytest.param(lambda call: crlf(in_block(call)), id="block-crlf")]


def find_call(source: str, func: str) -> tuple[FileContext, cst.Call]:
    module = cst.parse_module(source)
    call = next(n for n in iter_descendants(module) if isinstance(n, cst.Call) and dotted_name(n.func) == func)
    return FileContext("train.py", source, module), call


def add_pin_memory(source: str, position: int | None = 7) -> str:
    ctx, call = find_call(source, "DataLoader")
    return apply_edits(source, [set_keyword(ctx, call, "pin_memory", "True", position)])


def remove_first(source: str, func: str = "opt.zero_grad", index: int = 0) -> str:
    ctx, call = find_call(source, func)
    return apply_edits(source, [remove_argument(ctx, call, call.args[index])])


def assert_clean(text: str) -> None:
    """Parses (libcst and Python) and has no trailing whitespace the fix could have left."""
    cst.parse_module(text)
    compile(text, "train.py", "exec")
    assert all(line == line.rstrip(" \t") for line in text.splitlines()), text


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("before,after", [pytest.param(b, a, id=name) for name, b, a in ADD + SET])
def test_set_keyword_writes_the_call_style(place, before, after):
    fixed = add_pin_memory(place(before))
    assert fixed == place(after)
    assert_clean(fixed)
    assert add_pin_memory(fixed) == fixed  # idempotent: pin_memory=True is now set, and set to the same text


@pytest.mark.parametrize("before,after", [
    pytest.param("def make(ds):\n\tloader = DataLoader(\n\t\tds,\n\t\tbatch_size=8\n\t)\n\treturn loader\n",
                 "def make(ds):\n\tloader = DataLoader(\n\t\tds,\n\t\tbatch_size=8,\n\t\tpin_memory=True\n\t)\n"
                 "\treturn loader\n", id="tabs"),
    pytest.param("def make(ds):\n\tloader = DataLoader(ds,\n\t                  num_workers=2,\n"
                 "\t                  )\n",
                 "def make(ds):\n\tloader = DataLoader(ds,\n\t                  num_workers=2,\n"
                 "\t                  pin_memory=True,\n\t                  )\n", id="tabs-then-spaces-aligned"),
    pytest.param("loader = DataLoader(\n    ds,\r\n    batch_size=8\r\n)\n",
                 "loader = DataLoader(\n    ds,\r\n    batch_size=8,\r\n    pin_memory=True\r\n)\n",
                 id="mixed-line-breaks-the-line-s-own"),
    pytest.param("loader = DataLoader(x for x in items)\n",
                 "loader = DataLoader((x for x in items), pin_memory=True)\n", id="lone-generator"),
])
def test_set_keyword_other_files(before, after):
    fixed = add_pin_memory(before)
    assert fixed == after
    assert_clean(fixed)
    assert add_pin_memory(fixed) == fixed


def test_set_keyword_changes_the_value_in_a_kwargs_dict_nearby():
    source = ("def make(ds):\n    kwargs = dict(\n        batch_size=8,\n        pin_memory=False,\n    )\n"
              "    return DataLoader(ds, **kwargs)\n")
    assert add_pin_memory(source) == source.replace("pin_memory=False", "pin_memory=True")


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("before,after", [pytest.param(b, a, id=name) for name, b, a in REMOVE])
def test_remove_argument_keeps_the_rest(place, before, after):
    fixed = remove_first(place(before))
    assert fixed == place(after)
    assert_clean(fixed)


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("before,index,after", [pytest.param(b, i, a, id=name) for name, b, i, a in REMOVE_OF_MANY])
def test_remove_argument_of_many(place, before, index, after):
    fixed = remove_first(place(before), "f", index)
    assert fixed == place(after)
    assert_clean(fixed)


# -- through the rules ------------------------------------------------------------------------------------------
HEADER = "import torch\nfrom torch.utils.data import DataLoader\n\n"


def fix_file(tmp_path, text: str, *codes: str, unsafe: bool = False) -> tuple[str, list]:
    path = tmp_path / "train.py"
    path.write_bytes(text.encode())
    config = Config(root=tmp_path, select=codes)
    items = list(lint_paths([path], config_for=lambda _: config, fix=True, unsafe_fixes=unsafe))
    fixed = path.read_bytes().decode()
    again = list(lint_paths([path], config_for=lambda _: config, fix=True, unsafe_fixes=unsafe))
    assert path.read_bytes().decode() == fixed  # fixing twice changes nothing
    assert [i for i in again if isinstance(i, FileChecked)] == [FileChecked(str(path), fixed=0)]
    return fixed, items


RULE_CASES = [
    # (id, codes, unsafe, before, after, pending)
    ("TL202 the issue's call", ("TL202",), False,
     in_file("DataLoader(\n    ds, batch_size=8, num_workers=2,\n)"),
     in_file("DataLoader(\n    ds, batch_size=8, num_workers=2, pin_memory=True,\n)"), False),
    ("TL202 the issue's call in a function", ("TL202",), False,
     in_block("DataLoader(\n    ds, batch_size=8, num_workers=2,\n)"),
     in_block("DataLoader(\n    ds, batch_size=8, num_workers=2, pin_memory=True,\n)"), True),
    ("TL201+TL202 own lines, no trailing comma, CRLF", ("TL201", "TL202"), True,
     crlf(in_file("DataLoader(\n    ds,\n    batch_size=8  # small\n)")),
     crlf(in_file("DataLoader(\n    ds,\n    batch_size=8,  # small\n    num_workers=4,\n    pin_memory=True\n)")),
     False),
    ("TL201+TL202 own lines in a function", ("TL201", "TL202"), True,
     in_block("DataLoader(\n    ds,\n    batch_size=8,\n)"),
     in_block("DataLoader(\n    ds,\n    batch_size=8,\n    num_workers=4,\n    pin_memory=True,\n)"), True),
    ("TL202 pin_memory=False in a function", ("TL202",), False,
     in_block("DataLoader(\n    ds,\n    pin_memory=False,\n)"),
     in_block("DataLoader(\n    ds,\n    pin_memory=True,\n)"), False),
    ("TL202 aligned with '('", ("TL202",), False,
     in_file("DataLoader(ds,\n           num_workers=2)"),
     in_file("DataLoader(ds,\n           num_workers=2,\n           pin_memory=True)"), False),
    ("TL301 one line in a loop", ("TL301",), False,
     "import torch\nfor batch in loader:\n    opt.zero_grad(set_to_none=False)  # each step\n",
     "import torch\nfor batch in loader:\n    opt.zero_grad()  # each step\n", False),
    ("TL301 own line in a loop", ("TL301",), False,
     "import torch\nfor batch in loader:\n    opt.zero_grad(\n        set_to_none=False,\n    )\n    loss.backward()\n",
     "import torch\nfor batch in loader:\n    opt.zero_grad()\n    loss.backward()\n", False),
    ("TL203 own line in a loop", ("TL203",), False,
     "import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader(ds, num_workers=2, pin_memory=True)\n"
     "for x in loader:\n    x = x.to(\n        device,\n    )\n",
     "import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader(ds, num_workers=2, pin_memory=True)\n"
     "for x in loader:\n    x = x.to(\n        device,\n        non_blocking=True,\n    )\n", True),
]


@pytest.mark.parametrize("codes,unsafe,before,after", [
    pytest.param(codes, unsafe, before, after, id=name)
    for name, codes, unsafe, before, after, pending in RULE_CASES])
def test_rule_fixes_keep_the_layout(tmp_path, codes, unsafe, before, after):
    header = HEADER if "import torch" not in before else ""
    if before.startswith("def ") or before.startswith("loader"):
        before, after = header + before, header + after
    if "\r\n" in before:
        before, after = crlf(before.replace("\r\n", "\n")), crlf(after.replace("\r\n", "\n"))
    fixed, items = fix_file(tmp_path, before, *codes, unsafe=unsafe)
    assert fixed == after
    assert_clean(fixed)
    assert [i for i in items if isinstance(i, Finding)] == []


def test_notebook_cell_multi_line_call(tmp_path):
    cell = ["loader = DataLoader(\n", "    ds,\n", "    batch_size=8  # small\n", ")\n", "opt.zero_grad(\n",
            "    set_to_none=False,\n", ")"]
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                     "source": ["import torch\n", "from torch.utils.data import DataLoader"]},
                    {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": cell}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb, indent=1) + "\n", encoding="utf-8")
    config = Config(root=tmp_path, select=("TL202", "TL301"))
    items = list(lint_paths([path], config_for=lambda _: config, fix=True))
    assert [i for i in items if isinstance(i, Finding)] == []
    assert json.loads(path.read_text(encoding="utf-8"))["cells"][1]["source"] == [
        "loader = DataLoader(\n", "    ds,\n", "    batch_size=8,  # small\n", "    pin_memory=True\n", ")\n",
        "opt.zero_grad()"]


@pytest.mark.parametrize("place", [pytest.param(in_file, id="file"),
                                   pytest.param(in_block, id="block")])
def test_cli_fix(tmp_path, place):
    """``python -m tracelint check FILE --fix`` on the issue's call."""
    path = tmp_path / "train.py"
    path.write_text(HEADER + place("DataLoader(\n    ds, batch_size=8, num_workers=2,\n)"))
    done = subprocess.run([sys.executable, "-m", "tracelint", "check", "train.py", "--fix"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert path.read_text() == HEADER + place("DataLoader(\n    ds, batch_size=8, num_workers=2, pin_memory=True,\n)")
