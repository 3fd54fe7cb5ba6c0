"""The runtime of verify's device-side rewrites (rewrite.py): what a rewritten script calls instead of syncing.

Loaded by the harness by path (it imports nothing from tracelint) and reachable from the rewritten script as the
builtin ``_tracelint_verify``, so a rewrite adds no import and moves no line. Three tools:

``lazy(t)``
    What ``t.item()`` becomes: a ``Lazy`` that holds the tensor on its device and behaves like the Python number
    it will be. Arithmetic with it stays on the device (``total += lazy(loss)`` is ``total += loss.detach()``,
    summed in float64 or int64 as Python would); anything that needs the number itself (formatting, ``float()``,
    a comparison, ``bool``) reads it then, at the cost of the sync the rewrite meant to avoid.
``host(value)``
    A read of a rewritten variable: a ``Lazy`` becomes its number, and the ``Lazy`` items of a list, dict or tuple
    (two levels deep) are replaced by theirs, lists and dicts in place. All pending values are read together: one
    copy per device and dtype, one sync.
``defer(source, filename, line, globals, locals, values)``
    A logging statement of the loop (``print(f"{loss.item():.4f}")``, ``log.info(...)``, ``wandb.log({...})``,
    ``meter.update(loss.item(), n)``) runs later: its ``.item()`` receivers are evaluated now (``values``, the
    GPU work stays where it was), the statement itself, with each ``.item()`` replaced by the value read, runs at
    the next read. Names it uses are looked up now; the objects they name are not copied (a list mutated in the
    meantime shows its later content: verify only times the variant, it never writes the user's files).

Everything pending is read every ``INTERVAL`` steps (the harness sets one block, and calls ``on_tick`` in the
baseline too, so that each timed block of every run holds exactly one read), and when a ``host()`` asks.
"""
from __future__ import annotations

import builtins
import operator

INTERVAL = 20  # steps between two reads; the harness sets it to the block length
MAX_PENDING = 10_000  # deferred statements kept before a read regardless of the interval

_pending: list[Lazy] = []
_calls: list[tuple] = []
_compiled: dict[tuple[str, str, int], tuple[object, frozenset[str]]] = {}


def _torch():
    import torch

    return torch


