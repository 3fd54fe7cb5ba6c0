"""TL5xx, launch overhead: Python loops that walk a device tensor element by element inside a training step
(TL502: ``for i in range(x.size(0)): ... x[i] ...``), each iteration launching its own small kernels or reading
its element on the host (``.item()``, ``if x[i] != 0``, ``vocab[x[i]]``): a host-device sync per element; graph
breaks in the code a ``torch.compile``d module or function runs (TL503: ``.item()``, ``print``, a tensor-valued
``if``; compiled.py says what is compiled and what breaks)."""
from __future__ import annotations

import libcst as cst

from tracelint.source.rule import SourceRule
from tracelint.source.rules.compiled import breaks, compiled_code
from tracelint.source.semantic.bindings import names_in, unpack_loop
from tracelint.source.semantic.model import callee_name, iter_descendants
from tracelint.source.semantic.values import words

# Words of a range bound that count elements (a batch, a sequence, boxes), not a handful of layers or heads.
_ELEMENT_WORDS = frozenset({
    "batch", "bs", "b", "sample", "samples", "seq", "len", "length", "tokens", "elements", "rows", "points", "boxes",
    "nodes", "examples", "images", "imgs", "n",
    "gt", "gts", "objects", "instances", "detections",  # detection: ``range(num_gt)`` counts an image's boxes
})
_SIZE_METHODS = frozenset({"size", "numel", "__len__"})
_METADATA_METHODS = _SIZE_METHODS | {"dim", "stride", "element_size", "nelement", "is_contiguous"}
# Calls whose result is a tuple of a few tensors (chunks, a values/indices pair), not a tensor walked row by row.
_TUPLE_RESULTS = frozenset({"chunk", "split", "tensor_split", "split_with_sizes", "hsplit", "vsplit", "dsplit",
                            "topk", "sort", "meshgrid", "broadcast_tensors"})
# What reads a tensor's value on the host: methods of the element, and builtins given the element.
_HOST_METHODS = frozenset({"item", "tolist", "cpu", "numpy"})
_HOST_BUILTINS = frozenset({"builtins.int", "builtins.float", "builtins.bool", "builtins.range", "builtins.print",
                            "builtins.str"})
_TRUTH_PARTS = (cst.Comparison, cst.ComparisonTarget, cst.BooleanOperation, cst.UnaryOperation)
_Loop = tuple[cst.CSTNode, cst.BaseExpression, cst.BaseExpression, tuple[cst.CSTNode, ...]]


