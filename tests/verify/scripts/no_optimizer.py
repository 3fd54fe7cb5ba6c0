"""A loop with backward() but no optimizer (a hand-written SGD update): the harness falls back to counting
backward calls. It also records the float32 matmul precision it sees at each step to TRACE_PRECISION_TO, so a test
can check that the harness's TF32 variant overrides this script's own setting."""
import os

import torch

torch.backends.cuda.matmul.allow_tf32 = False  # the script turns TF32 off itself; the tf32 variant must win
w = torch.randn(16, 4, requires_grad=True)
x = torch.randn(64, 16)
seen = open(os.environ["TRACE_PRECISION_TO"], "w") if os.environ.get("TRACE_PRECISION_TO") else None
while True:
    loss = (x @ w).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 0.01 * w.grad
        w.grad = None
    if seen:
        seen.write(torch.get_float32_matmul_precision() + "\n")
        seen.flush()
