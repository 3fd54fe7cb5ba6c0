"""A tiny CPU training script that would run (nearly) forever: the verify tests stop it with the harness.

Findings: TL202 (pin_memory=False, safe fix), TL301 (set_to_none=False, safe fix), TL101 (loss.item() summed per
step, unsafe fix). MODE (env VERIFY_TEST_MODE) makes the *fixed* loader (pin_memory=True) misbehave on purpose:
raise, hang or produce a NaN loss, so the tests can see each failure handled.
"""
import os
import sys
import time

import torch
import torch.nn.functional as F
from helper_module import make_model  # a sibling import: the patched copy must still find it
from torch.utils.data import DataLoader, TensorDataset

MODE = os.environ.get("VERIFY_TEST_MODE", "")
device = "cuda" if torch.cuda.is_available() else "cpu"  # the tests run it on the CPU
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 10**9

dataset = TensorDataset(torch.randn(100_000, 16), torch.randint(0, 4, (100_000,)))  # one epoch outlasts a run
loader = DataLoader(dataset, batch_size=32, num_workers=1, pin_memory=False)
model = make_model().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

running = 0.0
step = 0
while step < STEPS:
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = F.cross_entropy(model(x), y)
        if loader.pin_memory and MODE == "nan":
            loss = loss * float("nan")
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()
        running += loss.item()
        step += 1
        if loader.pin_memory and MODE == "raise" and step == 3:
            raise RuntimeError("the fixed loader broke this script")
        if loader.pin_memory and MODE == "hang":
            time.sleep(3600)
        if step >= STEPS:
            break
print(f"mean loss {running / step:.4f}")
