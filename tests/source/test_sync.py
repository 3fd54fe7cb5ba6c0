"""TL101-TL106 on snippets: what the judgment rules in rules/TL1xx say must be flagged, and what must not."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from tracelint.source.fix import apply_edits
from tracelint.source.rule import run_rules
from tracelint.source.rules import sync
from tracelint.source.screen import may_report, sites
from tracelint.source.semantic.model import FileContext

SYNC_RULES = (sync.ItemInLoop, sync.DeviceToHostCopyInLoop, sync.TensorToPythonScalarInLoop,
              sync.TensorFormattingInLoop, sync.CudaSynchronizeInLoop, sync.NonzeroInLoop)
HEADER = "import torch\nimport numpy as np\ndevice = torch.device('cuda')\n"  # a GPU script (device evidence)


def findings(snippet: str, header: str = HEADER):
    source = header + textwrap.dedent(snippet)
    ctx = FileContext("snippet.py", source, cst.parse_module(source))
    found = run_rules(ctx, [cls(ctx) for cls in SYNC_RULES])
    # Every snippet is also a case for the ast screen: it must let through each rule that reports here.
    screened = sites(source)
    assert all(may_report(f.code, screened) for f in found), f"the screen holds back {found} ({screened})"
    return source, found


def lint(snippet: str, header: str = HEADER) -> list[tuple[str, int]]:
    """[(code, line)] with lines counted in ``snippet`` (1 = its first line)."""
    offset = header.count("\n")
    return sorted((f.code, f.location.line - offset) for f in findings(snippet, header)[1])


TRAIN = """\
for x, y in train_loader:
    x, y = x.to(device), y.to(device)
    out = model(x)
    loss = criterion(out, y)
    loss.backward()
    optimizer.step()
