"""Where a source node runs once per training step: per-step loops, periodic and rare guards, and the per-file
``Facts`` the source rules ask (``SourceRule.facts``, ``step_loop``, ``needs_host_value``).

- ``hot_loop(node)``: the per-step loop it runs in on every iteration (DataLoader iteration, ``while True``,
  ``range(max_steps)``, RL env steps, eval loops, Lightning ``training_step``), or None: not in one, only in an
  epoch loop, or excused by a periodic / rare guard (``if step % N == 0:``, ``if last_batch:``, ``if args.verbose:``,
  an ``if`` whose body ends in ``break``/``return``/``raise``). A rank guard alone excuses nothing.
- ``needs_host_value(node)``: an environment step needs the value on the host (``env.step(action.item())``).
- ``kind(expr)`` (values.py): HOST, TENSOR or UNKNOWN.
- the words of a name (``train_loader`` -> train, loader) that the heuristics match on (``values.words``).

Everything is pure libcst over a ``Tree`` (the source FileContext satisfies it); the per-file ``Facts`` object
caches loop verdicts and per-function bindings so that each is computed once however many rules ask.
"""
from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from tracelint.source.runcalls import Entry
from tracelint.source.semantic.callers import Callers, HotLoop
from tracelint.source.semantic.calls import literal
from tracelint.source.semantic.model import FileContext, callee_name, dotted_name, iter_children, iter_descendants
from tracelint.source.semantic.values import Tree, Values, head_word, is_number, words
from tracelint.source.vocab import DATA_SUBSTRINGS as _DATA_SUBSTRINGS
from tracelint.source.vocab import DATA_WORDS as _DATA_WORDS
from tracelint.source.vocab import EXTERNAL_MODULES
from tracelint.source.vocab import STEP_HOOKS as _STEP_HOOKS
from tracelint.source.vocab import STEP_SUBSTRINGS as _STEP_SUBSTRINGS
from tracelint.source.vocab import STEP_WORDS as _STEP_WORDS


def _main_guard(test: cst.BaseExpression) -> bool:
    """``__name__ == "__main__"`` (either side)."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 or \
            not isinstance(test.comparisons[0].operator, cst.Equal):
        return False
    sides = {dotted_name(test.left), literal(test.left), dotted_name(test.comparisons[0].comparator),
             literal(test.comparisons[0].comparator)}
    return "__name__" in sides and "__main__" in sides


def _short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------------------------------------------------------
# which loops are per-step loops
# Iterating these is iterating a container's members, never data.
_MEMBER_METHODS = frozenset({
    "items", "keys", "values", "named_parameters", "parameters", "modules", "named_modules", "children",
    "named_children", "buffers", "named_buffers", "state_dict", "param_groups", "split", "splitlines", "chunk",
})
_WRAPPERS = frozenset({"enumerate", "tqdm", "trange", "zip", "iter", "islice", "track", "prefetch", "cycle", "chain"})
# Calls in a loop's own body that make it a step loop whatever its names.
_STEPPERS = frozenset({"optimizer", "optim", "opt", "scaler", "env", "envs", "environment"})
# Receivers of an environment step, and names of the actions fed to it (``needs_host_value``).
_ENV_WORDS = frozenset({"env", "envs", "environment", "environments", "game", "sim", "simulator", "venv"})
_ACTION_WORDS = frozenset({"action", "actions", "act", "acts"})


def _unwrap_iterable(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """``enumerate(tqdm(loader))`` -> [loader]; ``zip(a, b)`` -> [a, b]."""
    if isinstance(expr, cst.Call) and callee_name(expr) in _WRAPPERS and expr.args:
        if callee_name(expr) == "trange":
            return [expr]
        if callee_name(expr) in ("zip", "chain"):
            return [u for a in expr.args for u in _unwrap_iterable(a.value)]
        return _unwrap_iterable(expr.args[0].value)
    return [expr]


def _is_range(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Call) and callee_name(expr) in ("range", "trange")


def _steppy(text: str) -> bool:
    """A range bound or while test that counts steps: ``max_steps``, ``n_iter``, ``num_batches``, ``not done``."""
    low, found = text.lower(), words(text)
    if "epoch" in low:
        return False
    if "batch" in low and not found & {"size", "bs"}:  # range(num_batches) counts steps, range(batch_size) samples
        return True
    return any(s in low for s in _STEP_SUBSTRINGS) or bool(found & _STEP_WORDS)


def _steppy_target(target: cst.BaseExpression, iterable: cst.BaseExpression, tree: Tree) -> bool:
    """``for step in range(n)``, ``for it in ...``, ``for i, batch in enumerate(x)``; not the index of an enumerate
    (``for batch_idx, (h, w) in enumerate(sizes)`` iterates sizes)."""
    if isinstance(iterable, cst.Call) and callee_name(iterable) == "enumerate" and isinstance(target, cst.Tuple) \
            and len(target.elements) == 2:
        target = target.elements[1].value
    text = tree.code_for(target)
    low = text.lower()
    if _is_range(iterable):
        return "step" in low or bool(words(text) & {"it", "iter", "iteration", "itr"})
    return ("batch" in low or "step" in low) and "size" not in low

def is_step_call(node: cst.CSTNode) -> bool:
    """``loss.backward()``, ``optimizer.step()``, ``scaler.step(opt)``, ``env.step(a)``."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return False
    attr = node.func.attr.value
    return attr == "backward" or attr == "step" and bool(words(dotted_name(node.func.value) or "") & _STEPPERS)


