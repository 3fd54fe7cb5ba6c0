"""TL101-TL106: host-device synchronizations inside per-step loops (``.item()``, ``.cpu()``, ``float(t)``,
``print(t)``, ``torch.cuda.synchronize()``, boolean-mask indexing).

Each rule reports a site only when ``SourceRule.step_loop`` places it in a per-step loop without a periodic or rare
guard (and the host value is not needed there: ``SourceRule.needs_host_value``), in code that may run on a device
(the file shows device evidence, ``Values.device_evidence``, or the loop was reached from a file that does,
``HotLoop.on_device``), and only when local code does not show the value is already on the host
(``SourceRule.may_be_tensor``). Rules that need a tensor to exist at all
(TL103, TL104, TL106 masks) ask for positive evidence of one (``SourceRule.is_tensor``); ``.item()`` and ``.cpu()``
exist only on tensors (and numpy arrays), so TL101/TL102 report unless the value is known to be on the host.
"""
from __future__ import annotations

import re

import libcst as cst

from tracelint.engine import Fix
from tracelint.source.rule import SourceRule
from tracelint.source.semantic.callers import HotLoop
from tracelint.source.semantic.model import callee_name, dotted_name
from tracelint.source.semantic.values import Kind, is_python_scalar, is_to_cpu, words
from tracelint.source.vocab import DATA_DEPENDENT as _DATA_DEPENDENT
from tracelint.source.vocab import HOST_OUTPUT_CALLS as _HOST_OUTPUT_CALLS
from tracelint.source.vocab import HOST_OUTPUT_MODULES as _HOST_OUTPUT_MODULES
from tracelint.source.vocab import JOINS as _JOINS
from tracelint.source.vocab import LOGGING as _LOGGING
from tracelint.source.vocab import MASK_KEEPING as _MASK_KEEPING
from tracelint.source.vocab import MASK_METHODS as _MASK_METHODS
from tracelint.source.vocab import SYNCHRONIZE as _SYNCHRONIZE

_STREAMS = frozenset({"torch.cuda.current_stream", "torch.cuda.default_stream"})


def _snippet(ctx, node: cst.CSTNode, limit: int = 48) -> str:
    text = " ".join(ctx.code_for(node).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _method(call: cst.Call) -> str | None:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


def _sync_loop(rule: SourceRule, node: cst.CSTNode) -> HotLoop | None:
    """The per-step loop in which a sync at ``node`` waits for the GPU every step; None where it does not, where
    the host value is inherently needed (``env.step(action.item())``), or where nothing runs on a device."""
    loop = rule.step_loop(node)
    return None if loop is None or rule.needs_host_value(node) else _on_device(rule, loop)


def _on_device(rule: SourceRule, loop: HotLoop | None) -> HotLoop | None:
    """``loop`` where its code may run on an accelerator: the file shows device evidence, or the loop was reached
    through a call from a file that does. A script that never leaves the CPU has no host-device sync."""
    return loop if loop is not None and (loop.on_device or rule.facts.device_evidence()) else None


# --------------------------------------------------------------------------------------------------------------
class ItemInLoop(SourceRule):
    code = "TL101"
    triggers = (".item(", "add_scalar")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._accumulations: list[tuple[cst.Call, cst.AugAssign, HotLoop]] = []
        self._reported: list[tuple[cst.Call, str]] = []

    def visit_Call(self, node: cst.Call) -> None:
        if _method(node) == "add_scalar":
            self._logged_scalar(node)
            return
        if _method(node) != "item" or node.args:
            return
        receiver = node.func.value
        loop = _sync_loop(self, node)
        if loop is None or not self.may_be_tensor(receiver):
            return
        message = (f"`{_snippet(self.ctx, node)}` in {loop.description} copies a scalar to the host and waits "
                   f"for the GPU every step")
        accumulation = _accumulation_of(node, self.ctx)
        if accumulation is not None:
            self._accumulations.append((node, accumulation, loop))
            self._reported.append((node, message))
        else:
            self.report(node, message)

    def _logged_scalar(self, node: cst.Call) -> None:
        """``writer.add_scalar(tag, loss)``: TensorBoard (and tensorboardX) read a tensor value with ``.item()``."""
        value = next((a.value for a in node.args if a.keyword is not None and a.keyword.value == "scalar_value"),
                     None)
        positional = [a.value for a in node.args if a.keyword is None and not a.star]
        if value is None and len(positional) >= 2:
            value = positional[1]
        if value is None or not self.is_tensor(value):
            return
        loop = _sync_loop(self, node)
        if loop is not None:
            self.report(node, f"`{_snippet(self.ctx, node)}` in {loop.description} logs a tensor: TensorBoard reads "
                              "it with .item(), which copies a scalar to the host and waits for the GPU every step")

    def finish(self) -> None:
        # The accumulator fix needs every read of the name, including those after the loop: decided at the end.
        fixes = {id(call): _accumulator_fix(call, aug, loop, self) for call, aug, loop in self._accumulations}
        for call, message in self._reported:
            self.report(call, message, fix=fixes.get(id(call)))


def _accumulation_of(call: cst.Call, ctx) -> cst.AugAssign | None:
    """The ``total += loss.item()`` (or ``+= loss.item() * n``) statement ``call`` is the added value of."""
    parent = ctx.parent(call)
    if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, (cst.Multiply, cst.Divide)):
        value, parent = parent, ctx.parent(parent)
    else:
        value = call
    if (isinstance(parent, cst.AugAssign) and parent.value is value and isinstance(parent.operator, cst.AddAssign)
            and isinstance(parent.target, cst.Name)):
        return parent
    return None


