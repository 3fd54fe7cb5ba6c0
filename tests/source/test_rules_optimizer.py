"""TL303: a torch optimizer kept off its multi-tensor (foreach) kernels."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("call, flagged", [
    ("torch.optim.AdamW(params, lr=1e-3, foreach=False)", True),
    ("torch.optim.SGD(params, lr=0.1, fused=False)", True),  # fused=False alone: neither fast path
    ("optim.Adam(params, foreach=False, fused=False)", True),
    ("torch.optim.AdamW(params, lr=1e-3)", False),  # foreach by default on CUDA since torch 2.0
    ("torch.optim.AdamW(params, foreach=False, fused=True)", False),
    ("torch.optim.AdamW(params, fused=False, foreach=True)", False),
    ("torch.optim.Adam(params, foreach=args.foreach)", False),  # not literal
    ("torch.optim.Adam(params, foreach=False, differentiable=True)", False),  # no multi-tensor path
    ("torch.optim.LBFGS(params, foreach=False)", False),  # not an optimizer with a foreach path
    ("timm.optim.AdamW(params, foreach=False)", False),  # another library's
])
def test_optimizer_arguments(lint, call, flagged):
    result = lint(f"import torch\nimport timm\nfrom torch import optim\nopt = {call}\n")
    assert result.codes() == ([("TL303", 4)] if flagged else [])


def test_fix_restores_the_default_in_passes(lint, tmp_path):
    result = lint("import torch\nopt = torch.optim.Adam(params, lr=1e-3, foreach=False, fused=False)\n", fix=True)
    assert (tmp_path / "t.py").read_text() == "import torch\nopt = torch.optim.Adam(params, lr=1e-3)\n"
    assert result.codes() == []


def test_kwargs_dict_is_read_and_reported_without_a_fix(lint):
    result = lint("import torch\ndef make(p):\n    kw = {'lr': 1e-3, 'foreach': False}\n"
                  "    return torch.optim.AdamW(p, **kw)\n")
    assert result.codes() == [("TL303", 4)]
    assert result.findings[0].fix is None


def test_pinned_torch_before_2_0_has_no_foreach_default(lint, tmp_path):
    from tracelint.source.project import _pinned_in

    (tmp_path / "requirements.txt").write_text("torch==1.13.1\n", encoding="utf-8")
    _pinned_in.cache_clear()
    result = lint("import torch\nopt = torch.optim.AdamW(params, lr=1e-3)\n", fix=True)
    assert (tmp_path / "t.py").read_text() == "import torch\nopt = torch.optim.AdamW(params, lr=1e-3, foreach=True)\n"
    (tmp_path / "requirements.txt").write_text("torch==1.10.0\n", encoding="utf-8")
    _pinned_in.cache_clear()
    result = lint("import torch\nopt = torch.optim.AdamW(params, lr=1e-3)\n")
    assert result.codes() == [("TL303", 2)] and result.findings[0].fix is None
    assert "upgrade torch" in result.findings[0].message
    _pinned_in.cache_clear()


def test_not_reported_under_fsdp(lint):
    result = lint("import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
                  "model = FSDP(model)\nopt = torch.optim.AdamW(model.parameters(), foreach=False)\n")
    assert result.codes() == []
