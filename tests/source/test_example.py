"""The bundled example training script (README's first command) gives exactly its known findings."""
from __future__ import annotations

from tracelint.engine import Finding, InputError
from tracelint.source import lint_paths


def test_example_train_script_findings(repo):
    items = list(lint_paths([repo / "fixtures" / "examples" / "train.py"]))
    assert not [i for i in items if isinstance(i, InputError)]
    got = {(i.code, i.location.line) for i in items if isinstance(i, Finding)}
    assert got == {
        ("TL202", 30),  # DataLoader without pinned memory (no TL201: a TensorDataset in memory needs no workers)
        ("TL301", 42),  # zero_grad(set_to_none=False)
        ("TL101", 47),  # loss.item() every step
        ("TL104", 48),  # print of a tensor every step
    }  # line 51's accuracy.item() runs under `if step % args.log_every == 0:`: periodic, not flagged