class TensorElementLoop(SourceRule):
    code = "TL502"
    triggers = ("for ",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._loops: list[_Loop] = []
        self._by_node: dict[cst.CSTNode, _Loop] = {}

    def visit_For(self, node: cst.For) -> None:
        self._loops.append((node, node.target, node.iter, (node.body,)))

    def visit_CompFor(self, node: cst.CompFor) -> None:
        # what each element feeds: the comprehension's value, its conditions and the clauses nested in it
        comp = next((a for a in self.ctx.ancestors(node) if not isinstance(a, cst.CompFor)), None)
        values = [getattr(comp, f, None) for f in ("elt", "key", "value")]
        body = (*(v for v in values if v is not None), *node.ifs,
                *((node.inner_for_in,) if node.inner_for_in is not None else ()))
        if values != [None] * 3:
            self._loops.append((node, node.target, node.iter, body))

    def finish(self) -> None:
        # Judged after the traversal, when every node has its parent: the element must be used every step (not
        # under a rare guard: ``if not correct[i] and shown < 5: print(x[i])``).
        reported: dict[cst.CSTNode, bool] = {}  # loop -> its report names a host read
        self._by_node = {loop[0]: loop for loop in self._loops}
        for node, target, iterable, body in self._loops:
            outer = [reported[a] for a in self.ctx.ancestors(node) if a in reported]
            walk = self._walked(target, iterable, body)
            if walk is None:
                continue
            walked, uses = walk
            reads = any(map(self._host_read, uses))
            if outer and (any(outer) or not reads):
                continue  # part of the reported loop around it; unless it syncs per element inside a loop of kernels
            if isinstance(node, cst.For) and (self.facts.loop_description(node) or
                                              _recurrent(node.body, node.target)):
                continue  # a loop of steps itself, or a recurrence over time (``h = cell(x[t], h)``)
            loop = self.step_loop(node)
            if loop is None or not (loop.on_device or self.facts.device_evidence()):
                continue
            reported[node] = reads
            self.report(node, self._message(target, iterable, walked, uses, loop.description))

    def _message(self, target, iterable, walked: str, uses: list[cst.CSTNode], where: str) -> str:
        code = self.ctx.code_for
        text = " ".join(code(iterable).split())
        read = next((r for r in map(self._host_read, uses) if r is not None), None)
        if read is None:
            return (f"`for {_shown_target(target, iterable, self.ctx)} in {text}` in {where} walks tensor "
                    f"`{walked}` element by element: each iteration runs its own small kernels (a launch each, and "
                    "host time between them); write it as one vectorized operation over the tensor")
        shown = " ".join(code(read).split())
        shown = shown if len(shown) <= 40 else shown[:39] + "…"
        return (f"`for {' '.join(code(target).split())} in {text}` in {where} reads tensor `{walked}` on the host "
                f"element by element (`{shown}`): a host-device sync per element; read it once (`.tolist()` of the "
                "whole tensor) or keep the work on the device")

    # -- what the loop walks ------------------------------------------------------------------------------------
    def _walked(self, target, iterable, body) -> tuple[str, list[cst.CSTNode]] | None:
        """The code of the device tensor the loop walks and the body's uses of its elements: ``for row in x`` over
        a tensor ``x`` (also through ``enumerate`` and ``zip``) whose ``row`` the body reads, or ``for i in
        range(B)`` (``for i, _ in enumerate(x)`` of a tensor) with ``B`` counting elements (``len(x)``,
        ``x.size(0)``, ``x.shape[0]``, ``batch_size``, a count read from a tensor) and ``t[i]`` / ``t[i, j]`` of a
        tensor ``t`` in the body. Only uses that run on every iteration count."""
        index, pairs = unpack_loop(target, iterable)
        for element, source in pairs:
            if not self._walks_rows(source):
                continue
            bound = {n.value for n in names_in(element)}
            uses = [n for part in body for n in iter_descendants(part)
                    if isinstance(n, cst.Name) and n.value in bound and _is_read(n, self.ctx) and
                    not _only_kept(n, self.ctx) and self._runs_each_time(n)]
            if uses:
                return " ".join(self.ctx.code_for(source).split()), uses
            # an element never used: the tensor walked only for its count (its index may still walk another one)
        if index is None:
            return None
        if isinstance(iterable, cst.Call) and callee_name(iterable) == "range":
            if self.ctx.qualified_name(iterable.func) not in ("builtins.range", None):
                return None
            bounds = [a.value for a in iterable.args if a.keyword is None and not a.star]
            if not 1 <= len(bounds) <= 2 or not self._counts_elements(bounds[-1]):
                return None
        elif not (pairs and self._walks_rows(pairs[0][1])):
            return None  # ``enumerate`` of a list: its index counts list items
        uses = [sub for part in body for sub in iter_descendants(part)
                if isinstance(sub, cst.Subscript) and _indexed_by(sub, index) and self.is_tensor(sub.value) and
                self._runs_each_time(sub)]
        return (self.ctx.code_for(uses[0].value), uses) if uses else None

    def _runs_each_time(self, node: cst.CSTNode) -> bool:
        return self.step_loop(node) is not None

    def _walks_rows(self, source: cst.BaseExpression, depth: int = 0) -> bool:
        """``source`` is a device tensor whose rows a loop yields: not a tuple of a few tensors (``x.chunk(2)``,
        ``torch.split(x, n)``, a name bound to one), nor a list of tensors; an element of a list of tensors or a
        row of a tensor (``for y in batches: for v in y[:n]``) is one."""
        if depth > 4:
            return False
        if isinstance(source, cst.Call) and callee_name(source) in _TUPLE_RESULTS:
            return False
        if isinstance(source, cst.Name):
            value = self.facts.value_of(source)
            if value is not None and not self._walks_rows(value, depth + 1) and \
                    isinstance(value, cst.Call) and callee_name(value) in _TUPLE_RESULTS:
                return False
        if self.is_tensor(source):
            return True
        while isinstance(source, (cst.Subscript, cst.Attribute)) and not isinstance(source.value, cst.Call):
            source = source.value  # ``y[:bs]``, ``y.data``: a part of ``y``
        return isinstance(source, cst.Name) and self._element_of_tensors(source, depth)

    def _element_of_tensors(self, name: cst.Name, depth: int) -> bool:
        """``name`` is bound by an enclosing loop or comprehension to an element of a tensor or of a list of
        tensors (``[torch.zeros(n).to(x) for _ in r]``, ``[a, b]`` of tensors, a name bound to one)."""
        for ancestor in self.ctx.ancestors(name):
            if not isinstance(ancestor, (cst.For, cst.CompFor)) or _inside(name, ancestor.iter, self.ctx):
                continue
            for element, source in unpack_loop(ancestor.target, ancestor.iter)[1]:
                if name.value not in {n.value for n in names_in(element)}:
                    continue
                if isinstance(source, cst.Name):
                    source = self.facts.value_of(source) or source
                if isinstance(source, (cst.List, cst.Tuple)):
                    return bool(source.elements) and all(self.is_tensor(e.value) for e in source.elements)
                if isinstance(source, (cst.ListComp, cst.GeneratorExp)):
                    return self.is_tensor(source.elt)
                return self._walks_rows(source, depth + 1)
            return False
        return False

    def _counts_elements(self, bound: cst.BaseExpression, depth: int = 0) -> bool:
        """``len(x)``, ``x.size(0)``, ``x.shape[0]``, ``x.numel()``, a count held in a tensor (``range(n)`` of
        ``n = mask.sum()``, or of an element of a lengths tensor), or a name counting elements (``batch_size``,
        ``B``, a name bound to one of those): not a literal, not a count of layers or heads."""
        if isinstance(bound, cst.Call):
            return callee_name(bound) in _SIZE_METHODS | {"len"} or self.is_tensor(bound)
        if isinstance(bound, cst.Subscript):
            return isinstance(bound.value, cst.Attribute) and bound.value.attr.value == "shape" or \
                isinstance(bound.value, cst.Call) and callee_name(bound.value) == "size"
        if isinstance(bound, cst.Attribute):
            return bool(words(bound.attr.value) & _ELEMENT_WORDS)
        if isinstance(bound, cst.Name):
            if words(bound.value) & _ELEMENT_WORDS or self.is_tensor(bound) or self._element_of_tensors(bound, 0):
                return True
            value = self.facts.value_of(bound)
            return value is not None and depth < 2 and self._counts_elements(value, depth + 1)
        return False

    # -- what the body does with an element ------------------------------------------------------------------
    def _host_read(self, use: cst.CSTNode, depth: int = 0) -> cst.CSTNode | None:
        """The expression that reads the element ``use`` on the host, if it does: ``x.item()`` / ``.tolist()`` /
        ``.cpu()``, ``int(x)`` / ``float(x)`` / ``range(x)`` / ``print(x)``, a truth test (``if x[i] != 0:``), a
        Python container indexed by it (``vocab[x]``: ``__index__``), or a slice bound (``seq[:x]``)."""
        ctx = self.ctx
        node, parent = use, ctx.parent(use)
        while True:  # through what keeps a device value (``row[0]``, ``row.sum()``, ``row * 2``, ``torch.abs(row)``)
            if isinstance(parent, cst.Subscript) and parent.value is node or isinstance(parent, cst.BinaryOperation):
                node, parent = parent, ctx.parent(parent)
            elif isinstance(parent, cst.Attribute) and parent.value is node:
                call = ctx.parent(parent)
                if not (isinstance(call, cst.Call) and call.func is parent) or parent.attr.value in _METADATA_METHODS:
                    return None  # ``row.shape``, ``row.size(0)``: host values without a sync
                if parent.attr.value in _HOST_METHODS:
                    return call
                node, parent = call, ctx.parent(call)
            elif isinstance(parent, cst.Arg) and isinstance(ctx.parent(parent), cst.Call) and \
                    (ctx.qualified_name(ctx.parent(parent).func) or "").startswith("torch."):
                node = ctx.parent(parent)
                parent = ctx.parent(node)
            else:
                break
        if isinstance(parent, cst.Arg):
            call = ctx.parent(parent)
            if isinstance(call, cst.Call) and (ctx.qualified_name(call.func) or "") in _HOST_BUILTINS:
                return call
            return None
        if isinstance(parent, cst.FormattedStringExpression):
            return ctx.parent(parent)
        if isinstance(parent, (cst.For, cst.CompFor)) and parent.iter is node and depth < 3:
            nested = self._by_node.get(parent)  # ``for row in x: [vocab[t] for t in row]``: read in the inner loop
            walk = self._walked(*nested[1:]) if nested is not None else None
            return next((r for r in (self._host_read(u, depth + 1) for u in walk[1]) if r is not None), None) \
                if walk is not None else None
        if isinstance(parent, (cst.Index, cst.Slice)):
            subscript = next((a for a in ctx.ancestors(parent) if isinstance(a, cst.Subscript)), None)
            if subscript is not None and (isinstance(parent, cst.Slice) or not self.is_tensor(subscript.value)):
                return subscript
            return None
        while isinstance(parent, _TRUTH_PARTS):
            node, parent = parent, ctx.parent(parent)
        if isinstance(parent, (cst.If, cst.While, cst.Assert, cst.IfExp, cst.CompIf)) and parent.test is node:
            return node
        return None


def _is_read(name: cst.Name, ctx) -> bool:
    """``name`` is read as a variable: not ``obj.name``, ``f(name=...)`` nor a target it is rebound by."""
    parent = ctx.parent(name)
    if isinstance(parent, cst.Attribute) and parent.attr is name or isinstance(parent, cst.Arg) and \
            parent.keyword is name:
        return False
    return not (isinstance(parent, (cst.AssignTarget, cst.For, cst.CompFor)) and parent.target is name)


def _only_kept(name: cst.Name, ctx) -> bool:
    """The element is only kept, not computed with: put in a container (``{"logits": a}``, ``[a, b]``), bound
    to another name, returned or yielded (``[{"boxes": b} for b in boxes]``: no kernel, no read per element)."""
    parent = ctx.parent(name)
    if isinstance(parent, (cst.Element, cst.StarredElement)) or \
            isinstance(parent, cst.DictElement) and parent.value is name:
        return True
    return isinstance(parent, (cst.Assign, cst.Return, cst.Yield)) and parent.value is name


def _shown_target(target, iterable, ctx) -> str:
    """The loop's target as the kernels message shows it: the element alone for ``for row in x`` and ``for i, row in
    enumerate(x)`` (the wording baselines have fingerprinted), the whole target otherwise (``for a, b in zip(...)``)."""
    if isinstance(target, cst.Name):
        return target.value
    if isinstance(iterable, cst.Call) and callee_name(iterable) == "enumerate" and isinstance(target, cst.Tuple) and \
            len(target.elements) == 2 and isinstance(target.elements[1].value, cst.Name):
        return target.elements[1].value.value
    return " ".join(ctx.code_for(target).split())


def _inside(node: cst.CSTNode, container: cst.CSTNode, ctx) -> bool:
    return node is container or any(a is container for a in ctx.ancestors(node))


def _indexed_by(sub: cst.Subscript, index: str) -> bool:
    """``t[i]``, ``t[i, j]``, ``t[:, i]``: the loop variable itself is one of the indices."""
    return any(isinstance(el.slice, cst.Index) and isinstance(el.slice.value, cst.Name) and
               el.slice.value.value == index for el in sub.slice)
def _recurrent(body: cst.BaseSuite, target: cst.BaseExpression) -> bool:
    """A name the body carries from one iteration to the next: assigned from an expression that reads it before
    the iteration has bound it (``h = cell(x[t], h)``, ``h, c = lstm(x[t], (h, c))``): each iteration needs the
    previous one's result. A sum (``loss = loss + f(x[i])``, ``+=``) is not: it is a reduction, which vectorizes;
    nor is a name the loop's ``target`` binds anew each iteration (``for gt, prob in zip(labels, probs): prob =
    prob[:end]``), nor one the iteration bound before (``words = out[j].argmax(1); words = decode(words)``)."""
    fresh = {n.value for n in names_in(target)}
    for node in iter_descendants(body):
        if isinstance(node, cst.Assign):
            # names bound (``h``, ``h, c``), not the tensors written into (``out[i] = ...``)
            assigned = {n.value for t in node.targets for n in (t.target, *iter_descendants(t.target))
                        if isinstance(n, cst.Name) and not isinstance(t.target, (cst.Subscript, cst.Attribute))}
            summed = isinstance(node.value, cst.BinaryOperation) and len(node.targets) == 1 and \
                isinstance(node.targets[0].target, cst.Name) and \
                any(isinstance(side, cst.Name) and side.value == node.targets[0].target.value
                    for side in (node.value.left, node.value.right))
            if not summed:
                read = {n.value for n in iter_descendants(node.value) if isinstance(n, cst.Name)}
                if isinstance(node.value, cst.Name):
                    read.add(node.value.value)
                if (assigned - fresh) & read:
                    return True
            fresh |= assigned
    return False


class GraphBreakInCompiledStep(SourceRule):
    """A graph break (``compiled.breaks``) in code a ``torch.compile``d module or function of the file runs
    (``compiled.compiled_code``)."""

    code = "TL503"
    triggers = ("compile",)

    def finish(self) -> None:
        for reached in compiled_code(self):
            fn = reached.function
            owner = self.ctx.parent(self.ctx.parent(fn))
            name = f"{owner.name.value}.{fn.name.value}" if isinstance(owner, cst.ClassDef) else fn.name.value
            for node, what in breaks(self, fn):
                self.report(node, f"{what} in `{name}()` breaks the graph of the `torch.compile`d "
                                  f"`{reached.compiled}` (compiled at line {reached.line}): the code after it is "
                                  "compiled as a separate graph, nothing fuses across the break, and the breaking "
                                  "code runs eagerly every step (a `.item()` also waits for the GPU). Keep the "
                                  "value on the device (or log it outside the compiled code): removing such a "
                                  "break measured 1.16x on the project's host-bound compiled GPT and 1.01x at a "
                                  "GPU-bound size (H200)")
