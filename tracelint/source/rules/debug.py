"""TL7xx, debugging tools left on in training code: autograd's anomaly detection (TL701),
``CUDA_LAUNCH_BLOCKING=1`` set by the script (TL702), CUDA sync debug mode (TL703), a profiler or NVTX ranges around
the whole training loop (TL704), ``gradcheck`` in the step (TL705), deterministic algorithms (TL706, info).

A tool switched on under a condition (``if args.debug:``), with a value the file does not fix
(``set_detect_anomaly(args.anomaly)``), or in a test file is an opt-in, not a tool left on: none is reported.
"""
from __future__ import annotations

from pathlib import PurePath

import libcst as cst

from tracelint.source.rule import SourceRule
from tracelint.source.semantic.calls import call_arguments, is_literal, literal
from tracelint.source.semantic.model import dotted_name, iter_descendants


def is_test_file(path: str) -> bool:
    """A test module (``test_*.py``, ``*_test.py``, ``conftest.py``, under ``tests/``): checks there are the point."""
    parts = PurePath(path).parts
    name = parts[-1] if parts else ""
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py" or \
        any(p in ("test", "tests") for p in parts[:-1])


def opted_in(rule: SourceRule, node: cst.CSTNode) -> bool:
    """``node`` runs under a condition (``if args.debug:``, ``x if flag else y``) other than ``if __name__ ==
    "__main__":``, or in a test file."""
    if is_test_file(rule.ctx.path):
        return True
    for ancestor in rule.ctx.ancestors(node):
        if isinstance(ancestor, cst.IfExp):
            return True
        if isinstance(ancestor, cst.If) and "__name__" not in rule.ctx.code_for(ancestor.test):
            return True
    return False


def trains(rule: SourceRule, body: cst.CSTNode) -> bool:
    """``body`` holds a loop of training steps (its own code, not a function defined in it)."""
    facts = rule.facts
    for node in iter_descendants(body):
        if isinstance(node, (cst.For, cst.While)) and facts.loop_description(node) is not None:
            return True
    return False


def _called_as(rule: SourceRule, node: cst.Call, *names: str) -> str | None:
    name = rule.ctx.qualified_name(node.func)
    return name if name in names else None


def _switched_on(rule: SourceRule, node: cst.Call, name: str, keyword: str, *values) -> cst.BaseExpression | None:
    """The mode argument of a call of ``name`` that turns a tool on (a literal among ``values``), unless opted in."""
    if _called_as(rule, node, name) is None:
        return None
    mode = call_arguments(rule.ctx, node).get(keyword, 0)
    return mode if is_literal(mode, *values) and not opted_in(rule, node) else None


class AutogradAnomalyDetection(SourceRule):
    """``torch.autograd.set_detect_anomaly(True)``, unless the function turns it off again; ``with
    torch.autograd.detect_anomaly():`` around a loop of steps or inside one."""

    code = "TL701"
    triggers = ("detect_anomaly",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.turned_on: list[cst.Call] = []
        self.turned_off: list[cst.Call] = []
        self.contexts: list[tuple[cst.Call, cst.With]] = []

    def visit_Call(self, node: cst.Call) -> None:
        if _called_as(self, node, "torch.autograd.set_detect_anomaly", "torch.autograd.anomaly_mode."
                                                                        "set_detect_anomaly") is None:
            return
        mode = call_arguments(self.ctx, node).get("mode", 0)
        if is_literal(mode, True):
            self.turned_on.append(node)
        elif is_literal(mode, False):
            self.turned_off.append(node)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        call = node.item
        if not isinstance(call, cst.Call) or _called_as(self, call, "torch.autograd.detect_anomaly",
                                                        "torch.autograd.anomaly_mode.detect_anomaly") is None:
            return
        with_ = self.ctx.parent(node)
        if isinstance(with_, cst.With):
            self.contexts.append((call, with_))

    def finish(self) -> None:
        # judged once every node has its parent (loops of steps are read in the with's body)
        for call, with_ in self.contexts:
            if not opted_in(self, with_) and (self.step_loop(with_) is not None or trains(self, with_.body)):
                self.report(call, _MESSAGE.format(how="`with torch.autograd.detect_anomaly():` around the training "
                                                      "steps turns on"))
        for call in self.turned_on:
            scope = _scope(self, call)
            if opted_in(self, call) or any(_scope(self, off) is scope for off in self.turned_off):
                continue  # turned on for a while and off again: debugging one step on purpose
            self.report(call, _MESSAGE.format(how="`torch.autograd.set_detect_anomaly(True)` turns on"))


_MESSAGE = ("{how} autograd's anomaly detection: every backward node checks its gradients for NaN (a readback "
            "and a device sync each) and every forward op records a Python stack trace. Leave it off outside "
            "debugging: on the project's 8-layer MLP (H200) the step went from 5.34 to 2.19 ms without it (2.44x; "
            "`tracelint verify --rule TL701`: 2.74x)")


def _scope(rule: SourceRule, node: cst.CSTNode) -> cst.CSTNode | None:
    return next((a for a in rule.ctx.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.Module))), None)


