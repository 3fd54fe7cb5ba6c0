"""A sibling module of train_cpu.py (the verify harness must keep the script's folder on sys.path)."""
import torch


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
