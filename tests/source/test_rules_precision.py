"""TL401 (source twin): a CUDA training loop in a program that never enables TF32 or reduced precision; TL404:
layer sizes that keep fp16/bf16 GEMMs off the Tensor Core tiles; the precision settings both read."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tracelint.engine import Config, Finding, Severity
from tracelint.source import lint_paths
from tracelint.source.rules.precision_settings import (
    CONV,
    EXTERNAL,
    FULL,
    MATMUL,
    MATMUL_OPS,
    REDUCED,
    TF32,
    precision_settings,
    program_precision,
)

LOOP = """\
import torch

model = torch.nn.Linear(4096, 4096).cuda()
opt = torch.optim.AdamW(model.parameters())
for x, y in loader:
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
"""


@pytest.mark.parametrize("line, expected", [
    ('torch.set_float32_matmul_precision("high")', {TF32}),
    ('torch.set_float32_matmul_precision("medium")', {TF32}),
    ("torch.set_float32_matmul_precision(args.precision)", {TF32}),  # not literal: trusted
    ('torch.set_float32_matmul_precision("highest")', {FULL}),
    ("torch.backends.cuda.matmul.allow_tf32 = True", {TF32}),
    ("torch.backends.cuda.matmul.allow_tf32 = False", {FULL}),
    ('torch.backends.cuda.matmul.fp32_precision = "tf32"', {TF32}),
    ("torch.backends.cudnn.allow_tf32 = True", set()),  # convolutions only, and on by default
    ('ctx = torch.autocast("cuda", dtype=torch.bfloat16)', {REDUCED}),
    ("ctx = torch.cuda.amp.autocast()", {REDUCED}),
    ("ctx = torch.cuda.amp.autocast(enabled=False)", set()),
    ('ctx = torch.autocast("cpu")', set()),
    ("model = Net().half()", {REDUCED}),
    ("dtype = torch.float16", {REDUCED}),
    ("scaler = torch.cuda.amp.GradScaler()", {REDUCED}),
    ('trainer = Trainer(precision="bf16-mixed")', {REDUCED}),
    ("trainer = Trainer(precision=32)", set()),
    ('accelerator = Accelerator(mixed_precision="no")', set()),
    ("accelerator = Accelerator()", {EXTERNAL}),
    ("x = torch.float32", set()),
    ("class Attn(torch.nn.Module):\n    def forward(self, q, k):\n        return q @ k", {MATMUL_OPS}),
    ("class M(torch.nn.Module):\n    def forward(self, a, b):\n        return torch.einsum('ij,jk->ik', a, b)",
     {MATMUL_OPS}),
    ("conv = torch.nn.Conv2d(3, 64, 7)", {CONV}),
    ("from torchvision import models", {CONV}),
    ("import torchvision\nnet = torchvision.models.resnet50()", {CONV}),
    ("from torchvision.models import vit_b_16", set()),  # a vision transformer is no convolution net
    ("model = SupConResNet(name='resnet50')", {CONV}),  # a convolution net by its class name
    ("model = VisionTransformer(depth=12)", {MATMUL}),
    ("spec = torch.matmul(mel_basis, spec)", set()),  # a mel filterbank in a data function
    ("y = x @ w", set()),
    ("layer = torch.nn.Linear(4096, 1024)", {MATMUL_OPS}),  # large, but a conv net's head where there are convs
    ("layer = torch.nn.Linear(1024, 1024)", set()),
    ("model = GPT(config)", {MATMUL}),
    ("from transformers import AutoModel", {MATMUL}),
])
def test_precision_settings(line, expected):
    assert precision_settings(f"import torch\n{line}\n") == frozenset(expected)


CONV_NET = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 64, 3)
        self.head = nn.Linear(64, 128)

    def forward(self, x, queue):
        z = self.head(self.conv(x).mean((2, 3)))
        return torch.einsum("nc,ck->nk", z, queue)      # a contrastive head's logits


model = Net().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    torch.nn.functional.cross_entropy(model(x.cuda(), queue), y.cuda()).backward()
    opt.step()
"""


