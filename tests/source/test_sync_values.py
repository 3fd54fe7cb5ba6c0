"""TL101-TL106 and what values.py knows about values: device evidence (a script that never leaves the CPU has no
host-device sync), tensors returned by torch utilities, values that are not device tensors (config objects, model
objects, host copies, the else branch of a tensor type test, batch elements never moved), output that needs the
host copy, and boolean masks."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from tests.source.test_sync import lint
from tracelint.source.rule import run_rules
from tracelint.source.rules import sync
from tracelint.source.semantic.callers import HotLoop
from tracelint.source.semantic.model import FileContext
from tracelint.source.semantic.steps import facts
from tracelint.source.semantic.values import Kind

TORCH = "import torch\n"
GPU = "import torch\ndevice = torch.device('cuda')\n"


def parsed(source: str) -> FileContext:
    source = textwrap.dedent(source)
    ctx = FileContext("t.py", source, cst.parse_module(source))
    run_rules(ctx, [])  # the framework's traversal records every node's parent
    return ctx


def kind_of(source: str, name: str) -> Kind:
    """The kind of the value assigned to ``name`` (its last assignment) in ``source``."""
    ctx = parsed(source)
    found = [n for n in ctx.parents if isinstance(n, cst.Assign) and ctx.code_for(n.targets[0].target) == name]
    return facts(ctx).kind(found[-1].value)


# -- device evidence -----------------------------------------------------------------------------------------------
LOOP = "for x, y in loader:\n    loss = model(x)\n    loss.backward()\n    print(loss.item())\n"


@pytest.mark.parametrize("setup", [
    "",                                                                     # nothing on a device
    "device = torch.device('cpu')\nmodel = model.to(device)\n",            # a device variable that is the CPU
    "device = 'cpu'\ndef f(x):\n    return x.to(device)\n",                 # ... read in a function
    "x = x.to(torch.float16)\ny = y.to(dtype=torch.bfloat16)\nz = z.to(w.dtype)\n",  # dtypes are no devices
    "t = torch.zeros(3, device='cpu')\nloader = DataLoader(ds, pin_memory=False)\n",
])
def test_a_script_without_device_evidence_has_no_sync(setup):
    assert lint(setup + LOOP, header=TORCH) == []


@pytest.mark.parametrize("setup", [
    "model = model.cuda()\n",
    "x = x.to('cuda:0')\n",
    "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n",
    "device = torch.device(args.device)\nmodel.to(device)\n",
    "model.to(args.device)\n",
    "model.to(0)\n",
    "def train(model, device):\n    model.to(device)\n",                    # a device parameter
    "buf = torch.zeros(3, device=dev)\n",
    "x = x.to(dev, non_blocking=True)\n",
    "loader = DataLoader(ds, pin_memory=True)\n",
    "import torch.distributed as dist\n",
    "from accelerate import Accelerator\n",
    "import lightning as L\n",
    "rank = int(os.environ['LOCAL_RANK'])\n",
    "model = torch.nn.DataParallel(model)\n",
    "torch.backends.cudnn.benchmark = True\n",
    "parser.add_argument('--gpu', type=int, default=0)\n",
    "device = torch.device('mps')\n",
    "class Lit:\n    def training_step(self, batch, batch_idx):\n        pass\n",  # a framework's step hook
])
def test_device_evidence_lets_the_syncs_through(setup):
    assert lint(setup + LOOP, header=TORCH) == [("TL101", setup.count("\n") + 4)]


# A process or framework setup says nothing of the device where the file pins the CPU itself (issue #34: a gloo
# job with ``device = torch.device("cpu")`` was told its ``loss.item()`` waits for the GPU).
CPU_PIN = "device = torch.device('cpu')\nmodel = model.to(device)\n"


@pytest.mark.parametrize("setup", [
    "import torch.distributed as dist\ndist.init_process_group('gloo')\n",
    "import torch.distributed as dist\ndist.init_process_group(backend='gloo')\n",
    "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(model)\n",
    "rank = int(os.environ['LOCAL_RANK'])\n",
    "from accelerate import Accelerator\n",
])
def test_the_cpu_pinned_in_the_file_wins_over_a_distributed_setup(setup):
    assert lint(setup + CPU_PIN + LOOP, header=TORCH) == []
    assert lint(setup + LOOP, header=TORCH) == [("TL101", setup.count("\n") + 4)]  # unpinned: may be a GPU job


@pytest.mark.parametrize("setup", [
    "import torch.distributed as dist\ndist.init_process_group('nccl')\n",  # NCCL runs on GPUs only
    "x = x.cuda()\n",
    "loader = DataLoader(ds, pin_memory=True)\n",
    "buf = torch.zeros(3, device='cuda')\n",
])
def test_an_accelerator_named_beside_a_cpu_pin_still_counts(setup):
    assert lint(setup + CPU_PIN + LOOP, header=TORCH) == [("TL101", setup.count("\n") + 6)]


def test_device_evidence_is_computed_once_per_file():
    ctx = parsed("import torch\nx = x.cuda()\n")
    f = facts(ctx)
    assert f.device_evidence() is True and f._device is True
    f._device = False  # the cached verdict is what is asked next
    assert f.device_evidence() is False


def test_a_loop_reached_from_a_device_file_counts_as_on_device():
    ctx = parsed("import torch\nfor x in loader:\n    print(model(x).item())\n")
    loop = next(n for n in ctx.parents if isinstance(n, cst.For))
    rule = sync.ItemInLoop(ctx)
    assert sync._on_device(rule, HotLoop(loop, "the loop", on_device=True)) is not None
    assert sync._on_device(rule, HotLoop(loop, "the loop")) is None


def test_a_while_test_needs_device_evidence_too():
    assert lint("loss = model(x)\nwhile loss > 1:\n    loss = model(x)\n    loss.backward()\n", header=TORCH) == []
    assert lint("loss = model(x)\nwhile loss > 1:\n    loss = model(x)\n    loss.backward()\n", header=GPU) == [
        ("TL103", 2)]


# -- tensors returned by torch utilities ---------------------------------------------------------------------------
CLIP = "for x, y in loader:\n    loss = model(x.cuda())\n    loss.backward()\n    grad_norm = {clip}\n    {use}\n"


@pytest.mark.parametrize("clip", [
    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
    "nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
    "accelerator.clip_grad_norm_(model.parameters(), 1.0)",
])
@pytest.mark.parametrize("use, code", [
    ("is_overflow = math.isnan(grad_norm)", "TL103"),
    ("print('{:.6f}'.format(grad_norm))", "TL104"),
    ("print('%f' % grad_norm)", "TL104"),
    ("print(f'{grad_norm:.3f}')", "TL104"),
])
def test_the_total_norm_is_a_device_tensor(clip, use, code):
    header = "import math\nimport torch\nfrom torch import nn\n"
    assert lint(CLIP.format(clip=clip, use=use), header=header) == [(code, 5)]


@pytest.mark.parametrize("use, code", [
    ("if grad_norm > 10.0:\n        continue", "TL103"),
    ("logged = float(grad_norm)", "TL103"),
    ("logger.info('grad norm %f', grad_norm)", "TL104"),
])
def test_the_total_norm_used_as_a_number_joins_the_sync_rules(use, code):
    header = "import logging\nimport torch\nlogger = logging.getLogger(__name__)\n"
    clip = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
    assert lint(CLIP.format(clip=clip, use=use), header=header) == [(code, 5)]


METRIC = """\
import torch
import torchmetrics
from torchmetrics.functional import accuracy as functional_accuracy
{made}
for x, y in loader:
    out = model(x.cuda())
    {use}
