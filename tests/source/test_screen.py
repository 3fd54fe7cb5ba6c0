"""The ast screen (tracelint/source/screen.py): never holds back a file a rule reports on, and does screen out
ordinary clean code (else one-file runs pay for libcst for nothing)."""
from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from tracelint.engine import Config, Finding
from tracelint.engine.catalog import catalog
from tracelint.source import lint
from tracelint.source.lint import source_rules
from tracelint.source.rule import SourceRule, run_rules
from tracelint.source.screen import (
    DATA_DEPENDENT_CALL,
    DATALOADER,
    ELEMENT_LOOP,
    FORMAT,
    ITEM,
    MASK_INDEX,
    PINNED_COPY,
    SCALAR,
    SITE_KINDS,
    SYNCHRONIZE,
    ZERO_GRAD,
    is_site_kind,
    may_report,
    sites,
)
from tracelint.source.semantic.model import FileContext

REPO = Path(__file__).resolve().parents[2]
# the module (tracelint.engine's attribute of that name is the catalog() function)
catalog_module = importlib.import_module("tracelint.engine.catalog")


def unscreened_codes(source: str) -> set[str]:
    """The codes every source rule reports on ``source`` when run directly, without the screen."""
    ctx = FileContext("t.py", source, cst.parse_module(source))
    return {f.code for f in run_rules(ctx, [cls(ctx) for cls in source_rules()])}


def assert_sound(source: str) -> None:
    found = sites(source)
    held_back = {code for code in unscreened_codes(source) if not may_report(code, found)}
    assert not held_back, f"the screen ({sorted(found or ())}) holds back {sorted(held_back)} on:\n{source}"


@pytest.mark.parametrize("doc", [d for d in catalog().values() if d.sites is not None], ids=lambda d: d.code)
def test_rule_docs_name_known_site_kinds(doc):
    assert "source" in doc.implemented_by, "only a source rule is screened"
    unknown = sorted(k for k in doc.sites if not is_site_kind(k))
    assert doc.sites and not unknown, f"unknown site kinds {unknown}: the kinds are screen.SITE_KINDS " \
        f"{sorted(SITE_KINDS)} and call:NAME"


def test_call_sites_name_every_callee_as_written_and_resolved():
    found = sites("import torch.distributed as dist\nfrom torch.distributed import barrier as b\n"
                  "def f():\n    dist.all_reduce(x)\n    b()\n")
    assert {"call:all_reduce", "call:barrier", "call:b"} <= found
    assert may_report("TL101", found) is False  # the generic kinds do not wake the specific rules
    assert is_site_kind("call:barrier") and not is_site_kind("call:") and not is_site_kind("barrier")


class ScratchCompile(SourceRule):
    """A rule the screen knows nothing about (its sites are whatever its doc says)."""

    code = "TL999"

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualified_name(node.func) == "torch.compile":
            self.report(node, "torch.compile")


SCRATCH_DOC = """---
code: TL999
name: scratch-compile
family: launch overhead
severity: warning
implemented-by: source
fix: none{sites}
---

## What it does
## Why is this bad?
## Example
## Use instead
## Measured effect
"""


def lint_with_scratch_rule(tmp_path, monkeypatch, sites_line: str) -> list[str]:
    """The codes found on a file where the screen finds no site, with TL999 in the catalog and the rules."""
    rules = tmp_path / "rules"
    rules.mkdir()
    for doc in catalog().values():
        (rules / doc.path.name).write_text(doc.text, encoding="utf-8")
    (rules / "TL999-scratch-compile.md").write_text(SCRATCH_DOC.format(sites=sites_line), encoding="utf-8")
    code = tmp_path / "train.py"
    code.write_text("import torch\nmodel = torch.compile(model)\n", encoding="utf-8")
    assert sites(code.read_text()) & SITE_KINDS == frozenset()
    discovered = source_rules()
    with monkeypatch.context() as patch:
        patch.setattr(catalog_module, "catalog_dir", lambda: rules)
        patch.setattr(lint, "source_rules", lambda: (*discovered, ScratchCompile))
        catalog.cache_clear()
        try:
            items = lint.lint_file(code, Config())
        finally:
            catalog.cache_clear()
    return [item.code for item in items if isinstance(item, Finding)]


def test_a_rule_whose_doc_has_no_sites_runs_where_the_screen_finds_nothing(tmp_path, monkeypatch):
    assert lint_with_scratch_rule(tmp_path, monkeypatch, "") == ["TL999"]


def test_a_rule_is_screened_out_by_the_sites_its_doc_names(tmp_path, monkeypatch):
    assert lint_with_scratch_rule(tmp_path, monkeypatch, "\nsites: zero-grad") == []