def _accumulator_fix(call: cst.Call, aug: cst.AugAssign, loop: HotLoop, rule: SourceRule) -> Fix | None:
    """``total += loss.item()`` -> ``total += loss.detach()``, and every read of ``total`` -> ``float(total)``.

    Only in the simple case where that is mechanically correct: ``total`` is bound in this function only by float
    literals (``total = 0.0``) and this one ``+=``, holds exactly this one ``.item()``, is not mentioned elsewhere
    (nested functions, strings, ``global``), and is never read on an unguarded path of the per-step loop.
    ``float()`` keeps reads correct when the loop ran zero times (``total`` is still the float literal).
    """
    ctx, facts = rule.ctx, rule.facts
    name = aug.target.value
    if sum(1 for n in _names_in(aug.value) if n == "item") != 1:
        return None
    scope = facts.scope_of(aug)
    table = facts.bindings(scope)
    bindings = table.bindings.get(name, [])
    for binding in bindings:
        if binding.augmented:
            if binding.value is not aug.value:
                return None
        elif not (isinstance(binding.value, cst.Float) and binding.element is None):
            return None
    names = [node for node in table.order if isinstance(node, cst.Name) and node.value == name]
    if len(re.findall(rf"\b{re.escape(name)}\b", ctx.code_for(scope))) != len(names):
        return None
    receiver = call.func.value
    edits = [rule.edit(call, f"{ctx.code_for(receiver)}.detach()")]
    for node in names:
        parent = ctx.parent(node)
        if node is aug.target:
            continue
        if isinstance(parent, cst.AssignTarget) and parent.target is node:
            continue  # a reset ``total = 0.0``
        if (isinstance(parent, cst.Attribute) and parent.attr is node) or \
                (isinstance(parent, cst.Arg) and parent.keyword is node) or not isinstance(parent, cst.CSTNode):
            return None
        if not isinstance(parent, (cst.Arg, cst.BinaryOperation, cst.Comparison, cst.FormattedStringExpression,
                                   cst.Element, cst.DictElement, cst.Return, cst.Assign, cst.AugAssign,
                                   cst.UnaryOperation, cst.Index)):
            return None
        if facts.hot_loop(node) is not None:
            return None  # read every step: the fix would not remove the sync
        edits.append(rule.edit(node, f"float({name})"))
    title = f"accumulate `{ctx.code_for(receiver)}.detach()` on the device; read `{name}` with float() after the loop"
    return Fix(title, tuple(edits), safe=False)


