"""The trace half: reads torch.profiler traces and reports what bounds the training step."""
from __future__ import annotations

__all__ = ["Report", "analyze_paths", "analyze_trace"]


def __getattr__(name: str):
    # Lazy, so that finding the traces of a folder (tracelint.trace.files) does not load the analyzer.
    if name in __all__:
        from tracelint.trace import analyze

        return getattr(analyze, name)
    raise AttributeError(name)
