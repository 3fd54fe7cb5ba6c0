"""DataLoader workers, forked, run nn.Module transforms (as torchvision's are): the harness's bf16 variant must
leave them alone. Issue #13: on a GPU the harness's autocast wrapper entered `torch.autocast("cuda")` inside the
worker and the worker crashed ("Cannot re-initialize CUDA in forked subprocess"). On the CPU nothing crashes, so
the transforms check it themselves: a transform that runs under autocast raises. The model's own forward records
that it did run under autocast (AUTOCAST_SEEN_TO, env), so a test can tell that the variant applied it where it
belongs."""
import os

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

device = "cuda" if torch.cuda.is_available() else "cpu"  # the tests run it on the CPU
MAIN = os.getpid()
seen = open(os.environ["AUTOCAST_SEEN_TO"], "a") if os.environ.get("AUTOCAST_SEEN_TO") else None


class Checked(torch.nn.Module):
    """A transform: fails loudly when it runs under autocast."""

    def forward(self, x):
        if torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda"):
            where = "a DataLoader worker" if os.getpid() != MAIN else "the training process"
            raise RuntimeError(f"a transform ran in a mixed-precision region in {where}")
        return x


class Jitter(Checked):
    def forward(self, x):
        return super().forward(x) + 0.01 * torch.randn_like(x)


class Compose:
    """torchvision.transforms.Compose, without torchvision: a plain callable holding nn.Module transforms."""

    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class Images(Dataset):
    def __init__(self):
        generator = torch.Generator().manual_seed(0)
        self.images = torch.randn(64, 3, 8, 8, generator=generator)
        self.transform = Compose([Checked(), Jitter()])

    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        return self.transform(self.images[i % 64]), i % 4


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8 * 8 * 8, 4)

    def forward(self, x):
        if seen:
            seen.write(f"{torch.is_autocast_enabled(x.device.type)}\n")
            seen.flush()
        return self.head(torch.relu(self.conv(x)).flatten(1))


torch.manual_seed(0)
model = Net().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
loader = DataLoader(Images(), batch_size=16, num_workers=2, multiprocessing_context="fork")

for x, y in loader:
    x, y = x.to(device), y.to(device)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
