"""TL201 / TL202 / TL203: DataLoader workers, pinned memory, non-blocking copies of its batches."""
from __future__ import annotations

import pytest

HEAD = "import torch\nfrom torch.utils.data import DataLoader\n"


@pytest.mark.parametrize("call, codes", [
    ("DataLoader(ds)", {"TL201", "TL202"}),
    ("DataLoader(ds, num_workers=0, pin_memory=False)", {"TL201", "TL202"}),
    ("DataLoader(ds, num_workers=8, pin_memory=True)", set()),
    ("DataLoader(ds, num_workers=args.workers, pin_memory=args.pin)", set()),  # non-literal: trusted
    ("DataLoader(ds, num_workers=0 if debug else 8, pin_memory=True)", set()),
    ("DataLoader(ds, **cfg.loader_kwargs)", set()),  # unknown **kwargs: silent
    ("DataLoader(*args)", set()),
    ("DataLoader(ds, 32, True, None, None, 4, None, True)", set()),  # positional
    ("DataLoader(ds, 32, True, None, None, 0, None, False)", {"TL201", "TL202"}),
    ("DataLoader(ds, num_workers=4, pin_memory=torch.cuda.is_available())", set()),
    ("DataLoader(ds, num_workers=4)", {"TL202"}),
    ("DataLoader(ds, pin_memory=True)", {"TL201"}),
])
def test_dataloader_arguments(lint, call, codes):
    result = lint(HEAD + f"loader = {call}\n")
    assert {c for c, _ in result.codes()} == codes


def test_aliases_resolve(lint):
    result = lint("""
        import torch.utils.data as tud
        from torch.utils.data import DataLoader as DL
        from torch.utils import data
        a = tud.DataLoader(ds, pin_memory=True)
        b = DL(ds, pin_memory=True)
        c = data.DataLoader(ds, pin_memory=True)
    """)
    assert result.codes() == [("TL201", 5), ("TL201", 6), ("TL201", 7)]


def test_local_dataloader_class_is_not_torch(lint):
    result = lint("""
        import torch
        class DataLoader:
            def __init__(self, ds):
                self.ds = ds
        loader = DataLoader(ds)
        from mylib import DataLoader as Other
        other = Other(ds)
    """)
    assert result.codes() == []


def test_kwargs_dict_in_same_function_is_resolved(lint):
    result = lint("""
        import torch
        from torch.utils.data import DataLoader
        def make(ds):
            kwargs = dict(batch_size=8, num_workers=0, pin_memory=True)
            return DataLoader(ds, **kwargs)
        def good(ds):
            kwargs = {"num_workers": 8, "pin_memory": True}
            return DataLoader(ds, **kwargs)
        def changed(ds, workers):
            kwargs = {"pin_memory": True}
            kwargs["num_workers"] = workers
            return DataLoader(ds, **kwargs)
        def param(ds, kwargs):
            return DataLoader(ds, **kwargs)
    """)
    assert result.codes() == [("TL201", 6)]


def test_tl202_fix_is_safe_and_tl201_fix_unsafe(lint):
    result = lint(HEAD + "loader = DataLoader(ds, pin_memory=False)\n")
    by_code = {f.code: f for f in result.findings}
    assert by_code["TL202"].fix.safe and by_code["TL202"].fix.edits[0].text == "True"
    assert not by_code["TL201"].fix.safe


PINNED = HEAD + "loader = DataLoader(ds, num_workers=4, pin_memory=True)\n"


@pytest.mark.parametrize("loop, lines", [
    ("for x, y in loader:\n    x = x.to(device)\n    y = y.cuda()\n", [5, 6]),
    ("for i, (x, y) in enumerate(loader):\n    x = x.to(device)\n", [5]),
    ("for batch in tqdm(loader):\n    x = batch['image'].to(device)\n", [5]),
    ("for batch in loader:\n    x, y = batch\n    x = x.to(device)\n", [6]),
    ("for batch in loader:\n    batch = {k: v.to(device) for k, v in batch.items()}\n", [5]),
    ("for x, y in loader:\n    x = x.to(device, non_blocking=True)\n", []),
    ("for x, y in loader:\n    x = x.to(device, non_blocking=False)\n", [5]),
    ("for x, y in loader:\n    x = x.to(torch.float16)\n    z = x.to('cpu')\n", []),
    ("for i, x in enumerate(loader):\n    j = i.to(device)\n", []),  # the index is not a batch
    ("for x, y in other:\n    x = x.to(device)\n", []),  # not a pinned loader
    ("z = w.to(device)\n", []),  # not in a loop over the loader
])
def test_tl203_batches_of_pinned_loader(lint, loop, lines):
    result = lint(PINNED + loop)
    assert [line for _, line in result.codes("TL203")] == lines


def test_tl203_not_reported_for_unpinned_loader(lint):
    result = lint(HEAD + "loader = DataLoader(ds, num_workers=4)\nfor x in loader:\n    x = x.to(device)\n")
    assert result.codes() == [("TL202", 3)]  # the root finding only


def test_tl203_self_attribute_loader(lint):
    result = lint("""
        import torch
        from torch.utils.data import DataLoader
        class Trainer:
            def __init__(self, ds):
                self.train_loader = DataLoader(ds, num_workers=4, pin_memory=True)
            def fit(self, device):
                for x in self.train_loader:
                    x = x.cuda(0)
    """)
    assert result.codes() == [("TL203", 9)]
    assert result.findings[0].fix.edits[0].text == ", non_blocking=True"
