"""The rule catalog's bad/good example pairs as micro-benchmarks (``tracelint verify --rule TL101``).

Convention: a rule's pair is runnable when its *Example* section and its *Use instead* section each hold a fenced
block opened with ```` ```python verify ```` (the word after the language is the marker; Markdown renderers ignore
it and the catalog still reads the block as a ``python`` example, so it stays a lint test case: the bad one must
fire the rule, the good one must not). The first marked block of each section form the pair. A marked block is a
complete script that runs as written on a CUDA device: imports, a small model and synthetic data, and a training
loop with ``optimizer.step()`` that runs at least warm-up + blocks x steps times (``for step in range(1000):`` or
cycling over a short list of batches; the harness stops it once it has what it needs).
"""
from __future__ import annotations

from dataclasses import dataclass

from tracelint.engine.catalog import RuleDoc

MARKER = "verify"


@dataclass(frozen=True, slots=True)
class Pair:
    code: str
    bad: str
    good: str


def marked_blocks(doc: RuleDoc, section: str) -> list[str]:
    return doc.examples(section, marker=MARKER)


def runnable_pair(doc: RuleDoc) -> Pair | None:
    bad, good = marked_blocks(doc, "Example"), marked_blocks(doc, "Use instead")
    return Pair(doc.code, bad[0], good[0]) if bad and good else None
