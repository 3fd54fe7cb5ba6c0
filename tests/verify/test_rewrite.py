"""Device-side rewrites (tracelint/verify/rewrite.py) for sync findings without a fix, and their runtime
(tracelint/verify/deferred.py): what each common TL101 shape becomes, why the others are not-measured, and that a
rewritten script computes and logs the same values while reading them once per block."""
from __future__ import annotations

import difflib
import importlib.util
import os
import textwrap
from pathlib import Path

import pytest

from tests.verify.conftest import CPU, SCRIPTS
from tracelint.engine import Finding
from tracelint.source import lint_paths
from tracelint.verify.harness_control import run_once
from tracelint.verify.rewrite import NotBuilt, rewrite
from tracelint.verify.variants import plan

HEADER = """\
import logging
import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)
model = torch.nn.Linear(32, 4).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = [(torch.randn(64, 32), torch.randint(0, 4, (64,))) for _ in range(100)]
"""


def changed(before: str, after: str) -> list[str]:
    return [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), n=0, lineterm="")
            if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def findings_of(tmp_path: Path, body: str) -> tuple[str, list[Finding]]:
    text = HEADER + textwrap.dedent(body)
    path = tmp_path / "train.py"
    path.write_text(text)
    return text, [f for f in lint_paths([path]) if isinstance(f, Finding)]


def only(findings: list[Finding], code: str = "TL101") -> Finding:
    (finding,) = [f for f in findings if f.code == code and f.fix is None]
    return finding


LOOP = """\
for step, (x, y) in enumerate(loader):
    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_append_keeps_the_values_on_the_device_and_reads_the_list_where_it_is_used(tmp_path):
    text, findings = findings_of(tmp_path, "losses = []\n" + LOOP + """\
    losses.append(loss.item())
    if step % 100 == 0:
        print(sum(losses[-100:]) / 100)
print(sum(losses) / len(losses))
""")
    done = rewrite(text, only(findings), "train.py")
    assert changed(text, done.text) == [
        "-    losses.append(loss.item())",
        "+    losses.append(_tracelint_verify.lazy(loss))",
        "-        print(sum(losses[-100:]) / 100)",
        "-print(sum(losses) / len(losses))",
        "+        print(sum(_tracelint_verify.host(losses)[-100:]) / 100)",
        "+print(sum(_tracelint_verify.host(losses)) / len(_tracelint_verify.host(losses)))",
    ]
    assert done.title == "append `loss` on the device; read `losses` where it is used"
    assert len(text.splitlines()) == len(done.text.splitlines())  # no line moves


def test_a_logging_statement_runs_later_with_its_receivers_evaluated_now(tmp_path):
    text, findings = findings_of(tmp_path, LOOP + """\
    print(f"step {step} loss {loss.item():.4f} acc {(model(x).argmax(1) == y).float().mean().item():.2f}")
""")
    first = rewrite(text, [f for f in findings if f.code == "TL101"][0], "train.py")
    (old, new) = changed(text, first.text)
    assert new == (
        "+    _tracelint_verify.defer('print(f\"step {step} loss {__tracelint_values[0]:.4f} acc "
        "{__tracelint_values[1]:.2f}\")', 'train.py', 15, globals(), locals(), (loss, "
        "(model(x).argmax(1) == y).float().mean(), ))")
    # Both .item() of the statement are read by one deferral: the second finding gives the same variant.
    second = rewrite(text, [f for f in findings if f.code == "TL101"][1], "train.py")
    assert second.text == first.text and first.title.startswith("log later: line 15")


@pytest.mark.parametrize("statement", [
    'log.info("loss %.4f", loss.item())',
    'wandb.log({"loss": loss.item(), "lr": opt.param_groups[0]["lr"]})',
    "pbar.set_postfix(loss=loss.item())",
    "meter.update(loss.item(), x.size(0))",
    "writer.add_scalar('loss', loss.item(), step)",
])
def test_logger_calls_are_deferred(tmp_path, statement):
    text, findings = findings_of(tmp_path, LOOP + f"    {statement}\n")
    done = rewrite(text, only(findings), "train.py")
    (old, new) = changed(text, done.text)
    assert new.startswith("+    _tracelint_verify.defer(") and "(loss, ))" in new and "__tracelint_values[0]" in new


def test_dict_value_for_a_logger_stays_lazy_and_the_logger_call_is_deferred(tmp_path):
    text, findings = findings_of(tmp_path, LOOP + """\
    logs = {"loss": loss.item(), "step": step}
    wandb.log(logs)
