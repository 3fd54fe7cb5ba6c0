"""The common TL101 shapes without a `--fix` of their own, in one CPU training loop: `losses.append(loss.item())`,
`.item()` in an f-string print and in a logger call, as a dict value handed to a logger, and a guarded read of the
list. verify measures each through a device-side rewrite (tracelint/verify/rewrite.py). LOG_TO (env) collects what
the script logs, so a test can check that the rewritten variants log the same values."""
import logging
import os

import torch
import torch.nn.functional as F

device = "cuda" if torch.cuda.is_available() else "cpu"  # the tests run it on the CPU
logging.basicConfig(level=logging.INFO, format="%(message)s")
log = logging.getLogger("train")
sink = open(os.environ["LOG_TO"], "a") if os.environ.get("LOG_TO") else None


def log_metrics(metrics):
    if sink:
        sink.write(" ".join(f"{k}={v:.6f}" for k, v in sorted(metrics.items())) + "\n")
        sink.flush()


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(64, 16, device=device), torch.randint(0, 4, (64,), device=device)

losses = []
for step in range(10**9):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
    print(f"step {step} loss {loss.item():.4f}")
    log.info("loss %.4f", loss.item())
    log_metrics({"loss": loss.item(), "step": step})
    if step % 7 == 0 and sink:
        sink.write(f"mean {sum(losses) / len(losses):.6f}\n")
