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