def _names_in(node: cst.CSTNode) -> list[str]:
    """Method names called in ``node`` (cheap: only the handful of nodes of one statement)."""
    found: list[str] = []

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            if isinstance(call.func, cst.Attribute):
                found.append(call.func.attr.value)

    node.visit(_Calls())
    return found


# --------------------------------------------------------------------------------------------------------------
class DeviceToHostCopyInLoop(SourceRule):
    code = "TL102"
    triggers = (".cpu(", ".tolist(", ".numpy(", ".to(")

    def visit_Call(self, node: cst.Call) -> None:
        method = _method(node)
        if method == "cpu" or method == "tolist":
            if node.args:
                return
        elif method == "numpy":
            # A CUDA tensor's .numpy() raises; only .numpy(force=True) copies (torch >= 2.1).
            if not any(a.keyword is not None and a.keyword.value == "force" and
                       not (isinstance(a.value, cst.Name) and a.value.value == "False") for a in node.args):
                return
        elif method != "to" or not is_to_cpu(node, self.ctx):
            return
        loop = _sync_loop(self, node)
        if loop is None or not self.may_be_tensor(node.func.value) or _feeds_output(self, node):
            return
        # numpy arrays have .tolist() too: there, a value of unknown kind (a parameter) is not evidence of a tensor
        if method == "tolist" and not self.is_tensor(node.func.value):
            return
        self.report(node, f"`{_snippet(self.ctx, node)}` in {loop.description} copies device memory to the host "
                          f"and waits for the GPU every step")


