"""Issue #35: syncs in model code reached through ``model(x)``: a module's ``forward`` runs every step when an
instance of its class is called every step, in the same file, in another file of the run, and in a project file
the run never named (the project index)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tracelint.engine import Config, Finding
from tracelint.source import lint_paths

CONFIG = Config(root=Path("/nonexistent"))


def write(root: Path, files: dict[str, str]) -> dict[str, Path]:
    paths = {}
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        paths[name] = path
    return paths


def findings(paths) -> list[Finding]:
    return [f for f in lint_paths(list(paths), config_for=lambda _p: CONFIG) if isinstance(f, Finding)]


def sites(paths, root: Path) -> list[tuple[str, int, str]]:
    return sorted((Path(f.location.path).relative_to(root).as_posix(), f.location.line, f.code)
                  for f in findings(paths))


NET = textwrap.dedent("""\
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.scale = torch.ones(8).max().item()          # construction: runs once

        def forward(self, x):
            y = self.fc(x)
            if y.abs().max().item() > 1e3:                   # line 12: a sync every forward
                y = y / 2
            if not self.training:
                print(y.mean().item())                       # eval only
            if torch.jit.is_scripting():
                y = y + y.sum().item()                       # scripting only
            return y
    """)

LOOP = textwrap.dedent("""\
    for x, y in loader:
        out = model(x.cuda())
        loss = (out - y.cuda()).pow(2).mean()
        loss.backward()
        optimizer.step()
    """)


# -- in one file ---------------------------------------------------------------------------------------------
def test_forward_of_an_instance_called_every_step_syncs_every_step(tmp_path):
    text = NET + "\nmodel = Net().cuda()\n" + LOOP
    paths = write(tmp_path, {"train.py": text})
    found = findings(paths.values())
    assert [(f.code, f.location.line) for f in found] == [("TL101", 12)]
    # the message names the class's forward and the call that runs it every step
    assert "`Net.forward()` (called as `model(x.cuda())` at line 22)" in found[0].message


def test_forward_of_an_instance_called_once_is_not_reported(tmp_path):
    text = NET + textwrap.dedent("""\
        model = Net().cuda()
        for x, y in loader:
            loss = (model.fc(x.cuda()) - y.cuda()).pow(2).mean()
            loss.backward()
            optimizer.step()
        print(model(x_test))          # once, after training
        """)
    assert findings(write(tmp_path, {"train.py": text}).values()) == []


@pytest.mark.parametrize("build", [
    "model = torch.compile(Net())",
    "model = torch.nn.parallel.DistributedDataParallel(Net().cuda(), device_ids=[0])",
    "net = Net()\nmodel = torch.compile(net.to('cuda'))",
])
def test_wrappers_are_seen_through(tmp_path, build):
    text = NET + "\n" + build + "\n" + LOOP
    found = findings(write(tmp_path, {"train.py": text}).values())
    assert [(f.code, f.location.line) for f in found if f.code != "TL503"] == [("TL101", 12)]
    # compiled: the same .item() breaks the graph (TL503); the eval-only and scripting-only ones do not run
    assert [f.location.line for f in found if f.code == "TL503"] == ([12] if "compile" in build else [])


def test_submodules_bound_in_init_sequential_modulelist_and_super(tmp_path):
    text = """\
        import torch
        import torch.nn as nn

        class Router(nn.Module):
            def forward(self, x):
                counts = torch.bincount(x.argmax(-1)).tolist()       # line 6: per step, through Net.route
                return counts

        class Block(nn.Module):
            def forward(self, x):
                return x * x.sum().item()                            # line 11: per step, through ModuleList

        class Head(nn.Module):
            def forward(self, x):
                return torch.masked_select(x, x > 0)                 # line 15: per step, through Sequential

        class Base(nn.Module):
            def forward(self, x):
                return x + float(torch.max(x))                       # line 19: per step, through super()

        class Net(Base):
            def __init__(self):
                super().__init__()
                self.route = Router()
                self.blocks = nn.ModuleList([Block() for _ in range(4)])
                self.head = nn.Sequential(nn.Linear(8, 8), Head())

            def forward(self, x):
                self.route(x)
                for block in self.blocks:
                    x = block(x)
                x = super().forward(x)
                return self.head(x)

        class Unused(nn.Module):
            def forward(self, x):
                return x.item()                                      # never called per step

        model = Net().cuda()
        for x, y in loader:
            loss = model(x.cuda()).sum()
            loss.backward()
            optimizer.step()
        """
    assert sites(write(tmp_path, {"train.py": text}).values(), tmp_path) == [
        ("train.py", 6, "TL102"), ("train.py", 11, "TL101"), ("train.py", 15, "TL106"), ("train.py", 19, "TL103")]


def test_a_loss_module_called_as_criterion(tmp_path):
    text = """\
        import torch
        import torch.nn as nn

        class SupConLoss(nn.Module):
            def forward(self, features, labels):
                mask = torch.eye(features.shape[0]).to(features.device)     # line 6: built on the host
                return (features * mask).sum() / labels.numel()

        def set_model():
            model = nn.Linear(8, 8).cuda()
            criterion = SupConLoss()
            return model, criterion

        def train(loader, model, criterion, optimizer):
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()

        model, criterion = set_model()
        """
    assert sites(write(tmp_path, {"train.py": text}).values(), tmp_path) == [("train.py", 6, "TL204")]


def test_an_object_built_every_step_runs_its_init_every_step(tmp_path):
    text = """\
        import torch
        import torch.nn as nn

        class SparseDispatcher:
            def __init__(self, num_experts, gates):
                self._nonzero = torch.nonzero(gates)                     # line 6: per forward
                self._part_sizes = (gates > 0).sum(0).tolist()           # line 7: per forward

            def dispatch(self, x):
                return torch.split(x, self._part_sizes)

        class Table:
            def __init__(self, counts):
                self.sizes = counts.tolist()                             # built once: not per step

        class MoE(nn.Module):
            def forward(self, x):
                dispatcher = SparseDispatcher(4, x.softmax(-1))
                return dispatcher.dispatch(x)

        table = Table(torch.ones(4).cuda())
        model = MoE().cuda()
        for x, y in loader:
            loss = model(x.cuda())[0].sum()
            loss.backward()
            optimizer.step()
        """
    found = findings(write(tmp_path, {"train.py": text}).values())
    assert [(f.location.line, f.code) for f in found] == [(6, "TL106"), (7, "TL102")]
    assert "in `SparseDispatcher.__init__()` (called as `SparseDispatcher(4, x.softmax(-1))` at line 18) in " \
        "`MoE.forward()` (called as `model(x.cuda())` at line 24)" in found[0].message


def test_modules_returned_by_a_factory_of_the_file(tmp_path):
    text = """\
        import torch
        import torch.nn as nn

        class Loss(nn.Module):
            def forward(self, out, y):
                return (out - y).pow(2).mean() + torch.ones(4).cuda().sum()      # line 6: built on the host

        class Other(nn.Module):
            def forward(self, out, y):
                return out.sum().item()                                          # never returned as the loss

        def build(cfg, criterion=None):
            net = nn.Linear(8, 8).cuda()
            return net, criterion or Loss()

        class Trainer:
            def make(self):
                return Other()

        model, loss_fn = build(None)
        for x, y in loader:
            loss = loss_fn(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
        """
    assert sites(write(tmp_path, {"train.py": text}).values(), tmp_path) == [("train.py", 6, "TL204")]


def test_a_cpu_fallback_branch_of_model_code_is_not_per_step(tmp_path):
    text = """\
        import torch
        import torch.nn as nn

        class Head(nn.Module):
            def assign(self, boxes, mode="gpu"):
                if mode == "cpu":                                   # the out-of-memory fallback
                    boxes = boxes.cpu()
                return torch.nonzero(boxes > 0)                     # line 8: every step

            def forward(self, x):
                try:
                    return self.assign(x)
                except RuntimeError:
                    return self.assign(x, mode="cpu")

        model = Head().cuda()
        for x, y in loader:
            loss = model(x.cuda()).sum()
            loss.backward()
            optimizer.step()
        """
    assert sites(write(tmp_path, {"train.py": text}).values(), tmp_path) == [("train.py", 8, "TL106")]


# -- across files --------------------------------------------------------------------------------------------
PKG = {
    "pyproject.toml": "[project]\nname = 'demo'\n",
    "pkg/__init__.py": "",
    "pkg/model.py": NET,
    "train.py": "import torch\nfrom pkg.model import Net\n\nmodel = Net().cuda()\n" + LOOP,
}


def test_forward_in_another_file_of_the_run(tmp_path):
    paths = write(tmp_path, PKG)
    found = findings([paths["train.py"], paths["pkg/model.py"]])
    assert [(Path(f.location.path).name, f.location.line, f.code) for f in found] == [("model.py", 12, "TL101")]
    assert "`Net.forward()` (called as `model(x.cuda())` at train.py:6)" in found[0].message


def test_forward_in_a_project_file_the_run_did_not_name(tmp_path):
    """pre-commit passes the staged file only: the model's file is found through the project's imports."""
    paths = write(tmp_path, PKG)
    found = findings([paths["train.py"]])
    assert [(Path(f.location.path).relative_to(tmp_path).as_posix(), f.location.line, f.code) for f in found] == [
        ("pkg/model.py", 12, "TL101")]
    # and only what the call brings: the reached file's other code is not reported
    paths["pkg/model.py"].write_text(NET + "\nfor b in loader:\n    print(b.cuda().sum().item())\n")
    assert [(Path(f.location.path).name, f.location.line) for f in findings([paths["train.py"]])] == [
        ("model.py", 12)]


def test_chains_of_modules_across_files(tmp_path):
    files = dict(PKG)
    files["pkg/router.py"] = """\
        import torch
        import torch.nn as nn

        class Router(nn.Module):
            def forward(self, x):
                return torch.nonzero(x > 0)                         # line 6
        """
    files["pkg/model.py"] = """\
        import torch.nn as nn
        from .router import Router

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.router = Router()

            def forward(self, x):
                return self.router(x)
        """
    paths = write(tmp_path, files)
    found = findings([paths["train.py"]])
    assert [(Path(f.location.path).name, f.location.line, f.code) for f in found] == [("router.py", 6, "TL106")]


def test_the_project_index_stays_in_the_project(tmp_path):
    """A module found outside the project root (the folder of the nearest pyproject.toml or .git) is not read."""
    files = {
        "outside/pkg/__init__.py": "",
        "outside/pkg/model.py": NET,
        "proj/pyproject.toml": "[project]\nname = 'demo'\n",
        "proj/train.py": PKG["train.py"],
    }
    paths = write(tmp_path, files)
    assert findings([paths["proj/train.py"]]) == []


def test_noqa_at_the_sync_and_a_stable_fingerprint(tmp_path):
    paths = write(tmp_path, PKG)
    [before] = findings([paths["train.py"]])
    paths["train.py"].write_text("import torch\n\n\nfrom pkg.model import Net\n\nmodel = Net().cuda()\n"
                                 + LOOP)
    [after] = findings([paths["train.py"]])
    assert before.fingerprint() == after.fingerprint()
    model = paths["pkg/model.py"]
    model.write_text(model.read_text().replace("> 1e3:", "> 1e3:  # noqa: TL101"))
    assert findings([paths["train.py"]]) == []


DETR_LIKE = {
    "pyproject.toml": "[project]\nname = 'demo'\n",
    "models/__init__.py": """\
        from .detr import build


        def build_model(args):
            return build(args)
        """,
    "models/detr.py": """\
        import torch
        import torch.nn as nn


        class SetCriterion(nn.Module):
            def forward(self, outputs, targets):
                num_boxes = torch.clamp(outputs.sum(), min=1).item()       # line 7: every step
                return outputs.sum() / num_boxes


        class PostProcess(nn.Module):
            def forward(self, outputs):
                return outputs.argmax().item()                           # line 13: every evaluation batch


        def build(args):
            model = nn.Linear(8, 8)
            criterion = SetCriterion()
            postprocessors = {"bbox": PostProcess()}
            return model, criterion, postprocessors
        """,
    "engine.py": """\
        import torch


        def train_one_epoch(model, criterion, loader, optimizer):
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()


        @torch.no_grad()
        def evaluate(model, postprocessors, loader):
            for x, y in loader:
                results = postprocessors["bbox"](model(x.cuda()))
        """,
    "main.py": """\
        import torch
        from models import build_model
        from engine import train_one_epoch, evaluate

        model, criterion, postprocessors = build_model(None)
        model.cuda()
        for epoch in range(10):
            train_one_epoch(model, criterion, loader, optimizer)
            evaluate(model, postprocessors, val_loader)
        """,
}


def test_modules_a_factory_of_another_file_returns_passed_to_a_loop_of_a_third(tmp_path):
    """DETR's layout: main.py builds the criterion with a factory of models/, passes it to engine.py's loop."""
    paths = write(tmp_path, DETR_LIKE)
    found = findings([p for name, p in paths.items() if name.endswith(".py")])
    assert [(Path(f.location.path).name, f.location.line, f.code) for f in found] == [
        ("detr.py", 7, "TL101"), ("detr.py", 13, "TL101")]
    assert "`SetCriterion.forward()` (called as `criterion(model(x.cuda()), y.cuda())` at engine.py:6)" in \
        found[0].message


# -- values through the file's own functions -------------------------------------------------------------------
RETURNS = """\
    import torch
    import torch.nn as nn

    class Head(nn.Module):
        def assign(self, x):
            fg_mask = x > 0
            return x.sum(), fg_mask, [0, 1]

        def counts(self, x):
            if x is None:
                return 0
            return x.sum()

        def forward(self, x):
            total, fg_mask, order = self.assign(x)
            picked = x[fg_mask]                          # line 16: a mask the method returns
            kept = x[order]                              # a host list it returns: an index, no mask
            if total > 0:                                # line 18: a tensor the method returns
                x = x * 2
            if self.counts(x) > 0:                       # returns of different kinds: unknown, quiet
                x = x / 2
            return x + picked.sum() + kept.sum()

    model = Head().cuda()
    for batch in loader:
        model(batch.cuda()).sum().backward()
    """


def test_a_value_a_function_of_the_file_returns(tmp_path):
    """``_, fg_mask = self.get_assignments(...)`` (YOLOX's label assignment): the name holds what the method returns,
    element by element; returns that disagree say nothing."""
    paths = write(tmp_path, {"head.py": RETURNS})
    assert sites(paths.values(), tmp_path) == [("head.py", 16, "TL106"), ("head.py", 18, "TL103")]


def test_a_function_of_the_same_name_elsewhere_says_nothing(tmp_path):
    """Near miss: ``self.assign(x)`` of an object of another class (not the file's method) keeps the name unknown."""
    text = RETURNS.replace("total, fg_mask, order = self.assign(x)", "total, fg_mask, order = self.other.assign(x)")
    paths = write(tmp_path, {"head.py": text})
    assert sites(paths.values(), tmp_path) == []


SUBMODULE_METHOD = """\
    import torch
    import torch.nn as nn

    class Grid(nn.Module):
        def build(self, c, device):
            return torch.cat((c, torch.zeros(c.size(0), 3).to(device)), dim=1)   # line 6

    class Other:
        def build(self, c, device):
            return torch.zeros(3).to(device)                                    # line 10: never per step

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.grid = Grid()
            self.other = Other()

        def forward(self, x):
            return self.grid.build(x, x.device).sum()

    device = torch.device("cuda")
    model = Net().to(device)
    for x in loader:
        model(x.to(device)).backward()
    """


def test_a_method_of_a_module_an_attribute_holds(tmp_path):
    """``self.grid.build(x)`` with ``self.grid = Grid()`` runs ``Grid.build`` (clovaai's TPS grid generator); the
    same-named method of the class another attribute holds does not run."""
    paths = write(tmp_path, {"net.py": SUBMODULE_METHOD})
    assert sites(paths.values(), tmp_path) == [("net.py", 6, "TL204")]


def test_a_method_of_a_module_of_another_file(tmp_path):
    paths = write(tmp_path, {
        "heads.py": """\
            import torch.nn as nn

            class Head(nn.Module):
                def get_losses(self, x):
                    return (x > 0).sum().item()      # line 5
            """,
        "train.py": """\
            import torch.nn as nn
            from heads import Head

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.head = Head()

                def forward(self, x):
                    return self.head.get_losses(x)

            model = Net().cuda()
            for x in loader:
                model(x.cuda()).backward()
            """,
    })
    assert sites(paths.values(), tmp_path) == [("heads.py", 5, "TL101")]
    assert sites([paths["train.py"]], tmp_path) == [("heads.py", 5, "TL101")]  # the project index finds it


KEYWORDS = """\
    import torch

    class MetricLogger:
        def update(self, **kwargs):
            for k, v in kwargs.items():
                if isinstance(v, torch.Tensor):
                    v = v.item()                      # line 7: floats only reach it
                self.total = v

    class Tracker:
        def update(self, **kwargs):
            for k, v in kwargs.items():
                if isinstance(v, torch.Tensor):
                    v = v.item()                      # line 14: a tensor reaches it
                self.total = v

    logger, tracker = MetricLogger(), Tracker()
    model = torch.nn.Linear(4, 4).cuda()
    for x in loader:
        loss = model(x.cuda()).sum()
        loss.backward()
        logger.update(loss=float(loss.detach().cpu()), lr=0.1)
        tracker.update(loss=loss)
    """


def test_the_values_of_keyword_arguments(tmp_path):
    """``for k, v in kwargs.items()``: ``v`` holds what the calls pass as keywords (a MetricLogger given floats does
    not sync in its ``isinstance(v, torch.Tensor)`` branch); a tensor passed, or a ``**dict`` passed on, keeps it."""
    paths = write(tmp_path, {"log.py": KEYWORDS})
    found = sites(paths.values(), tmp_path)
    assert ("log.py", 14, "TL101") in found and ("log.py", 7, "TL101") not in found
    passed_on = KEYWORDS.replace("logger.update(loss=float(loss.detach().cpu()), lr=0.1)", "logger.update(**terms)")
    paths = write(tmp_path, {"log.py": passed_on})
    assert ("log.py", 7, "TL101") in sites(paths.values(), tmp_path)


def test_what_another_file_passes_a_parameter(tmp_path):
    """YOLOX's trainer passes ``targets`` (a tensor) to ``YOLOX.forward``, which passes them to its head: a
    parameter holds what other files' per-step calls pass it (runcalls.argument_kinds). A MetricLogger of another
    file given floats (``loss.item()``, the optimizer's ``lr``) does not sync in its ``isinstance`` branch; a model's
    output passed on stays unknown (YOLO's per-scale outputs are a list: no element loop over a tensor)."""
    paths = write(tmp_path, {
        "head.py": """\
            import torch.nn as nn

            class Head(nn.Module):
                def forward(self, x, labels):
                    n = int((labels > 0).sum())       # line 5: labels is the trainer's tensor
                    return x.sum() / n

            def compute_loss(predictions, targets):
                total = 0
                for p in predictions:                 # a list of outputs, not a tensor walked row by row
                    total = total + p.sum()
                return total
            """,
        "utils.py": """\
            import torch

            class MetricLogger:
                def update(self, **kwargs):
                    for k, v in kwargs.items():
                        if isinstance(v, torch.Tensor):
                            v = v.item()              # line 7: floats only
                        self.last = v
            """,
        "train.py": """\
            import torch
            from head import Head, compute_loss
            from utils import MetricLogger

            head = Head().cuda()
            model = torch.nn.Linear(4, 4).cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            logger = MetricLogger()
            for x, targets in loader:
                targets = targets.to("cuda")
                loss = head(model(x.cuda()), targets) + compute_loss(model(x.cuda()), targets)
                loss.backward()
                optimizer.step()
                logger.update(loss=loss.item())
                logger.update(lr=optimizer.param_groups[0]["lr"])
            """,
    })
    found = sites(paths.values(), tmp_path)
    assert ("head.py", 5, "TL103") in found
    assert not [site for site in found if site[0] == "utils.py" or site[2] == "TL502"]
    alone = write(tmp_path, {"utils.py": KEYWORDS.replace("loss=float(loss.detach().cpu()), lr=0.1", "loss=loss")})
    assert ("utils.py", 7, "TL101") in sites([alone["utils.py"]], tmp_path)  # a tensor passed: reported


def test_a_method_of_an_object_another_file_passes_in(tmp_path):
    """clovaai's validation(model, criterion, loader, converter, opt): train.py passes the converter it built, and
    ``converter.decode(preds_index, ...)`` in the evaluation loop runs that class's decode on the predictions (the
    file is not screened out: its project call is on a parameter the run says holds a module)."""
    paths = write(tmp_path, {
        "utils.py": """\
            class Converter(object):
                def __init__(self, chars):
                    self.chars = chars

                def decode(self, text_index, length):
                    texts = []
                    for index, l in enumerate(length):
                        t = text_index[index, :]
                        chars = []
                        for i in range(l):
                            if t[i] != 0:                     # line 11: a CUDA scalar's truth per character
                                chars.append(self.chars[t[i]])
                        texts.append("".join(chars))
                    return texts
            """,
        "evaluate.py": """\
            import torch

            def validation(model, loader, converter):
                for images, lengths in loader:
                    _, preds_index = model(images.cuda()).max(2)
                    strs = converter.decode(preds_index.data, lengths.tolist())
                return strs
            """,
        "train.py": """\
            import torch
            from utils import Converter
            from evaluate import validation

            converter = Converter("abc")
            model = torch.nn.Linear(4, 4).cuda()
            for it, (x, y) in enumerate(loader):
                model(x.cuda()).sum().backward()
                if it % 100 == 0:
                    validation(model, val_loader, converter)
            """,
    })
    assert ("utils.py", 11, "TL103") in sites(paths.values(), tmp_path)


def test_a_helper_that_never_names_torch(tmp_path):
    """A helper module without ``import torch`` is still analysed when the run's per-step calls reach it: it gets
    what they pass (a tensor: a sync; a numpy array: none)."""
    helper = """\
        def correct(out, y):
            return (out.argmax(1) == y).sum().item()      # line 2
        """
    train = """\
        import numpy as np
        import torch
        from metrics import correct

        model = torch.nn.Linear(4, 4).cuda()
        for x, y in loader:
            out = model(x.cuda())
            out.sum().backward()
            hits = correct(ARG)
        """
    paths = write(tmp_path, {"metrics.py": helper, "train.py": train.replace("ARG", "out.detach(), y.cuda()")})
    assert sites(paths.values(), tmp_path) == [("metrics.py", 2, "TL101")]
    paths = write(tmp_path, {"metrics.py": helper, "train.py": train.replace("ARG", "np.asarray(x), np.asarray(y)")})
    assert sites(paths.values(), tmp_path) == []


@pytest.mark.parametrize("package, imported", [
    ("from .post import build\n\n\ndef build_model(args):\n    return build(args)\n", "build_model"),  # DETR's
    ("from .post import build\n", "build"),  # a factory the package re-exports
])
def test_modules_stored_by_key_in_a_dict_a_factory_returns(tmp_path, package, imported):
    """DETR's build() returns ``postprocessors = {"bbox": PostProcess()}`` with ``postprocessors["segm"] =
    PostProcessSegm()`` added under ``--masks``; main.py passes the dict to engine.evaluate, whose evaluation loop
    calls ``postprocessors["segm"](...)``: PostProcessSegm.forward runs every evaluation batch."""
    paths = write(tmp_path, {
        "models/__init__.py": package,
        "models/post.py": """\
            import torch
            import torch.nn as nn

            class PostProcess(nn.Module):
                def forward(self, outputs, sizes):
                    return outputs

            class PostProcessSegm(nn.Module):
                def forward(self, results, outputs, sizes):
                    return [label.item() for label in outputs.argmax(-1)[0]]     # line 10

            def build(args):
                postprocessors = {"bbox": PostProcess()}
                if args.masks:
                    postprocessors["segm"] = PostProcessSegm()
                return nn.Linear(4, 4), postprocessors
            """,
        "engine.py": """\
            import torch

            @torch.no_grad()
            def evaluate(model, postprocessors, loader):
                for samples, sizes in loader:
                    outputs = model(samples.to("cuda"))
                    results = postprocessors["bbox"](outputs, sizes)
                    results = postprocessors["segm"](results, outputs, sizes)
                return results
            """,
        "main.py": """\
            import torch
            from models import IMPORTED
            from engine import evaluate

            model, postprocessors = IMPORTED(args)
            model.to("cuda")
            for epoch in range(10):
                evaluate(model, postprocessors, loader)
            """.replace("IMPORTED", imported),
    })
    assert ("models/post.py", 10, "TL101") in sites(paths.values(), tmp_path)


def test_a_module_buffer_is_a_tensor_on_the_module_device(tmp_path):
    """MoCo's ``self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))``: ``int(self.queue_ptr)`` in
    forward reads a CUDA tensor every step once the model is on the GPU; a plain Python attribute does not."""
    text = """\
        import torch
        import torch.nn as nn

        class Queue(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))
                self.count = 0

            def forward(self, x):
                ptr = int(self.queue_ptr)                 # line 11
                seen = int(self.count)
                return x[ptr:] .sum() + seen

        model = Queue().cuda()
        for x in loader:
            model(x.cuda()).backward()
        """
    paths = write(tmp_path, {"moco.py": text})
    assert sites(paths.values(), tmp_path) == [("moco.py", 11, "TL103")]


def test_a_dim_keyword_is_torch_and_an_except_handler_binding_is_the_rare_path(tmp_path):
    """YOLOX's label assignment: ``nlabel = (labels.sum(dim=2) > 0).sum(dim=1)`` of a parameter of unknown kind is a
    tensor (``dim=`` is torch's; numpy says ``axis=``), so ``int(nlabel[i])`` per image reads the GPU; and ``fg_mask``
    bound by ``try: ... = self.assign(...)`` holds the mask that method returns on the common path even though the
    ``except`` handler binds it again (YOLOX's handler retries on the CPU after an out-of-memory error). The near
    miss: ``axis=`` (numpy's spelling) proves nothing."""
    text = """\
        import torch
        import torch.nn as nn
        from data import prepare

        class Head(nn.Module):
            def assign(self, boxes, mode="gpu"):
                if mode == "cpu":
                    boxes = boxes.cpu()
                fg = boxes.sum(1) > 0
                return boxes, fg

            def losses(self, labels, boxes, preds):
                nlabel = (labels.sum(dim=2) > 0).sum(dim=1)
                counts = (labels.sum(axis=2) > 0).sum(axis=1)
                for i in range(preds.shape[0]):
                    n = int(nlabel[i])                     # line 16
                    m = int(counts[i])
                    try:
                        _, fg_mask = self.assign(boxes)
                    except RuntimeError:
                        fg_mask = None                     # (skips the image)
                        continue
                    picked = preds[i][fg_mask]             # line 23
                return picked.sum() + n + m

            def forward(self, x, labels, boxes):
                return self.losses(labels, boxes, x * 2)

        head = Head().cuda()
        for batch in loader:
            x, labels, boxes = prepare(batch)
            head(x.cuda(), labels, boxes).backward()
        """
    paths = write(tmp_path, {"head.py": text})
    assert sites(paths.values(), tmp_path) == [("head.py", 15, "TL502"), ("head.py", 16, "TL103"),
                                               ("head.py", 23, "TL106")]


SELF_TEST = """\
    import torch
    import torch.nn as nn

    class SplitLoss(nn.Module):
        def forward(self, w, h):
            return (h @ w.t()).logsumexp(dim=1).mean()

    if __name__ == "__main__":
        if torch.cuda.is_available():
            torch.cuda.manual_seed(42)
        crit = SplitLoss(){move}
        losses = []
        for _ in range(10):
            loss = crit(torch.randn(8, 4{device}), torch.randn(2, 4{device}))
            losses.append(loss.item())                  # line 15
            loss.backward()
    """


@pytest.mark.parametrize("move", [False, True])
def test_a_library_modules_self_test_on_the_cpu_is_not_training(tmp_path, move):
    """awd-lstm's splitcross.py ends in a ``__main__`` self-test on the CPU (the file names torch.cuda only to seed
    it); main.py imports the loss and calls it every step on the GPU. The self-test's loop is no per-step loop of
    the run: nothing in the file places anything on a device and it imports only libraries, so run on its own the
    block runs on the CPU. The near miss: the same block with ``.cuda()`` and ``device="cuda"`` is a GPU program."""
    paths = write(tmp_path, {
        "splitcross.py": SELF_TEST.format(move=".cuda()" if move else "", device=', device="cuda"' if move else ""),
        "main.py": """\
            import torch
            from splitcross import SplitLoss

            crit = SplitLoss()
            for h, w in loader:
                loss = crit(w.cuda(), h.cuda())
                loss.backward()
            """})
    assert [s for s in sites(paths.values(), tmp_path) if s[0] == "splitcross.py"] == \
        ([("splitcross.py", 15, "TL101"), ("splitcross.py", 16, "TL401")] if move else [])


@pytest.mark.parametrize("appended, flagged", [("scores > 0.5", True), ("scores.argmax(0)", False)])
def test_a_join_of_appended_masks_is_a_mask(tmp_path, appended, flagged):
    """YOLOX's ``fg_masks.append(fg_mask)`` per image, then ``preds[torch.cat(fg_masks, 0)]``: a join of boolean
    masks is one, and indexing with it has a data-dependent shape. The near miss: a join of index tensors."""
    text = f"""\
        import torch
        import torch.nn as nn

        class Head(nn.Module):
            def forward(self, preds, scores):
                fg_masks = []
                for i in range(4):
                    fg_mask = {appended}
                    fg_masks.append(fg_mask)
                fg_masks = torch.cat(fg_masks, 0)
                return preds[fg_masks].sum()                # line 11

        head = Head().cuda()
        for x, s in loader:
            head(x.cuda(), s.cuda()).backward()
        """
    paths = write(tmp_path, {"head.py": text})
    assert sites(paths.values(), tmp_path) == ([("head.py", 11, "TL106")] if flagged else [])


@pytest.mark.parametrize("passed, flagged", [("sizes", True), ("[[4, 4]]", False)])
def test_a_call_that_cannot_bind_is_another_modules(tmp_path, passed, flagged):
    """DETR's post-processors share a dict: ``post["segm"](results, out, sizes, max_sizes)`` and ``post["panoptic"](
    out, sizes)`` reach both forwards (the key is not followed), but a call of two arguments cannot call a forward
    that needs four: what Segm's ``max_sizes`` holds comes from the calls that can bind it. The near miss: what they
    pass is a Python list."""
    text = f"""\
        import torch
        import torch.nn as nn

        class Segm(nn.Module):
            def forward(self, results, outputs, sizes, max_sizes):
                h, w = max_sizes.max(0)[0].tolist()        # line 6
                return results

        class Panoptic(nn.Module):
            def forward(self, outputs, sizes, target_sizes=None):
                return outputs

        post = {{"segm": Segm(), "panoptic": Panoptic()}}
        model = nn.Linear(4, 4).cuda()
        for x, t in loader:
            out = model(x.cuda())
            sizes = torch.stack(t).cuda()
            results = post["segm"]([], out, sizes, {passed})
            pano = post["panoptic"](out, sizes)
        """
    paths = write(tmp_path, {"eval.py": text})
    assert [s for s in sites(paths.values(), tmp_path) if s[2] == "TL102"] == \
        ([("eval.py", 6, "TL102")] if flagged else [])


@pytest.mark.parametrize("mask, flagged", [("boxes.sum(1) > 0", True), ("boxes.argmax(1)", False)])
def test_a_mask_passed_as_a_parameter_and_a_move_back_in_a_rare_branch(tmp_path, mask, flagged):
    """YOLOX's SimOTA: ``simota_matching(cost, ..., fg_mask)`` writes ``fg_mask[fg_mask.clone()] = inboxes``; the
    parameter is a mask because every call passes one, and the ``fg_mask.cuda()`` of the CPU fallback after the call
    (``if mode == "cpu":``) does not make it a host value before; the prefilter lets ``m.clone()`` of a parameter
    through as mask-shaped. The near miss: an index tensor passed."""
    text = f"""\
        import torch
        import torch.nn as nn

        class Head(nn.Module):
            def match(self, cost, fg_mask):
                inboxes = cost.sum(1) > 0
                fg_mask[fg_mask.clone()] = inboxes         # line 7
                return fg_mask

            def forward(self, boxes, mode="gpu"):
                fg_mask = {mask}
                matched = self.match(boxes * 2, fg_mask)
                if mode == "cpu":
                    fg_mask = fg_mask.cuda()
                return matched, fg_mask

        head = Head().cuda()
        for x in loader:
            head(x.cuda())[0].sum().backward()
        """
    paths = write(tmp_path, {"head.py": text})
    assert sites(paths.values(), tmp_path) == ([("head.py", 7, "TL106")] if flagged else [])


@pytest.mark.parametrize("sizes, flagged", [("torch.stack(t).cuda()", True), ("[(4, 4)] * len(t)", False)])
def test_a_row_of_a_tensor_a_loop_walks_is_a_tensor(tmp_path, sizes, flagged):
    """DETR's PostProcessSegm: ``for i, (mask, t, tt) in enumerate(zip(masks, max_sizes, orig_sizes))`` binds
    ``tt`` to a row of a CUDA tensor, and ``tt.tolist()`` copies it to the host per image (numpy arrays have
    ``.tolist()`` too: only a tensor's row is evidence). The near miss: the sizes are a list of Python tuples."""
    text = f"""\
        import torch
        import torch.nn.functional as F

        model = torch.nn.Conv2d(3, 1, 1).cuda()
        for x, t in loader:
            masks = model(x.cuda())
            sizes = {sizes}
            out = []
            for i, (mask, size) in enumerate(zip(masks, sizes)):
                out.append(F.interpolate(mask[None], size=tuple(size.tolist())))  # line 10
        """
    paths = write(tmp_path, {"post.py": text})
    assert [s for s in sites(paths.values(), tmp_path) if s[2] == "TL102"] == \
        ([("post.py", 10, "TL102")] if flagged else [])


@pytest.mark.parametrize("guard, flagged", [("isinstance(self.sampler, LossAwareSampler)", True),
                                            ("self.sampler is not None", False)])
def test_a_method_call_under_an_isinstance_test_runs_that_classs_method(tmp_path, guard, flagged):
    """improved-diffusion's TrainLoop: ``if isinstance(self.schedule_sampler, LossAwareSampler):
    self.schedule_sampler.update_with_local_losses(t, losses)`` every microbatch runs LossAwareSampler's method (the
    sampler itself comes from a factory of another file): its ``.item()`` per rank is a sync every step. The near
    miss: a test that names no class says nothing of what the sampler is."""
    paths = write(tmp_path, {
        "resample.py": """\
            import torch

            class LossAwareSampler:
                def update_with_local_losses(self, ts, losses):
                    sizes = [torch.tensor([0], device=losses.device) for _ in range(4)]
                    return [x.item() for x in sizes]          # line 6
            """,
        "train.py": f"""\
            import torch
            from resample import LossAwareSampler

            class TrainLoop:
                def __init__(self, model, sampler):
                    self.model, self.sampler = model, sampler

                def run(self, loader):
                    for x in loader:
                        losses = self.model(x.cuda())
                        if {guard}:
                            self.sampler.update_with_local_losses(x, losses.detach())
                        losses.mean().backward()
            """})
    assert [s for s in sites(paths.values(), tmp_path) if s[0] == "resample.py"] == \
        ([("resample.py", 6, "TL101")] if flagged else [])
