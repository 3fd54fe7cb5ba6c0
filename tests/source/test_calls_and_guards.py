"""Issue #12: calls followed within a file and across the files of one run (callers.py), and the guards and loops
of real training code (semantic/steps.py): what is per step and what is not."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tracelint.engine import Config, Finding
from tracelint.source import lint_paths

CONFIG = Config(root=Path("/nonexistent"))


def write(root: Path, files: dict[str, str]) -> list[Path]:
    paths = []
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        paths.append(path)
    return paths


def findings(paths: list[Path]) -> list[Finding]:
    return [f for f in lint_paths(paths, config_for=lambda _p: CONFIG) if isinstance(f, Finding)]


def sites(paths, root: Path) -> list[tuple[str, int, str]]:
    return sorted((str(Path(f.location.path).relative_to(root)), f.location.line, f.code) for f in findings(paths))


# -- calls within a file -----------------------------------------------------------------------------------------
def test_a_function_called_every_step_syncs_every_step(tmp_path):
    paths = write(tmp_path, {"train.py": """\
        import torch

        def train(epoch):
            optimizer.zero_grad()
            loss = criterion(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            return loss.item()

        for epoch in range(args.epochs):
            train(epoch)
        """})
    [finding] = findings(paths)
    assert (finding.code, finding.location.line) == ("TL101", 8)
    # the message names the call and the loop it is called in
    assert "`train()` (called at line 11) in the loop over `range(args.epochs)`" in finding.message


def test_methods_chains_and_lambdas(tmp_path):
    paths = write(tmp_path, {"trainer.py": """\
        import torch

        class Trainer:
            def log(self, loss):
                return loss.item()

            def run_step(self, batch):
                loss = self.model(batch.cuda())
                loss.backward()
                self.opt.step()
                self.log(loss)

            def fit(self, loader):
                for batch in loader:
                    self.run_step(batch)
                    values = list(map(lambda t: t.item(), self.model.losses))
        """})
    found = findings(paths)
    assert sorted((f.location.line, f.code) for f in found) == [(5, "TL101"), (16, "TL101")]
    [log] = [f for f in found if f.location.line == 5]
    assert "`log()` (called at line 11) in `run_step()` (called at line 15) in the loop over `loader`" in log.message


@pytest.mark.parametrize("call", [
    "if step % 100 == 0:\n        evaluate(model)",   # a guarded call: rare
    "pass",                                             # never called in a loop
])
def test_a_function_not_called_every_step_is_not_reported(tmp_path, call):
    paths = write(tmp_path, {"train.py": textwrap.dedent("""\
        import torch

        def evaluate(model):
            return model(x.cuda()).item()

        for step, batch in enumerate(loader):
            loss = model(batch.cuda())
            {call}
        """).format(call=call)})
    assert findings(paths) == []


def test_recursion_and_a_function_calling_itself_terminate(tmp_path):
    paths = write(tmp_path, {"train.py": """\
        import torch

        def a(x):
            return b(x) + x.item()

        def b(x):
            return a(x)

        for batch in loader:
            a(model(batch.cuda()))
        """})
    assert [(f.location.line, f.code) for f in findings(paths)] == [(4, "TL101")]


# -- calls across the files of one run ---------------------------------------------------------------------------
FILES = {
    "pkg/__init__.py": "",
    "pkg/metrics.py": """\
        import torch

        def accuracy(scores, targets):
            return (scores.argmax(1) == targets).float().sum().item()

        def rarely(x):
            return x.item()

        class Algo:
            def update(self, batch):
                loss = self.model(batch)
                loss.backward()
                self.opt.step()
                return loss.item()
        """,
    "train.py": """\
        import torch
        from pkg.metrics import accuracy, rarely
        from pkg import metrics

        agent = metrics.Algo()
        for x, y in loader:
            out = model(x.cuda())
            acc = accuracy(out, y.cuda())
            agent.update(x)
            if step % 100 == 0:
                rarely(out)
        """,
}


def test_functions_called_every_step_from_another_file_of_the_run(tmp_path):
    paths = write(tmp_path, FILES)
    found = findings([tmp_path])
    assert sorted((str(Path(f.location.path).relative_to(tmp_path)), f.location.line) for f in found) == \
        [("pkg/metrics.py", 4), ("pkg/metrics.py", 14)]
    messages = {f.location.line: f.message for f in found}
    assert "`accuracy()` (called at train.py:8) in the loop over `loader`" in messages[4]
    assert "`update()` (called at train.py:9)" in messages[14]
    # the files given one by one, as pre-commit passes them, give the same result
    assert sites(paths, tmp_path) == [("pkg/metrics.py", 4, "TL101"), ("pkg/metrics.py", 14, "TL101")]
    # a helper module linted alone has no callers: nothing in it runs per step
    assert findings([tmp_path / "pkg" / "metrics.py"]) == []


def test_relative_imports_and_output_order(tmp_path):
    write(tmp_path, {
        "proj/__init__.py": "",
        "proj/a_loss.py": "import torch\n\ndef loss_value(x):\n    return x.cpu()\n",
        "proj/train.py": ("import torch\nfrom .a_loss import loss_value\n\nfor batch in loader:\n"
                          "    loss_value(model(batch.cuda()))\n    print(model(batch).item())\n"),
    })
    found = findings([tmp_path / "proj"])
    # findings are in file order, each file's findings together
    assert [(Path(f.location.path).name, f.location.line, f.code) for f in found] == \
        [("a_loss.py", 4, "TL102"), ("train.py", 6, "TL101")]


# -- guards and loops of real code -------------------------------------------------------------------------------
GUARDED = {
    # the generator's update every n_critic steps: its cadence, not a logging interval
    "if i % n_critic == 0:\n        g_loss = gen_loss(batch)\n        g_loss.backward()\n        opt_g.step()\n"
    "        print(g_loss.item())": True,
    "if i % log_every == 0:\n        print(loss.item())": False,
    # % a module constant equal to 1 is every step
    "if i % LOG_INTERVAL == 0:\n        print(loss.item())": True,
    # capped work: a counter below a small literal
    "if i <= 4:\n        print(loss.item())": False,
    "if shown < 5:\n        shown += 1\n        print(loss.item())": False,
    "if i in sample_ids:\n        print(loss.item())": False,
    # the end of training, a terminal path, an exception handler
    "if i >= args.max_steps:\n        print(loss.item())\n        break": False,
    "if not math.isfinite(stats['loss']):\n        print(loss.item())\n        sys.exit(1)": False,
    "try:\n        pass\n    except RuntimeError:\n        print(loss.item())": False,
    # a threshold check that only prints runs when something is off
    "if stats['loss'] > 10.0:\n        print('large loss', loss.max().item())": False,
    "if stats['loss'] > 10.0:\n        print('large loss', loss.max().item())\n        clip(model)": True,
    # the number of something is a size, not a counter: ``n_classes == 1`` is a model branch taken every step
    "if net.n_classes == 1:\n        assert loss.min() >= 0": True,
    "if num_layers == 1:\n        print(loss.item())": True,
    "if n == 0:\n        print(loss.item())": False,
    # opt-in switches that exist to synchronize or time
    "if args.synchronize_step:\n        torch.cuda.synchronize()": False,
    "if timing:\n        torch.cuda.synchronize()": False,
    # a flag named for recording, bound to a test: the test decides (YOLOX's evaluator times every batch but the last)
    "is_time_record = i < len(loader) - 1\n    if is_time_record:\n        torch.cuda.synchronize()": True,
    "is_time_record = i % 100 == 0\n    if is_time_record:\n        torch.cuda.synchronize()": False,
}


@pytest.mark.parametrize("guarded, reported", GUARDED.items(), ids=[g.split(":")[0] for g in GUARDED])
def test_guards(tmp_path, guarded, reported):
    text = ("import math\nimport sys\nimport torch\n\nLOG_INTERVAL = 1\nshown = 0\n\n"
            "for i, batch in enumerate(loader):\n    loss = model(batch.cuda())\n    " + guarded + "\n")
    paths = write(tmp_path, {"train.py": text})
    assert bool(findings(paths)) is reported, text


@pytest.mark.parametrize("inner, reported", [
    ("for opt, sched in zip(optimizers, schedulers):\n            opt.step()", True),   # a member loop: one step
    ("for domain in ['A', 'B']:\n            loss.backward()", True),
    ("for batch in loader:\n            opt.step()", False),                           # a loop of steps inside
])
def test_loops_over_members_are_part_of_one_step(tmp_path, inner, reported):
    text = ("import torch\n\nfor step in range(num_iterations):\n    loss = model(x.cuda())\n"
            "    for micro in range(accum):\n        loss.backward()\n"
            f"    if True:\n        {inner}\n    print(loss.item())\n")
    paths = write(tmp_path, {"train.py": text})
    assert bool(findings(paths)) is reported, text


def test_a_loop_that_ends_in_break_or_return_runs_once(tmp_path):
    text = """\
        import torch

        def timed(model, x):
            for i in range(30):
                model(x.cuda())
                torch.cuda.synchronize()
                return

        def evaluate(model):
            for val in val_loader:
                print(model(val.cuda()).item())
                break

        for step, batch in enumerate(loader):
            batch = batch.cuda()
            if step % 500 == 0:
                evaluate(model)
        """
    assert findings(write(tmp_path, {"train.py": text})) == []
    # once per iteration of a per-step loop is every step
    text = text.replace("if step % 500 == 0:", "if True:")
    [finding] = findings(write(tmp_path, {"train.py": text}))
    assert finding.location.line == 11 and "in the loop over `enumerate(loader)`" in finding.message


def test_device_evidence_flows_to_the_modules_a_device_script_calls(tmp_path):
    # The helper module never names a device: its own minibatch loop syncs only because train.py, which moves the
    # model to CUDA, calls it. (Not a per-step call: once per update, around the helper's own per-step loop.)
    files = {
        "algo.py": """\
            import torch

            class PPO:
                def update(self, rollouts):
                    for batch in rollouts.feed_forward_generator():
                        loss = self.model(batch)
                        loss.backward()
                        self.optimizer.step()
                        print(loss.item())
            """,
        "train.py": """\
            import torch
            from algo import PPO

            model = Policy().cuda()
            agent = PPO(model)
            for update in range(num_updates):
                for step in range(num_steps):
                    obs = envs.step(model.act(obs))
                agent.update(rollouts)
            """,
    }
    write(tmp_path, files)
    assert [(Path(f.location.path).name, f.location.line) for f in findings([tmp_path])] == [("algo.py", 9)]
    assert findings([tmp_path / "algo.py"]) == []  # alone: no device evidence, no host-device sync


def test_a_graph_collate_defined_in_another_file_of_the_run(tmp_path):
    files = {
        "data.py": """\
            import dgl
            import torch

            class Molecules(torch.utils.data.Dataset):
                def collate(self, samples):
                    graphs, labels = map(list, zip(*samples))
                    return dgl.batch(graphs), torch.tensor(labels)

                def collate_dense(self, samples):
                    return torch.stack([s[0] for s in samples]), torch.tensor([s[1] for s in samples])
            """,
        "train.py": """\
            import torch
            from torch.utils.data import DataLoader
            from data import Molecules

            dataset = Molecules()
            graph_loader = DataLoader(dataset, batch_size=128, num_workers=4, collate_fn=dataset.collate)
            dense_loader = DataLoader(dataset, batch_size=128, num_workers=4, collate_fn=dataset.collate_dense)
            for loader in (graph_loader, dense_loader):
                for x, y in loader:
                    model(x.to("cuda"), y.to("cuda")).backward()
                    opt.step()
            """,
    }
    write(tmp_path, files)
    found = [(Path(f.location.path).name, f.location.line, f.code) for f in findings([tmp_path])]
    assert ("train.py", 7, "TL202") in found and ("train.py", 6, "TL202") not in found
    # the train file alone cannot know what dataset.collate returns: reported
    alone = [(f.location.line, f.code) for f in findings([tmp_path / "train.py"])]
    assert (6, "TL202") in alone


def test_a_collate_that_builds_objects_pinning_cannot_pin(tmp_path):
    """DETR's collate_fn (util/misc.py) turns the images into a NestedTensor, a class without a pin_memory() method:
    DataLoader pinning returns it as it is, so pin_memory=True gains nothing. A class that has pin_memory() is pinned
    (the near miss), and so is a loader whose collate builds plain tensors."""
    misc = """\
        import torch

        class NestedTensor(object):
            def __init__(self, tensors, mask):
                self.tensors, self.mask = tensors, mask
            PIN

        def nested_tensor_from_tensor_list(tensor_list):
            tensor = torch.stack(tensor_list)
            return NestedTensor(tensor, torch.zeros_like(tensor, dtype=torch.bool))

        def collate_fn(batch):
            batch = list(zip(*batch))
            batch[0] = nested_tensor_from_tensor_list(batch[0])
            return tuple(batch)
        """
    train = """\
        import torch
        from torch.utils.data import DataLoader
        import misc

        loader = DataLoader(dataset, batch_size=2, num_workers=4, collate_fn=misc.collate_fn)
        for samples, targets in loader:
            model(samples.to("cuda")).sum().backward()
            opt.step()
        """
    write(tmp_path, {"misc.py": misc.replace("PIN", ""), "train.py": train})
    assert [f for f in findings([tmp_path]) if f.code == "TL202"] == []
    pinnable = misc.replace(
        "PIN", "def pin_memory(self):\n        return NestedTensor(self.tensors.pin_memory(), self.mask)")
    write(tmp_path, {"misc.py": pinnable, "train.py": train})
    assert [(Path(f.location.path).name, f.location.line) for f in findings([tmp_path]) if f.code == "TL202"] == \
        [("train.py", 5)]


def test_a_method_a_subclass_inherits_runs_where_the_subclass_calls_it(tmp_path):
    """``self.log_metrics(loss)`` in ``Trainer(BaseTrainer)``'s loop runs BaseTrainer.log_metrics every step; a
    same-named method of an unrelated class does not run, nor does the base's when the subclass overrides it."""
    text = textwrap.dedent("""\
        import torch

        class BaseTrainer:
            def log_metrics(self, loss):
                self.last = loss.item()          # line 5

        class Trainer(BaseTrainer):
            def train(self, model, loader, opt):
                for x in loader:
                    loss = model(x.cuda()).sum()
                    loss.backward()
                    opt.step()
                    self.log_metrics(loss)

        class Other:
            def log_metrics(self, loss):
                return loss.item()               # line 17
        """)
    (tmp_path / "t.py").write_text(text)
    assert [(f.location.line, f.code) for f in findings([tmp_path / "t.py"])] == [(5, "TL101")]
    overridden = text.replace("    def train(self, model, loader, opt):",
                              "    def log_metrics(self, loss):\n        self.last = loss\n\n"
                              "    def train(self, model, loader, opt):")
    (tmp_path / "t.py").write_text(overridden)
    assert [(f.location.line, f.code) for f in findings([tmp_path / "t.py"])] == []
