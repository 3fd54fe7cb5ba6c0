"""TL204: a tensor built on the host and moved to the device every step (source half and trace twin)."""
from __future__ import annotations

import pytest

from tracelint.testing import TraceBuilder, analyze

LOOP = """\
import torch

def train(model, loader, device):
    for x in loader:
        t = {expr}
        model(x.to(device), t).backward()
"""


@pytest.mark.parametrize("expr, fixed", [
    ("torch.zeros(4, 8).to(device)", "torch.zeros(4, 8, device=device)"),
    ("torch.arange(16).cuda()", 'torch.arange(16, device="cuda")'),
    ("torch.ones(3).cuda(0)", "torch.ones(3, device=0)"),
    ("torch.full((2,), 7.0).to('cuda:1')", "torch.full((2,), 7.0, device='cuda:1')"),
    ("torch.full((2,), 0).to('cuda:1')", "torch.full((2,), 0, device='cuda:1')"),  # a fill value of 0 is no size
    ("torch.eye(3, dtype=torch.bool).to(x.device, non_blocking=True)",
     "torch.eye(3, dtype=torch.bool, device=x.device)"),
    ("torch.zeros(3, device='cpu').to(device)", "torch.zeros(3, device=device)"),
])
def test_a_filled_tensor_moved_every_step_is_fixed_with_device(lint, tmp_path, expr, fixed):
    reported = lint(LOOP.format(expr=expr)).findings
    assert [(f.code, f.location.line, f.fix.safe) for f in reported if f.code == "TL204"] == [("TL204", 5, True)]
    lint(LOOP.format(expr=expr), fix=True)
    assert (tmp_path / "t.py").read_text() == LOOP.format(expr=fixed)
    assert lint(LOOP.format(expr=fixed)).codes("TL204") == []


def test_random_values_get_an_unsafe_fix(lint, tmp_path):
    [finding] = [f for f in lint(LOOP.format(expr="torch.randn(4, 8).cuda()")).findings if f.code == "TL204"]
    assert finding.fix is not None and not finding.fix.safe
    lint(LOOP.format(expr="torch.randn(4, 8).cuda()"), fix=True, unsafe_fixes=True)
    assert 't = torch.randn(4, 8, device="cuda")\n' in (tmp_path / "t.py").read_text()


@pytest.mark.parametrize("expr", [
    "torch.zeros(4).to(device, torch.half)",
    "torch.zeros(4).to(device=device, dtype=torch.half)",
    "torch.zeros(4).to(device, copy=True)",
])
def test_moves_with_other_arguments_are_reported_without_a_fix(lint, expr):
    [finding] = [f for f in lint(LOOP.format(expr=expr)).findings if f.code == "TL204"]
    assert finding.fix is None


@pytest.mark.parametrize("expr", [
    "torch.tensor([1, 2, 3]).cuda()",      # data only the host has: a copy either way
    "torch.from_numpy(a).to(device)",
    "torch.zeros(4).to(torch.float16)",    # not a move
    "torch.zeros(4).to('cpu')",
    "torch.zeros(4).to(x)",                # .to(other tensor): the name does not say device
    "torch.zeros(4, device=device).to(torch.half)",
    "torch.empty(0).to(x[0].device)",      # no element: nothing to fill or copy (DINO's MultiCropWrapper)
    "torch.zeros((0, 4)).cuda()",
    # (a creation then shape or dtype methods, ``torch.zeros(4).float().cuda()``, is reported: test_flow.py)
])
def test_not_a_host_built_tensor_moved(lint, expr):
    assert lint(LOOP.format(expr=expr)).codes("TL204") == []


def test_built_once_outside_the_steps_is_not_reported(lint):
    source = """\
    import torch

    def train(model, loader, device):
        mask = torch.ones(8, 8).to(device)
        for x in loader:
            model(x.to(device), mask).backward()
    """
    assert lint(source).codes("TL204") == []


def test_a_helper_called_every_step_is_reported_in_the_helper(lint):
    source = """\
    import torch

    def positions(n):
        return torch.arange(n).cuda()

    def train(model, loader):
        for x in loader:
            model(x.cuda(), positions(x.size(1))).backward()
    """
    assert lint(source).codes("TL204") == [("TL204", 4)]


# -- trace twin -------------------------------------------------------------------------------------------------
GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"


def _trace(creation: str | None, *, steps: int = 6, every: int = 1, pinned: bool = False) -> TraceBuilder:
    trace = TraceBuilder().device_properties()
    for i in trace.steps(steps):
        trace.kernel(GEMM, gpu_us=500)
        if i % every == 0:
            if creation is not None:
                trace.cpu(creation, 50)
            trace.to_device(1 << 20, pinned=pinned)
        trace.kernel(GEMM, gpu_us=500)
    return trace


def test_trace_twin_reports_the_creation_op_bytes_and_copy_time_per_step():
    [finding] = [f for f in analyze(_trace("aten::zeros")).findings if f.code == "TL204"]
    details = dict(finding.details)
    assert details["op"] == "aten::zeros" and details["bytes_per_step"] == 1 << 20
    assert details["steps_with_copy"] == details["steps"] == 6 and details["copy_us_per_step"] > 0
    assert finding.location.event == "aten::zeros"


@pytest.mark.parametrize("trace", [
    _trace(None),                       # a batch copied to the device: no creation op before it
    _trace("aten::cat"),                # made by another op
    _trace("aten::zeros", every=3),     # in a third of the steps (a periodic evaluation)
], ids=["batch-copy", "other-op", "periodic"])
def test_trace_twin_stays_silent(trace):
    assert "TL204" not in [f.code for f in analyze(trace).findings]


def test_trace_twin_needs_the_copy_right_after_the_creation():
    trace = TraceBuilder().device_properties()
    for _ in trace.steps(4):
        trace.cpu("aten::zeros", 50)
        trace.idle(500)  # Python work in between: the copy is not of that tensor's making
        trace.to_device(1 << 20)
        trace.kernel(GEMM, gpu_us=500)
    assert "TL204" not in [f.code for f in analyze(trace).findings]
