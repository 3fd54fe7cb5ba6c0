import torch
import torch.nn.functional as F

model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(6)]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)

total = 0.0
for step in range(100_000):
    x = torch.randn(1024, 2048).pin_memory()  # the batch is prepared on the host
    y = torch.randint(0, 2048, (1024,)).pin_memory()
    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    total += loss.item()
print(total / 100_000)
