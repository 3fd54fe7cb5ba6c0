"""Issue #40 item 3, the source twins of the memory findings: TL305 empty_cache() every step, TL306 a graph kept
across steps, TL307 retain_graph=True with no second backward, TL308 a memory report every step; and the screen's
KEPT_GRAPH kind, which must let every TL306 finding through."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tracelint.engine import Severity
from tracelint.source.screen import KEPT_GRAPH, may_report, sites

REPO = Path(__file__).resolve().parents[2]

STEP = """\
import gc
import torch
import torch.nn.functional as F

def train(model, loader, opt, x_val):
    outputs = []
    total = 0
    for step, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
{body}
    print(len(outputs), total)

train(model, loader, opt, x_val)
"""


def step(body: str) -> str:
    """A training step whose last lines are ``body`` (indented into the loop)."""
    return STEP.format(body=textwrap.indent(textwrap.dedent(body), " " * 8))


def lines_of(source: str, marker: str = "# here") -> list[int]:
    return [i for i, line in enumerate(source.splitlines(), 1) if marker in line]


# -- TL305 -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("body", [
    "torch.cuda.empty_cache()  # here",
    "torch.cuda.memory.empty_cache()  # here",
    "if step % 2 == 0 or True:\n    torch.cuda.empty_cache()  # here",
])
def test_empty_cache_every_step(lint, body):
    source = step(body)
    assert lint(source).codes("TL305") == [("TL305", n) for n in lines_of(source)]


@pytest.mark.parametrize("header,call", [
    ("from torch.cuda import empty_cache", "empty_cache()"),
    ("from torch.cuda import empty_cache as free", "free()"),
    ("import torch.cuda as tc", "tc.empty_cache()"),
])
def test_empty_cache_through_imports(lint, header, call):
    source = f"{header}\n" + step(f"{call}  # here")
    assert lint(source).codes("TL305") == [("TL305", n) for n in lines_of(source)]


def test_empty_cache_in_a_helper_called_every_step_names_the_gc_collect_beside_it(lint):
    source = textwrap.dedent("""\
        import gc
        import torch

        def free_memory():
            gc.collect()
            torch.cuda.empty_cache()

        for batch in loader:
            loss = model(batch).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            free_memory()
        """)
    result = lint(source)
    assert result.codes("TL305") == [("TL305", 6)]
    message = result.findings[0].message
    assert "`free_memory()` (called at line 13)" in message and "`gc.collect()` (line 5)" in message
    assert result.findings[0].fix is None


@pytest.mark.parametrize("source", [
    # once, before and after training
    "import torch\ntorch.cuda.empty_cache()\nfor b in loader:\n    model(b).mean().backward()\n    opt.step()\n"
    "torch.cuda.empty_cache()\n",
    # a rare branch
    step("if step % 100 == 0:\n    torch.cuda.empty_cache()"),
    # the out-of-memory handler: the moment giving the cache back helps
    step("try:\n    out = model(x_val)\nexcept torch.cuda.OutOfMemoryError:\n    torch.cuda.empty_cache()\n"
         "    out = model(x_val[:1])"),
    # a loop over models, not steps
    "import torch\nfor name in ['resnet18', 'resnet50']:\n    benchmark(name)\n    torch.cuda.empty_cache()\n",
    # gc.collect() alone, and a function of the project's named empty_cache
    step("gc.collect()"),
    "import torch\ndef empty_cache():\n    pass\nfor b in loader:\n    model(b).mean().backward()\n"
    "    opt.step()\n    empty_cache()\n",
])
def test_empty_cache_not_every_step(lint, source):
    assert lint(source).codes("TL305") == []


# -- TL306 -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("body,kind", [
    ("outputs.append(model(x_val))  # here", "activations"),
    ("out = model(x_val)\noutputs.append(out)  # here", "activations"),
    ("outputs.append(model(x_val).cpu())  # here", "activations"),  # .cpu() keeps the graph
    ("outputs.append(loss)  # here", "nodes"),
    ("outputs.append(loss.cpu())  # here", "nodes"),
    ("total += loss  # here", "nodes"),
    ("total = total + loss * x.size(0)  # here", "nodes"),
    ("total = loss + total  # here", "nodes"),
])
def test_graph_kept_across_steps(lint, body, kind):
    source = step(body)
    result = lint(source)
    assert result.codes("TL306") == [("TL306", n) for n in lines_of(source)]
    message = result.findings[0].message
    if kind == "activations":
        assert "activations its forward saved" in message and "torch.no_grad()" in message
    else:
        assert "graph nodes stay alive" in message and "FAQ" in message


def test_kept_graph_of_a_helper_called_every_step_and_of_a_training_hook(lint):
    helper = textwrap.dedent("""\
        import torch

        history = []

        def log_step(loss):
            history.append(loss)  # here

        for x, y in loader:
            loss = criterion(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            log_step(loss)
        """)
    assert lint(helper).codes("TL306") == [("TL306", n) for n in lines_of(helper)]
    hook = textwrap.dedent("""\
        import torch
        import lightning as L

        class Module(L.LightningModule):
            def training_step(self, batch, batch_idx):
                x, y = batch
                loss = torch.nn.functional.cross_entropy(self.net(x), y)
                self.losses.append(loss)  # here
                return loss
        """)
    result = lint(hook, name="hook.py")
    assert result.codes("TL306") == [("TL306", n) for n in lines_of(hook)]
    assert "graph nodes stay alive" in result.findings[0].message  # Lightning runs the returned loss's backward


@pytest.mark.parametrize("body", [
    "outputs.append(model(x_val).detach())",
    "outputs.append(loss.detach().cpu())",
    "outputs.append(loss.item())",  # a sync (TL101), but no graph
    "outputs.append(loss.data)",
    "outputs.append(float(loss))",
    "total += loss.item()",
    "total += loss.detach()",
    "with torch.no_grad():\n    outputs.append(model(x_val))",
    "with torch.inference_mode():\n    out = model(x_val)\noutputs.append(out)",
    "per_step = []\nper_step.append(loss)",  # made inside the loop: lives one step
    "if step % 100 == 0:\n    outputs.append(model(x_val))",  # a rare branch
    "try:\n    pass\nexcept RuntimeError:\n    outputs.append(loss)",
    "outputs.append(x_val)",  # no graph shown
    "total += 1",
])
def test_no_graph_kept(lint, body):
    assert lint(step(body)).codes("TL306") == []


@pytest.mark.parametrize("source", [
    # autograd off on the function (decorator), or on every call of it
    "import torch\n@torch.no_grad()\ndef evaluate(model, val_loader):\n    preds = []\n    for x, y in val_loader:\n"
    "        preds.append(model(x))\n    return preds\nevaluate(model, val_loader)\n",
    "import torch\ndef evaluate(model, val_loader):\n    preds = []\n    for x, y in val_loader:\n"
    "        preds.append(model(x))\n    print(len(preds))\nwith torch.no_grad():\n    evaluate(model, val_loader)\n",
    # the accumulator is reset or cleared every step
    "import torch\nouts = []\nfor x in loader:\n    outs.clear()\n    outs.append(model(x))\n"
    "    sum(o.mean() for o in outs).backward()\n    opt.step()\n",
    # gradient accumulation: the sum is backpropagated, then reset
    "import torch\nacc = 0\nfor i, x in enumerate(loader):\n    acc = acc + model(x).mean()\n"
    "    if (i + 1) % 4 == 0:\n        acc.backward()\n        opt.step()\n        acc = 0\n",
    # REINFORCE: the kept log-probabilities are backpropagated after the episode
    "import torch\nfor episode in range(1000):\n    values = []\n    for t in range(max_steps):\n"
    "        values.append(policy(state))\n        state = env.step(0)\n"
    "    loss = -torch.stack(values).sum()\n    opt.zero_grad()\n    loss.backward()\n    opt.step()\n",
    # a function nothing in the file calls, with no step in its loop: its callers may turn autograd off
    "import torch\ndef predict(model, test_loader):\n    preds = []\n    for x in test_loader:\n"
    "        preds.append(model(x))\n    print(len(preds))\n",
    # a rollout returned to its caller, which may backpropagate through it
    "import torch\ndef rollout(policy, env):\n    log_probs = []\n    for t in range(max_steps):\n"
    "        log_probs.append(policy(state))\n        state = env.step(0)\n    return log_probs\n"
    "rollout(policy, env)\n",
    # a name rebound to a Python number before it is kept
    step("loss = loss.item()\noutputs.append(loss)"),
])
def test_graph_not_kept_across_steps(lint, source):
    assert lint(source).codes("TL306") == []


def test_fix_keeps_the_detached_value(lint, tmp_path):
    source = step("outputs.append(model(x_val))\ntotal = total + loss * 2")
    result = lint(source, fix=True)
    assert result.codes("TL306") == []  # fixed, so not reported
    fixed = (tmp_path / "t.py").read_text(encoding="utf-8")
    assert "outputs.append(model(x_val).detach())" in fixed and "total = total + (loss * 2).detach()" in fixed


# -- TL307 -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", [
    "import torch\nfor x, y in loader:\n    loss = criterion(model(x), y)\n    opt.zero_grad()\n"
    "    loss.backward(retain_graph=True)  # here\n    opt.step()\n",
    "import torch\nfor x in loader:\n    loss = model(x).mean()\n"
    "    grads = torch.autograd.grad(loss, model.parameters(), retain_graph=True)  # here\n"
    "    sgd_update(model, grads)\n",
    "import torch\nfrom torch.autograd import backward\nfor x in loader:\n    loss = model(x).mean()\n"
    "    backward(loss, retain_graph=True)  # here\n    opt.step()\n",
])
def test_retain_graph_without_a_second_backward(lint, source):
    result = lint(source)
    assert result.codes("TL307") == [("TL307", n) for n in lines_of(source)]
    assert result.findings[0].fix is None


@pytest.mark.parametrize("source", [
    # a second backward through the same graph in the step (a GAN)
    "import torch\nfor real in loader:\n    fake = G(z)\n    d_loss = bce(D(real)) + bce(D(fake))\n"
    "    d_loss.backward(retain_graph=True)\n    d_opt.step()\n    g_loss = bce(D(fake))\n    g_loss.backward()\n"
    "    g_opt.step()\n",
    # a gradient penalty, then the loss's backward
    "import torch\nfor x in loader:\n    out = D(x)\n"
    "    g, = torch.autograd.grad(out.sum(), x, create_graph=True, retain_graph=True)\n"
    "    (out.mean() + g.norm()).backward()\n    opt.step()\n",
    # the second backward in a helper called every step
    "import torch\ndef second(loss):\n    loss.backward()\nfor x in loader:\n    a, b = model(x)\n"
    "    a.backward(retain_graph=True)\n    second(b)\n    opt.step()\n",
    # several backward passes a step: a loop over losses
    "import torch\nfor x in loader:\n    losses = model(x)\n    for l in losses:\n"
    "        l.backward(retain_graph=True)\n    opt.step()\n",
    "import torch\nfor x in loader:\n    for k in range(3):\n        model(x)[k].backward(retain_graph=True)\n"
    "    opt.step()\n",
    # not a literal True, a rare branch, outside the loop
    "import torch\nfor x in loader:\n    model(x).mean().backward(retain_graph=args.retain)\n    opt.step()\n",
    "import torch\nfor i, x in enumerate(loader):\n    loss = model(x).mean()\n    if i % 100 == 0:\n"
    "        loss.backward(retain_graph=True)\n        continue\n    loss.backward()\n    opt.step()\n",
    "import torch\nloss = model(x).mean()\nloss.backward(retain_graph=True)\n",
])
def test_retain_graph_used_or_not_every_step(lint, source):
    assert lint(source).codes("TL307") == []


# -- TL308 -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call,severity", [
    ("print(torch.cuda.memory_summary())", Severity.WARNING),
    ("snap = torch.cuda.memory_snapshot()", Severity.WARNING),
    ("torch.cuda.memory._snapshot()", Severity.WARNING),
    ("torch.cuda.memory._dump_snapshot(f'snap{step}.pickle')", Severity.WARNING),
    ("torch.cuda.memory._record_memory_history(max_entries=100000)", Severity.WARNING),
    ("logger.info(torch.cuda.memory_stats())", Severity.INFO),
])
def test_memory_report_every_step(lint, call, severity):
    source = step(call + "  # here")
    result = lint(source)
    assert result.codes("TL308") == [("TL308", n) for n in lines_of(source)]
    assert result.findings[0].severity is severity


def test_memory_report_through_imports(lint):
    source = "from torch.cuda import memory_summary\nfrom torch.cuda import memory as cm\n" + \
        step("print(memory_summary())  # here\ncm._dump_snapshot('s.pickle')  # here")
    assert lint(source).codes("TL308") == [("TL308", n) for n in lines_of(source)]


@pytest.mark.parametrize("body", [
    "print(torch.cuda.memory_allocated())",  # a counter for the log line
    "print(torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved())",
    "if step % 100 == 0:\n    print(torch.cuda.memory_summary())",
    "if step == 10:\n    torch.cuda.memory._dump_snapshot('s.pickle')",
    "if args.debug:\n    print(torch.cuda.memory_summary())",
])
def test_memory_report_not_every_step(lint, body):
    assert lint(step(body)).codes("TL308") == []


def test_memory_report_once_around_the_loop(lint):
    source = ("import torch\ntorch.cuda.memory._record_memory_history()\nfor b in loader:\n"
              "    model(b).mean().backward()\n    opt.step()\ntorch.cuda.memory._dump_snapshot('s.pickle')\n"
              "print(torch.cuda.memory_summary())\n")
    assert lint(source).codes("TL308") == []


# -- the fixtures --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,expected", [
    ("memory_growth", [("TL306", 45)]),
    ("memory_growth_fixed", []),
    ("empty_cache_per_step", [("TL305", 41)]),
    ("empty_cache_per_step_fixed", []),
])
def test_the_issue40_fixtures(lint, name, expected):
    path = REPO / "fixtures" / "scenarios" / f"{name}.py"
    if not path.is_file():
        pytest.skip(f"{path.name} not in this checkout")
    found = lint(path.read_text(encoding="utf-8")).codes()
    assert [f for f in found if f[0] in ("TL305", "TL306", "TL307", "TL308")] == expected


# -- the screen ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", [
    step("outputs.append(model(x_val))"),
    step("total += loss"),
    step("total = total + loss"),
    "import torch\ndef log(history, loss):\n    history.append(loss)\nfor x in loader:\n    loss = model(x).mean()\n"
    "    loss.backward()\n    log(hist, loss)\n",
])
def test_the_screen_lets_a_kept_graph_through(lint, source):
    found = sites(source)
    assert KEPT_GRAPH in found and may_report("TL306", found)
    assert lint(source).codes("TL306")


@pytest.mark.parametrize("source", [
    step("outputs.append(loss.item())\ntotal += loss.detach()\noutputs.append(len(x))\ntotal += 1"),
    "import torch\nouts = []\nouts.append(model(x))\n",  # not in a loop
    "outs = []\nfor x in loader:\n    outs.append(model(x))\n",  # no torch import
])
def test_the_screen_holds_back_values_without_a_graph(source):
    assert KEPT_GRAPH not in (sites(source) or ())