class Lazy:
    """A device scalar that stands in for the Python number ``.item()`` would have returned."""

    __slots__ = ("tensor", "value", "ready", "__weakref__")

    def __init__(self, tensor) -> None:
        self.tensor, self.value, self.ready = tensor, None, False
        _pending.append(self)

    # --- the number itself: reading it is a sync -------------------------------------------------------------

    def get(self):
        if not self.ready:
            read_all()
        return self.value

    def __float__(self) -> float:
        return float(self.get())

    def __int__(self) -> int:
        return int(self.get())

    def __index__(self) -> int:
        return operator.index(self.get())

    def __bool__(self) -> bool:
        return bool(self.get())

    def __format__(self, spec: str) -> str:
        return format(self.get(), spec)

    def __str__(self) -> str:
        return str(self.get())

    def __repr__(self) -> str:
        return repr(self.get())

    def __hash__(self) -> int:
        return hash(self.get())

    def __round__(self, ndigits=None):
        return round(self.get(), ndigits) if ndigits is not None else round(self.get())

    def __trunc__(self):
        return int(self.get())

    def __eq__(self, other):
        return self.get() == _number(other)

    def __ne__(self, other):
        return self.get() != _number(other)

    def __lt__(self, other):
        return self.get() < _number(other)

    def __le__(self, other):
        return self.get() <= _number(other)

    def __gt__(self, other):
        return self.get() > _number(other)

    def __ge__(self, other):
        return self.get() >= _number(other)

    # --- arithmetic stays on the device ------------------------------------------------------------------------

    def __add__(self, other):
        return _binary(operator.add, self, other)

    def __radd__(self, other):
        return _binary(operator.add, other, self)

    def __sub__(self, other):
        return _binary(operator.sub, self, other)

    def __rsub__(self, other):
        return _binary(operator.sub, other, self)

    def __mul__(self, other):
        return _binary(operator.mul, self, other)

    def __rmul__(self, other):
        return _binary(operator.mul, other, self)

    def __truediv__(self, other):
        return _binary(operator.truediv, self, other)

    def __rtruediv__(self, other):
        return _binary(operator.truediv, other, self)

    def __pow__(self, other):
        return _binary(operator.pow, self, other)

    def __rpow__(self, other):
        return _binary(operator.pow, other, self)

    def __neg__(self):
        return _unary(operator.neg, self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _unary(abs, self)


def _number(value):
    return value.get() if isinstance(value, Lazy) else value


def _operand(value):
    """A tensor (float64 or int64, as Python computes) for a pending Lazy; the number itself otherwise."""
    if isinstance(value, Lazy):
        if value.ready:
            return value.value
        tensor = value.tensor
        return tensor.double() if tensor.is_floating_point() else tensor.long()
    return value


def _wrap(result):
    torch = _torch()
    return Lazy(result) if isinstance(result, torch.Tensor) else result


def _binary(op, left, right):
    a, b = _operand(left), _operand(right)
    torch = _torch()
    if op is operator.truediv and isinstance(a, torch.Tensor) and not a.is_floating_point():
        a = a.double()
    if op is operator.truediv and isinstance(b, torch.Tensor) and not b.is_floating_point():
        b = b.double()
    if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
        return op(a, b)
    if not isinstance(a, (torch.Tensor, int, float, bool)) or not isinstance(b, (torch.Tensor, int, float, bool)):
        return op(_number(left), _number(right))  # a type torch would not mix with: read the number
    return _wrap(op(a, b))


def _unary(op, value):
    return _wrap(op(_operand(value)))


# --- the API of rewritten scripts ------------------------------------------------------------------------------

def lazy(tensor) -> Lazy:
    """``tensor.item()``, read later."""
    if tensor.numel() != 1:
        return tensor.item()  # raises as the original would
    return Lazy(tensor.detach().reshape(()))


def read_all() -> None:
    """Read every pending value: one copy (and one sync) per device and dtype."""
    if not _pending:
        return
    torch = _torch()
    groups: dict[tuple, list[Lazy]] = {}
    for item in _pending:
        if not item.ready:
            groups.setdefault((item.tensor.device, item.tensor.dtype), []).append(item)
    _pending.clear()
    for items in groups.values():
        values = torch.stack([item.tensor for item in items]).tolist()
        for item, value in zip(items, values, strict=True):
            item.value, item.ready, item.tensor = value, True, None


def host(value, _depth: int = 0):
    """``value`` with its Lazy numbers read (see the module docstring)."""
    if isinstance(value, Lazy):
        return value.get()
    if _depth > 2:
        return value
    if isinstance(value, list):
        if any(isinstance(v, Lazy) or isinstance(v, (list, dict, tuple)) for v in value):
            value[:] = [host(v, _depth + 1) for v in value]
        return value
    if isinstance(value, dict):
        for key, item in list(value.items()):
            if isinstance(item, (Lazy, list, dict, tuple)):
                value[key] = host(item, _depth + 1)
        return value
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(host(v, _depth + 1) for v in value)
    return value


def _names(code) -> frozenset[str]:
    found = set(code.co_names) | set(code.co_varnames) | set(code.co_freevars)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            found |= _names(const)
    return frozenset(found)


def defer(source: str, filename: str, line: int, glob: dict, loc: dict, values: tuple) -> None:
    """Run ``source`` (one statement) at the next read, with the names it uses as they are now; inside it,
    ``__tracelint_values[i]`` is ``values[i].item()``, read then."""
    key = (source, filename, line)
    compiled = _compiled.get(key)
    if compiled is None:
        code = compile("\n" * (line - 1) + source, f"{filename} (deferred by tracelint verify)", "exec")
        compiled = _compiled[key] = (code, _names(code))
    code, names = compiled
    snapshot = {name: loc[name] for name in names if name in loc}
    if loc is not glob:
        snapshot.update((name, glob[name]) for name in names if name not in loc and name in glob)
    torch = _torch()
    values = tuple(lazy(v) if isinstance(v, torch.Tensor) else v.item() for v in values)  # numpy: no sync
    _calls.append((code, glob, snapshot, values))
    if len(_calls) >= MAX_PENDING:
        flush()


def flush() -> None:
    """Read everything pending, then run the deferred statements in their order."""
    read_all()
    calls = list(_calls)
    _calls.clear()
    for code, glob, snapshot, values in calls:
        namespace = dict(glob)
        namespace.setdefault("__builtins__", builtins)
        namespace.update(snapshot)
        namespace["__tracelint_values"] = [host(v) for v in values]
        exec(code, namespace)


def on_tick(ticks: int) -> None:
    """Called by the harness at every step: the read interval."""
    if (_pending or _calls) and ticks % INTERVAL == 0:
        flush()
