"""Rule semantics of TL502 (element loops that read on the host), TL204 (moves by ``.to(tensor)``,
``.type_as``, ``.type(torch.cuda.*)``), TL203 (``.type()`` copies), TL106 (mask products, a mask among several
indices, masked updates) and TL103 (``not t``, ``any``/``all``, conditional expressions): each bad case beside
its near miss. The sync facts behind them were measured with ``torch.cuda.set_sync_debug_mode`` and a 0.1 s kernel
queued ahead (torch 2.11, H200): ``x[:, m] = 0.0`` does not wait, ``x[:, m]``, ``x[:, m] *= 0``,
``x[idx, m] = 1``, ``vocab[t]``, ``range(t)``, ``s[:t]``, ``not t.all()``, ``zeros(n).to(x)``,
``zeros(n).type_as(x)`` and ``zeros(n).type(torch.cuda.FloatTensor)`` do."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from tracelint.source.lint import source_rules
from tracelint.source.rule import run_rules
from tracelint.source.screen import may_report, sites
from tracelint.source.semantic.model import FileContext

STEP = """\
import torch

def train(model, opt, loader, device, vocab, params):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        out = torch.relu(model(x))
        pred = out.argmax(-1)
        loss = out.sum()
{body}
        loss.backward()
        opt.step()