def test_tl401_is_quiet_on_a_conv_net_whose_matmuls_are_a_head_or_a_loss(lint):
    """Convolutions run as TF32 by default (cuDNN): TF32 matmuls buy a conv net nothing measurable (ResNet-50 fp32 on
    an H200: 1.00x, bench/tl401_conv_tf32.py). The same einsum in a program without convolutions is reported."""
    assert lint(CONV_NET).codes("TL401") == []
    no_conv = CONV_NET.replace("nn.Conv2d(3, 64, 3)", "nn.Linear(3, 64)").replace(".mean((2, 3))", "")
    assert lint(no_conv).codes("TL401") == [("TL401", 20)]  # at opt.step()


def test_tl401_fires_once_per_loop_at_the_optimizer_step_at_info(lint):
    result = lint(LOOP)
    assert result.codes("TL401") == [("TL401", 7)]
    finding = result.findings[0]
    assert finding.severity is Severity.INFO
    assert "loop over `loader`" in finding.message
    assert finding.fix is not None and not finding.fix.safe


@pytest.mark.parametrize("setting", [
    'torch.set_float32_matmul_precision("high")',
    "torch.backends.cuda.matmul.allow_tf32 = True",
    "torch.backends.cuda.matmul.allow_tf32 = False",  # full fp32 on purpose
    "model = model.to(torch.bfloat16)",
    "from accelerate import Accelerator\naccelerator = Accelerator()",
])
def test_tl401_silent_where_the_file_sets_precision(lint, setting):
    assert lint(LOOP + setting + "\n").codes("TL401") == []


def test_tl401_silent_without_a_gpu_or_outside_a_step_loop(lint):
    assert lint(LOOP.replace(".cuda()", "")).codes("TL401") == []
    assert lint("import torch\nmodel.cuda()\nloss.backward()\nopt.step()\n").codes("TL401") == []


@pytest.mark.parametrize("model", [
    "torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3))",  # TF32 already
    "torch.nn.Sequential(torch.nn.Linear(8, 256), torch.nn.Tanh(), torch.nn.Linear(256, 2))",  # an RL policy
    "Net()",  # defined elsewhere, not in the run
])
def test_tl401_needs_matmuls_that_matter(lint, model):
    assert lint(LOOP.replace("torch.nn.Linear(4096, 4096)", model)).codes("TL401") == []
    assert lint(LOOP.replace("torch.nn.Linear(4096, 4096)", "GPT(config)")).codes("TL401") == [("TL401", 7)]


def test_tl401_takes_the_matmuls_of_an_imported_model_file(tmp_path):
    model = "import torch\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        return x @ self.w\n"
    train = LOOP.replace("import torch\n", "import torch\nfrom net import Net\n").replace(
        "torch.nn.Linear(4096, 4096)", "Net()")
    found = _run(tmp_path, {"net.py": model, "train.py": train})
    assert [(Path(f.location.path).name, f.code) for f in found] == [("train.py", "TL401")]


def test_tl401_knows_torch_before_1_12_ran_tf32_by_default(lint, tmp_path):
    (tmp_path / "requirements.txt").write_text("numpy\ntorch==1.10.2\n", encoding="utf-8")
    assert lint(LOOP).codes("TL401") == []
    (tmp_path / "requirements.txt").write_text("torch==2.3.0\n", encoding="utf-8")
    from tracelint.source.project import _pinned_in
    _pinned_in.cache_clear()
    assert lint(LOOP).codes("TL401") == [("TL401", 7)]


def test_tl401_unsafe_fix_inserts_tf32_after_the_imports(lint, tmp_path):
    source = '"""Train."""\nimport torch\nfrom torch import nn\n\n' + LOOP.split("\n", 1)[1]
    lint(source, fix=True)
    assert (tmp_path / "t.py").read_text(encoding="utf-8") == source  # unsafe: not without --unsafe-fixes
    result = lint(source, fix=True, unsafe_fixes=True)
    fixed = (tmp_path / "t.py").read_text(encoding="utf-8")
    assert fixed.startswith('"""Train."""\nimport torch\nfrom torch import nn\n'
                            'torch.set_float32_matmul_precision("high")\n\n')
    assert result.codes("TL401") == []


