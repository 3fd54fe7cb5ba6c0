"""Helpers for the verify tests: the tiny CPU scripts under tests/verify/scripts and fast CPU run settings."""
from __future__ import annotations

from pathlib import Path

import pytest

from tracelint.verify.run import RunSettings

SCRIPTS = Path(__file__).resolve().parent / "scripts"
# CPU timings are no claims: these settings only exercise the harness (few steps, a generous timeout for a
# loaded 2-core machine importing torch).
CPU = RunSettings(warmup=2, steps=3, blocks=3, device="cpu", timeout_s=120)


@pytest.fixture
def scripts() -> Path:
    return SCRIPTS
