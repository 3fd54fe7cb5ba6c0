"""Constant and device data flow (flow.py, issue #29 item 1) and the rules that ask it: TL401 (how big are the
matmuls?), TL404 (layer sizes), TL204 (is this a device?)."""
from __future__ import annotations

import libcst as cst
import pytest

from tracelint.source.semantic.flow import Flow
from tracelint.source.semantic.model import iter_descendants


def _flow_of(source: str, expr: str) -> tuple[Flow, cst.BaseExpression]:
    """The Flow of ``source`` and the node of the last statement ``probe = <expr>`` appended to it at module level,
    or inside ``def`` when ``source`` ends in a function body (indented ``probe``)."""
    module = cst.parse_module(source + expr)
    flow = Flow(module)
    probe = [n for n in iter_descendants(module) if isinstance(n, cst.Assign)
             and getattr(n.targets[0].target, "value", "") == "probe"]
    return flow, probe[-1].value


def _calls(module: cst.Module) -> list[tuple[cst.Call, str]]:
    return [(n, module.code_for_node(n)) for n in iter_descendants(module) if isinstance(n, cst.Call)]


GPT = """\
import argparse
from dataclasses import dataclass
import torch
from torch import nn

VOCAB = 50257

@dataclass
class GPTConfig:
    n_embd: int = 768
    n_head: int = 12

class MLP(nn.Module):
    def __init__(self, dim, mult=4):
        super().__init__()
        hidden = mult * dim
        self.dim = dim
        self.fc = nn.Linear(dim, hidden)

class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, config.n_embd * 3)

small = MLP(256)
big = MLP(1024)
attn = Attention(GPTConfig(n_embd=1024))
default = Attention(GPTConfig())
"""


@pytest.mark.parametrize("expr, expected", [
    ("VOCAB + 47", {50304}),                      # a module constant, arithmetic
    ("small.dim", {256}),                         # a constructor argument, through self.dim
    ("GPTConfig().n_embd", {768}),                # a dataclass field's default
    ("GPTConfig(n_embd=1024).n_embd * 3", {3072}),
    ("attn_size", None),                          # bound nowhere
])
def test_ints_at_module_level(expr, expected):
    flow, node = _flow_of(GPT, f"probe = {expr}\n")
    assert flow.ints(node) == (frozenset(expected) if expected is not None else None)


def test_ints_of_a_parameter_are_the_calls_arguments():
    module = cst.parse_module(GPT)
    flow = Flow(module)
    fc = next(n for n, code in _calls(module) if code == "nn.Linear(dim, hidden)")
    # MLP(256) and MLP(1024): both values, and hidden = mult * dim with mult's default 4
    assert flow.ints(fc.args[0].value) == {256, 1024} and flow.ints(fc.args[1].value) == {1024, 4096}
    qkv = next(n for n, code in _calls(module) if "c_attn" not in code and code.startswith("nn.Linear(config"))
    assert flow.ints(qkv.args[1].value) == {3 * 1024, 3 * 768}  # GPTConfig(n_embd=1024) and the default


@pytest.mark.parametrize("binding, expected", [
    ('dev = torch.device("cuda")', True),
    ('dev = torch.device("cuda:1")', True),
    ('dev = f"cuda:{rank}"', True),
    ("dev = 0", True),                                  # a device index
    ('dev = "cuda" if torch.cuda.is_available() else "cpu"', True),
    ("dev = x.device", True),
    ("dev = accelerator.device", True),
    ("dev = torch.cuda.current_device()", True),
    ('dev = torch.device("cpu")', False),
    ('dev = "cpu"', False),
    ("dev = something()", None),
])
def test_device_of_a_binding(binding, expected):
    flow, node = _flow_of("import torch\n", f"{binding}\nprobe = dev\n")
    assert flow.device(node) is expected


@pytest.mark.parametrize("default, expected", [('"cuda"', True), ('"cpu"', False),
                                               ('"cuda" if torch.cuda.is_available() else "cpu"', True)])
def test_device_of_an_argparse_option(default, expected):
    source = ("import argparse, torch\nparser = argparse.ArgumentParser()\n"
              f"parser.add_argument('--device', type=str, default={default})\nargs = parser.parse_args()\n")
    flow, node = _flow_of(source, "probe = args.device\n")
    assert flow.device(node) is expected


def test_device_through_self_and_a_parameter():
    source = ("import torch\nclass Trainer:\n    def __init__(self, device):\n        self.device = device\n"
              "    def step(self):\n        probe = self.device\n"
              "t = Trainer(torch.device('cuda'))\n")
    flow, node = _flow_of(source, "")
    assert flow.device(node) is True
    flow, node = _flow_of(source.replace("'cuda'", "'cpu'"), "")
    assert flow.device(node) is False


# -- the rules ------------------------------------------------------------------------------------------------------
BLOCK = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.proj(torch.relu(self.fc(x)))