"""


@pytest.mark.parametrize("made, use, found", [
    ("acc = torchmetrics.Accuracy(task='binary').cuda()", "print(f'{acc.compute():.3f}')", [("TL104", 7)]),
    ("acc = torchmetrics.Accuracy(task='binary').cuda()", "value = acc.compute()\n    print(f'{value}')",
     [("TL104", 8)]),
    ("acc = torchmetrics.Accuracy(task='binary').cuda()", "acc.update(out, y)", []),  # stays on the device
    ("acc = torchmetrics.Accuracy(task='binary').cuda()", "if acc(out, y) > 0.5:\n        break", []),  # unknown
    ("", "print(f'{functional_accuracy(out, y, task=\"binary\")}')", [("TL104", 7)]),
    ("meter = Meter()", "print(f'{meter.compute()}')", []),  # not a torchmetrics metric
])
def test_torchmetrics_values_are_device_tensors(made, use, found):
    assert lint(METRIC.format(made=made, use=use)) == found


def test_math_functions_read_tensors_on_the_host():
    header = "import math\nfrom math import isnan\nimport torch\n"
    body = ["v = math.sqrt(loss)", "if isnan(loss):", "    break", "f = math.isnan(loss.item())", "g = math.floor(3.5)"]
    source = "for x, y in loader:\n    loss = model(x.cuda())\n" + "".join(f"    {line}\n" for line in body)
    assert lint(source, header=header) == [("TL101", 6), ("TL103", 3), ("TL103", 4)]


# -- values that are not device tensors -----------------------------------------------------------------------------
@pytest.mark.parametrize("source, name, kind", [
    ("import argparse\nargs = parser.parse_args()\ndef f():\n    v = args.lr\n", "v", Kind.HOST),
    ("def get_args():\n    p = argparse.ArgumentParser()\n    return p.parse_args()\nargs = get_args()\n"
     "v = args.train.batch_size\n", "v", Kind.HOST),
    ("def get_args():\n    args = parser.parse_args()\n    return args\nopt = get_args()\nv = opt.n_critic\n", "v",
     Kind.HOST),
    ("from utils import load_config\ncfg = load_config('a.yaml')\nv = cfg.model.depth\n", "v", Kind.HOST),
    ("hps = utils.get_hparams()\nv = hps.train.segment_size\n", "v", Kind.HOST),
    ("import torch\nconfig = load_model_config(path)\nv = config.n_layer\n", "v", Kind.HOST),
    # a parameter named args, or a name bound from a call that says nothing of configs: not known
    ("def f(args):\n    v = args.lr\n", "v", Kind.UNKNOWN),
    ("args = compute(x)\nv = args.lr\n", "v", Kind.UNKNOWN),
    ("def get_args():\n    return\nargs = get_args()\nv = args.lr\n", "v", Kind.UNKNOWN),
])
def test_config_objects_hold_python_values(source, name, kind):
    assert kind_of(source, name) is kind


@pytest.mark.parametrize("source, name, kind", [
    ("import torch\nmodel = load_model(path)\nv = model.hyperparams\n", "v", Kind.UNKNOWN),
    ("import torch\nnet = build_network(cfg)\nv = net.layers\n", "v", Kind.UNKNOWN),
    ("import torch\ncriterion = get_criterion()\n", "criterion", Kind.UNKNOWN),
    ("import torch\nout = model(x)\n", "out", Kind.TENSOR),          # a model's output is still a tensor
    ("import torch\ngenerator = Generator(opt)\n", "generator", Kind.UNKNOWN),  # a class: the module
    ("import torch\ngenerator = Generator(opt)\nfake = generator(z)\n", "fake", Kind.TENSOR),
    ("import torch\nloss = get_loss(out, y)\n", "loss", Kind.TENSOR),
    ("import torch\nfrom utils import to_cpu\nv = to_cpu(loss)\n", "v", Kind.HOST),
    ("import torch\nv = tensor2numpy(out)\n", "v", Kind.HOST),
    ("import torch\nv = self.to_np(out)\n", "v", Kind.HOST),
    ("import torch\nv = numpy_to_tensor(arr)\n", "v", Kind.UNKNOWN),     # the name ends in what it returns
    ("import torch\nmodel = Net().cuda()\nv = model.training\n", "v", Kind.UNKNOWN),  # a module moved to the GPU
    ("import torch\nv = Variable(FloatTensor(4).fill_(1.0)).cuda()\n", "v", Kind.TENSOR),
    ("import torch\nheader = torch.from_file('a.bin', False, 256, dtype=torch.int32)\n", "header", Kind.HOST),
])
def test_model_objects_and_host_copies(source, name, kind):
    assert kind_of(source, name) is kind


def test_config_and_model_attributes_are_not_tensor_truths():
    source = """\
    model = load_model(args.model)
    cfg = load_model_config(args.config)
    for step, (imgs, targets) in enumerate(loader):
        loss = model(imgs.to(device))
        loss.backward()
        if step % model.hyperparams["subdivisions"] == 0:
            optimizer.step()
        if step < cfg.warmup_steps:
            pass
        print(to_cpu(loss).item())
    """
    assert lint(source) == []


@pytest.mark.parametrize("body, expected", [
    (["if torch.is_tensor(aux):", "    aux = aux.detach()", "else:", "    print(f'{aux:.3f}')"], []),
    (["if not isinstance(aux, torch.Tensor):", "    print(f'{aux:.3f}')"], []),
    (["if isinstance(aux, (torch.Tensor, torch.cuda.FloatTensor)):", "    pass",
      "elif aux > 0:", "    print(f'{aux:.3f}')"], []),
    (["v = aux.item() if torch.is_tensor(aux) else aux", "print(f'{v:.3f}')"], [("TL101", 4)]),
    # the tensor branch, and a rebinding inside the other branch, are tensors
    (["if torch.is_tensor(aux):", "    print(f'{aux:.3f}')"], [("TL104", 5)]),
    (["if not torch.is_tensor(aux):", "    aux = model(x)", "    print(f'{aux:.3f}')"], [("TL104", 6)]),
])
def test_the_non_tensor_branch_of_a_type_test(body, expected):
    source = "for x in loader:\n    out = model(x.cuda())\n    aux = out['aux']\n" + "".join(
        f"    {line}\n" for line in body)
    assert lint(source) == expected


@pytest.mark.parametrize("moves, expected", [
    ("imgs = imgs.type(Tensor)", []),                                    # only the images go to the GPU
    ("imgs = imgs.to(device)", []),
    # targets moved too, but after the read: on the host when read (a batch is built on the CPU, then moved)
    ("imgs, targets = imgs.to(device), targets.to(device)", []),
    ("imgs = imgs.to(torch.float32)", [("TL102", 2)]),                   # a dtype is no move
])
def test_a_batch_element_never_moved_stays_on_the_host(moves, expected):
    source = f"for _, imgs, targets in loader:\n    labels.append(targets[:, 1].cpu())\n    {moves}\n" \
             "    out = model(imgs)\n"
    assert lint(source) == expected


def test_a_value_moved_to_the_device_later_is_on_the_host_until_then():
    read = "    labels.append(targets[:, 1].cpu())\n"
    moved = "    targets = targets.to(device)\n"
    source = "for _, imgs, targets in loader:\n{}{}    out = model(imgs.cuda(), targets)\n"
    assert lint(source.format(read, moved)) == []
    assert lint(source.format(moved, read)) == [("TL102", 3)]  # moved first: the read copies it back
    dtype = "    targets = targets.to(torch.int64)\n"  # a dtype change between keeps it where it was
    assert lint(source.format(read, dtype + moved)) == []
    again = "    targets = targets.to(device)\n    targets = targets * 2\n"  # rebound from the moved value first
    assert lint(source.format(read, again)) == []


def test_a_single_loop_target_is_not_inferred():
    # moved after the read: on the host there; read after the move (or never moved), no inference: a sync
    assert lint("for batch in loader:\n    ids = batch.cpu()\n    out = model(batch.cuda())\n") == []
    assert lint("for batch in loader:\n    batch = batch.cuda()\n    ids = batch.cpu()\n") == [("TL102", 3)]


def test_tolist_needs_evidence_of_a_tensor():
    # numpy arrays have .tolist() too: a value of unknown kind (a parameter, a loader item) is not reported, a
    # model output or a torch op's result is; .cpu() exists only on tensors and is reported either way.
    source = "def step(counts, x):\n    for batch in loader:\n        a = counts.tolist()\n" \
             "        b = model(x).argmax(1).tolist()\n        c = counts.cpu()\n"
    assert lint(source) == [("TL102", 4), ("TL102", 5)]


# -- host copies that output needs ----------------------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "save_image(fake.cpu(), f'out/{i}.png')",
    "torchvision.utils.save_image(denorm(fake.data.cpu()), path, nrow=1)",
    "Image.fromarray(fake[0].permute(1, 2, 0).cpu().numpy()).save(path)",
    "plt.imshow(fake[0].cpu().permute(1, 2, 0))",
    "np.save(path, fake.cpu().numpy())",
    "cv2.imwrite(path, fake[0].cpu().numpy())",
])
def test_a_host_copy_written_or_plotted_is_not_reported(line):
    header = ("import cv2\nimport numpy as np\nimport torch\nimport torchvision\nimport matplotlib.pyplot as plt\n"
              "from PIL import Image\nfrom torchvision.utils import save_image\n")
    source = f"for i, (x, _) in enumerate(test_loader):\n    fake = G(x.cuda())\n    {line}\n"
    assert lint(source, header=header) == []


@pytest.mark.parametrize("line", [
    "preds.append(fake.cpu())",
    "f.write(str(fake.cpu()))",
    "writer.add_histogram('fake', fake.cpu(), i)",
    "arr = fake.cpu().numpy()",
])
def test_other_host_copies_are_reported(line):
    source = f"for i, (x, _) in enumerate(test_loader):\n    fake = G(x.cuda())\n    {line}\n"
    assert lint(source) == [("TL102", 3)]


# -- boolean masks ----------------------------------------------------------------------------------------------------
MASKS = "for images, _ in loader:\n    features = model(images.cuda())\n    sim = features @ features.T\n"


@pytest.mark.parametrize("body, line", [
    (["mask = torch.eye(sim.shape[0], dtype=torch.bool, device=sim.device)", "neg = sim[~mask]"], 5),
    (["mask = torch.eye(sim.shape[0], dtype=torch.bool).to(device)", "neg = sim[~mask].view(n, -1)"], 5),
    (["labels = (ids.unsqueeze(0) == ids.unsqueeze(1)).float().to(device)", "pos = sim[labels.bool()]"], 5),
    (["labels = (ids.unsqueeze(0) == ids.unsqueeze(1)).float().to(device)", "neg = sim[~labels.bool()]"], 5),
    (["top = sim[sim > 0.5]"], 4),
    (["r = sim / features.norm()", "j = torch.max(r, 1. / r).max(1)[0] < 4", "t = features * 2", "t = t[j]"], 7),
    (["m = sim > 0", "sim[m] += 1"], 5),
    (["m = sim > 0", "sim[m] = sim.mean()"], 5),
])
def test_boolean_mask_reads_and_writes(body, line):
    source = MASKS + "".join(f"    {b}\n" for b in body)
    assert lint(source) == [("TL106", line)]


@pytest.mark.parametrize("body", [
    ["m = sim > 0", "sim[m] = 0.0", "sim[~m] = float('-inf')"],              # masked_fill_: no sync
    ["m = sim > 0", "sim[m] = torch.tensor(1.0)"],                            # a CPU value: masked_fill_ too
    ["mask = torch.eye(sim.shape[0], dtype=torch.bool)", "neg = sim[mask]"],  # a CPU mask: no count on the GPU
    ["w = (sim > 0).to(torch.float32)", "v = sim[w]"],                        # no longer boolean
    ["idx = torch.arange(4, device=sim.device)", "v = sim[idx]"],             # an integer index
    ["late = images.shape[0] > 3", "v = sim[late]"],                          # a Python bool
    ["mask = torch.eye(sim.shape[0], dtype=torch.bool, device=sim.device)",
     "sim = sim.masked_fill(mask, float('-inf'))"],
])
def test_not_boolean_mask_syncs(body):
    source = MASKS + "".join(f"    {b}\n" for b in body)
    assert lint(source) == []
