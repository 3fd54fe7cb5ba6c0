"""TL201-TL203 judged by what the file shows of a loader's use (issue #12): loaders read now and then, batches that
never reach the GPU, cheap in-memory datasets, and pinned batches followed through dict literals, ``next()``,
factories and functions."""
from __future__ import annotations

import pytest

HEAD = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, TensorDataset
"""


def codes(lint, source: str, code: str) -> list[int]:
    return [line for _, line in lint(HEAD + source).codes(code)]


# -- loaders read now and then (TL201, TL202) ----------------------------------------------------------------------
@pytest.mark.parametrize("use, reported", [
    # one batch before training
    ("imgs, labels = next(iter(loader))\nimgs = imgs.cuda()\n", False),
    # a loop that ends in break reads one batch
    ("for x, y in loader:\n    model(x.cuda())\n    break\n", False),
    # one batch per sample interval, through a function of the file
    ("def sample(gen):\n    imgs = next(iter(loader))\n    gen(imgs.cuda())\n"
     "for i, (x, y) in enumerate(train):\n    gen(x.cuda()).backward()\n    opt.step()\n"
     "    if i % sample_interval == 0:\n        sample(gen)\n", False),
    # ... but every step when the call is not guarded
    ("def sample(gen):\n    imgs = next(iter(loader))\n    gen(imgs.cuda())\n"
     "for i, (x, y) in enumerate(train):\n    gen(x.cuda()).backward()\n    opt.step()\n    sample(gen)\n", True),
    # next() in the step loop: a batch every step
    ("it = iter(loader)\nwhile True:\n    x, y = next(it)\n    model(x.cuda()).backward()\n    opt.step()\n", True),
    # a full pass, even in a function run at an interval (an evaluation walks every batch)
    ("def validate(model):\n    for x, y in loader:\n        model(x.cuda())\n"
     "for step in range(steps):\n    if step % 100 == 0:\n        validate(model)\n", True),
    # the loader's use is partly out of sight: handed to another module's function
    ("from lib import fit\nx, y = next(iter(loader))\nfit(model, loader)\n", True),
])
def test_loader_read_now_and_then(lint, use, reported):
    source = "from mydata import Images\nloader = DataLoader(Images('val'), batch_size=8)\n" + use
    expected = [5] if reported else []
    assert codes(lint, source, "TL201") == expected
    assert codes(lint, source, "TL202") == expected


def test_a_builder_module_is_reported(lint):
    # no sight of the loader's use: the module that builds it is where the fix belongs
    source = "def get_loaders(train_set):\n    return DataLoader(train_set, batch_size=64)\n"
    assert codes(lint, source, "TL201") == [5]
    assert codes(lint, source, "TL202") == [5]


def test_factory_and_parameters_are_followed(lint):
    source = (
        "from mydata import Images\n"
        "def make_loader(split):\n"
        "    return DataLoader(Images(split), batch_size=8, num_workers=4)\n"
        "def sample_images(gen, loader):\n"
        "    gen(next(iter(loader))[0].cuda())\n"
        "def main(gen, steps):\n"
        "    val_loader = make_loader('val')\n"
        "    for step in range(steps):\n"
        "        if step % 500 == 0:\n"
        "            sample_images(gen, val_loader)\n"
    )
    assert codes(lint, source, "TL202") == []
    # the same loader read every step
    assert codes(lint, source.replace("if step % 500 == 0:", "if True:"), "TL202") == [HEAD.count("\n") + 3]


# -- batches that never reach the GPU (TL202) -----------------------------------------------------------------------
LOADER = "from mydata import Records\nloader = DataLoader(Records(), batch_size=32, num_workers=4)\n"


@pytest.mark.parametrize("use, reported", [
    ("for x, y in loader:\n    x, y = x.to(device), y.to(device)\n", True),
    ("for batch in loader:\n    batch = {k: v.cuda() for k, v in batch.items()}\n", True),
    ("Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor\n"
     "for x, y in loader:\n    x = Variable(x.type(Tensor))\n", True),
    ("for batch in loader:\n    batch = to_device(batch, device)\n", True),  # a call that takes a device
    ("def step(x):\n    return model(x.cuda())\nfor x, y in loader:\n    step(x)\n", True),  # followed into step()
    # batches only sent over RPC, or only read on the host
    ("import torch.distributed.rpc as rpc\nmodel = Net().cuda()\n"
     "for x, y in loader:\n    rpc.rpc_sync('ps', step, args=(x, y))\n", False),
    ("for x, y in loader:\n    print(x.shape, y.numpy())\n", False),
    # a CPU script: the file's own model, no sign of a GPU anywhere
    ("model = nn.Linear(16, 4)\nfor x, y in loader:\n    nn.functional.cross_entropy(model(x), y).backward()\n",
     False),
    # ... but a GPU model in the file needs the batches on the GPU
    ("model = nn.Linear(16, 4).cuda()\nfor x, y in loader:\n    model(x)\n", True),
    # ... and a model from another module may move them itself
    ("from helpers import make_model\nmodel = make_model()\nfor x, y in loader:\n    model(x)\n", True),
    # accelerate moves the batches it yields
    ("from accelerate import Accelerator\nmodel, loader = Accelerator().prepare(model, loader)\n"
     "for x in loader:\n    model(x)\n", True),
])
def test_pinning_only_where_batches_reach_the_gpu(lint, use, reported):
    assert codes(lint, LOADER + use, "TL202") == ([5] if reported else [])


@pytest.mark.parametrize("collate, reported", [
    ("def collate(samples):\n    graphs, labels = map(list, zip(*samples))\n"
     "    return dgl.batch(graphs), torch.tensor(labels)\n", False),
    ("def collate(samples):\n    data = Batch.from_data_list(samples)\n    return data\n", False),
    ("def collate(samples):\n    return torch.stack(samples)\n", True),
])
def test_graph_batches_gain_nothing_from_pinning(lint, collate, reported):
    source = ("import dgl\nfrom torch_geometric.data import Batch\n" + collate +
              "loader = DataLoader(ds, batch_size=32, num_workers=4, collate_fn=collate)\n"
              "for g, y in loader:\n    model(g.to('cuda'), y.to('cuda')).backward()\n")
    line = source.count("\n", 0, source.index("loader =")) + 4
    assert codes(lint, source, "TL202") == ([line] if reported else [])


# -- cheap in-memory datasets (TL201) --------------------------------------------------------------------------------
TOKENS = """\
class Tokens(Dataset):
    def __init__(self, data):
        self.data = data
    def __len__(self):
        return len(self.data)
    def __getitem__(self, i):
        return self.data[i]["ids"].type(torch.int64), torch.tensor(self.data[i]["label"])