model = Block({width}).cuda()
opt = torch.optim.AdamW(model.parameters())
for step in range(1000):
    x = torch.randn(64, {width}, device="cuda")
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
"""


def test_tl401_sees_the_sizes_a_block_is_built_with(lint):
    assert lint(BLOCK.format(width=1024)).codes("TL401") == [("TL401", 21)]  # 1024 x 4096 weights in fp32
    assert lint(BLOCK.format(width=256)).codes("TL401") == []  # 256 x 1024: a small MLP
    tf32 = BLOCK.format(width=1024).replace("model =", "torch.set_float32_matmul_precision('high')\nmodel =")
    assert lint(tf32).codes("TL401") == []


def test_tl401_follows_a_config_object(lint):
    source = """\
        from dataclasses import dataclass
        import torch
        from torch import nn

        @dataclass
        class Config:
            n_embd: int = 1024

        class Net(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.up = nn.Linear(config.n_embd, config.n_embd * 4)

        model = Net(Config()).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for batch in loader:
            model(batch.cuda()).sum().backward()
            opt.step()
        """
    assert lint(source).codes("TL401") == [("TL401", 18)]
    assert lint(source.replace("n_embd: int = 1024", "n_embd: int = 128")).codes("TL401") == []


def test_tl404_follows_a_size_through_a_constructor(lint):
    source = """\
        import torch
        from torch import nn

        class Head(nn.Module):
            def __init__(self, d, vocab):
                super().__init__()
                self.out = nn.Linear(d, vocab)

        head = Head(768, {vocab})
        with torch.autocast("cuda", dtype=torch.bfloat16):
            pass
        """
    assert lint(source.format(vocab=50257)).codes("TL404") == [("TL404", 7)]
    assert lint(source.format(vocab=50304)).codes("TL404") == []


STEP = """\
import torch
{binding}
model = torch.nn.Linear(8, 8).to({device})
for step in range(100):
    x = torch.randn(64, 8).to({device})
    loss = model(x).sum()
    loss.backward()
"""


@pytest.mark.parametrize("binding, device, flagged", [
    ('dev = torch.device("cuda")', "dev", True),         # a name bound to a device, whatever its words
    ('dev = torch.device("cpu")', "dev", False),
    ("import argparse\np = argparse.ArgumentParser()\np.add_argument('--where', default='cuda:0')\n"
     "args = p.parse_args()", "args.where", True),
    ("import argparse\np = argparse.ArgumentParser()\np.add_argument('--device', default='cpu')\n"
     "args = p.parse_args()", "args.device", False),    # bound to the CPU: its words no longer decide
    ("", "device", True),                                # bound nowhere: the words are the fallback
])
def test_tl204_asks_what_the_device_is_bound_to(lint, binding, device, flagged):
    found = lint(STEP.format(binding=binding, device=device)).codes("TL204")
    assert bool(found) is flagged


@pytest.mark.parametrize("made, flagged, fixed", [
    ("torch.arange(64).view(-1, 1)", True, "torch.arange(64, device=dev).view(-1, 1)"),  # a shape method, then moved
    ("torch.zeros(64, 3, 2).float()", True, "torch.zeros(64, 3, 2, device=dev).float()"),
    ("torch.FloatTensor(64, 8).fill_(0)", True, None),              # the legacy form of torch.zeros: no device=
    ("torch.tril(torch.ones(8, 8)).type(torch.ByteTensor)", True, None),  # .type() would undo a device=
    ("torch.exp(-2.0 * torch.arange(0, 8) / 8)", True, None),      # computed on the host from a creation
    ("torch.FloatTensor(obs)", False, None),                        # data the host has: a copy of values
    ("torch.arange(64).view(-1, 1).type(torch.cuda.LongTensor)", True, None),  # the move is .type() itself
])
def test_tl204_follows_a_creation_through_shape_and_dtype_methods(lint, made, flagged, fixed):
    source = ("import torch\ndev = torch.device('cuda')\nmodel = torch.nn.Linear(8, 8).to(dev)\n"
              f"for step in range(100):\n    x = {made}.to(dev)\n    loss = model(x.float()).sum()\n"
              "    loss.backward()\n")
    found = [f for f in lint(source).findings if f.code == "TL204"]
    assert bool(found) is flagged
    if found:
        assert (found[0].fix is not None) is (fixed is not None)
        if fixed is not None:
            from tracelint.source.fix import apply_edits
            assert f"x = {fixed}\n" in apply_edits(source, found[0].fix.edits)


# -- one tree: the rules' own nodes, no position join ---------------------------------------------------------------
def test_ints_on_a_line_with_non_ascii_text_before_the_node():
    """Python's ``ast`` counts columns in UTF-8 bytes, libcst in characters: joined by position, a size after
    ``"é"`` on its line was unknown. The rules' nodes are the flow's own now."""
    from tracelint.source.semantic.model import FileContext

    source = 'VOCAB = 50257\nlabel = "é"; head = torch.nn.Linear(768, VOCAB)\n'
    module = cst.parse_module(source)
    ctx = FileContext("t.py", source, module)
    size = next(n for n, _ in _calls(module)).args[1].value
    assert ctx.ints(size) == {50257}


def test_flow_of_deeply_nested_code_is_built_without_recursion():
    source = "x = " + " + ".join(["1"] * 3000) + "\nprobe = x\n"
    flow, node = _flow_of(source, "")
    assert flow.ints(node) is None  # deeper than MAX_DEPTH: unknown, and no RecursionError on the way