def _feeds_output(rule: SourceRule, node: cst.CSTNode) -> bool:
    """The host copy ``node`` goes, in its statement, into a call that writes or plots the values
    (``save_image(x.cpu())``, ``Image.fromarray(x.cpu().numpy())``, ``plt.imshow(...)``, ``np.save``): the host
    needs them whatever the code does, so the copy is not a waste (writing every batch is the task)."""
    ctx = rule.ctx
    for parent in ctx.ancestors(node):
        if isinstance(parent, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return False
        if isinstance(parent, cst.Call):
            name = ctx.qualified_name(parent.func) or ""
            if callee_name(parent) in _HOST_OUTPUT_CALLS or \
                    any(name == m or name.startswith(m + ".") for m in _HOST_OUTPUT_MODULES):
                return True
    return False


# --------------------------------------------------------------------------------------------------------------
class TensorToPythonScalarInLoop(SourceRule):
    code = "TL103"
    triggers = ("float(", "int(", "bool(", "if ", "while ", "max(", "min(", "assert ", "math", "not ", "any(",
                "all(")

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func)
        positional = [a.value for a in node.args if a.keyword is None and not a.star]
        if name in ("builtins.float", "builtins.int", "builtins.bool") and len(node.args) == len(positional) == 1:
            why = "reads a tensor's value on the host"
        elif name in ("builtins.max", "builtins.min") and len(positional) >= 2:
            why = "compares tensors on the host"
        elif name and name.startswith("math.") and positional:
            why = "converts a tensor to a Python float on the host"  # math.isnan(t), math.sqrt(t): t.__float__()
        elif name in ("builtins.any", "builtins.all") and len(positional) == 1 and \
                isinstance(positional[0], (cst.GeneratorExp, cst.ListComp)) and \
                not _is_not(positional[0].elt) and self.is_tensor(positional[0].elt):
            why = "takes the truth value of each tensor on the host"  # any(torch.isnan(p.grad).any() for p in ps)
            positional = [positional[0].elt]
        else:
            return
        if not any(self.is_tensor(value) for value in positional):
            return
        loop = _sync_loop(self, node)
        if loop is not None:
            self.report(node, f"`{_snippet(self.ctx, node)}` in {loop.description} {why}: "
                              "a host-device sync every step")

    def _test(self, node: cst.CSTNode, test: cst.BaseExpression, keyword: str) -> None:
        # The test runs where its statement runs; a while test also runs on every iteration of its own loop. The
        # tensor test first: most tests are not of tensors, and placing a node in a loop may follow calls.
        if self._tensor_truth(test) is None:
            return
        description = self.facts.loop_description(node) if isinstance(node, cst.While) else None
        loop = _on_device(self, HotLoop(node, description)) if description and self.facts.imports_torch() \
            else _sync_loop(self, node)
        if loop is not None:
            self.report(test, f"`{keyword} {_snippet(self.ctx, test)}` in {loop.description} takes the truth value "
                              f"of a tensor on the host: a host-device sync every step")

    def _tensor_truth(self, test: cst.BaseExpression) -> cst.BaseExpression | None:
        """The part of an if/while/assert test whose truth value is a tensor's, if any."""
        if isinstance(test, cst.BooleanOperation):
            return self._tensor_truth(test.left) or self._tensor_truth(test.right)
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            return self._tensor_truth(test.expression)
        return test if self.is_tensor(test) else None

    def visit_If(self, node: cst.If) -> None:
        self._test(node, node.test, "if")

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._test(node, node.test, "if")

    def visit_CompIf(self, node: cst.CompIf) -> None:
        self._test(node, node.test, "if")

    def visit_UnaryOperation(self, node: cst.UnaryOperation) -> None:
        """``not t`` outside a test (a test's truth value is reported with its statement): ``ok = not
        torch.isfinite(loss).all()``, ``any(not torch.isfinite(p.grad).all() for p in params)``."""
        if not isinstance(node.operator, cst.Not) or not self.is_tensor(node.expression):
            return
        part, parent = node, self.ctx.parent(node)
        while isinstance(parent, (cst.BooleanOperation, cst.UnaryOperation)):
            part, parent = parent, self.ctx.parent(parent)
        if isinstance(parent, (cst.If, cst.While, cst.Assert, cst.IfExp, cst.CompIf)) and parent.test is part:
            return
        loop = _sync_loop(self, node)
        if loop is not None:
            self.report(node, f"`{_snippet(self.ctx, node)}` in {loop.description} takes the truth value of a "
                              "tensor on the host: a host-device sync every step")

    def visit_While(self, node: cst.While) -> None:
        self._test(node, node.test, "while")

    def visit_Assert(self, node: cst.Assert) -> None:
        self._test(node, node.test, "assert")


def _is_not(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not)


# --------------------------------------------------------------------------------------------------------------
class TensorFormattingInLoop(SourceRule):
    code = "TL104"
    triggers = ("print(", "f\"", "f'", ".format(", "%", "str(", "repr(", "set_postfix", "log")

    def _check(self, node: cst.CSTNode, values) -> None:
        """Report ``node`` when it runs every step and one of the formatted ``values`` is a tensor."""
        tensor = self._first_tensor(values) if values else None  # first: most formatted values are not tensors
        loop = _sync_loop(self, node) if tensor is not None else None
        if loop is not None:
            self.report(node, f"`{_snippet(self.ctx, node)}` in {loop.description} formats tensor "
                              f"`{_snippet(self.ctx, tensor, 32)}` (Tensor.__format__ calls .item()): "
                              f"a host-device sync every step")

    def _first_tensor(self, exprs) -> cst.BaseExpression | None:
        for expr in exprs:
            if isinstance(expr, cst.Tuple):
                found = self._first_tensor(e.value for e in expr.elements)
                if found is not None:
                    return found
            elif self.is_tensor(expr):
                return expr
        return None

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        name = self.ctx.qualified_name(func)
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        if name in ("builtins.print", "builtins.str", "builtins.repr"):
            values = [a.value for a in node.args if a.keyword is None and not a.star]  # not sep=, file=
        elif method == "format" and isinstance(func.value, (cst.SimpleString, cst.ConcatenatedString)) or \
                method in ("set_postfix", "set_postfix_str", "set_description"):
            values = [a.value for a in node.args if not a.star]
        elif method in _LOGGING and node.args and \
                words(self.ctx.code_for(func.value)) & {"log", "logger", "logging"}:
            values = [a.value for a in node.args[1:] if not a.star]  # the format string itself is not a tensor
        else:
            return
        self._check(node, values)

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        self._check(node, [part.expression for part in node.parts if isinstance(part, cst.FormattedStringExpression)])

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.Modulo) and isinstance(node.left, (cst.SimpleString, cst.ConcatenatedString)):
            self._check(node, [node.right])


