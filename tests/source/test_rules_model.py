"""TL403: a conv or linear layer's bias cancelled by the BatchNorm right after it."""
from __future__ import annotations

import pytest

from tracelint.engine import Severity


@pytest.mark.parametrize("layers, line", [
    ("nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)", 4),
    ("nn.Conv1d(3, 8, 3, bias=True), nn.BatchNorm1d(8)", 4),
    ("nn.Linear(16, 8), nn.BatchNorm1d(8, affine=True)", 4),
    ("nn.ConvTranspose2d(8, 4, 4, 2, 1), nn.SyncBatchNorm(4)", 4),
    ("nn.ReLU(), nn.Conv3d(3, 8, 3), nn.BatchNorm3d(8)", 4),
])
def test_sequential_neighbours(lint, layers, line):
    source = f"import torch.nn as nn\n\ndef block():\n    return nn.Sequential({layers})\n"
    assert lint(source).codes("TL403") == [("TL403", line)]


@pytest.mark.parametrize("layers", [
    "nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8)",
    "nn.Conv2d(3, 8, 3, 1, 0, 1, 1, False), nn.BatchNorm2d(8)",  # bias by position
    "nn.Conv2d(3, 8, 3, bias=use_bias), nn.BatchNorm2d(8)",
    "nn.Conv2d(3, 8, 3, **kw), nn.BatchNorm2d(8)",
    "nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8, affine=False)",
    "nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8, 1e-5, 0.1, False)",  # affine by position
    "nn.Conv2d(3, 8, 3), nn.ReLU(), nn.BatchNorm2d(8)",
    "nn.Conv2d(3, 8, 3), *extra, nn.BatchNorm2d(8)",
    "nn.BatchNorm2d(3), nn.Conv2d(3, 8, 3)",
])
def test_sequential_not_reported(lint, layers):
    source = f"import torch.nn as nn\n\ndef block(use_bias, kw, extra):\n    return nn.Sequential({layers})\n"
    assert lint(source).codes("TL403") == []


@pytest.mark.parametrize("forward, reported", [
    ("return self.bn(self.conv(x))", True),
    ("x = self.conv(x)\n        x = self.bn(x)\n        return x", True),
    ("y = self.conv(x)\n        return self.bn(y)", True),
    ("x = self.conv(x)\n        x = self.act(x)\n        return self.bn(x)", False),
    ("return self.bn(self.act(self.conv(x)))", False),
    ("return self.conv(self.bn(x))", False),
])
def test_module_forward(lint, forward, reported):
    source = f"""\
import torch.nn as nn

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU()

    def forward(self, x):
        {forward}
"""
    assert lint(source).codes("TL403") == ([("TL403", 6)] if reported else [])


def test_list_of_layers_with_a_named_conv_and_the_unsafe_fix(lint, tmp_path):
    source = """\
    import torch.nn as nn

    def make_layers(cfg):
        layers = []
        for v in cfg:
            conv2d = nn.Conv2d(3, v, kernel_size=3, padding=1)
            layers += [conv2d, nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
        return nn.Sequential(*layers)
    """
    [finding] = [f for f in lint(source).findings if f.code == "TL403"]
    assert finding.location.line == 6 and finding.severity is Severity.INFO
    assert finding.fix is not None and not finding.fix.safe  # checkpoints saved with the bias no longer load
    lint(source, fix=True)
    assert "conv2d = nn.Conv2d(3, v, kernel_size=3, padding=1)\n" in (tmp_path / "t.py").read_text()
    lint(source, fix=True, unsafe_fixes=True)
    assert "nn.Conv2d(3, v, kernel_size=3, padding=1, bias=False)" in (tmp_path / "t.py").read_text()