def _run(tmp_path: Path, files: dict[str, str]) -> list[Finding]:
    paths = []
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        paths.append(path)
    config = Config(root=tmp_path)
    return [f for f in lint_paths(paths, config_for=lambda _p: config) if isinstance(f, Finding)]


TRAINER = """\
import torch

def fit(model, loader, opt):
    model.cuda()
    for x, y in loader:
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
"""


def test_tl401_follows_imports_across_the_run(tmp_path):
    entry = ("import torch\nfrom pkg.trainer import fit\nm = GPT(config)\n\n"
             "torch.set_float32_matmul_precision('high')\nfit(m, l, o)\n")
    found = _run(tmp_path, {"main.py": entry, "pkg/trainer.py": TRAINER, "pkg/__init__.py": ""})
    assert [f.code for f in found if f.code == "TL401"] == []  # the entry script sets TF32 for the trainer
    sibling = "import torch\ntorch.set_float32_matmul_precision('high')\n"
    entry = "import torch\nfrom trainer import fit\nfit(GPT(config), l, o)\n"
    found = _run(tmp_path / "b", {"bench.py": sibling, "trainer.py": TRAINER, "main.py": entry})
    assert [(Path(f.location.path).name, f.code) for f in found] == [("trainer.py", "TL401")]  # not its program


def test_program_precision_goes_both_ways_along_imports(tmp_path):
    step = "import torch\nloss.backward()\n"  # a training step: what TL401 asks its program's settings for
    (tmp_path / "setup_torch.py").write_text("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n")
    (tmp_path / "train.py").write_text("import setup_torch\n" + step)  # imports the setter
    (tmp_path / "loop.py").write_text("x = 1\n" + step)  # connected to no setter
    (tmp_path / "main.py").write_text("from loop import x\nimport train\n" + step)  # imports it indirectly
    (tmp_path / "entry.py").write_text("import torch\ntorch.set_float32_matmul_precision('high')\nimport trainer\n")
    (tmp_path / "trainer.py").write_text(step)  # imported by a setter
    (tmp_path / "tool.py").write_text("import setup_torch\n")  # no site of TL401/TL404: never asked about
    found = program_precision(sorted(tmp_path.glob("*.py")))
    assert {p.name: v for p, v in found.items()} == {"train.py": {TF32}, "main.py": {TF32}, "trainer.py": {TF32}}


# -- TL404 ----------------------------------------------------------------------------------------------------------
BF16 = 'import torch\nfrom torch import nn\nctx = torch.autocast("cuda", dtype=torch.bfloat16)\n'


@pytest.mark.parametrize("layer, flagged", [
    ("nn.Linear(768, 50257)", True),
    ("nn.Linear(in_features=30522, out_features=768)", True),  # BERT's vocabulary
    ("nn.Conv2d(1027, 64, 3)", True),
    ("nn.Linear(768, 50304)", False),
    ("nn.Linear(512, 10)", False),  # a small classifier: too little to matter
    ("nn.Conv2d(3, 64, 7)", False),  # RGB input channels
    ("nn.Linear(768, config.vocab_size)", False),  # not followed
    ("nn.Embedding(50257, 768)", False),  # a lookup, not a GEMM, unless tied
])
def test_tl404_sizes(lint, layer, flagged):
    result = lint(BF16 + f"head = {layer}\n")
    assert bool(result.codes("TL404")) is flagged


def test_tl404_reads_module_constants_and_tied_embeddings(lint):
    result = lint(BF16 + "VOCAB = 50257\nwte = nn.Embedding(VOCAB, 768)\nhead = nn.Linear(768, VOCAB)\n"
                         "head.weight = wte.weight\n")
    assert result.codes("TL404") == [("TL404", 5), ("TL404", 6)]
    assert "pad it (to 50304" in result.findings[0].message


def test_tl404_needs_reduced_precision(lint):
    assert lint("import torch\nfrom torch import nn\nhead = nn.Linear(768, 50257)\n").codes("TL404") == []
    tf32_only = "import torch\nfrom torch import nn\ntorch.set_float32_matmul_precision('high')\n"
    assert lint(tf32_only + "head = nn.Linear(768, 50257)\n").codes("TL404") == []