# --------------------------------------------------------------------------------------------------------------
class CudaSynchronizeInLoop(SourceRule):
    code = "TL105"
    triggers = ("synchronize",)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        name = self.ctx.qualified_name(func)
        if name not in _SYNCHRONIZE:
            if not (isinstance(func, cst.Attribute) and func.attr.value == "synchronize"
                    and isinstance(func.value, cst.Call) and self.ctx.qualified_name(func.value.func) in _STREAMS):
                return
        loop = _sync_loop(self, node)
        if loop is not None:
            self.report(node, f"`{_snippet(self.ctx, node)}` in {loop.description} blocks the host until the GPU "
                              f"has finished all queued work, every step")


# --------------------------------------------------------------------------------------------------------------
class NonzeroInLoop(SourceRule):
    code = "TL106"
    triggers = ("nonzero", "where", "masked_select", "unique", "argwhere", "[")

    def _report(self, node: cst.CSTNode, what: str) -> None:
        loop = _sync_loop(self, node)
        if loop is not None:
            self.report(node, f"`{_snippet(self.ctx, node)}` in {loop.description} {what}: the host waits for the "
                              f"GPU to count the elements every step")

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        name = self.ctx.qualified_name(func)
        if name and name.startswith("torch."):
            leaf = name[6:]
            if node.args and node.args[0].keyword is None and not self.may_be_tensor(node.args[0].value):
                return  # a host tensor's nonzero counts on the host (a batch built on the CPU, moved later)
            if leaf in _DATA_DEPENDENT:
                self._report(node, "has a data-dependent output size")
            elif leaf == "where" and len(node.args) == 1 and node.args[0].keyword is None:
                self._report(node, "(one-argument where, i.e. nonzero) has a data-dependent output size")
            return
        if _method(node) in _DATA_DEPENDENT and name is None and _sync_loop(self, node) and \
                self.may_be_tensor(func.value):
            self._report(node, "has a data-dependent output size")

    def visit_Subscript(self, node: cst.Subscript) -> None:
        # the mask may be one index among several (``x[:, mask]``, ``x[idx, mask]``); a slice or ``...`` beside it
        # keeps a Python-scalar write a masked fill (measured: ``x[:, m] = 0.0`` does not sync, ``x[idx, m] = 0.0``
        # does), a tensor index beside it does not
        indices = [el.slice.value if isinstance(el.slice, cst.Index) else None for el in node.slice]
        candidates = [i for i in indices if i is not None and self._mask_like(i, 0)]
        if not candidates or _sync_loop(self, node) is None:
            return
        parent = self.ctx.parent(node)
        if isinstance(parent, cst.AssignTarget) and parent.target is node:
            assign = self.ctx.parent(parent)
            value = assign.value if isinstance(assign, cst.Assign) else None
            if value is None or isinstance(value, cst.Subscript):
                return  # ``x[m] = y[m]`` is reported at the read
            if is_python_scalar(value, self.ctx):
                if len(indices) == 1:
                    return  # ``x[mask] = 0.0`` is masked_fill_
                what = "(boolean-mask assignment beside an index tensor)"
            elif self.is_tensor(value):
                what = "(boolean-mask assignment of a tensor)"
            else:
                return
            mask = self._mask_index(candidates, node.value)
            if mask is None or what.endswith("index tensor)") and not any(
                    i is not None and i is not mask and self.is_tensor(i) for i in indices):
                return  # ``x[:, mask] = 0.0`` is masked_fill_ too
            self._report(node, f"{what} needs the mask's nonzero indices")
        elif self.may_be_tensor(node.value) and self._mask_index(candidates, node.value) is not None:
            update = isinstance(parent, cst.AugAssign) and parent.target is node
            self._report(node, "(boolean-mask update) reads and writes through the mask's nonzero indices" if update
                         else "(boolean-mask indexing) has a data-dependent shape")

    def _mask_index(self, candidates: list[cst.BaseExpression], indexed: cst.BaseExpression):
        """The one index among ``candidates`` that is a boolean mask (None: none, or several)."""
        masks = [c for c in candidates if self._is_mask(c, indexed)]
        return masks[0] if len(masks) == 1 else None

    @staticmethod
    def _mask_like(expr: cst.BaseExpression, depth: int) -> bool:
        """Cheap shape test before any inference: could this index be a boolean mask?"""
        if isinstance(expr, cst.Comparison):
            return not any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in expr.comparisons)
        if isinstance(expr, cst.UnaryOperation):
            return isinstance(expr.operator, cst.BitInvert)
        if isinstance(expr, cst.BinaryOperation):
            if isinstance(expr.operator, cst.Multiply):  # ``(u > 0) * (l == u)``: a product of masks is one
                return NonzeroInLoop._mask_like(expr.left, depth + 1) and \
                    NonzeroInLoop._mask_like(expr.right, depth + 1)
            return isinstance(expr.operator, (cst.BitAnd, cst.BitOr, cst.BitXor))
        if isinstance(expr, cst.Call):
            method = _method(expr)
            return method in _MASK_METHODS or _bool_dtype(expr) is True or callee_name(expr) in _JOINS or (
                method in _MASK_KEEPING and NonzeroInLoop._mask_like(expr.func.value, depth))
        return isinstance(expr, cst.Name) and depth == 0

    def _is_mask(self, expr: cst.BaseExpression, indexed: cst.BaseExpression, depth: int = 0) -> bool:
        """Evidence that ``expr`` is a boolean tensor: a tensor comparison, ``~m``, ``a & b``, ``.bool()``, ..."""
        if depth > 4:
            return False
        if isinstance(expr, cst.Comparison):
            kinds = [self.facts.kind(expr.left), *(self.facts.kind(c.comparator) for c in expr.comparisons)]
            if Kind.TENSOR in kinds:
                return True
            # ``logits[labels != -100]``: a comparison of a non-host value indexing a tensor
            return any(k is Kind.UNKNOWN for k in kinds) and self.is_tensor(indexed)
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.BitInvert):
            return self._is_mask(expr.expression, indexed, depth + 1)
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.BitAnd, cst.BitOr, cst.BitXor)):
            return self._is_mask(expr.left, indexed, depth + 1) or self._is_mask(expr.right, indexed, depth + 1)
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
            return self._mask_like(expr, depth) and (self._is_mask(expr.left, indexed, depth + 1) or
                                                     self._is_mask(expr.right, indexed, depth + 1))
        if isinstance(expr, cst.Call):
            name = self.ctx.qualified_name(expr.func)
            if name and name.startswith("torch.") and name[6:] in _MASK_METHODS:
                return True
            method = _method(expr)
            if method in _MASK_METHODS:
                return self.is_tensor(expr.func.value)
            # ``torch.eye(n, dtype=torch.bool, device=d)``, ``torch.eye(n, dtype=torch.bool).to(device)``
            return self.is_tensor(expr) and self._is_bool(expr, depth)
        if isinstance(expr, cst.Name):
            value = self.facts.value_of(expr)
            if value is not None and self._mask_like(value, depth + 1) and self._is_mask(value, indexed, depth + 1):
                return True
            returned = self.facts.returned_values(expr)  # ``_, fg_mask = self.get_assignments(...)``
            return bool(returned) and all((isinstance(r, cst.Name) or self._mask_like(r, depth + 1)) and
                                          self._is_mask(r, indexed, depth + 1) for r in returned)
        return False

    def _is_bool(self, expr: cst.BaseExpression, depth: int) -> bool:
        """Evidence that ``expr`` holds booleans, wherever it lives: a comparison, ``.bool()``, ``torch.isnan``,
        ``dtype=torch.bool``, ``~m``, ``m1 & m2``, or a boolean tensor moved or reshaped (``.to(device)``)."""
        if depth > 6:  # (a join of masks a method returned: YOLOX's fg_masks, six steps from its comparison)
            return False
        if isinstance(expr, cst.Comparison):
            return self._mask_like(expr, depth)
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.BitInvert):
            return self._is_bool(expr.expression, depth + 1)
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.BitAnd, cst.BitOr, cst.BitXor)):
            return self._is_bool(expr.left, depth + 1) or self._is_bool(expr.right, depth + 1)
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
            return self._is_bool(expr.left, depth + 1) and self._is_bool(expr.right, depth + 1)
        if isinstance(expr, cst.Call):
            dtype = _bool_dtype(expr)
            if dtype is not None:
                return dtype
            method = _method(expr)
            if (method or callee_name(expr)) in _MASK_METHODS:
                return True
            if (self.ctx.qualified_name(expr.func) or "").removeprefix("torch.") in _JOINS and expr.args:
                parts = self._joined(expr.args[0].value)
                return bool(parts) and all(self._is_bool(part, depth + 1) for part in parts)
            return method in _MASK_KEEPING and self._is_bool(expr.func.value, depth + 1)
        if isinstance(expr, cst.Name):
            value = self.facts.value_of(expr)
            if value is not None:
                return self._is_bool(value, depth + 1)
            # ``_, fg_mask = self.get_assignments(...)``; a parameter: what every call of its function passes
            held = self.facts.returned_values(expr) or self.facts.parameter_values(expr)
            return bool(held) and all(self._is_bool(r, depth + 1) for r in held)
        return False

    def _joined(self, parts: cst.BaseExpression) -> list[cst.BaseExpression]:
        """What ``torch.cat(parts)`` joins: the elements of a list or tuple written out, or every value appended to
        the list a name holds in its function (``fg_masks.append(fg_mask)`` per image, then ``torch.cat(fg_masks)``);
        empty when that is not known."""
        if isinstance(parts, (cst.List, cst.Tuple)):
            return [e.value for e in parts.elements if not isinstance(e, cst.StarredElement)]
        if not isinstance(parts, cst.Name):
            return []
        scope, index = self.facts.scope_of(parts), self.facts.callers.index  # the file's calls by name: no new walk
        return [call.args[0].value for call in index.calls.get("append", ())
                if isinstance(call.func, cst.Attribute) and len(call.args) == 1 and
                isinstance(call.func.value, cst.Name) and call.func.value.value == parts.value and
                index.inside(call, scope)]


def _bool_dtype(call: cst.Call) -> bool | None:
    """True when ``call`` names ``torch.bool`` as its dtype (``dtype=torch.bool``, ``.to(torch.bool)``), False when
    it names another torch dtype (``.to(torch.float32)``), None when it names none."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value != "dtype":
            continue
        name = dotted_name(arg.value)
        if name in ("torch.bool", "bool"):
            return True
        if arg.keyword is not None or name and name.startswith("torch.") and name != "torch.device":
            return False
    return None