""")
    done = rewrite(text, only(findings), "train.py")
    assert changed(text, done.text) == [
        '-    logs = {"loss": loss.item(), "step": step}',
        "-    wandb.log(logs)",
        '+    logs = {"loss": _tracelint_verify.lazy(loss), "step": step}',
        "+    _tracelint_verify.defer('wandb.log(_tracelint_verify.host(logs))', 'train.py', 16, globals(), "
        "locals(), ())",
    ]


def test_an_accumulator_without_a_fix_sums_on_the_device(tmp_path):
    # Two readers of `total` (one under the log interval, one after the loop) and a reset: --fix has no fix.
    text, findings = findings_of(tmp_path, LOOP.replace("for step", "total = 0\nfor step") + """\
    total += (model(x).argmax(1) == y).sum().item()
    if step % 10 == 9:
        print(total / 640)
        total = 0
print(total)
""")
    done = rewrite(text, only(findings), "train.py")
    assert changed(text, done.text) == [
        "-    total += (model(x).argmax(1) == y).sum().item()",
        "+    total += _tracelint_verify.lazy((model(x).argmax(1) == y).sum())",
        "-        print(total / 640)",
        "+        print(_tracelint_verify.host(total) / 640)",
        "-print(total)",
        "+print(_tracelint_verify.host(total))",
    ]


@pytest.mark.parametrize("body, code, reason", [
    ("    if loss.item() > 10:\n        break\n", "TL101", "the value decides control flow every step (line {0})"),
    ("    best = loss.item()\n    if best < 0.1:\n        break\n", "TL101",
     "`best` is used every step at line {1} (`if best < 0.1: break`)"),
    ("    history.append(loss.item())\n    if len(history) > 100:\n        history.pop(0)\n", "TL101",
     "`history` is used every step at line {1} (`if len(history) > 100: history.pop(0)`)"),
    ("    seen = compute(loss.item())\n", "TL101", "is used right away at line {0} (in `compute(loss.item())`)"),
    ("    sel = x[x > 0]\n", "TL106", "the result's shape depends on the data"),
    ("    preds = model(x).argmax(1).cpu()\n", "TL102",
     "no device-side rewrite for `model(x).argmax(1).cpu()` outside a logging statement (line {0})"),
])
def test_shapes_without_a_rewrite_say_why(tmp_path, body, code, reason):
    text, findings = findings_of(tmp_path, ("history = []\n" if "history" in body else "") + LOOP + body)
    finding = next(f for f in findings if f.code == code and f.fix is None)
    with pytest.raises(NotBuilt) as info:
        rewrite(text, finding, "train.py")
    assert reason.format(finding.source.line, finding.source.line + 1) in str(info.value)


def test_a_return_is_not_followed(tmp_path):
    text, findings = findings_of(tmp_path, """\
def train_step(x, y):
    loss = F.cross_entropy(model(x.cuda()), y.cuda())
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()

for x, y in loader:
    train_step(x, y)
""")
    with pytest.raises(NotBuilt, match="returned to the caller"):
        rewrite(text, only(findings), "train.py")


def test_plan_measures_every_shape_and_lists_the_rest_as_not_measured(tmp_path):
    script = tmp_path / "train.py"
    text, _ = findings_of(tmp_path, LOOP.replace("for step", "losses = []\nfor step") + """\
    losses.append(loss.item())
    print(f"loss {loss.item():.4f}")
    sel = x[x > 0]
