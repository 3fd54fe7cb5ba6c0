"""``HotLoop``, the verdict that a node runs once per training step: what ``loops.Facts.hot_loop`` and
``callers.Callers.per_step`` return, and how a finding's message names the loop."""
from __future__ import annotations

from dataclasses import dataclass

import libcst as cst


@dataclass(frozen=True, slots=True)
class HotLoop:
    """The per-step context a node runs in: the loop (or step hook) and how messages name it."""

    node: cst.CSTNode
    description: str  # "the loop over `train_loader`", "the `while True` loop", "`training_step`"
    # The code reached this loop through a call from another file of the run whose code puts work on a CUDA device
    # (a helper module shows no device of its own: the caller's evidence counts).
    on_device: bool = False