_LAUNCH_BLOCKING = "CUDA_LAUNCH_BLOCKING"


class CudaLaunchBlocking(SourceRule):
    """``os.environ["CUDA_LAUNCH_BLOCKING"] = "1"``, ``os.environ.setdefault(...)``, ``os.environ.update(...)``,
    ``os.putenv(...)`` with the value ``"1"`` written in the file."""

    code = "TL702"
    triggers = (_LAUNCH_BLOCKING,)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            t = target.target
            if isinstance(t, cst.Subscript) and self._is_environ(t.value) and len(t.slice) == 1 and \
                    isinstance(t.slice[0].slice, cst.Index) and is_literal(t.slice[0].slice.value, _LAUNCH_BLOCKING):
                self._setting(node, node.value)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute):
            return
        args = [a for a in node.args if a.keyword is None and not a.star]
        if func.attr.value == "setdefault" and self._is_environ(func.value) or \
                self.ctx.qualified_name(func) == "os.putenv":
            if len(args) == 2 and is_literal(args[0].value, _LAUNCH_BLOCKING):
                self._setting(node, args[1].value)
        elif func.attr.value == "update" and self._is_environ(func.value):
            for arg in node.args:
                if arg.keyword is not None and arg.keyword.value == _LAUNCH_BLOCKING:
                    self._setting(node, arg.value)
                elif isinstance(arg.value, cst.Dict):
                    for element in arg.value.elements:
                        if isinstance(element, cst.DictElement) and is_literal(element.key, _LAUNCH_BLOCKING):
                            self._setting(node, element.value)

    def _is_environ(self, expr: cst.BaseExpression) -> bool:
        return self.ctx.qualified_name(expr) == "os.environ"

    def _setting(self, node: cst.CSTNode, value: cst.BaseExpression) -> None:
        if not is_literal(value, "1") or opted_in(self, node):
            return
        self.report(node, "`CUDA_LAUNCH_BLOCKING=1` set in the script makes every kernel launch wait for its kernel "
                          "to finish: the host and the GPU take turns instead of overlapping. Remove it outside "
                          "debugging (or set it for one debugging run in the shell): on the project's launch-bound "
                          "MLP (H200) the step went from 7.75 to 3.99 ms without it (1.94x)")


class SyncDebugMode(SourceRule):
    """``torch.cuda.set_sync_debug_mode(1 | 2 | "warn" | "error")``."""

    code = "TL703"
    triggers = ("set_sync_debug_mode",)

    def visit_Call(self, node: cst.Call) -> None:
        mode = _switched_on(self, node, "torch.cuda.set_sync_debug_mode", "debug_mode", 1, 2, "warn", "error")
        if mode is None:
            return
        self.report(node, f"`torch.cuda.set_sync_debug_mode({self.ctx.code_for(mode)})` checks every call that may "
                          "synchronize the host with the GPU and warns (with a Python stack) or raises there: a "
                          "debugging aid for finding syncs. Remove it once they are found; the syncs themselves are "
                          "TL1xx's findings (its own cost is small: an MLP with one `.item()` per step took "
                          "3.14 ms per step with it and 3.14 ms without, one H200)")


# Profilers that record every op while they are on, and the keyword that bounds the recording to a few steps.
_PROFILERS = {
    "torch.profiler.profile": "schedule",
    "torch.autograd.profiler.profile": None,
    "torch.autograd.profiler_legacy.profile": None,
    "torch.autograd.profiler.emit_nvtx": None,
    "torch.autograd.profiler.emit_itt": None,
    "torch.autograd.emit_nvtx": None,
}


