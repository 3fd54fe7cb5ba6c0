"""../shared/traces, the trace corpus beside the repository (never copied into it), and the one way tests reach it.

A fresh clone has no ../shared: every test that reads it skips there, with a reason that starts with SKIP_REASON,
and the end of the pytest run says how many did (tests/conftest.py). A test says what it reads in one of three ways:

- the fixtures ``public_traces`` (../shared/traces/public) and ``multi_gpu_traces`` (../shared/traces/multi-gpu),
  also through a fixture that asks for one of them: the test is skipped at collection where the folder is absent;
- the marker ``@pytest.mark.shared(PATH, ...)``, PATH under ../shared/traces (a str, or a Path built from the
  constants below; none: the public corpus): skipped at collection unless every PATH is there;
- ``shared_path(PATH, ...)`` inside a test or a fixture: the path, or the test skips.

No pytest at import: tests/trace/fuzzing.py (and through it bench/fuzz_traces.py) take the paths from here.
"""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED_TRACES = REPO.parent / "shared" / "traces"
PUBLIC_TRACES = SHARED_TRACES / "public"
MULTI_GPU_TRACES = SHARED_TRACES / "multi-gpu"
SKIP_REASON = "../shared/traces not present"


def _named(path: str | Path) -> str:
    path = SHARED_TRACES / path
    try:
        return str(path.relative_to(SHARED_TRACES))
    except ValueError:
        return str(path)


def missing(*paths: str | Path) -> list[str]:
    """Those of ``paths`` (under ../shared/traces; none given: the public corpus) that are absent, as named there."""
    return [_named(p) for p in (paths or ("public",)) if not (SHARED_TRACES / p).exists()]


def skip_reason(absent: list[str]) -> str:
    return f"{SKIP_REASON} (needs {', '.join(absent)})"


def shared_path(*parts: str | Path) -> Path:
    """``../shared/traces/<parts...>``, or skip the calling test where it is absent."""
    path = SHARED_TRACES.joinpath(*parts)
    if not path.exists():
        import pytest

        pytest.skip(skip_reason([_named(path)]))
    return path
