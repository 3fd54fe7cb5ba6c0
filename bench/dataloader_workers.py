#!/usr/bin/env python3
"""Step time with the DataLoader in the main process or in 4 workers, pinned or not, for in-memory datasets: the
measurement behind TL201's cheap-dataset exemption and TL202's note on small batches (rules/TL201-*.md, TL202-*.md).

    python bench/dataloader_workers.py          # on a machine with a CUDA GPU; about 90 s

Prints one line per dataset: ms per training step for ``w0`` (num_workers=0), ``w0p`` (and pin_memory=True), ``w4``,
``w4p``: the median of 5 rounds, each running the four variants in turn (150 steps after 20 warm-up steps, a fresh
loader each), with the spread (min-max) beside it. Copies use ``non_blocking=pin_memory``.
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset, TensorDataset

DEVICE = "cuda"


class Tokens(Dataset):
    """Pre-tokenized sequences held in memory (lit-llama's InstructionDataset): an index and a dtype cast per item."""

    def __init__(self, data):
        self.data = data

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i]["input_ids"].type(torch.int64), self.data[i]["labels"].type(torch.int64)


def pad_collate(batch):
    x, y = zip(*batch, strict=True)
    return pad_sequence(x, batch_first=True), pad_sequence(y, batch_first=True, padding_value=-1)


class Addition(Dataset):
    """minGPT's adder dataset: a few digits formatted and parsed per item."""

    def __init__(self, n):
        self.ix = torch.randperm(n)

    def __len__(self):
        return len(self.ix)

    def __getitem__(self, i):
        idx = self.ix[i].item()
        a, b = idx // 100, idx % 100
        digits = [int(c) for c in f"{a:02d}{b:02d}" + f"{a + b:03d}"[::-1]]
        x, y = torch.tensor(digits[:-1]), torch.tensor(digits[1:])
        y[:3] = -1
        return x, y


class TinyTransformer(nn.Module):
    def __init__(self, vocab, d, layers):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True), layers)
        self.out = nn.Linear(d, vocab)

    def forward(self, x):
        return self.out(self.enc(self.emb(x)))


def classify(model, x, y):
    return F.cross_entropy(model(x), y)


def next_token(model, x, y):
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=-1)


def cases():
    g = torch.Generator().manual_seed(0)
    images = TensorDataset(torch.randn(4096, 3, 64, 64, generator=g), torch.randint(0, 10, (4096,), generator=g))
    cnn = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1),
                        nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    yield "TensorDataset 3x64x64 images, batch 128, small CNN", images, 128, None, cnn, classify
    rows = TensorDataset(torch.randn(200_000, 16, generator=g), torch.randint(0, 4, (200_000,), generator=g))
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    yield "TensorDataset 16-feature rows, batch 32, MLP", rows, 32, None, mlp, classify
    data = []
    for _ in range(4000):
        ids = torch.randint(0, 32000, (int(torch.randint(64, 512, (1,), generator=g)),), generator=g,
                            dtype=torch.int32)
        data.append({"input_ids": ids, "labels": ids.clone()})
    yield ("pre-tokenized sequences, batch 8, 4-layer transformer", Tokens(data), 8, pad_collate,
           TinyTransformer(32000, 512, 4), next_token)
    yield ("adder digits, batch 64, 2-layer transformer", Addition(10_000), 64, None, TinyTransformer(10, 128, 2),
           next_token)


def step_ms(dataset, batch_size, collate, model, loss_fn, workers, pin, steps=150, warmup=20):
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, collate_fn=collate, num_workers=workers,
                        pin_memory=pin, persistent_workers=workers > 0, drop_last=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batches, done, start = iter(loader), 0, 0.0
    while done < steps + warmup:
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            continue
        loss = loss_fn(model, x.to(DEVICE, non_blocking=pin), y.to(DEVICE, non_blocking=pin))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        done += 1
        if done == warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1e3


def main() -> None:
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    variants = ((0, False), (0, True), (4, False), (4, True))
    for name, dataset, batch_size, collate, model, loss_fn in cases():
        model = model.to(DEVICE)
        times: dict[tuple[int, bool], list[float]] = {v: [] for v in variants}
        for _ in range(5):  # rounds of all variants, so that a slow spell of the machine hits them alike
            for workers, pin in variants:
                times[workers, pin].append(step_ms(dataset, batch_size, collate, model, loss_fn, workers, pin))
        row = [f"w{w}{'p' if p else ''}={statistics.median(t):.2f} ({min(t):.2f}-{max(t):.2f})"
               for (w, p), t in times.items()]
        print(f"{name}: {' '.join(row)} ms/step", flush=True)


if __name__ == "__main__":
    main()