""")
    script.write_text(text)
    planned = plan(script, tmp_path / "scratch", precision=[])
    line = text.splitlines().index("    losses.append(loss.item())") + 1
    assert [v.key for v in planned.variants] == [f"TL101:{line}", f"TL101:{line + 1}", "all"]
    assert all(not v.safe for v in planned.variants)
    (skipped,) = planned.unmeasured
    assert skipped.finding.code == "TL106" and "depends on the data" in skipped.reason
    together = planned.variants[-1].text
    assert "lazy(loss)" in together and "_tracelint_verify.defer(" in together and "x[x > 0]" in together


# --- the runtime ------------------------------------------------------------------------------------------------

@pytest.fixture
def runtime():
    torch = pytest.importorskip("torch")
    path = Path(__file__).resolve().parents[2] / "tracelint" / "verify" / "deferred.py"
    spec = importlib.util.spec_from_file_location("_tracelint_verify_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.torch = torch
    return module


def test_lazy_values_stay_on_the_device_until_read_and_are_read_together(runtime, monkeypatch):
    import torch

    stacks = []
    real_stack = torch.stack
    monkeypatch.setattr(torch, "stack", lambda ts, *a, **k: stacks.append(len(ts)) or real_stack(ts, *a, **k))
    total, count, values = 0.0, 0, []
    for i in range(5):
        loss = torch.tensor(float(i) + 0.5)
        total += runtime.lazy(loss)  # a float plus a Lazy: still a Lazy (a device tensor underneath)
        count += runtime.lazy(torch.tensor(i).sum())
        values.append(runtime.lazy(loss))
    assert isinstance(total, runtime.Lazy) and stacks == []  # nothing read yet
    assert runtime.host(values) == [0.5, 1.5, 2.5, 3.5, 4.5] and all(type(v) is float for v in values)
    # one copy per dtype for all 25 pending values: float32 losses, their float64 sums, int64 counts and sums
    assert sorted(stacks) == [5, 10, 10]
    assert runtime.host(total) == 12.5 and runtime.host(count) == 10 and type(runtime.host(count)) is int
    assert f"{runtime.lazy(torch.tensor(2.0)) / 4:.3f}" == "0.500"  # formatting reads it
    assert runtime.lazy(torch.tensor(3)) / 2 == 1.5  # Python's true division, not torch's integer one
    assert runtime.host({"a": [runtime.lazy(torch.tensor(1.0))], "b": 2}) == {"a": [1.0], "b": 2}
    with pytest.raises(RuntimeError):
        runtime.lazy(torch.ones(3))  # as .item() of a 3-element tensor


def test_deferred_statements_run_at_the_read_with_the_names_of_their_time(runtime, capsys):
    import torch

    def loop(steps):
        for step in range(steps):
            loss = torch.tensor(1.0 / (step + 1))
            runtime.defer('print(f"step {step} loss {__tracelint_values[0]:.3f}")', "train.py", 7, globals(),
                          locals(), (loss,))
            runtime.on_tick(step + 1)

    runtime.INTERVAL = 3
    loop(4)
    assert capsys.readouterr().out == "step 0 loss 1.000\nstep 1 loss 0.500\nstep 2 loss 0.333\n"
    runtime.flush()
    assert capsys.readouterr().out == "step 3 loss 0.250\n"


def test_a_failing_deferred_statement_names_the_script_line(runtime):
    import torch

    runtime.defer("undefined_name(__tracelint_values[0])", "train.py", 42, {}, {}, (torch.tensor(1.0),))
    with pytest.raises(NameError) as info:
        runtime.flush()
    frames = [(f.filename, f.lineno) for f in __import__("traceback").extract_tb(info.tb)]
    assert ("train.py (deferred by tracelint verify)", 42) in frames


@pytest.mark.slow
def test_rewritten_script_logs_the_same_values_as_the_original(tmp_path, monkeypatch):
    """log_shapes.py as written and with every shape rewritten ("all"), under the harness on the CPU: the same
    log lines (deferred ones later, in a different order), and the run completes."""
    script = SCRIPTS / "log_shapes.py"
    planned = plan(script, tmp_path / "scratch", precision=[])
    assert [v.key.split(":")[0] for v in planned.variants] == ["TL101"] * 4 + ["all"] and not planned.unmeasured
    code = tmp_path / "code" / script.name
    code.parent.mkdir()
    code.write_text(planned.variants[-1].text)
    logged = {}
    for name, path in (("original", script), ("rewritten", code)):
        monkeypatch.setenv("LOG_TO", str(tmp_path / f"{name}.log"))
        outcome = run_once(path, script, [], CPU, tmp_path / name)
        assert outcome.ok, outcome.reason + outcome.stderr_tail
        logged[name] = (tmp_path / f"{name}.log").read_text().splitlines()
    rewritten = logged["rewritten"]
    assert len(rewritten) >= 10 and set(rewritten) <= set(logged["original"])
    stdout = (tmp_path / "rewritten" / "stdout.txt").read_text()
    assert "step 0 loss " in stdout and os.path.getsize(tmp_path / "rewritten" / "stderr.txt") > 0


def test_reads_under_a_guard_or_a_handler_are_read_there_and_a_finally_is_every_step(tmp_path):
    body = "total = 0.0\n" + LOOP + """\
    total += loss.item() * 2
    try:
        pass
    except ValueError:
        print(total)
    else:
        pass
    if step % 10 == 0:
        pass
    elif step % 5 == 0:
        print(total)
print(total)
"""
    text, findings = findings_of(tmp_path, body)
    tl101 = next(f for f in findings if f.code == "TL101")  # --fix may have its own fix here; verify's is checked
    done = rewrite(text, tl101, "train.py")
    assert done.text.count("_tracelint_verify.host(total)") == 3
    every_step = body.replace("    else:\n        pass\n", "    finally:\n        x = total > 3\n")
    text, findings = findings_of(tmp_path, every_step)
    with pytest.raises(NotBuilt, match="`total` is used every step"):
        rewrite(text, next(f for f in findings if f.code == "TL101"), "train.py")
