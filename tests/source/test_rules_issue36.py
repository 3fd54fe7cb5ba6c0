"""The source halves of issue #36: channels_last (TL405), cudnn.benchmark (TL406), debugging tools left on (TL701-
TL706), graph breaks in compiled code (TL503), DataParallel and gradient accumulation (TL605-TL607), evaluation
with autograd on (TL304). Each rule: what fires, a near miss that does not, and the project's GPU fixture scripts."""
from __future__ import annotations

from pathlib import Path

import pytest

from tracelint.engine import Finding
from tracelint.source import lint_paths

SCENARIOS = Path(__file__).resolve().parents[2] / "fixtures" / "scenarios"

TRAIN = """
for x, y in loader:
    {autocast}loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


# -- TL405, TL406: conv nets -------------------------------------------------------------------------------------
@pytest.mark.parametrize("build", ["torchvision.models.resnet50().cuda()", "torchvision.models.efficientnet_b0()",
                                   "torchvision.models.convnext_tiny(weights=None)"])
def test_tl405_torchvision_cnn_under_autocast(lint, build):
    source = ("import torch\nimport torchvision\n"
              f"model = {build}\n"
              "for x, y in loader:\n"
              "    with torch.autocast('cuda', dtype=torch.bfloat16):\n"
              "        loss = torch.nn.functional.cross_entropy(model(x), y)\n"
              "    loss.backward()\n")
    assert lint(source).codes("TL405") == [("TL405", 3)]


def test_tl405_own_conv_class_in_half(lint):
    source = """
        import torch
        import torch.nn as nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 64, 3)

        net = Net().cuda().half()
        for x, y in loader:
            loss = crit(net(x.half()), y)
            loss.backward()
    """
    result = lint(source)
    assert result.codes("TL405") == [("TL405", 10)]
    assert "`.half()`" in result.findings[0].message and "1.86x" in result.findings[0].message


@pytest.mark.parametrize("change", [
    "channels_last on the input",  # model or input: the file mentions channels_last
    "fp32",  # no autocast: out of scope (the trace twin's too)
    "cpu autocast",
    "no backward",  # inference
    "a Linear model",
])
def test_tl405_near_misses(lint, change):
    build = "torchvision.models.resnet50().cuda()"
    autocast = "with torch.autocast('cuda', dtype=torch.bfloat16):"
    x = "x"
    backward = "    loss.backward()\n"
    if change == "channels_last on the input":
        x = "x.to(memory_format=torch.channels_last)"
    elif change == "fp32":
        autocast = "if True:"
    elif change == "cpu autocast":
        autocast = "with torch.autocast('cpu', dtype=torch.bfloat16):"
    elif change == "no backward":
        backward = ""
    elif change == "a Linear model":
        build = "torch.nn.Linear(8, 8).cuda()"
    source = (f"import torch\nimport torchvision\nmodel = {build}\nfor x, y in loader:\n    {autocast}\n"
              f"        loss = torch.nn.functional.cross_entropy(model({x}), y)\n{backward}")
    assert lint(source).codes("TL405") == []


def test_tl406_fixed_size_inputs_only(lint):
    base = ("import torch\nimport torchvision\nmodel = torchvision.models.resnet18().cuda()\n{data}\n"
            "for x, y in loader:\n    loss = torch.nn.functional.cross_entropy(model(x), y)\n    loss.backward()\n")
    cifar = "data = torchvision.datasets.CIFAR10('d', transform=torchvision.transforms.ToTensor())"
    assert lint(base.format(data=cifar)).codes("TL406") == [("TL406", 3)]
    assert lint(base.format(data="data = CocoDetection('d')")).codes("TL406") == []  # sizes vary: no evidence
    set_off = cifar + "\ntorch.backends.cudnn.benchmark = False"  # a choice either way
    assert lint(base.format(data=set_off)).codes("TL406") == []
    assert lint(base.format(data=cifar)).findings[0].severity.name == "INFO"


# -- TL701-TL706: debugging tools left on --------------------------------------------------------------------------
@pytest.mark.parametrize("setting, code, flagged", [
    ("torch.autograd.set_detect_anomaly(True)", "TL701", True),
    ("torch.autograd.set_detect_anomaly(mode=True)", "TL701", True),
    ("torch.autograd.set_detect_anomaly(args.anomaly)", "TL701", False),  # the file does not fix it
    ("torch.autograd.set_detect_anomaly(False)", "TL701", False),
    ("os.environ['CUDA_LAUNCH_BLOCKING'] = '1'", "TL702", True),
    ("os.environ.setdefault('CUDA_LAUNCH_BLOCKING', '1')", "TL702", True),
    ("os.environ.update({'CUDA_LAUNCH_BLOCKING': '1'})", "TL702", True),
    ("os.environ['CUDA_LAUNCH_BLOCKING'] = '0'", "TL702", False),
    ("os.environ['CUDA_VISIBLE_DEVICES'] = '1'", "TL702", False),
    ("torch.cuda.set_sync_debug_mode('warn')", "TL703", True),
    ("torch.cuda.set_sync_debug_mode(2)", "TL703", True),
    ("torch.cuda.set_sync_debug_mode(0)", "TL703", False),
    ("torch.use_deterministic_algorithms(True)", "TL706", True),
    ("torch.use_deterministic_algorithms(args.det)", "TL706", False),
])
def test_debug_settings(lint, setting, code, flagged):
    source = f"import os\nimport torch\n{setting}\n" + TRAIN.format(autocast="")
    assert lint(source).codes(code) == ([(code, 3)] if flagged else [])


@pytest.mark.parametrize("setting", ["torch.autograd.set_detect_anomaly(True)",
                                     "os.environ['CUDA_LAUNCH_BLOCKING'] = '1'",
                                     "torch.cuda.set_sync_debug_mode('error')"])
def test_debug_settings_under_a_condition_or_in_tests_are_opt_in(lint, setting):
    guarded = f"import os\nimport torch\nif args.debug:\n    {setting}\n"
    main_guard = f"import os\nimport torch\nif __name__ == '__main__':\n    {setting}\n"
    assert [f.code for f in lint(guarded).findings] == []
    assert len(lint(main_guard).findings) == 1  # the script's entry point is no condition
    assert [f.code for f in lint(f"import os\nimport torch\n{setting}\n", name="tests/test_nan.py").findings] == []


def test_tl701_turned_off_again_in_the_same_function(lint):
    source = """
        import torch

        def debug_step(model, x):
            torch.autograd.set_detect_anomaly(True)
            model(x).sum().backward()
            torch.autograd.set_detect_anomaly(False)
    """
    assert lint(source).codes("TL701") == []


def test_tl701_detect_anomaly_context(lint):
    around = "import torch\nwith torch.autograd.detect_anomaly():\n" + \
        "".join("    " + line + "\n" for line in TRAIN.format(autocast="").strip().splitlines())
    assert lint(around).codes("TL701") == [("TL701", 2)]
    once = "import torch\nwith torch.autograd.detect_anomaly():\n    loss = model(x).sum()\n    loss.backward()\n"
    assert lint(once).codes("TL701") == []  # one step debugged, no loop of steps


def test_tl704_profiler_around_the_loop(lint):
    body = "".join("    " + line + "\n" for line in TRAIN.format(autocast="").strip().splitlines())
    bad = f"import torch\nwith torch.profiler.profile(record_shapes=True) as prof:\n{body}"
    assert lint(bad).codes("TL704") == [("TL704", 2)]
    nvtx = f"import torch\nwith torch.autograd.profiler.emit_nvtx():\n{body}"
    assert lint(nvtx).codes("TL704") == [("TL704", 2)]
    scheduled = ("import torch\nwith torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, "
                 f"active=2)) as prof:\n{body}")
    assert lint(scheduled).codes("TL704") == []
    switched = f"import torch\nwith torch.autograd.profiler.emit_nvtx(enabled=args.nvtx):\n{body}"
    assert lint(switched).codes("TL704") == []
    few = ("import torch\nwith torch.profiler.profile() as prof:\n    for _ in range(10):\n        model(x)\n")
    assert lint(few).codes("TL704") == []  # a bounded benchmark, no loop of training steps


def test_tl705_gradcheck_per_step_only(lint):
    per_step = ("import torch\nfor x, y in loader:\n    torch.autograd.gradcheck(op, (x,))\n"
                "    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n")
    assert lint(per_step).codes("TL705") == [("TL705", 3)]
    once = "import torch\nassert torch.autograd.gradcheck(op, (x,))\n"
    assert lint(once).codes("TL705") == []


# -- TL503: graph breaks in compiled code --------------------------------------------------------------------------
COMPILED = """
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        {block}
        return self.fc(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        {net}
        return x


model = {build}
"""


@pytest.mark.parametrize("block, net, line", [
    ("print(x.shape)", "pass", 12),  # in a submodule's forward, reached through the ModuleList
    ("pass", "self.peak = x.abs().amax().item()", 24),
    ("pass", "n = x.tolist()", 24),
    ("pass", "if x.sum() > 0:\n            x = x * 2", 24),
])
def test_tl503_breaks_in_a_compiled_module(lint, block, net, line):
    result = lint(COMPILED.format(block=block, net=net, build="torch.compile(Net().cuda())"))
    assert result.codes("TL503") == [("TL503", line)]
    assert "`torch.compile`d `Net`" in result.findings[-1].message


@pytest.mark.parametrize("block, net, build", [
    ("print(x.shape)", "pass", "Net().cuda()"),  # not compiled
    ("pass", "if x.dim() == 2:\n            x = x * 2", "torch.compile(Net())"),  # a host-valued test
    ("pass", "if self.training:\n            x = x * 2", "torch.compile(Net())"),
])
def test_tl503_near_misses(lint, block, net, build):
    assert lint(COMPILED.format(block=block, net=net, build=build)).codes("TL503") == []


def test_tl503_compiled_functions_and_scalar_capture(lint):
    source = """
        import torch

        @torch.compile
        def step(x, y):
            loss = (x - y).pow(2).mean()
            print("loss", loss)
            return loss

        def plain(x):
            print(x)
            return x
    """
    assert lint(source).codes("TL503") == [("TL503", 7)]
    captured = """
        import torch
        torch._dynamo.config.capture_scalar_outputs = True

        @torch.compile
        def step(x):
            return x * x.sum().item()
    """
    assert lint(captured).codes("TL503") == []


# -- TL605-TL607: distributed ----------------------------------------------------------------------------------
def test_tl605_data_parallel(lint):
    source = "import torch\nif torch.cuda.device_count() > 1:\n    model = torch.nn.DataParallel(model)\n"
    assert lint(source).codes("TL605") == [("TL605", 3)]
    local = "class DataParallel:\n    pass\nimport torch\nmodel = DataParallel(model)\n"
    assert lint(local).codes("TL605") == []  # the file's own class


DDP_ACCUM = """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(model, device_ids=[rank])
for i, (x, y) in enumerate(loader):
    loss = torch.nn.functional.cross_entropy(model(x), y) / accum
    loss.backward()
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
"""

# The 2-GPU fixtures' step (fixtures/make_ddp_traces.py, ddp_accum / ddp_accum_no_sync), written out as a user would
MICRO_STEPS = """
import contextlib
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(model, device_ids=[local_rank])
for _ in range(steps):
    optimizer.zero_grad()
    for i in range(micro):
        x = torch.randn(batch, 3, 224, 224, device=device)
        y = torch.randint(0, 1000, (batch,), device=device)
        {context}
            (F.cross_entropy(model(x), y) / micro).backward()
    optimizer.step()
"""


def test_tl606_modulo_guarded_step(lint):
    result = lint(DDP_ACCUM)
    assert result.codes("TL606") == [("TL606", 8)]
    assert "(i + 1) % accum == 0" in result.findings[0].message and "no_sync" in result.findings[0].message


def test_tl606_micro_step_loop_and_its_no_sync_twin(lint):
    bad = lint(MICRO_STEPS.format(context="with contextlib.nullcontext():"))
    assert bad.codes("TL606") == [("TL606", 14)]
    good = lint(MICRO_STEPS.format(context="with model.no_sync() if i < micro - 1 else contextlib.nullcontext():"))
    assert good.codes("TL606") == []


@pytest.mark.parametrize("change", ["no DDP", "a step every iteration"])
def test_tl606_near_misses(lint, change):
    source = DDP_ACCUM
    if change == "no DDP":
        source = source.replace("model = DDP(model, device_ids=[rank])\n", "")
    else:
        source = source.replace("    if (i + 1) % accum == 0:\n        optimizer.step()", "    if True:\n"
                                "        optimizer.step()")
    assert lint(source).codes("TL606") == []


def test_tl606_a_comment_that_names_no_sync_is_no_fix(lint):
    source = DDP_ACCUM.replace("loss.backward()", "loss.backward()  # TODO: model.no_sync() before the last micro-step")
    assert lint(source).codes("TL606") == [("TL606", 8)]
    numpy = DDP_ACCUM.replace("loss.backward()", "loss.backward()\n    seen = np.add.accumulate(counts)")
    assert lint("import numpy as np\n" + numpy).codes("TL606") == [("TL606", 9)]
    attribute = DDP_ACCUM.replace("loss.backward()", "model.require_backward_grad_sync = False\n    loss.backward()")
    assert lint(attribute).codes("TL606") == []


def test_tl606_fsdp2_names_its_switch(lint):
    source = ("import torch\nfrom torch.distributed.fsdp import fully_shard\nfully_shard(model)\n"
              "for step in range(max_steps):\n    for micro in range(accum):\n        model(x).sum().backward()\n"
              "    opt.step()\n")
    result = lint(source)
    assert result.codes("TL606") == [("TL606", 6)]
    assert "set_requires_gradient_sync(False)" in result.findings[0].message


def test_tl607_find_unused_parameters(lint):
    source = "import torch\nm = torch.nn.parallel.DistributedDataParallel(net, find_unused_parameters={})\n"
    assert lint(source.format("True")).codes("TL607") == [("TL607", 2)]
    assert lint(source.format("args.unused")).codes("TL607") == []


# -- TL304: evaluation with autograd on ------------------------------------------------------------------------------
EVALUATE = """
import torch


{decorator}def evaluate(model, loader):
    model.eval()
    total = 0
    for x, y in loader:
        total += (model(x).argmax(1) == y).sum()
    return total


for epoch in range(epochs):
    train(model, train_loader)
    {call}
"""


def test_tl304_eval_loop_with_autograd(lint):
    result = lint(EVALUATE.format(decorator="", call="evaluate(model, val_loader)"))
    assert result.codes("TL304") == [("TL304", 9)]


@pytest.mark.parametrize("decorator, call", [
    ("@torch.no_grad()\n", "evaluate(model, val_loader)"),
    ("@torch.inference_mode()\n", "evaluate(model, val_loader)"),
    ("", "with torch.no_grad():\n        evaluate(model, val_loader)"),  # every call of it is under no_grad
    ("", "pass"),  # never called in the file: its callers may turn autograd off
])
def test_tl304_near_misses(lint, decorator, call):
    assert lint(EVALUATE.format(decorator=decorator, call=call)).codes("TL304") == []


def test_tl304_a_training_loop_after_eval_is_not_one(lint):
    source = ("import torch\nmodel.eval()\nmodel.train()\nfor x, y in loader:\n    loss = model(x).sum()\n"
              "    loss.backward()\n    opt.step()\n")
    assert lint(source).codes("TL304") == []
    val = "import torch\nmodel.eval()\nfor x, y in val_loader:\n    out = model(x)\n"
    assert lint(val).codes("TL304") == [("TL304", 4)]


# -- the project's GPU fixtures: each rule fires on its bad scenario and is silent on the fixed twin ---------------
@pytest.mark.parametrize("code, bad, line", [
    ("TL405", "conv_nchw_bf16", 19),
    ("TL701", "anomaly_mode", 31),
    ("TL702", "launch_blocking", 10),
    ("TL503", "compiled_graph_break", 57),
    # fixtures/gpu_issue36_scenarios.sh timed these pairs (2 x H200, torch 2.11): the rule docs give the figures
    ("TL703", "sync_debug_mode", 31),
    ("TL704", "profiler_left_on", 39),
    ("TL705", "gradcheck_in_step", 57),
    ("TL706", "deterministic", 63),
    ("TL605", "data_parallel", 27),  # its fix runs under torchrun: DDP, one process per GPU
    ("TL606", "ddp_accum", 44),
    ("TL607", "ddp_find_unused", 34),  # 2 x H200: no measurable cost (rules/TL607's doc)
])
def test_gpu_fixture_pairs(code, bad, line):
    def lines(name: str) -> list[int]:
        items = lint_paths([SCENARIOS / f"{name}.py"])
        return [f.location.line for f in items if isinstance(f, Finding) and f.code == code]

    assert lines(bad) == [line]
    assert lines(f"{bad}_fixed") == []


def test_the_screen_sees_bare_decorators_and_environ_items():
    from tracelint.source.screen import ENV_SETTING, sites

    assert "call:compile" in sites("import torch\n\n@torch.compile\ndef f(x):\n    return x\n")
    assert ENV_SETTING in sites("import os\nos.environ['CUDA_LAUNCH_BLOCKING'] = '1'\n")
    assert ENV_SETTING not in sites("import os\nd = {}\nd['x'] = 1\n")
