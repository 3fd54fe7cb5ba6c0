"""TL502: Python loops that walk a device tensor element by element in a training step."""
from __future__ import annotations

import pytest

STEP = """\
import torch

def train(model, opt, loader, device):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        out = model(x)
        loss = out.sum()
{body}
        loss.backward()
        opt.step()
"""


def _codes(lint, body: str) -> list[tuple[str, int]]:
    indented = "\n".join("        " + line for line in body.splitlines())
    return lint(STEP.format(body=indented)).codes("TL502")


@pytest.mark.parametrize("body", [
    "for i in range(out.size(0)):\n    loss = loss + (out[i] - y[i]).abs().sum()",
    "for i in range(len(out)):\n    out[i] = out[i] * 2",
    "for i in range(out.shape[0]):\n    loss += out[i, 0]",
    "b = x.size(0)\nfor i in range(b):\n    loss += out[i].max()",
    "for i in range(batch_size):\n    loss += out[i].max()",
    "for g in range(num_gt):\n    loss += out[g].max()",  # YOLOX's SimOTA: per ground-truth box of an image
    "for row in out:\n    loss = loss + row.max()",
    "for i, row in enumerate(out):\n    loss = loss + row.max()",
    # names bound anew each iteration are carried across none (clovaai's test.py, hyunwoongko's train.py)
    "for gt, prob in zip(y, out):\n    if gt.sum() > 0:\n        prob = prob[:4]\n    loss += prob.cumprod(0)[-1]",
    "for j in range(batch_size):\n    words = out[j].max(dim=1)[1]\n    words = decode(words)\n    print(words)",
])
def test_element_loops_in_a_step(lint, body):
    assert [code for code, _ in _codes(lint, body)] == ["TL502"]


@pytest.mark.parametrize("body", [
    "for i in range(3):\n    loss += out[i].sum()",                   # a handful
    "for k in range(self.num_heads):\n    loss += out[:, k].sum()",  # heads, not elements
    "for i in range(len(model.layers)):\n    x = model.layers[i](x)",  # modules
    "h = out[:, 0]\nfor t in range(out.size(1)):\n    h = model.cell(out[:, t], h)",  # a recurrence
    "h = out[:, 0]\nfor t in range(out.size(1)):\n    o = out[:, t]\n    h = model.cell(o, h)",  # one, bound late
    "losses = [loss]\nfor i in range(len(losses)):\n    print(losses[i])",  # a list
    "c = out.cpu()\nfor i in range(c.size(0)):\n    loss += c[i]",  # host tensor
    "for i in range(out.size(0)):\n    if i < 5:\n        print(out[i])",  # capped work
])
def test_not_element_loops(lint, body):
    assert _codes(lint, body) == []


def test_nested_loops_are_one_finding_and_outside_the_steps_nothing(lint):
    assert len(_codes(lint, "for i in range(out.size(0)):\n    for j in range(out.size(1)):\n"
                            "        loss += out[i, j]")) == 1
    # DETR's panoptic post-processing: per image, then per kept query with .item() of each: a sync per element is
    # a finding of its own inside the loop of kernels
    assert [line for _, line in _codes(lint, "for row in out:\n    labels = row.argmax(-1)\n"
                                             "    for label in labels:\n        names.append(label.item())")] == \
        [8, 10]
    source = """\
    import torch

    def summarize(t):
        return [t[i].sum() for i in range(t.size(0))]

    x = torch.randn(4, 4, device="cuda")
    print(summarize(x))
    """
    assert lint(source).codes("TL502") == []
