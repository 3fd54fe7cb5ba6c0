"""The synthetic trace builder of the tests, now public as ``tracelint.testing.TraceBuilder`` (import it from there)."""
from tracelint.testing import TraceBuilder as Synth

__all__ = ["Synth"]
