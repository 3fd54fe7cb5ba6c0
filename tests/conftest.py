"""Shared test fixtures: the repository's paths, the public trace corpus, and GPU-test skipping."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
FIXTURE_TRACES = FIXTURES / "traces"
PUBLIC_TRACES = REPO.parent / "shared" / "traces" / "public"


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


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def public_traces() -> Path:
    """../shared/traces/public: read in place, never copied into the project."""
    if not PUBLIC_TRACES.is_dir():
        pytest.skip("public trace corpus ../shared/traces/public not present")
    return PUBLIC_TRACES


@pytest.fixture(scope="session")
def fixture_traces() -> Path:
    if not any(FIXTURE_TRACES.glob("*.json.gz")):
        pytest.skip("fixtures/traces holds no traces yet")
    return FIXTURE_TRACES


@pytest.fixture(scope="session")
def multi_gpu_traces() -> Path:
    path = REPO.parent / "shared" / "traces" / "multi-gpu"
    if not path.is_dir():
        pytest.skip("../shared/traces/multi-gpu not present")
    return path