"""


def _source(body: str) -> str:
    return STEP.format(body="\n".join("        " + line for line in body.splitlines()))


def _run(source: str, code: str) -> list:
    """The rule's findings on ``source`` without the screen (screen.py decides which files a rule sees at all;
    these tests are about what the rule reports on a file it sees: test_screen_lets_the_new_forms_through)."""
    source = textwrap.dedent(source)
    ctx = FileContext("t.py", source, cst.parse_module(source))
    return [f for f in run_rules(ctx, [cls(ctx) for cls in source_rules()]) if f.code == code]


def _codes(lint, body: str, code: str) -> list[int]:
    return [f.location.line - 8 for f in _run(_source(body), code)]  # the line within the body


def _messages(lint, body: str, code: str) -> list[str]:
    return [f.message for f in _run(_source(body), code)]


# -- TL502: element loops that read each element on the host -------------------------------------------------
@pytest.mark.parametrize("body,read", [
    ("for i in range(len(pred)):\n    if pred[i] != 0:\n        loss = loss + 1", "pred[i] != 0"),
    ("for i in range(pred.size(0)):\n    n = int(pred[i])", "int(pred[i])"),
    ("words = [vocab[t] for t in pred[0]]", "vocab[t]"),
    ("vals = [v.item() for v in out[0]]", "v.item()"),
    ("for k, label in enumerate(pred[0]):\n    print(vocab[label])", "vocab[label]"),
    ("lengths = (pred != 0).sum(-1)\nfor i, n in enumerate(lengths):\n    keep = out[i, :n]", "out[i, :n]"),
    ("kept = [r for r in out if r.sum() > 0]", "r.sum() > 0"),
    ("for row in pred:\n    text = ''.join([vocab[t] for t in row if t != 0])", "vocab[t]"),
    ("for name, p in zip(vocab, out.amax(-1)):\n    print(name, float(p))", "float(p)"),
    ("batches = [out * 2 for _ in range(4)]\nts = [v.item() for b in batches for v in b[:3]]", "v.item()"),
])
def test_element_loops_that_read_on_the_host(lint, body, read):
    messages = _messages(lint, body, "TL502")
    assert len(messages) == 1 and f"(`{read}`)" in messages[0] and "a host-device sync per element" in \
        messages[0], messages


@pytest.mark.parametrize("body", [
    "for row in out:\n    loss = loss + row.max()",          # device work: the kernels message
    "for i in range(out.size(0)):\n    loss = loss + out[i].sum()",
])
def test_element_loops_with_device_work_keep_their_message(lint, body):
    messages = _messages(lint, body, "TL502")
    assert len(messages) == 1 and "runs its own small kernels" in messages[0]


@pytest.mark.parametrize("body", [
    "for q in out.chunk(2):\n    loss = loss + q.sum().item()",            # a tuple of two tensors
    "halves = out.detach().chunk(2)\nfor i, q in enumerate(halves):\n    loss = loss + q.sum()",
    "names = [vocab[i] for i, _ in enumerate(out)]",                   # walked for its length only
    "aux = [{'a': a, 'b': b} for a, b in zip(out[:-1], pred[:-1])]",  # elements only kept
    "rows = [r for r in out]",
    "pair = [out, pred]\nvals = [v.item() for v in pair]",            # a list of tensors
    "c = out.cpu()\nvals = [v.item() for v in c]",                    # a host tensor
    "for i in range(pred.size(0)):\n    if i < 5:\n        print(pred[i].item())",  # a capped use
    "for row in out:\n    shape = row.shape",                          # metadata: no kernel, no sync
])
def test_not_element_loops(lint, body):
    assert _codes(lint, body, "TL502") == []


# -- TL106: masks ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("body", [
    "l, u = out.floor().long(), out.ceil().long()\nl[(u > 0) * (l == u)] -= 1",  # a product of masks, updated
    "m = out[0] > 0\nz = out[:, m]",                      # the mask beside a slice: a read
    "m = out[0] > 0\nout[:, m] *= 0",                     # an update through it
    "m = out[0] > 0\nidx = out.argmin(0)\nout[idx, m] = 1",  # beside an index tensor: a write that counts
    "m = out[0] > 0\nout[:, m] = out * 2",                # a tensor written through it
    "m = out > 0\nout[m] -= 1",
])
def test_mask_forms_that_sync(lint, body):
    assert len(_codes(lint, body, "TL106")) == 1


@pytest.mark.parametrize("body", [
    "m = out[0] > 0\nout[:, m] = 1.0",                    # masked_fill_ (measured: no sync)
    "m = out[0] > 0\nout[..., m] = 0.0",
    "m = out[0] > 0\nout[3, m] = 1",                      # an int index beside the mask: still a fill
    "w = out * 2.0\nz = out[w * out]",                    # a product that is no mask
    "m = out > 0\nout[m] = 0.0",
])
def test_mask_forms_that_do_not_sync(lint, body):
    assert _codes(lint, body, "TL106") == []


# -- TL103: truth values outside if/while/assert statements --------------------------------------------------
@pytest.mark.parametrize("body", [
    "if any(not torch.isfinite(p.grad).all() for p in params):\n    loss = loss * 0",
    "ok = not torch.isfinite(out).all()",
    "bad = any(torch.isnan(p.grad).any() for p in params)",
    "loss = loss if out.sum() > 0 else loss * 0",
    "kept = [p for p in params if torch.isnan(out).any()]",
])
def test_truth_values_in_expressions(lint, body):
    assert len(_codes(lint, body, "TL103")) == 1


@pytest.mark.parametrize("body", [
    "ok = not params",                                    # a Python value
    "bad = any(p.grad is None for p in params)",
    "loss = loss if out is not None else loss * 0",
    "if not torch.isfinite(out).all():\n    loss = loss * 0",  # reported once, as the if test
])
def test_truth_values_that_are_host_values_or_counted_once(lint, body):
    assert len(_codes(lint, body, "TL103")) == (1 if body.startswith("if") else 0)


# -- TL204: moves that name a tensor or a CUDA tensor type ---------------------------------------------------
@pytest.mark.parametrize("body", [
    "z = torch.zeros(8).to(out)",                         # to out's device (and dtype)
    "z = torch.zeros(1, 8).fill_(2).type_as(out)",
    "z = torch.zeros(8).type(torch.cuda.FloatTensor)",
    "z = torch.arange(8).view(-1, 1).to(device)",         # a creation chain before the move
])
def test_moves_of_host_built_tensors(lint, body):
    assert len(_codes(lint, body, "TL204")) == 1


@pytest.mark.parametrize("body", [
    "z = torch.zeros(8).type(torch.FloatTensor)",         # stays on the host
    "h = out.cpu()\nz = torch.zeros(8).type_as(h)",       # to a host tensor
    "z = torch.tensor([1, 2]).type_as(out)",              # data the host has: a copy either way
    "z = torch.zeros(8).to(vocab)",                       # a parameter: it may be a dtype
    "z = torch.zeros(8).to(torch.float16)",
])
def test_not_moves_of_host_built_tensors(lint, body):
    assert _codes(lint, body, "TL204") == []


def test_a_name_bound_to_a_cuda_tensor_type_is_a_move(lint):
    source = STEP.replace("import torch\n", "import torch\n\nTensor = torch.cuda.FloatTensor if "
                          "torch.cuda.is_available() else torch.FloatTensor\n")
    assert len(_run(source.format(body="        z = torch.zeros(8).type(Tensor)"), "TL204")) == 1


# -- TL203: .type(torch.cuda.FloatTensor) of a pinned batch ----------------------------------------------------
PINNED_TYPE_COPY = """\
    import torch
    from torch.utils.data import DataLoader

    def train(model, opt, dataset):
        loader = DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True)
        for images, labels in loader:
            images = images.type(torch.cuda.FloatTensor)
            labels = labels.type(torch.cuda.LongTensor, non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """


def test_a_type_copy_of_a_pinned_batch_is_a_blocking_copy():
    found = _run(PINNED_TYPE_COPY, "TL203")
    assert [f.location.line for f in found] == [7]
    assert found[0].fix is not None and "non_blocking=True" in found[0].fix.title


# -- the screen ----------------------------------------------------------------------------------------------
# Forms the rules above report that screen.py (another engineer's module) does not yet count as sites of their
# rules: a file whose only site is one of them is never parsed for that rule. Listed for whoever extends the
# screen; strict, so that this list shrinks as it does.
HELD_BACK = [
    ("TL502", "words = [vocab[t] for t in pred[0]]"),           # ELEMENT_LOOP: iterable a subscript or a call
    ("TL502", "for name, p in zip(vocab, out.amax(-1)):\n    print(name, float(p))"),  # zip of a tensor
    ("TL106", "m = out[0] > 0\nz = out[:, m]"),                 # MASK_INDEX: a mask among several indices
    ("TL106", "l, u = out.floor().long(), out.ceil().long()\nl[(u > 0) * (l == u)] -= 1"),  # a product of masks
    ("TL103", "ok = not torch.isfinite(out).all()"),            # SCALAR: not, IfExp, CompIf, any()/all()
    ("TL103", "loss = loss if out.sum() > 0 else loss * 0"),
    ("TL204", "z = torch.zeros(1, 8).fill_(2).type_as(out)"),   # HOST_BUILT: .type_as(t), .type(cuda type)
    ("TL203", None),                                            # PINNED_COPY: .type(cuda type) of a batch
]


@pytest.mark.parametrize("code,body", HELD_BACK)
def test_screen_lets_the_new_forms_through(code, body):
    source = textwrap.dedent(PINNED_TYPE_COPY) if body is None else _source(body)
    assert _run(source, code), "the rule reports it on an unscreened file"
    assert may_report(code, sites(source))