# A nested loop over these is part of one step (``for opt in optimizers: opt.step()``), never a loop of steps.
_MEMBER_WORDS = frozenset({
    "optimizer", "optimizers", "optim", "optims", "opt", "opts", "scheduler", "schedulers", "sched", "scheds",
    "model", "models", "net", "nets", "networks", "param", "params", "parameters", "group", "groups", "loss", "losses",
})


def member_loop(loop: cst.CSTNode) -> bool:
    """A loop over a fixed set of things within one step: a literal container (``for domain in ['A', 'B']``), a
    container's members (``.items()``, ``.parameters()``, ``param_groups``), or optimizers/models/losses
    (``for opt, sched in zip(optimizers, schedulers)``)."""
    if not isinstance(loop, cst.For):
        return False
    sources = _unwrap_iterable(loop.iter)
    for source in sources:
        if isinstance(source, (cst.List, cst.Tuple, cst.Set, cst.Dict, cst.SimpleString)):
            continue
        if isinstance(source, cst.Call) and isinstance(source.func, cst.Attribute) and \
                source.func.attr.value in _MEMBER_METHODS:
            continue
        name = dotted_name(source)
        if name is not None and words(name.rsplit(".", 1)[-1]) & _MEMBER_WORDS:
            continue
        return False
    return bool(sources)


