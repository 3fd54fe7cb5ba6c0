"""TL5xx, launch overhead: Python loops that walk a device tensor element by element inside a training step
(TL502: ``for i in range(x.size(0)): ... x[i] ...``), each iteration launching its own small kernels."""
from __future__ import annotations

import libcst as cst

from tracelint.source.context import callee_name, iter_descendants
from tracelint.source.rule import SourceRule
from tracelint.source.values import words

# Words of a range bound that count elements (a batch, a sequence, boxes), not a handful of layers or heads.
_ELEMENT_WORDS = frozenset({
    "batch", "bs", "b", "sample", "samples", "seq", "len", "length", "tokens", "elements", "rows", "points", "boxes",
    "nodes", "examples", "images", "imgs", "n",
})
_SIZE_METHODS = frozenset({"size", "numel", "__len__"})


class TensorElementLoop(SourceRule):
    code = "TL502"
    triggers = ("for ",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._loops: list[tuple[cst.CSTNode, cst.Name, cst.BaseExpression, cst.CSTNode]] = []

    def visit_For(self, node: cst.For) -> None:
        self._add(node, node.target, node.iter, node.body)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        comp = self.ctx.parent(node)
        body = getattr(comp, "elt", None) or getattr(comp, "value", None)
        if body is not None:
            self._add(node, node.target, node.iter, body)

    def _add(self, node: cst.CSTNode, target, iterable, body) -> None:
        if isinstance(target, cst.Tuple) and len(target.elements) == 2 and isinstance(iterable, cst.Call) and \
                callee_name(iterable) == "enumerate":
            target = target.elements[1].value  # ``for i, row in enumerate(x)``: the rows of x
        if isinstance(target, cst.Name):
            self._loops.append((node, target, iterable, body))

    def finish(self) -> None:
        # Judged after the traversal, when every node has its parent: the indexing must itself run every step (not
        # under a rare guard: ``if not correct[i] and shown < 5: print(x[i])``).
        reported: set[cst.CSTNode] = set()
        for node, target, iterable, body in self._loops:
            if any(a in reported for a in self.ctx.ancestors(node)):
                continue  # a loop nested in a reported one is part of it
            walked = self._walked(target.value, iterable, body)
            if walked is None:
                continue
            if isinstance(node, cst.For) and (self.facts.loop_description(node) or _recurrent(node.body)):
                continue  # a loop of steps itself, or a recurrence over time (``h = cell(x[t], h)``)
            loop = self.step_loop(node)
            if loop is None or not (loop.on_device or self.facts.device_evidence()):
                continue
            reported.add(node)
            text = " ".join(self.ctx.code_for(iterable).split())
            self.report(node, f"`for {target.value} in {text}` in {loop.description} walks tensor `{walked}` "
                              "element by element: each iteration runs its own small kernels (a launch each, and "
                              "host time between them); write it as one vectorized operation over the tensor")

    def _walked(self, index: str, iterable: cst.BaseExpression, body: cst.CSTNode) -> str | None:
        """The code of the device tensor the loop walks: ``for row in x`` over a tensor ``x``, or ``for i in
        range(B)`` with ``B`` counting elements (``len(x)``, ``x.size(0)``, ``x.shape[0]``, ``batch_size``) and
        ``t[i]`` / ``t[i, j]`` of a tensor ``t`` in the body, where it runs on every iteration."""
        if isinstance(iterable, cst.Call) and callee_name(iterable) == "enumerate" and iterable.args:
            iterable = iterable.args[0].value
        if isinstance(iterable, (cst.Name, cst.Attribute)):
            return self.ctx.code_for(iterable) if self.is_tensor(iterable) else None
        if not isinstance(iterable, cst.Call):
            return None
        if callee_name(iterable) != "range" or self.ctx.qualified_name(iterable.func) not in ("builtins.range", None):
            return None
        bounds = [a.value for a in iterable.args if a.keyword is None and not a.star]
        if not 1 <= len(bounds) <= 2 or not self._counts_elements(bounds[-1]):
            return None
        for sub in iter_descendants(body):
            if isinstance(sub, cst.Subscript) and _indexed_by(sub, index) and self.is_tensor(sub.value) and \
                    self.step_loop(sub) is not None:
                return self.ctx.code_for(sub.value)
        return None

    def _counts_elements(self, bound: cst.BaseExpression, depth: int = 0) -> bool:
        """``len(x)``, ``x.size(0)``, ``x.shape[0]``, ``x.numel()``, or a name counting elements (``batch_size``,
        ``B``, a name bound to one of those): not a literal, not a count of layers or heads."""
        if isinstance(bound, cst.Call):
            return callee_name(bound) in _SIZE_METHODS | {"len"}
        if isinstance(bound, cst.Subscript):
            return isinstance(bound.value, cst.Attribute) and bound.value.attr.value == "shape" or \
                isinstance(bound.value, cst.Call) and callee_name(bound.value) == "size"
        if isinstance(bound, cst.Attribute):
            return bool(words(bound.attr.value) & _ELEMENT_WORDS)
        if isinstance(bound, cst.Name):
            if words(bound.value) & _ELEMENT_WORDS:
                return True
            value = self.facts.value_of(bound)
            return value is not None and depth < 2 and self._counts_elements(value, depth + 1)
        return False


def _indexed_by(sub: cst.Subscript, index: str) -> bool:
    """``t[i]``, ``t[i, j]``, ``t[:, i]``: the loop variable itself is one of the indices."""
    return any(isinstance(el.slice, cst.Index) and isinstance(el.slice.value, cst.Name) and
               el.slice.value.value == index for el in sub.slice)


def _recurrent(body: cst.BaseSuite) -> bool:
    """A name assigned in the body from an expression that reads it (``h = cell(x[t], h)``, ``h, c = lstm(x[t],
    (h, c))``): each iteration needs the previous one's result. A sum (``loss = loss + f(x[i])``, ``+=``) is not:
    it is a reduction, which vectorizes."""
    for node in iter_descendants(body):
        if isinstance(node, cst.Assign):
            if isinstance(node.value, cst.BinaryOperation) and len(node.targets) == 1 and \
                    isinstance(node.targets[0].target, cst.Name) and \
                    any(isinstance(side, cst.Name) and side.value == node.targets[0].target.value
                        for side in (node.value.left, node.value.right)):
                continue
            # names bound (``h``, ``h, c``), not the tensors written into (``out[i] = ...``)
            assigned = {n.value for t in node.targets for n in (t.target, *iter_descendants(t.target))
                        if isinstance(n, cst.Name) and not isinstance(t.target, (cst.Subscript, cst.Attribute))}
            read = {n.value for n in iter_descendants(node.value) if isinstance(n, cst.Name)}
            if isinstance(node.value, cst.Name):
                read.add(node.value.value)
            if assigned & read:
                return True
    return False