"""


@pytest.mark.parametrize("dataset, reported", [
    ("TensorDataset(torch.randn(100, 3), torch.arange(100))", False),
    ("[torch.randn(8) for _ in range(100)]", False),
    ("torch.utils.data.Subset(TensorDataset(torch.randn(100, 3)), range(50))", False),
    ("Tokens(torch.load('train.pt'))", False),
    ("Photos(paths)", True),        # Image.open per item
    ("Augmented(data)", True),      # self.transform per item
    ("Digits(100)", True),          # formats and parses a few digits per item
    ("Cached('x.npy')", True),      # np.memmap: every item is a disk read
    ("Records()", True),            # another module's dataset: unknown
    ("datasets.MNIST('data', transform=transforms.ToTensor())", True),
])
def test_cheap_datasets_need_no_workers(lint, dataset, reported):
    source = TOKENS + """\
from PIL import Image
import numpy as np
from mydata import Records
from torchvision import datasets, transforms
class Photos(Dataset):
    def __getitem__(self, i):
        return Image.open(self.paths[i])
class Augmented(Tokens):
    def __getitem__(self, i):
        return self.transform(self.data[i])
class Digits(Dataset):
    def __getitem__(self, i):
        text = f"{i:04d}"
        return torch.tensor([int(c) for c in text])
class Cached(Tokens):
    def __init__(self, path):
        self.data = np.memmap(path)