FILES = sorted((REPO / "fixtures").rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_sound_on_the_fixtures(path):
    assert_sound(path.read_text(encoding="utf-8"))


EXAMPLES = [(doc.code, i, text) for doc in catalog().values() if "source" in doc.implemented_by
            for i, text in enumerate([*doc.bad_examples, *doc.good_examples])]


@pytest.mark.parametrize("code,index,text", EXAMPLES, ids=lambda v: str(v)[:12])
def test_sound_on_the_catalog_examples(code, index, text):
    assert_sound(text)


def screen(source: str) -> frozenset[str] | None:
    """The specific site kinds of a snippet (the generic call:NAME kinds left out)."""
    found = sites(textwrap.dedent(source))
    return None if found is None else found & SITE_KINDS


PREFETCH = """\
import torch

class Prefetcher:
    def __iter__(self):
        first = True
        stream = torch.cuda.current_stream()
        for next_input, next_target in self.loader:
            if stream is not None:
                self.stream.wait_stream(stream)
            with torch.cuda.stream(self.stream):
                next_input = next_input.to(device=self.device, non_blocking=True)
                if self.erase is not None:
                    next_input = self.erase(next_input)
            if not first:
                yield input, target
            else:
                first = False
            input = next_input

def adapt(x, n):
    if len(x) != n:
        x = (np.mean(x).item(),) * n
        print(f"mean {x}")
    for i in range(n):
        assert len(x[i]) == n, "shape"
        rows = [v * 2 for v in x[i]]
    return x
"""


def test_ordinary_clean_code_is_screened_out():
    assert screen(PREFETCH) == frozenset()


@pytest.mark.parametrize("source,kind", [
    ("for b in loader:\n    loss.item()\n", ITEM),
    ("while True:\n    loss = criterion(model(x), y)\n    if loss > 0:\n        break\n", SCALAR),
    ("for b in loader:\n    out = model(b)\n    print(out)\n", FORMAT),
    ("for b in loader:\n    out = model(b)\n    s = f'{out}'\n", FORMAT),
    ("from torch.cuda import synchronize as sync\nfor b in loader:\n    sync()\n", SYNCHRONIZE),
    ("for b in loader:\n    m = b > 0\n    x = b[m]\n", MASK_INDEX),
    ("for b in loader:\n    ends = (b == 2).nonzero(as_tuple=False)\n", DATA_DEPENDENT_CALL),
    ("for b in loader:\n    torch.cuda.current_stream().synchronize()\n", SYNCHRONIZE),
    ("for b in loader:\n    x, m = b, b.isnan()\n    y = b[m]\n", MASK_INDEX),
    ("DL = torch.utils.data.DataLoader\nloader = DL(ds)\n", DATALOADER),
    ("from torch.utils.data import DataLoader as L\nloader = L(ds, pin_memory=True)\nfor x in loader:\n"
     "    def move():\n        return x.to(dev)\n", PINNED_COPY),
    ("opt.zero_grad(False)\n", ZERO_GRAD),
    ("def training_step(self, batch, i):\n    return self(batch).item()\n", ITEM),
    # improved-diffusion's resampler: a comprehension over batches that walks each one's elements (TL502 reports it)
    ("def update(ts_batches, sizes):\n    return [x.item() for y, bs in zip(ts_batches, sizes) for x in y[:bs]]\n",
     ELEMENT_LOOP),
])
def test_sites_are_found(source, kind):
    assert kind in screen("import torch\n" + source)


@pytest.mark.parametrize("source", [
    "for b in loader:\n    n = len(b)\n    if n > 2:\n        print(n, b.shape)\n",
    "for b in loader:\n    def later():\n        return b.item()\n",
    "x.item()\nfloat(model(x))\n",
    "opt.zero_grad(set_to_none=True)\nloader = make_loader(ds)\n",
    "for b in loader:\n    if b is None or not ok:\n        continue\n",
])
def test_host_values_and_places_outside_loops_are_not_sites(source):
    assert screen("import torch\n" + source) == frozenset()


def test_sync_sites_need_a_torch_import():
    assert screen("for b in loader:\n    loss.item()\n") == frozenset()


def test_code_ast_cannot_parse_is_not_screened():
    assert sites("print 'python 2'\n") is None
    assert may_report("TL101", None)


def test_a_screened_out_file_never_imports_libcst(tmp_path):
    clean = tmp_path / "prefetch.py"
    clean.write_text(PREFETCH, encoding="utf-8")
    probe = ("import sys; from tracelint.cli import main\n"
             "try:\n    main(['check', sys.argv[1]])\nexcept SystemExit as e:\n    code = e.code\n"
             "print(code, 'libcst' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe, str(clean)], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-2:] == ["0", "False"]


@pytest.mark.parametrize("setting", [
    "os.environ['CUDA_LAUNCH_BLOCKING'] = '1'",
    "os.environ.setdefault('CUDA_LAUNCH_BLOCKING', '1')",
    "os.environ.update({'CUDA_LAUNCH_BLOCKING': '1'})",
    "os.environ.update(CUDA_LAUNCH_BLOCKING='1')",
    "os.putenv('CUDA_LAUNCH_BLOCKING', '1')",
])
def test_an_environment_setting_is_a_site_where_the_file_names_launch_blocking(setting):
    assert may_report("TL702", sites(f"import os\n{setting}\n"))


@pytest.mark.parametrize("setting", [
    "os.environ['CUDA_VISIBLE_DEVICES'] = '1'",
    "os.environ.setdefault('MASTER_PORT', '29500')",
    "state.update(model.state_dict())",
])
def test_other_environment_settings_and_updates_are_not_sites(setting):
    # a model file's ``cfg.update(...)`` once let TL702 through: timm parsed 36 files for a rule that cannot fire
    assert not may_report("TL702", sites(f"import os\n{setting}\n"))


# -- the sites of rules that once let whole model zoos through (timm: 1.75 MB of 5.5 MB parsed, 0.79 MB after) -----
_CONV_BN_CLASS = """import torch.nn as nn
class Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
    def forward(self, x):
{body}
"""


@pytest.mark.parametrize("code,source", [
    ("TL403", "import torch.nn as nn\nstem = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))\n"),
    ("TL403", "import torch.nn as nn\nconv = nn.Conv2d(3, 8, 3)\nlayers = [conv, nn.BatchNorm2d(8)]\n"),
    ("TL403", _CONV_BN_CLASS.format(body="        return self.bn(self.conv(x))")),
    ("TL403", _CONV_BN_CLASS.format(body="        y = self.conv(x)\n        return self.bn(y)")),
    ("TL503", "import torch, torch.nn as nn\nclass Net(nn.Module):\n    def forward(self, x):\n"
              "        return x.item()\nmodel = torch.compile(Net())\nfor b in loader:\n    model(b)\n"),
])
def test_tightened_sites_still_let_their_rule_through(code, source):
    assert code in unscreened_codes(source)
    assert may_report(code, sites(source))
    assert_sound(source)


@pytest.mark.parametrize("code,source", [
    # a biased conv and a BatchNorm in one file, never one straight after the other
    ("TL403", "import torch.nn as nn\nhead = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())\nnorm = nn.BatchNorm2d(8)\n"),
    ("TL403", _CONV_BN_CLASS.format(body="        return self.conv(x) + self.bn(x)")),
    ("TL403", "import torch.nn as nn\nstem = nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8))\n"),
    # a regular expression compiled, or a model compiled in a file that defines no module
    ("TL503", "import re, torch\nPATTERN = re.compile('x')\nfor b in loader:\n    loss.backward()\n"),
    ("TL503", "import torch\nfrom models import Net\nmodel = torch.compile(Net())\n"),
    # a tensor built on the host and moved once, before any loop
    ("TL204", "import torch\nmask = torch.ones(8, 8).cuda()\nfor b in loader:\n    model(b)\n"),
    # a size read through an item of a list: the rule's data flow knows nothing of it (timm's reparameterizations)
    ("TL404", "import torch.nn as nn\nV = 50257\nclass M(nn.Module):\n    def fuse(self):\n"
              "        return nn.Conv2d(self.convs[0].conv.in_channels, 8, 3)\n"),
])
def test_near_misses_of_the_tightened_sites_are_screened_out(code, source):
    assert code not in unscreened_codes(source)
    assert not may_report(code, sites(source))


@pytest.mark.parametrize("source,expected", [
    ("def train(model, loader):\n    for x in loader:\n        model(x)\n", True),
    ("class T:\n    def fit(self, loader):\n        for x in loader:\n            self.net(x)\n", True),
    ("def build(model):\n    return model.cfg\n", False),
    ("def train(loader):\n    for x in loader:\n        helper(x)\n", False),
])
def test_a_per_step_call_on_a_parameter_is_a_parameter_call(source, expected):
    # a file other files pass modules to is analysed again only where a call on a parameter may run per step
    from tracelint.source.screen import PARAMETER_CALL

    assert (PARAMETER_CALL in sites("import torch\n" + source)) is expected
