"""The misses and false alarms issue #29 lists, each from a minimal snippet shaped like the real code, with the near
miss that must keep its verdict."""
from __future__ import annotations

TRAINER = """\
import torch
import torchmetrics
from torch.utils.tensorboard import SummaryWriter


class Trainer:
    def __init__(self, model, device):
        self.model = model.to(device)
        self.metric = {metric}
        self.writer = SummaryWriter()

    def fit(self, loader, opt):
        for step, (x, y) in enumerate(loader):
            out = self.model(x.cuda())
            loss = torch.nn.functional.cross_entropy(out, y.cuda())
            loss.backward()
            opt.step()
            self.metric.update(out, y.cuda())
            acc = self.metric.compute()
            if acc > 0.9:
                print("good")
            {log}
"""


def test_a_metric_set_in_init_computes_a_device_tensor(lint):
    found = lint(TRAINER.format(metric="torchmetrics.Accuracy(task='binary').to(device)", log="pass"))
    assert found.codes() == [("TL103", 20)]
    found = lint(TRAINER.format(metric="RunningAverage()", log="pass"))  # a class of the project: unknown
    assert found.codes() == []


def test_tensorboard_add_scalar_of_a_tensor_calls_item(lint):
    base = dict(metric="RunningAverage()")
    assert lint(TRAINER.format(log="self.writer.add_scalar('loss', loss, step)", **base)).codes() == [("TL101", 22)]
    assert lint(TRAINER.format(log="self.writer.add_scalar('lr', 0.1, step)", **base)).codes() == []
    # already a Python float: the .item() is the finding, once
    assert lint(TRAINER.format(log="self.writer.add_scalar('loss', loss.item(), step)", **base)).codes() == [
        ("TL101", 22)]


FLUSH = """\
import torch
import logging

log = logging.getLogger("train")
model = torch.nn.Linear(8, 8).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
pending = []
for step in range(1000):
    logits = model(torch.randn(4, 8, device="cuda"))
    logits.sum().backward()
    opt.step()
    pending.append((step, logits))
    if len(pending) == 50:
        for logged_step, logged in pending:
            log.debug("step %d: %s", logged_step, logged.argmax(dim=1).cpu())
        {clear}
"""


def test_a_buffer_flushed_when_full_is_not_read_every_step(lint):
    assert lint(FLUSH.format(clear="pending.clear()")).codes() == []
    # never cleared: once full, the branch runs every step after
    assert lint(FLUSH.format(clear="pass").replace("== 50", ">= 50")).codes() == [("TL102", 15)]


def _run(tmp_path, files: dict[str, str]) -> list[tuple[str, str, int]]:
    import textwrap

    from tracelint.engine import Config, Finding
    from tracelint.source import lint_paths

    paths = []
    for name, text in files.items():
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        paths.append(path)
    config = Config(root=tmp_path)
    return [(f.location.path.rsplit("/", 1)[-1], f.code, f.location.line)
            for f in lint_paths(paths, config_for=lambda _p: config) if isinstance(f, Finding)]


UNET_TRAIN = """\
import torch
from torch.utils.data import DataLoader

from evaluate import evaluate


def train_model(model, train_set, val_set, device, epochs=5):
    loader_args = dict(batch_size=8, num_workers=4, pin_memory={pin})
    train_loader = DataLoader(train_set, shuffle=True, **loader_args)
    val_loader = DataLoader(val_set, shuffle=False, drop_last=True, **loader_args)
    optimizer = torch.optim.RMSprop(model.parameters())
    for epoch in range(1, epochs + 1):
        for batch in train_loader:
            loss = model(batch["image"].to(device=device, non_blocking=True)).mean()
            loss.backward()
            optimizer.step()
        val_score = evaluate(model, val_loader, device)
"""
UNET_EVALUATE = """\
import torch


@torch.inference_mode()
def evaluate(net, dataloader, device):
    score = 0
    for batch in dataloader:
        image, mask_true = batch["image"], batch["mask"]
        image = image.to(device=device, dtype=torch.float32)
        mask_true = mask_true.to(device=device, dtype=torch.long)
        score += (net(image) - mask_true).abs().mean()
    return score
"""


def test_a_pinned_loader_built_in_another_file_and_passed_in(tmp_path):
    found = _run(tmp_path, {"train.py": UNET_TRAIN.format(pin="True"), "evaluate.py": UNET_EVALUATE})
    assert [f for f in found if f[1] == "TL203"] == [("evaluate.py", "TL203", 9), ("evaluate.py", "TL203", 10)]
    (tmp_path / "b").mkdir()
    found = _run(tmp_path / "b", {"train.py": UNET_TRAIN.format(pin="False"), "evaluate.py": UNET_EVALUATE})
    assert [f for f in found if f[1] == "TL203"] == []  # not pinned: nothing to overlap
    (tmp_path / "c").mkdir()
    assert _run(tmp_path / "c", {"evaluate.py": UNET_EVALUATE}) == []  # alone: no caller says what it gets


A2C_MAIN = """\
import torch

from algo import A2C

device = torch.device("cuda")
agent = A2C(actor_critic.to(device))
for j in range(num_updates):
    for step in range(num_steps):
        action = actor_critic.act(rollouts.obs[step])
        obs, reward, done, infos = envs.step(action)
        rollouts.insert(obs, action, reward)
    value_loss, action_loss = agent.update(rollouts)
"""
A2C_ALGO = """\
import torch


class A2C:
    def __init__(self, actor_critic):
        self.actor_critic = actor_critic
        self.optimizer = torch.optim.RMSprop(actor_critic.parameters())

    def update(self, rollouts):
        values, log_probs = self.actor_critic.evaluate_actions(rollouts.obs)
        value_loss = (rollouts.returns - values).pow(2).mean()
        action_loss = -(log_probs * (rollouts.returns - values).detach()).mean()
        {step}
        return value_loss.item(), action_loss.item()
"""


def test_an_update_that_steps_the_optimizer_once_per_outer_loop(tmp_path):
    stepping = "(value_loss + action_loss).backward()\n        self.optimizer.step()"
    found = _run(tmp_path, {"main.py": A2C_MAIN, "algo.py": A2C_ALGO.format(step=stepping)})
    assert found == [("algo.py", "TL101", 15)] * 2  # both .item(): the outer loop is the loop of optimizer steps
    (tmp_path / "b").mkdir()
    found = _run(tmp_path / "b", {"main.py": A2C_MAIN, "algo.py": A2C_ALGO.format(step="pass")})
    assert found == []  # no optimizer step in update(): the outer loop runs once per rollout, like an epoch


def test_a_return_in_a_function_body_ends_the_call_not_the_loop(lint):
    helper = """\
        import torch
        import torch.distributed as dist


        def all_reduce_mean(x):
            if dist.get_world_size() > 1:
                x_reduce = torch.tensor(x).cuda()
                dist.all_reduce(x_reduce)
                return x_reduce.item()
            return x


        for step, batch in enumerate(loader):
            loss = model(batch.cuda())
            loss.backward()
            value = all_reduce_mean(loss.detach())
        """
    assert lint(helper).codes() == [("TL101", 9)]
    # a return from inside the loop ends the loop: the branch runs once
    once = """\
        import torch


        def train(loader):
            for step, batch in enumerate(loader):
                loss = model(batch.cuda())
                loss.backward()
                if step >= 1000:
                    return loss.item()
        """
    assert lint(once).codes() == []