"""


def train(*body: str) -> str:
    return TRAIN + "".join(f"    {line}\n" for line in body)


# Each case: the lines after TRAIN (indented into the loop) and the codes expected there (line 7 = first added).
FLAGGED = {
    "item": (["print(loss.item())"], [("TL101", 7)]),
    # the environment needs actions on the host, not the loss of the actions (a name is what its last word says)
    "action loss": (["stats.append(action_loss.item())"], [("TL101", 7)]),
    "nonzero of a device tensor": (["idx = torch.nonzero(out > 0)"], [("TL106", 7)]),
    "item accumulate": (["total += loss.item()"], [("TL101", 7)]),
    "meter update": (["losses.update(loss.item(), x.size(0))"], [("TL101", 7)]),
    "cpu": (["preds.append(out.argmax(1).cpu())"], [("TL102", 7)]),
    "tolist": (["ids = out.argmax(-1).tolist()"], [("TL102", 7)]),
    "to cpu": (["p = out.to('cpu')"], [("TL102", 7)]),
    "to cpu device": (["p = out.to(torch.device('cpu'))"], [("TL102", 7)]),
    "numpy force": (["p = out.numpy(force=True)"], [("TL102", 7)]),
    "float": (["v = float(loss)"], [("TL103", 7)]),
    "int of sum": (["n = int((out.argmax(1) == y).sum())"], [("TL103", 7)]),
    "if compare": (["if loss < best:", "    best = loss"], [("TL103", 7)]),
    "if isnan": (["if torch.isnan(loss):", "    print('nan')"], [("TL103", 7)]),
    "max of tensors": (["m = max(loss, other)"], [("TL103", 7)]),
    "print tensor": (["print(loss)"], [("TL104", 7)]),
    "f-string": (["msg = f'loss {loss:.4f}'"], [("TL104", 7)]),
    "percent": (["msg = 'loss %f' % loss"], [("TL104", 7)]),
    "format": (["msg = 'loss {}'.format(loss)"], [("TL104", 7)]),
    "postfix": (["pbar.set_postfix(loss=loss)"], [("TL104", 7)]),
    "synchronize": (["torch.cuda.synchronize()"], [("TL105", 7)]),
    "nonzero": (["idx = y.nonzero()"], [("TL106", 7)]),
    "torch.nonzero": (["idx = torch.nonzero(y)"], [("TL106", 7)]),
    "where 1-arg": (["idx = torch.where(y > 0)"], [("TL106", 7)]),
    "unique": (["u = torch.unique(y)"], [("TL106", 7)]),
    "mask read": (["sel = out[y != -100]"], [("TL106", 7)]),
    "mask name": (["m = y > 0", "sel = out[m]"], [("TL106", 8)]),
    "mask write tensor": (["m = y > 0", "out[m] = out.mean()"], [("TL106", 8)]),
    "masked_select": (["s = out.masked_select(y > 0)"], [("TL106", 7)]),
    "rebound to float": (["loss = loss.item()", "print(loss)", "print(f'{loss:.2f}')"], [("TL101", 7)]),
    "float of item": (["v = float(loss.item())"], [("TL101", 7)]),
    "rank guard does not excuse": (["if rank == 0:", "    print(loss.item())"], [("TL101", 8)]),
    "else of periodic guard": (["if step % 10 == 0:", "    pass", "else:", "    print(loss.item())"], [("TL101", 10)]),
    "accumulation boundary is every step": (
        ["if (i + 1) % grad_accum_steps == 0:", "    print(loss.item())"], [("TL101", 8)]),
}

NOT_FLAGGED = {
    "periodic guard": ["if step % 100 == 0:", "    print(loss.item())"],
    "periodic guard +1": ["if (i + 1) % args.log_interval == 0:", "    print(f'{loss:.3f}')"],
    "periodic and rank": ["if master_process and step % 10 == 0:", "    print(loss.item())"],
    "last batch": ["if last_batch or batch_idx % log_interval == 0:", "    print(loss.item())"],
    "first step": ["if step == 0:", "    print(loss.item())"],
    "verbose flag": ["if args.verbose:", "    print(loss.item())"],
    "debug flag": ["if debug:", "    torch.cuda.synchronize()"],
    "continue guard": ["if step % 10 != 0:", "    continue", "print(loss.item())"],
    "rare branch ends in break": ["if step >= max_steps:", "    print(loss.item())", "    break"],
    "numpy tolist": ["a = np.zeros(3)", "a.tolist()"],
    "numpy item": ["m = np.mean([1.0, 2.0])", "m.item()"],
    "shape check": ["if x.size(1) <= n:", "    pass", "if x.shape[0] != 4:", "    pass", "if len(x) > 2:", "    pass"],
    "dict items": ["for k, v in stats.items():", "    pass"],
    "cpu tensor from list": ["t = torch.tensor([1.0, 2.0])", "t.item()", "print(t)"],
    "numpy without force": ["a = out.detach().numpy()"],
    "masked fill write": ["out[y == 0] = 0.0", "out[y > 1] = float('-inf')"],
    "three-arg where": ["z = torch.where(y > 0, out, 0.0)"],
    "integer index": ["sel = out[idx]", "sel = out[:, 0]"],
    "is None test": ["if out is None:", "    pass"],
    "unknown truth": ["if args.clip:", "    pass", "v = float(args.lr)", "print(args)"],
    "env step": ["obs, r, done, info = env.step(action.item())", "envs.step(actions.cpu().numpy())"],
    # a batch built on the host and moved at the end (a data generator): its nonzero counts on the host
    "nonzero before the move": ["ids = x[0]", "starts = torch.nonzero(ids == 50256)", "ids = ids.to(device)"],
    "an action for the host": ["next_action = policy(out).argmax().item()", "a = self.actions.cpu()"],
}


@pytest.mark.parametrize("name", sorted(FLAGGED))
def test_flagged(name):
    body, expected = FLAGGED[name]
    assert lint(train(*body)) == expected


@pytest.mark.parametrize("name", sorted(NOT_FLAGGED))
def test_not_flagged(name):
    assert lint(train(*NOT_FLAGGED[name])) == []


def test_cpu_chain_is_one_finding():
    assert lint(train("p = out.softmax(-1).cpu().numpy().tolist()", "v = out.sum().cpu().item()")) == [
        ("TL102", 7), ("TL102", 8)]


def test_print_of_formatted_item_is_one_finding():
    assert lint(train("print(f'{loss.item():.3f}')")) == [("TL101", 7)]


@pytest.mark.parametrize("loop", [
    "for batch in loader:", "for i, batch in enumerate(tqdm(train_dl)):", "for step in range(max_steps):",
    "for it in range(args.iters):", "while True:", "while step < total_steps:", "for x, y in val_loader:",
    "for i in range(len(train_loader)):", "for inputs, labels in zip(loader_a, loader_b):",
    "for i in range(10):\n    loss.backward()", "while not done:",
])
def test_hot_loops(loop):
    source = loop + "\n    print(loss.item())\n"
    assert [c for c, _ in lint(source)] == ["TL101"]


@pytest.mark.parametrize("loop", [
    "for epoch in range(epochs):", "for k, v in metrics.items():", "for name, p in model.named_parameters():",
    "for e in range(args.num_epochs):", "for i in range(3):", "for x in [1, 2, 3]:", "while epoch < max_epochs:",
])
def test_not_hot_loops(loop):
    assert lint(loop + "\n    print(loss.item())\n") == []


def test_once_per_epoch_is_not_hot():
    source = """\
    for epoch in range(epochs):
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
        print(loss.item())
        torch.cuda.synchronize()
    """
    assert lint(source) == []


def test_epoch_loop_with_inner_loop_only_flags_inner():
    source = """\
    for epoch in range(epochs):
        for x, y in loader:
            loss = criterion(model(x), y)
            print(loss.item())
        print(loss.item())
    """
    assert lint(source) == [("TL101", 4)]


def test_nested_non_hot_loop_inside_hot_loop_is_hot():
    source = train("for name, p in model.named_parameters():", "    norms.append(p.grad.norm().item())")
    assert lint(source) == [("TL101", 8)]


def test_function_defined_in_loop_is_not_the_loop():
    assert lint(train("def report():", "    return loss.item()")) == []


def test_lightning_training_step_is_hot():
    source = """\
    class Lit:
        def training_step(self, batch, batch_idx):
            loss = self.model(batch)
            self.log("loss", loss.item())
            return loss
    """
    assert lint(source) == [("TL101", 4)]


def test_comprehension_in_loop_and_over_loader():
    assert lint(train("vals = [t.item() for t in parts]")) == [("TL101", 7)]
    assert lint("accs = [model(x).argmax().item() for x, _ in val_loader]\n") == [("TL101", 1)]


def test_file_without_torch_import_is_silent():
    assert lint(train("print(loss.item())", "torch.cuda.synchronize()"), header="import numpy as np\n") == []


def test_synchronize_through_aliases():
    header = "import torch.cuda as tc\nfrom torch.cuda import synchronize as sync\n"
    assert lint(train("tc.synchronize()", "sync()", "torch.cuda.current_stream().synchronize()"),
                header=header + "import torch\n") == [("TL105", 7), ("TL105", 8), ("TL105", 9)]


def test_local_synchronize_is_not_torch():
    assert lint(train("synchronize()"), header="import torch\ndef synchronize(): pass\n") == []


def test_eval_loop_under_no_grad():
    source = """\
    with torch.no_grad():
        for images, target in val_loader:
            output = model(images.cuda())
            correct += (output.argmax(1) == target.cuda()).sum().item()
    """
    assert lint(source) == [("TL101", 4)]


def test_while_test_on_tensor():
    assert lint("while True:\n    if loss > 1:\n        break\n", header=HEADER + "loss = model(x)\n") == [("TL103", 2)]


def _fixed(snippet: str) -> str | None:
    source, found = findings(textwrap.dedent(snippet))
    fixes = [f.fix for f in found if f.fix is not None]
    if not fixes:
        return None
    assert all(not fix.safe for fix in fixes)
    return apply_edits(source, [e for fix in fixes for e in fix.edits])[len(HEADER):]


def test_accumulator_fix():
    snippet = """\
    for epoch in range(epochs):
        running_loss = 0.0
        for i, (x, y) in enumerate(loader):
            loss = criterion(model(x), y)
            running_loss += loss.item() * x.size(0)
            if i % 100 == 99:
                print(f"{running_loss / 100:.3f}")
                running_loss = 0.0
        print(running_loss)
    """
    fixed = _fixed(snippet)
    assert fixed is not None
    assert "running_loss += loss.detach() * x.size(0)" in fixed
    assert 'print(f"{float(running_loss) / 100:.3f}")' in fixed
    assert "print(float(running_loss))" in fixed
    assert "running_loss = 0.0" in fixed
    cst.parse_module(HEADER + fixed)


@pytest.mark.parametrize("snippet", [
    # read on every step: the fix would not remove the sync
    "total = 0.0\nfor x in loader:\n    total += model(x).item()\n    print(total)\n",
    # integer accumulator: float() reads would change what is printed
    "total = 0\nfor x in loader:\n    total += model(x).item()\nprint(total)\n",
    # a second accumulation
    "total = 0.0\nfor x in loader:\n    total += model(x).item()\n    total += 1.0\nprint(total)\n",
    # used in a nested function
    "total = 0.0\nfor x in loader:\n    total += model(x).item()\ndef f():\n    return total\n",
])
def test_accumulator_fix_only_in_the_simple_case(snippet):
    assert _fixed(snippet) is None


# Condensed from public training scripts (pytorch/examples mnist, karpathy/nanoGPT, an RL actor-critic loop).
MNIST = """\
import torch
import torch.nn.functional as F