""" + f"loader = DataLoader({dataset}, batch_size=8, pin_memory=True)\n"
    line = HEAD.count("\n") + source.count("\n")
    assert codes(lint, source, "TL201") == ([line] if reported else [])


@pytest.mark.parametrize("collate, reported", [
    ("def collate(batch):\n    x, y = zip(*batch)\n    return torch.stack(x), torch.stack(y)\n", False),
    ("def collate(batch):\n    return tokenizer([t for t, _ in batch], padding=True)\n", True),
    ("collate = lambda batch: torch.stack(batch)\n", False),
])
def test_a_collate_function_counts_too(lint, collate, reported):
    source = collate + "loader = DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=8, collate_fn=collate)\n"
    line = HEAD.count("\n") + source.count("\n")
    assert codes(lint, source, "TL201") == ([line] if reported else [])


def test_random_split_of_a_tensor_dataset_is_cheap(lint):
    source = ("dataset = TensorDataset(torch.randn(100, 3))\n"
              "train_set, val_set = torch.utils.data.random_split(dataset, [80, 20])\n"
              "loader = DataLoader(train_set, batch_size=8, pin_memory=True)\n")
    assert codes(lint, source, "TL201") == []


# -- TL203: pinned batches followed further --------------------------------------------------------------------------
@pytest.mark.parametrize("pinned", [
    "loader_args = dict(batch_size=8, num_workers=4, pin_memory=True)\n    loader = DataLoader(ds, **loader_args)",
    'kwargs = {"num_workers": 4, "pin_memory": True}\n    loader = DataLoader(ds, shuffle=True, **kwargs)',
])
def test_tl203_loader_pinned_through_a_dict_literal(lint, pinned):
    source = f"def train(model, ds, device):\n    {pinned}\n" \
             "    for batch in loader:\n        model(batch['image'].to(device=device, dtype=torch.float32))\n"
    assert codes(lint, source, "TL203") == [HEAD.count("\n") + 5]


def test_tl203_batch_drawn_with_next(lint):
    source = """\
class Trainer:
    def run(self):
        loader = DataLoader(self.ds, num_workers=4, pin_memory=True)
        data_iter = iter(loader)
        while True:
            try:
                batch = next(data_iter)
            except StopIteration:
                data_iter = iter(loader)
                batch = next(data_iter)
            batch = [t.to(self.device) for t in batch]
            x, y = batch
            self.model(x, y).backward()
            self.optimizer.step()
"""
    result = lint(HEAD + source)
    assert result.codes("TL203") == [("TL203", HEAD.count("\n") + 11)]
    from tracelint.source.fix import apply_edits

    fixed = apply_edits(HEAD + source, list(result.findings[0].fix.edits))
    assert "batch = [t.to(self.device, non_blocking=True) for t in batch]" in fixed


def test_tl203_through_factory_class_and_helper(lint):
    source = """\
def prepare_dataloader(dataset):
    return DataLoader(dataset, batch_size=32, pin_memory=True, num_workers=4)

class Trainer:
    def __init__(self, model, train_data, gpu_id):
        self.train_data = train_data
        self.gpu_id = gpu_id
    def _run_batch(self, source, targets):
        self.model(source).backward()
        targets.to(self.gpu_id)
    def train(self):
        for source, targets in self.train_data:
            source = source.to(self.gpu_id)
            self._run_batch(source, targets)

Trainer(model, prepare_dataloader(ds), 0).train()
"""
    assert codes(lint, source, "TL203") == [HEAD.count("\n") + 10, HEAD.count("\n") + 13]


def test_tl203_not_in_a_one_batch_evaluation_at_an_interval(lint):
    source = """\
def evaluate(gen, eval_loader):
    for x, y in eval_loader:
        gen(x.cuda(0), y.cuda(0))
        break

def train(gen, opt, train_set, eval_set, eval_interval):
    train_loader = DataLoader(train_set, num_workers=8, pin_memory=True)
    eval_loader = DataLoader(eval_set, num_workers=1, pin_memory=True)
    for step, (x, y) in enumerate(train_loader):
        gen(x.cuda(0), y.cuda(0, non_blocking=True)).backward()
        opt.step()
        if step % eval_interval == 0:
            evaluate(gen, eval_loader)
"""
    assert codes(lint, source, "TL203") == [HEAD.count("\n") + 10]


def test_tl203_a_name_that_is_another_loader_is_not_a_pinned_batch(lint):
    source = """\
pinned = DataLoader(ds, num_workers=4, pin_memory=True)
def train(model, loader):
    for x in loader:
        model(x.cuda())
from lib import other
train(model, other)
"""
    assert codes(lint, source, "TL203") == []
