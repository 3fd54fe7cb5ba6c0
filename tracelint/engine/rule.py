"""Rule implementations are discovered, never listed by hand: any class with a ``code`` in a module of a rules
package is a rule, and its metadata comes from the catalog file of the same code."""
from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import ClassVar

from tracelint.engine.catalog import RuleDoc, catalog


class Rule:
    code: ClassVar[str] = ""

    @classmethod
    def doc(cls) -> RuleDoc:
        return catalog()[cls.code]


@cache
def discover(package: str, base: type) -> tuple[type, ...]:
    """Every concrete subclass of ``base`` with a ``code`` defined in the modules of ``package``, by code."""
    pkg = importlib.import_module(package)
    found = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        module = importlib.import_module(f"{package}.{info.name}")
        for obj in vars(module).values():
            if (isinstance(obj, type) and issubclass(obj, base) and obj is not base and obj.code
                    and obj.__module__ == module.__name__):
                found[(obj.code, obj.__qualname__)] = obj
    return tuple(found[k] for k in sorted(found))
