"""The one import resolver of the source half: a file's imports, once-assigned aliases and local names, and what a
dotted name written in the file stands for.

Plain Python, no parser: a reader walks the file's statements and tells ``Names`` what each binds
(``import_module``, ``import_from``, ``assign``, ``define``), then calls ``finish``. The model (model.py) reads
libcst's tree into it; the prefilter (screen.py) reads Python's ``ast`` into it, before any libcst parse. Two
questions are asked of it:

- ``qualified(dotted)``: what the name certainly is, for a rule to match on ("torch.utils.data.DataLoader" for
  ``DL``/``tud.DataLoader`` after ``import torch.utils.data as tud``; "builtins.print" for an unshadowed builtin);
  None for a name the file defines itself (a local ``class DataLoader`` is not torch's) or cannot resolve;
- ``spelled(dotted)``: the name with its head replaced through the imports and aliases, as written where it binds
  nothing (the prefilter's looser question: its verdicts must hold whatever a name turns out to be).

It deliberately ignores scoping subtleties (an import inside a function counts file-wide): it is meant to be cheap
(libcst's QualifiedNameProvider is precise, but made TorchFix about ten times slower than a bare parse).
"""
from __future__ import annotations

from tracelint.source.vocab import BUILTINS

_MAX_HOPS = 8  # aliases of aliases followed


class Names:
    """What the names of one file are bound to (see the module docstring)."""

    def __init__(self) -> None:
        self.imports: dict[str, str] = {}  # bound name -> qualified name ("np" -> "numpy", "DL" -> "torch...DL")
        self.aliases: dict[str, str] = {}  # a name assigned exactly once, to a dotted name -> that dotted name
        self.local: set[str] = set()       # names the file binds by def/class/assignment/parameter (not aliases)
        self._candidates: dict[str, str] = {}
        self._assigned: dict[str, int] = {}

    # -- what a reader tells ---------------------------------------------------------------------------------
    def import_module(self, dotted: str, asname: str | None) -> str:
        """``import a.b`` (binds ``a``) or ``import a.b as c``; returns the bound name."""
        if asname:
            self.imports[asname] = dotted
            return asname
        head = dotted.split(".")[0]
        self.imports[head] = head
        return head

    def import_from(self, module: str, level: int, name: str, asname: str | None) -> str:
        """``from [.]module import name [as asname]``; returns the bound name."""
        base = "." * level + module
        bound = asname or name
        self.imports[bound] = f"{base}{name}" if base.endswith(".") else f"{base}.{name}"
        return bound

    def assign(self, name: str, dotted_value: str | None = None) -> None:
        """``name = value`` (any binding: a loop or ``with`` target too); ``dotted_value`` when the value is a plain
        dotted name (``DL = torch.utils.data.DataLoader``): an alias if the name is bound only there."""
        self._assigned[name] = self._assigned.get(name, 0) + 1
        if dotted_value is not None:
            self._candidates[name] = dotted_value

    def define(self, name: str) -> None:
        """``def name``, ``class name``, a parameter: the file's own, never an import."""
        self.local.add(name)

    def finish(self) -> Names:
        """Settle the aliases: a name counts as one only when it is bound exactly once, to a dotted name."""
        for name, count in self._assigned.items():
            if count == 1 and name in self._candidates:
                self.aliases[name] = self._candidates[name]
            else:
                self.local.add(name)
        return self

    # -- what is asked -----------------------------------------------------------------------------------------
    def qualified(self, dotted: str | None, depth: int = 0) -> str | None:
        """What ``dotted`` certainly names, through imports, aliases and builtins; None when the file binds its head
        itself or nothing binds it."""
        if dotted is None or depth > _MAX_HOPS:
            return None
        head, _, rest = dotted.partition(".")
        if head in self.local:
            return None
        if head in self.imports:
            base = self.imports[head]
        elif head in self.aliases:
            base = self.qualified(self.aliases[head], depth + 1)
            if base is None:
                return None
        elif head in BUILTINS:
            base = f"builtins.{head}"
        else:
            return None
        return f"{base}.{rest}" if rest else base

    def spelled(self, dotted: str) -> str:
        """``dotted`` with its head replaced through imports and aliases (a few hops), else as written."""
        for _ in range(_MAX_HOPS):
            head, _, rest = dotted.partition(".")
            if head in self.imports and self.imports[head] != head:
                base = self.imports[head]
            elif head in self.aliases and head not in self.imports:
                base = self.aliases[head]
            else:
                return dotted
            dotted = f"{base}.{rest}" if rest else base
        return dotted
