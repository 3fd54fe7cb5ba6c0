"""Shared test fixtures: the repository's paths, the trace corpus in ../shared (tests/shared.py: absent in a fresh
clone, its tests skip and the run's end counts them), and GPU-test skipping."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.shared import MULTI_GPU_TRACES, PUBLIC_TRACES, REPO, SKIP_REASON, missing, shared_path, skip_reason

FIXTURES = REPO / "fixtures"
FIXTURE_TRACES = FIXTURES / "traces"
# fixture -> what it reads under ../shared/traces: a test that asks for one (itself or through a fixture) needs it
SHARED_FIXTURES = {"public_traces": "public", "multi_gpu_traces": "multi-gpu"}


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if any("gpu" in item.keywords for item in items) and not _cuda_available():
        skip = pytest.mark.skip(reason="needs torch with a CUDA device")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
    for item in items:  # the ../shared corpus: the marker and the fixtures
        needs = [p for mark in item.iter_markers("shared") for p in (mark.args or ("public",))]
        needs += [path for name, path in SHARED_FIXTURES.items() if name in getattr(item, "fixturenames", ())]
        absent = missing(*needs) if needs else []
        if absent:
            item.add_marker(pytest.mark.skip(reason=skip_reason(absent)))


def pytest_terminal_summary(terminalreporter):
    """How many tests skipped for want of ../shared (a fresh clone), printed only when some did."""
    n = sum(SKIP_REASON in str(getattr(report, "longrepr", "")) for report in terminalreporter.stats.get("skipped", []))
    if n:
        terminalreporter.write_line(f"{n} tests skipped: {SKIP_REASON}")


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def public_traces() -> Path:
    """../shared/traces/public: read in place, never copied into the project."""
    return shared_path(PUBLIC_TRACES)


@pytest.fixture(scope="session")
def multi_gpu_traces() -> Path:
    """../shared/traces/multi-gpu: read in place, never copied into the project."""
    return shared_path(MULTI_GPU_TRACES)


@pytest.fixture(scope="session")
def fixture_traces() -> Path:
    if not any(FIXTURE_TRACES.glob("*.json.gz")):
        pytest.skip("fixtures/traces holds no traces yet")
    return FIXTURE_TRACES
