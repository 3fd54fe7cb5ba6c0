"""tracelint: a performance linter for PyTorch training (source code and torch.profiler traces).

The public API::

    from tracelint import lint_paths, analyze_trace
    for finding in lint_paths(["train.py"]): ...
    report = analyze_trace("trace.json.gz"); print(report.verdict)
    with tracelint.profile(schedule=torch.profiler.schedule(wait=5, warmup=2, active=3)) as prof: ...
"""
from __future__ import annotations

from tracelint.engine.version import __version__

__all__ = ["analyze_trace", "lint_paths", "on_trace_ready", "profile", "__version__"]


def __getattr__(name: str):
    # Lazy, so that `import tracelint` stays cheap for the pre-commit path and never pulls the other half.
    if name == "lint_paths":
        from tracelint.source import lint_paths

        return lint_paths
    if name == "on_trace_ready":
        from tracelint.trace.profiler import on_trace_ready

        return on_trace_ready
    if name == "profile":
        from tracelint.profile import profile

        # Importing the submodule bound `tracelint.profile` to the module; bind the function in its place.
        globals()["profile"] = profile
        return profile
    raise AttributeError(f"module 'tracelint' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def analyze_trace(path, **options):
    """``tracelint.trace.analyze_trace`` (one trace file in, a Report out; same options), whose Report shows itself in
    Jupyter as the HTML report."""
    from dataclasses import replace

    from tracelint.render.html import notebook_frame
    from tracelint.trace.analyze import analyze_trace as analyze

    return replace(analyze(path, **options), html=notebook_frame)