def _own_nodes(body: cst.CSTNode):
    """The nodes of a loop body that run once per iteration of that loop: not inside nested loops (except loops over
    a fixed set of members, ``member_loop``) or defs. Nested loops themselves are yielded (not their insides)."""
    stack = list(iter_children(body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (cst.For, cst.While)) and not member_loop(node):
            continue
        if not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            stack.extend(iter_children(node))


def _body_steps(body: cst.BaseSuite) -> bool:
    """Does the body itself (not a nested loop) step the optimizer or the environment?"""
    return any(is_step_call(node) for node in _own_nodes(body))


Steps = Callable[[cst.BaseSuite], bool]  # _body_steps, or Facts.body_steps (which follows calls in the file)


def _outer_loop(loop: cst.For | cst.While, steps: Steps = _body_steps) -> bool:
    """A loop whose steps happen in a nested loop (``for update in range(n): ...; for mb in batches: opt.step()``)
    runs its own body once per pass, like an epoch loop, unless it also steps directly (``while True`` with
    gradient-accumulation micro-steps inside)."""
    if steps(loop.body):
        return False
    return any(isinstance(node, (cst.For, cst.While)) and not member_loop(node) and not runs_once(node)
               and (steps(node.body) or _outer_loop(node, steps)) for node in _own_nodes(loop.body))


def runs_once(loop: cst.For | cst.While) -> bool:
    """A loop whose body ends in ``break``/``return``/``raise`` (or a call that exits) runs its body once: a
    one-batch look at a loader, a timed block that returns. It is not a loop of steps."""
    return _ends_loop_or_function(loop.body)


def loop_description(loop: cst.For | cst.While, tree: Tree, steps: Steps = _body_steps) -> str | None:
    """How messages name ``loop`` when it is a per-step loop; None when it is not one. ``steps(body)`` says whether a
    body steps the optimizer itself (an epoch loop of full-batch training, ``for epoch in ...: train()`` where
    ``train()`` steps once, is a per-step loop)."""
    if runs_once(loop):
        return None
    if isinstance(loop, cst.For):
        target, iterable = tree.code_for(loop.target), loop.iter
        if "epoch" in target.lower() or "epoch" in tree.code_for(iterable).lower():
            if steps(loop.body) and not _outer_loop(loop, steps):
                return f"the loop over `{_short(tree.code_for(iterable))}`"
            return None
        if isinstance(iterable, (cst.List, cst.Tuple, cst.Set, cst.Dict, cst.SimpleString)):
            return None
        sources = _unwrap_iterable(iterable)
        if any(isinstance(s, cst.Call) and isinstance(s.func, cst.Attribute) and s.func.attr.value in _MEMBER_METHODS
               for s in sources):
            return None
        hot = False
        for source in sources:
            text = tree.code_for(source)
            if _is_range(source):
                hot = hot or _steppy(text)
            else:
                low = text.lower()
                hot = hot or any(s in low for s in _DATA_SUBSTRINGS) or bool(words(text) & _DATA_WORDS)
        hot = hot or _steppy_target(loop.target, iterable, tree)
        if (hot or steps(loop.body)) and not _outer_loop(loop, steps):
            return f"the loop over `{_short(tree.code_for(iterable))}`"
        return None
    test = loop.test
    if _outer_loop(loop, steps):
        return None
    if isinstance(test, cst.Name) and test.value == "True" or isinstance(test, cst.Integer) and test.value != "0":
        return f"the `while {test.value}` loop"
    text = tree.code_for(test)
    if _steppy(text) or ("epoch" not in text.lower() and steps(loop.body)):
        return f"the `while {_short(text)}` loop"
    return None


# ---------------------------------------------------------------------------------------------------------------
# periodic and rare guards
_RANK_WORDS = frozenset({"rank", "master", "main", "primary", "process", "gpu", "device", "world", "node", "zero"})
_COUNTER_SUBSTRINGS = ("step", "iter", "idx", "batch", "count")
_COUNTER_WORDS = frozenset({"i", "j", "k", "n", "t", "it", "global", "num", "index"})
_SIZE_WORDS = frozenset({"n", "num"})  # a counter alone (``n``), a size with a noun (``n_classes``)
_FLAG_WORDS = frozenset({
    "verbose", "debug", "debugging", "dry", "profile", "profiling", "profiler", "trace", "tracing", "visualize",
    "vis", "viz", "plot", "plotting", "sanity", "log", "logging", "wandb", "tensorboard", "print", "last", "first",
    "should", "video", "capture", "render", "record", "recording", "save", "checkpoint",
    # opt-in switches that exist to synchronize, time or benchmark (``if args.synchronize_step:``)
    "synchronize", "sync", "timing", "timer", "timed", "benchmark", "benchmarking", "measure",
})
_ACCUMULATION_WORDS = frozenset({"accum", "accumulate", "accumulation", "accumulations", "grad", "gradient"})


def _has_modulo(expr: cst.BaseExpression) -> cst.BinaryOperation | None:
    if isinstance(expr, cst.Comparison):
        for part in (expr.left, *(c.comparator for c in expr.comparisons)):
            found = _has_modulo(part)
            if found is not None:
                return found
        return None
    if isinstance(expr, cst.BinaryOperation):
        if isinstance(expr.operator, cst.Modulo):
            return expr
        return _has_modulo(expr.left) or _has_modulo(expr.right)
    return None


def _is_counter(expr: cst.BaseExpression, tree: Tree) -> bool:
    if isinstance(expr, cst.BinaryOperation):  # (step + 1) == total_steps
        return _is_counter(expr.left, tree) or _is_counter(expr.right, tree)
    if not isinstance(expr, (cst.Name, cst.Attribute)):
        return False
    text = tree.code_for(expr)
    found = words(text)
    if found & _RANK_WORDS:
        return False
    if any(s in text.lower() for s in _COUNTER_SUBSTRINGS):
        return True
    last = words(text.rsplit(".", 1)[-1])
    if last & _COUNTER_WORDS <= _SIZE_WORDS and last - _SIZE_WORDS:
        return False  # ``n_classes``, ``num_layers``: the number of something, a size that does not advance
    return bool(found & _COUNTER_WORDS)


def guard_polarity(test: cst.BaseExpression, tree: Tree, facts: Facts | None = None) -> int:
    """+1 when ``test`` is rarely true (periodic, first/last step, the end of training, capped work, opt-in flag),
    -1 when it is rarely false, else 0. With ``facts``, names are looked up: ``step % log_interval`` with a module
    constant ``log_interval = 1`` is every step; ``j <= 4`` where ``j`` counts (a loop index, ``n += 1``) is capped."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return -guard_polarity(test.expression, tree, facts)
    if isinstance(test, cst.BooleanOperation):
        left, right = guard_polarity(test.left, tree, facts), guard_polarity(test.right, tree, facts)
        if isinstance(test.operator, cst.And):
            return 1 if 1 in (left, right) else (-1 if left == right == -1 else 0)
        return -1 if -1 in (left, right) else (1 if left == right == 1 else 0)
    modulo = _has_modulo(test)
    if modulo is not None:
        # ``(i + 1) % accumulation_steps == 0`` is true once per optimizer step: still every step.
        if words(tree.code_for(modulo.right)) & _ACCUMULATION_WORDS:
            return 0
        if facts is not None and facts.constant_int(modulo.right) == 1:
            return 0  # ``% log_interval`` with ``log_interval = 1``: every step
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            op = test.comparisons[0].operator
            return 1 if isinstance(op, cst.Equal) else (-1 if isinstance(op, cst.NotEqual) else 0)
        return -1 if test is modulo else 0  # ``if step % N:`` is true on most steps
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        op, right = test.comparisons[0].operator, test.comparisons[0].comparator
        if isinstance(op, (cst.Equal, cst.NotEqual)) and any(
                isinstance(side, cst.SimpleString) and side.evaluated_value == "cpu" for side in (test.left, right)):
            return 1 if isinstance(op, cst.Equal) else -1  # ``if mode == "cpu":`` a CPU path of GPU training code
        if isinstance(op, (cst.Equal, cst.NotEqual)) and (_is_counter(test.left, tree) or _is_counter(right, tree)):
            return 1 if isinstance(op, cst.Equal) else -1  # ``step == 0``, ``i == len(loader) - 1``
        if isinstance(op, (cst.GreaterThan, cst.GreaterThanEqual)) and _is_counter(test.left, tree) and \
                words(tree.code_for(right)) & _END_WORDS:
            return 1  # ``if step >= args.max_steps:``: the end of training
        if isinstance(op, (cst.LessThan, cst.LessThanEqual)) and facts is not None and \
                _small_int(right) and facts.counts(test.left):
            return 1  # ``if j <= 4:``, ``if printed < 5:``: a few times, then never
        if isinstance(op, cst.In) and facts is not None and facts.counts(test.left):
            return 1  # ``if i in sample_ids:``: a few chosen steps
        return 0
    if isinstance(test, cst.Name) and facts is not None:
        value = facts.value_of(test)  # ``is_time_record = cur_iter < len(loader) - 1``: its test, not its name
        if isinstance(value, (cst.Comparison, cst.BooleanOperation, cst.UnaryOperation)):
            return guard_polarity(value, tree, facts)
    if isinstance(test, (cst.Name, cst.Attribute, cst.Call)):
        func = test.func if isinstance(test, cst.Call) else test
        name = dotted_name(func) or ""
        if name.endswith(_EXPORT_ONLY):
            return 1  # ``if torch.jit.is_scripting():``: only while scripting or exporting the model
        if name == "self.training":
            return -1  # a module in training mode: ``if not self.training:`` is an evaluation-only branch
        found = words(tree.code_for(func))
        if found & _RANK_WORDS:
            return 0
        return 1 if found & _FLAG_WORDS else 0
    return 0


_EXPORT_ONLY = ("is_scripting", "is_tracing", "is_in_onnx_export", "is_exporting")
_END_WORDS = frozenset({"max", "total", "end", "last", "limit", "stop", "final"})
_CAP = 32  # ``counter < N`` with a literal N up to this is capped work


def _small_int(expr: cst.BaseExpression) -> bool:
    value = literal(expr) if isinstance(expr, cst.Integer) else None
    return isinstance(value, int) and value <= _CAP


_REPORTERS = frozenset({"print", "warn", "warning", "info", "debug", "error", "log", "write"})


def _reports(call: cst.Call, tree: Tree) -> bool:
    """``print(...)``, ``logger.warning(...)``, ``warnings.warn(...)``: a call that only reports."""
    name = callee_name(call)
    return name in _REPORTERS and (name != "print" or tree.qualified_name(call.func) in (None, "builtins.print"))


_EXITS = frozenset({"sys.exit", "builtins.exit", "builtins.quit", "os._exit", "os.abort"})


def _ends_loop_or_function(body: cst.BaseSuite, tree: Tree | None = None) -> bool:
    """The block ends in ``break``/``return``/``raise`` or ``sys.exit()``: a terminal path."""
    stmts = body.body
    if not stmts:
        return False
    last = stmts[-1]
    small = last.body[-1] if isinstance(last, cst.SimpleStatementLine) and last.body else last
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        func = small.value.func
        name = tree.qualified_name(func) if tree is not None else None
        return name in _EXITS or (name is None and dotted_name(func) in ("sys.exit", "exit", "quit", "os._exit"))
    return isinstance(small, (cst.Break, cst.Return, cst.Raise))


def _skips_rest(stmt: cst.CSTNode, tree: Tree) -> bool:
    """``if <mostly true>: continue``: the statements after it in its block are skipped on most steps."""
    if isinstance(stmt, cst.If) and stmt.orelse is None and guard_polarity(stmt.test, tree) == -1:
        inner = stmt.body.body
        first = inner[0] if inner else None
        return isinstance(first, cst.SimpleStatementLine) and isinstance(first.body[0], cst.Continue)
    return False


class Facts(Values):
    """Per-file caches behind ``hot_loop`` and ``kind`` (one object per FileContext: see ``facts``)."""

    def __init__(self, tree: Tree) -> None:
        super().__init__(tree)
        self._loops: dict[cst.CSTNode, str | None] = {}
        self._imports_torch: bool | None = None
        # block -> (statement -> its index, index of the first statement that skips the rest): computed once per
        # block, as every call in a loop asks (once a scan of the block per call: quadratic in long loops).
        self._skips: dict[cst.IndentedBlock, tuple[dict[cst.CSTNode, int], int]] = {}
        self._body_steps: dict[cst.BaseSuite, bool] = {}
        self._cpu_only: bool | None = None  # _self_test: the file places nothing on a device, imports no project
        # Functions of this file that per-step loops of other files of the run call ({"f" or "C.m": Entry}).
        self.entries: dict[str, Entry] = getattr(tree, "entries", None) or {}
        # Imported functions that step an optimizer in another file of the run (runcalls.stepping_calls)
        self.stepping_targets: frozenset[str] = getattr(tree, "stepping_targets", None) or frozenset()
        self.callers = Callers(self)

    def _skipped_by_continue(self, block: cst.IndentedBlock, stmt: cst.CSTNode) -> bool:
        """True when an earlier ``if <mostly true>: continue`` in ``block`` skips ``stmt`` on most steps."""
        known = self._skips.get(block)
        if known is None:
            body = block.body
            first = next((i for i, s in enumerate(body) if _skips_rest(s, self.tree)), len(body))
            known = self._skips[block] = ({s: i for i, s in enumerate(body)}, first)
        order, first = known
        return order.get(stmt, -1) > first

    def imports_torch(self) -> bool:
        """Whether the file imports torch or a torch module."""
        if self._imports_torch is None:
            self._imports_torch = any(q == "torch" or q.startswith("torch.") for q in self.tree.imports.values())
        return self._imports_torch

    def needs_host_value(self, node: cst.CSTNode) -> bool:
        """``env.step(action.item())``, ``actions.cpu().numpy()``, ``action = logits.argmax(1).tolist()[0]``: an
        environment needs the host value of ``node`` to step, so reading it on the host is not a waste."""
        tree = self.tree
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and \
                head_word(tree.code_for(node.func.value)) in _ACTION_WORDS:
            return True
        for parent in tree.ancestors(node):
            if isinstance(parent, cst.Assign):  # ``action = ...``, not ``action_loss = ...`` (a loss)
                return any(head_word(tree.code_for(t.target)) in _ACTION_WORDS for t in parent.targets)
            if isinstance(parent, cst.Return):  # def select_action(self, state): return self.actor(s).cpu()...
                function = next((a for a in tree.ancestors(parent) if isinstance(a, cst.FunctionDef)), None)
                return function is not None and bool(words(function.name.value) & _ACTION_WORDS)
            if isinstance(parent, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
                return False
            if isinstance(parent, cst.Call) and isinstance(parent.func, cst.Attribute):
                receiver = words(tree.code_for(parent.func.value))
                if parent.func.attr.value in ("step", "step_async", "act") and receiver & _ENV_WORDS:
                    return True
        return False

    # -- guards -----------------------------------------------------------------------------------------------
    def guard_polarity(self, test: cst.BaseExpression) -> int:
        return guard_polarity(test, self.tree, self)

    def _diagnostic(self, guard: cst.If) -> bool:
        """``if torch.min(y) < -1.: print(...)``: a threshold check whose body only reports (print, logging,
        warnings) runs when something is off, not every step (the test itself still runs every step)."""
        test = guard.test
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            return False
        op, right = test.comparisons[0].operator, test.comparisons[0].comparator
        if not isinstance(op, (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)):
            return False
        if not any(is_number(side) for side in (test.left, right)) or self.counts(test.left) or \
                _is_counter(test.left, self.tree):
            return False
        body = guard.body.body
        return bool(body) and all(
            isinstance(stmt, cst.SimpleStatementLine) and all(
                isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and _reports(small.value, self.tree)
                for small in stmt.body)
            for stmt in body)

    def _self_test(self, node: cst.CSTNode) -> bool:
        """``node`` is in the ``if __name__ == "__main__":`` block of a file that places nothing on a device anywhere
        (no ``.cuda()``, no ``.to(X)`` or ``device=X`` that may name an accelerator) and imports only libraries
        (values.EXTERNAL_MODULES: no project module that might): the block runs only when the file is run on its
        own, and then on the CPU, whatever device evidence the file's text or its callers in the run give (a
        module's self-test: awd-lstm's splitcross.py)."""
        if "__main__" not in getattr(self.tree, "source", "__main__"):
            return False
        if not any(isinstance(p, cst.If) and _main_guard(p.test) for p in self.tree.ancestors(node)):
            return False
        if self._cpu_only is None:
            self._cpu_only = all(q.split(".")[0] in EXTERNAL_MODULES for q in self.tree.imports.values()) and \
                not self._places()
        return self._cpu_only

    def _places(self) -> bool:
        """The file puts a tensor or module on a device somewhere: ``.cuda()``, or a ``.to(X)`` / ``device=X`` whose
        X may name an accelerator (``Values._device_node``)."""
        return any(placed or type(node) is cst.Call and isinstance(node.func, cst.Attribute) and
                   node.func.attr.value == "cuda" for node, placed in self.device_nodes())

    def _terminal(self, guard: cst.If) -> bool:
        """The block of ``guard`` ends the per-step loop (``break``, ``raise``, ``sys.exit()``, or a ``return`` from
        inside a loop of its function): it runs once. A ``return`` in a function's own body (``if world_size > 1:
        ...; return x.item()``) only ends that call: the branch runs on every call."""
        if not _ends_loop_or_function(guard.body, self.tree):
            return False
        last = guard.body.body[-1]
        small = last.body[-1] if isinstance(last, cst.SimpleStatementLine) and last.body else last
        if not isinstance(small, cst.Return):
            return True
        for parent in self.tree.ancestors(guard):
            if isinstance(parent, (cst.For, cst.While)):
                return True
            if isinstance(parent, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return False
        return True

    def _flush_guard(self, guard: cst.If) -> bool:
        """``if len(pending) == N: ...; pending.clear()``: a buffer flushed when full runs its body once every N
        appends, not every step."""
        test = guard.test
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 or not isinstance(
                test.comparisons[0].operator, (cst.Equal, cst.GreaterThan, cst.GreaterThanEqual)):
            return False
        left = test.left
        if not (isinstance(left, cst.Call) and self.tree.qualified_name(left.func) == "builtins.len" and
                len(left.args) == 1):
            return False
        buffer = dotted_name(left.args[0].value)
        if buffer is None:
            return False
        for node in iter_children(guard.body):
            for inner in (node, *iter_descendants(node)):
                if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) and \
                        inner.func.attr.value == "clear" and dotted_name(inner.func.value) == buffer:
                    return True
                if isinstance(inner, cst.Assign) and isinstance(inner.value, cst.List) and not inner.value.elements \
                        and any(dotted_name(t.target) == buffer for t in inner.targets):
                    return True
        return False

    def counts(self, expr: cst.BaseExpression) -> bool:
        """``expr`` is a counter: ``len(...)``, a loop index, or a name only ever incremented (``n += 1``)."""
        if isinstance(expr, cst.Call) and self.tree.qualified_name(expr.func) == "builtins.len":
            return True
        if not isinstance(expr, cst.Name):
            return False
        bound = self.bindings(self.scope_of(expr)).bindings.get(expr.value, ())
        return any(b.loop_index or b.augmented for b in bound)

    def constant_int(self, expr: cst.BaseExpression) -> int | None:
        """The value of an integer literal, or of a name the module binds once to one (``log_interval = 1``)."""
        if isinstance(expr, cst.Integer):
            value = literal(expr)
            return value if isinstance(value, int) else None
        if not isinstance(expr, cst.Name):
            return None
        scope = self.scope_of(expr)
        bound = self.bindings(scope).bindings.get(expr.value, ())
        if not bound and not isinstance(scope, cst.Module):
            module = getattr(self.tree, "module", None)
            bound = self.bindings(module).bindings.get(expr.value, ()) if module is not None else ()
        if len(bound) == 1 and isinstance(bound[0].value, cst.Integer) and not bound[0].augmented:
            return self.constant_int(bound[0].value)
        return None

    # -- hot loops ------------------------------------------------------------------------------------------
    def loop_description(self, loop: cst.For | cst.While) -> str | None:
        if loop not in self._loops:
            self._loops[loop] = None if self._buffered(loop) else loop_description(loop, self.tree, self.body_steps)
        return self._loops[loop]

    def _buffered(self, loop: cst.For | cst.While) -> bool:
        """``for logged_step, logits in pending:`` inside a loop that appends to ``pending``: a walk over what
        earlier steps kept (a flush), not a loop of steps, whatever its target's name says."""
        if not isinstance(loop, cst.For) or not isinstance(loop.iter, cst.Name) or self.body_steps(loop.body):
            return False
        name = loop.iter.value
        for outer in self.tree.ancestors(loop):
            if isinstance(outer, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return False
            if isinstance(outer, (cst.For, cst.While)):
                return any(isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and
                           n.func.attr.value == "append" and isinstance(n.func.value, cst.Name) and
                           n.func.value.value == name for n in iter_descendants(outer.body))
        return False

    def body_steps(self, body: cst.BaseSuite) -> bool:
        """Does ``body`` step the optimizer itself, or through a call of a function of this file whose own body
        does (``for epoch in range(n): train()`` where ``train()`` runs one full-batch step)?"""
        known = self._body_steps.get(body)
        if known is None:
            self._body_steps[body] = False  # recursion (a function calling itself) stops here
            stepping = self.stepping_targets
            known = self._body_steps[body] = _body_steps(body) or any(
                isinstance(node, cst.Call) and (any(_body_steps(fn.body) for fn in self.callers.callees(node)) or
                                                bool(stepping) and not stepping.isdisjoint(self.callers.imported(node)))
                for node in _own_nodes(body))
        return known

    def _comprehension_loop(self, comp: cst.CSTNode) -> str | None:
        for_in = getattr(comp, "for_in", None)
        if not isinstance(for_in, cst.CompFor):
            return None
        sources = _unwrap_iterable(for_in.iter)
        texts = [self.tree.code_for(s).lower() for s in sources]
        if any(s in t for t in texts for s in _DATA_SUBSTRINGS) and not any("epoch" in t for t in texts):
            return f"the comprehension over `{_short(self.tree.code_for(for_in.iter))}`"
        return None

    def hot_loop(self, node: cst.CSTNode, depth: int = 0) -> HotLoop | None:
        """The per-step loop ``node`` runs in on every iteration, or None (see the module docstring). Out of a
        function body, the function's per-step callers (callers.py) decide; ``depth`` counts the calls followed."""
        tree = self.tree
        if self._self_test(node):
            return None
        child, parent = node, tree.parent(node)
        while parent is not None:
            if isinstance(parent, cst.Lambda) and isinstance(tree.parent(parent), cst.Arg):
                pass  # map(lambda t: t.item(), losses): runs where the call that takes it runs
            elif isinstance(parent, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                if not isinstance(parent, cst.FunctionDef) or child is not parent.body:
                    return None
                if parent.name.value in _STEP_HOOKS:
                    return HotLoop(parent, f"`{parent.name.value}` (runs every step)")
                return self.callers.per_step(parent, depth)
            if isinstance(parent, cst.If):
                polarity = self.guard_polarity(parent.test) or (1 if self._flush_guard(parent) else 0)
                # a periodic guard around the model's own update is its update cadence (``if i % n_critic == 0:``
                # around the generator's step), not a logging interval
                if polarity != 0 and self.body_steps(parent.body if polarity == 1 else parent.orelse or parent.body):
                    polarity = 0
                if child is parent.body and (polarity == 1 or self._terminal(parent) or self._diagnostic(parent)):
                    return None
                if child is parent.orelse and polarity == -1:
                    return None
            elif isinstance(parent, cst.ExceptHandler):
                return None  # an exception handler is a rare path
            elif isinstance(parent, cst.IndentedBlock) and self._skipped_by_continue(parent, child):
                return None
            elif isinstance(parent, cst.For):
                if child is parent.body:
                    description = self.loop_description(parent)
                    if description:
                        return HotLoop(parent, description)
            elif isinstance(parent, cst.While):
                if child is parent.body or child is parent.test:
                    description = self.loop_description(parent)
                    if description:
                        return HotLoop(parent, description)
            elif isinstance(parent, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
                description = self._comprehension_loop(parent)
                if description:
                    return HotLoop(parent, description)
            child, parent = parent, tree.parent(parent)
        return None


def facts(ctx: FileContext) -> Facts:
    """The one Facts object of a file (shared by all rules that check it)."""
    return ctx.memo("facts", Facts)