class ProfilerLeftOn(SourceRule):
    """``with torch.profiler.profile(...)`` without a ``schedule``, ``torch.autograd.profiler.profile`` or
    ``emit_nvtx()`` around a loop of training steps, or opened inside one (every step profiled)."""

    code = "TL704"
    triggers = ("profile", "emit_nvtx", "emit_itt")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.contexts: list[tuple[cst.Call, cst.With]] = []

    def visit_WithItem(self, node: cst.WithItem) -> None:
        call = node.item
        name = _called_as(self, call, *_PROFILERS) if isinstance(call, cst.Call) else None
        if name is None:
            return
        args = call_arguments(self.ctx, call)
        enabled = args.get("enabled", 0 if name.endswith(("emit_nvtx", "emit_itt")) else None)
        bound = _PROFILERS[name]
        if not args.known or enabled is not None and not is_literal(enabled, True) or \
                bound is not None and args.has(bound):
            return  # an opt-in switch, a bounded schedule, or arguments the file does not show
        with_ = self.ctx.parent(node)
        if isinstance(with_, cst.With):
            self.contexts.append((call, with_))

    def finish(self) -> None:
        for call, with_ in self.contexts:
            if opted_in(self, with_):
                continue
            where = "around the training loop" if trains(self, with_.body) else \
                "inside the training loop" if self.step_loop(with_) is not None else None
            if where is not None:
                self._report(call, where)

    def _report(self, call: cst.Call, where: str) -> None:
        shown = dotted_name(call.func) or "profile"
        self.report(call, f"`{shown}(...)` {where} records every op of every step (and keeps the events in "
                          "memory until it exits): the profiler slows the steps it records. Profile a few steps "
                          "with `torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, "
                          "active=3), ...)` and `prof.step()`, or leave it off: the project's GPT-2-small step "
                          "(H200) took 28.4 ms unprofiled and 42 ms under a profiler with stacks, shapes and "
                          "memory (114 ms against 25.2 ms compiled); an MLP's step 4.87 ms profiled every step, "
                          "3.53 ms with a schedule (1.38x)")


class GradcheckInTrainingStep(SourceRule):
    """``torch.autograd.gradcheck`` / ``gradgradcheck`` called in a per-step loop."""

    code = "TL705"
    triggers = ("gradcheck",)

    def visit_Call(self, node: cst.Call) -> None:
        name = _called_as(self, node, "torch.autograd.gradcheck", "torch.autograd.gradgradcheck",
                          "torch.autograd.gradcheck.gradcheck", "torch.autograd.gradcheck.gradgradcheck")
        if name is None or is_test_file(self.ctx.path):
            return
        loop = self.step_loop(node)
        if loop is None:
            return
        short = name.rsplit(".", 1)[-1]
        self.report(node, f"`{short}()` in {loop.description} checks the gradients by finite differences every "
                          "step: it runs the function twice per input element (and its backward per output "
                          "element), in double precision. It is a test, not a training step: run it once, in a "
                          "test (its cost grows with the inputs' size: a gradcheck of a 4x8 float64 probe made "
                          "the project's MLP step 31.6 ms against 3.25 ms once at start, 9.7x, one H200)")


class DeterministicAlgorithms(SourceRule):
    """``torch.use_deterministic_algorithms(True)`` (info)."""

    code = "TL706"
    triggers = ("use_deterministic_algorithms",)

    def visit_Call(self, node: cst.Call) -> None:
        if _switched_on(self, node, "torch.use_deterministic_algorithms", "mode", True) is None:
            return
        warn_only = literal(call_arguments(self.ctx, node).get("warn_only")) is True
        also = " (warn_only=True keeps the nondeterministic ops that have no deterministic version)" \
            if warn_only else ""
        self.report(node, "`torch.use_deterministic_algorithms(True)` makes PyTorch and cuDNN pick deterministic "
                          "implementations only: cuDNN's fastest convolution algorithms are excluded and ops such "
                          f"as `index_add_`/`scatter_add_` on CUDA take slower paths{also}. Keep it for runs that "
                          "must reproduce bit for bit; its cost depends on the model (ResNet-18 in fp32: 14.0 "
                          "against 12.7 ms per step, 1.11x, one H200)")
