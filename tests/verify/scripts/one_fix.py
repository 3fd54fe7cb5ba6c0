"""A tiny CPU training loop with one finding (TL301, a safe fix): the smallest end-to-end verify target."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))

for step in range(10**9):  # noqa: B007 (a step loop as training scripts write it)
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=False)
    loss.backward()
    optimizer.step()
