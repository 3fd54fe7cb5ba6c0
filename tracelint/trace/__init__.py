"""The trace half: reads torch.profiler traces and reports what bounds the training step."""
from tracelint.trace.analyze import Report, analyze_paths, analyze_trace

__all__ = ["Report", "analyze_paths", "analyze_trace"]
