"""The rule catalog: one Markdown file per rule in rules/, holding its metadata, docs and examples.

A rule file starts with a front-matter block of ``key: value`` lines between ``---`` fences::

    ---
    code: TL101
    name: host-sync-in-loop
    family: host-device synchronization
    severity: warning
    implemented-by: source, trace
    fix: none | safe | unsafe
    thresholds: key=value, key=value      (optional; defaults of the trace rule)
    sites: item, host-copy                (optional, source rules; see below)
    ---

followed by the sections ``## What it does``, ``## Why is this bad?``, ``## Example``, ``## Use instead`` and
``## Measured effect``. Fenced ``python`` blocks under *Example* must trigger the rule; those under *Use instead*
must not. The test suite runs them. A block whose opening fence says ```` ```python trace ```` is a trace scenario
(built with ``tracelint.testing``) for the trace half; the other ``python`` blocks are source code.

``sites`` names the kinds of site (``tracelint.source.screen``) a source rule can report on: a file in which none
of them occurs is not parsed for the rule. A source rule without ``sites`` runs on every file that mentions torch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from tracelint.engine.severity import Severity

REQUIRED_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "Measured effect")
TRACE_MARKER = "trace"
_FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```", re.M | re.S)


class CatalogError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class RuleDoc:
    code: str
    name: str
    family: str
    severity: Severity
    implemented_by: frozenset[str]
    fix: str
    path: Path
    text: str
    sections: dict[str, str] = field(hash=False, compare=False)
    thresholds: dict[str, float] = field(hash=False, compare=False)
    sites: frozenset[str] | None = None  # None: the rule is never screened out


    def examples(self, section: str, marker: str | None = None) -> list[str]:
        """The fenced python blocks of one section ("Example" = bad, "Use instead" = good); with ``marker``, only
        the blocks whose opening fence carries that word after the language (```` ```python verify ````)."""
        body = self.sections.get(section, "")
        return [code for lang, info, code in _FENCE.findall(body)
                if lang in ("python", "py") and (marker is None or marker in info.split())]

    def _source_examples(self, section: str) -> list[str]:
        body = self.sections.get(section, "")
        return [code for lang, info, code in _FENCE.findall(body)
                if lang in ("python", "py") and TRACE_MARKER not in info.split()]

    @property
    def bad_examples(self) -> list[str]:
        """The source code under *Example* (trace scenarios excluded)."""
        return self._source_examples("Example")

    @property
    def good_examples(self) -> list[str]:
        """The source code under *Use instead* (trace scenarios excluded)."""
        return self._source_examples("Use instead")

    @property
    def bad_traces(self) -> list[str]:
        """The ```` ```python trace ```` scenarios under *Example*: each must make the trace rule fire."""
        return self.examples("Example", TRACE_MARKER)

    @property
    def good_traces(self) -> list[str]:
        """The ```` ```python trace ```` scenarios under *Use instead*: the trace rule must stay silent on each."""
        return self.examples("Use instead", TRACE_MARKER)

    @property
    def summary(self) -> str:
        first = self.sections.get("What it does", "").strip().split("\n\n")[0]
        return " ".join(first.split())


def catalog_dir() -> Path:
    here = Path(__file__).resolve().parent.parent
    installed = here / "_catalog"  # wheel layout (see pyproject's force-include)
    return installed if installed.is_dir() else here.parent / "rules"


def parse_rule_file(path: Path) -> RuleDoc:
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        raise CatalogError(f"{path}: missing front matter")
    try:
        head, body = text[4:].split("\n---\n", 1)
    except ValueError:
        raise CatalogError(f"{path}: unterminated front matter") from None
    meta: dict[str, str] = {}
    for line in head.splitlines():
        if line.strip():
            key, _, value = line.partition(":")
            meta[key.strip().lower()] = value.strip()
    for key in ("code", "name", "family", "severity", "implemented-by"):
        if key not in meta:
            raise CatalogError(f"{path}: front matter lacks {key!r}")
    sections: dict[str, str] = {}
    for chunk in re.split(r"^## ", body, flags=re.M)[1:]:
        title, _, content = chunk.partition("\n")
        sections[title.strip()] = content
    missing = [s for s in REQUIRED_SECTIONS if s not in sections]
    if missing:
        raise CatalogError(f"{path}: missing sections {missing}")
    thresholds: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in meta.get("thresholds", "").split(","))):
        key, _, value = item.partition("=")
        thresholds[key.strip()] = float(value)
    sites = frozenset(p.strip() for p in meta["sites"].split(",") if p.strip()) if "sites" in meta else None
    return RuleDoc(
        code=meta["code"],
        name=meta["name"],
        family=meta["family"],
        severity=Severity.parse(meta["severity"]),
        implemented_by=frozenset(p.strip() for p in meta["implemented-by"].split(",") if p.strip()),
        fix=meta.get("fix", "none"),
        path=path,
        text=text,
        sections=sections,
        thresholds=thresholds,
        sites=sites,
    )


@lru_cache(maxsize=1)
def catalog() -> dict[str, RuleDoc]:
    rules = {}
    for path in sorted(catalog_dir().glob("TL*.md")):
        doc = parse_rule_file(path)
        if doc.code in rules:
            raise CatalogError(f"{path}: duplicate rule code {doc.code}")
        rules[doc.code] = doc
    return rules


def rule_name(code: str) -> str:
    """The rule's name (``item-in-loop``) for a code, or the code itself when the catalog does not know it."""
    doc = catalog().get(code)
    return doc.name if doc else code