def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print('Train Epoch: {} Loss: {:.6f}'.format(epoch, loss.item()))
            if args.dry_run:
                break

def test(model, device, test_loader):
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(test_loader.dataset)
    print(test_loss, correct)
"""

NANOGPT = """\
import torch
device = 'cuda'
@torch.no_grad()
def estimate_loss():
    out = {}
    for split in ['train', 'val']:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            logits, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    return out

X, Y = get_batch('train')
while True:
    if iter_num % eval_interval == 0 and master_process:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}")
        if losses['val'] < best_val_loss or always_save_checkpoint:
            best_val_loss = losses['val']
    for micro_step in range(gradient_accumulation_steps):
        logits, loss = model(X, Y)
        loss = loss / gradient_accumulation_steps
        X, Y = get_batch('train')
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if iter_num % log_interval == 0 and master_process:
        lossf = loss.item() * gradient_accumulation_steps
        print(f"iter {iter_num}: loss {lossf:.4f}")
    iter_num += 1
    if iter_num > max_iters:
        break
"""

RL = """\
import torch

for update in range(1, num_updates + 1):
    for step in range(0, args.num_steps):
        with torch.no_grad():
            action, logprob, _, value = agent.get_action_and_value(next_obs)
        next_obs, reward, done, info = envs.step(action.cpu().numpy())
        rewards[step] = torch.tensor(reward).to(device).view(-1)
    for epoch in range(args.update_epochs):
        for start in range(0, args.batch_size, args.minibatch_size):
            loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if args.target_kl is not None and approx_kl > args.target_kl:
            break
    writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
"""


def test_mnist_example():
    # the training print is under the log interval; the test loop's two .item() run every batch
    assert lint(MNIST, header="") == [("TL101", 25), ("TL101", 27)]


def test_nanogpt_train_loop():
    # only the eval loop's per-iteration .item(): the logging is periodic, the micro-steps are the step loop's
    assert lint(NANOGPT, header="") == [("TL101", 11)]  # (the device line replaces a blank one)


def test_rl_rollout_and_update_loop():
    # actions go to the environment; the update loop runs its body once per update (steps are nested)
    assert lint(RL, header="") == []
