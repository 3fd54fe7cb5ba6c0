"""What the files of one run tell each other about per-step calls (callers.py), as plain data, and ``resolve``,
which maps each file's per-step calls of imported functions to the files of the run that define them. No libcst
here: lint.py imports this before it knows whether a file needs parsing."""
from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from tracelint.source.astnames import ast_dotted_name
from tracelint.source.flow import Flow
from tracelint.source.vocab import GRAPH_BATCHING

MAX_ROUNDS = 6  # cross-file passes (a factory's module called in a loop of a third file: main -> engine -> model)


@dataclass(frozen=True, slots=True)
class Entry:
    """A function of this file that a per-step loop of another file of the run calls."""

    description: str  # how the loop is named at the sync: "`accuracy()` (called at train.py:88) in the loop over ..."
    on_device: bool   # the calling file puts work on a CUDA device


@dataclass(frozen=True, slots=True)
class HotCall:
    """A per-step call of a function another module defines, as the calling file names it."""

    target: str       # "pkg.metrics.accuracy", ".trainer.run" (relative), "pkg.algo.PPO.update" (a method)
    description: str
    on_device: bool


@dataclass(frozen=True, slots=True)
class RunCalls:
    """What one analysed file tells the others of the run (plain data: it comes back from a worker by pickle)."""

    defines: frozenset[str] = frozenset()  # "f", "C.m": module-level functions and methods of module-level classes
    hot_calls: tuple[HotCall, ...] = ()
    device: bool = False                   # the file shows device evidence itself
    device_calls: frozenset[str] = frozenset()  # with ``device``: the imported functions it calls anywhere
    sync_sites: bool = True                # the screen found host-device sync sites (device evidence matters)
    precision: frozenset[str] = frozenset()  # the file's own precision settings (precision_settings)
    imports: tuple[str, ...] = ()          # what it imports (import_targets): how programs connect files
    pending: frozenset[str] = frozenset()  # TL401/TL404: its findings stand only if its program agrees (settle)
    pinned: tuple[tuple[str, int | str], ...] = ()  # (target, position or keyword): a pinned DataLoader passed to
                                                    # an imported function (TL203 follows it there)
    stepping: frozenset[str] = frozenset()  # "f", "C.m" of this file whose body steps an optimizer (or calls backward)
    # (target, element): calls of another file's functions whose result the file calls as a module (``criterion =
    # build(args)[1]``; "*.get_model" for a method of an object of unknown class): the run resolves them (project.py)
    made: tuple[tuple[str, int | None], ...] = ()
    passes: tuple[tuple[str, int | str, str], ...] = ()  # (target, position or keyword, class): modules passed to
                                                         # another file's functions (project.parameter_modules)


# -- resolving the calls of a run -----------------------------------------------------------------------------
@dataclass
class _Module:
    path: Path
    parts: tuple[str, ...]  # the path's parts without ".py" ("__init__" dropped)
    calls: RunCalls = field(default_factory=RunCalls)


def resolve(files: dict[Path, RunCalls]) -> tuple[dict[Path, dict[str, Entry]], set[Path]]:
    """The entry points of each file of a run, {file: {"f" or "C.m": Entry}}, from the others' per-step calls; and
    the files without device evidence of their own whose functions a file with device evidence calls (their code runs
    on the caller's device: a PPO module's ``update()`` called from a script that moves the model to CUDA)."""
    modules = [_Module(p, _parts(p), c) for p, c in files.items()]
    entries: dict[Path, dict[str, Entry]] = {}
    device: set[Path] = set()
    for caller in modules:
        for call in caller.calls.hot_calls:
            for module, member in _candidates(call.target, caller, modules):
                if module.path != caller.path:
                    entries.setdefault(module.path, {}).setdefault(member, Entry(call.description, call.on_device))
                break
        for target in caller.calls.device_calls if caller.calls.device else ():
            for module, _member in _candidates(target, caller, modules):
                if module.path != caller.path and not module.calls.device and module.calls.sync_sites:
                    device.add(module.path)
                break
    return entries, device


def stepping_calls(files: dict[Path, RunCalls]) -> dict[Path, frozenset[str]]:
    """{file: targets}: the imported functions each file calls (``device_calls``) that step an optimizer in another
    file of the run (``agent.update(rollouts)`` where A2C's ``update()`` runs one optimizer step): a loop whose own
    body calls one is a loop of steps, however many environment steps a nested loop takes first."""
    modules = [_Module(p, _parts(p), c) for p, c in files.items()]
    found: dict[Path, frozenset[str]] = {}
    for caller in modules:
        targets = set()
        for target in caller.calls.device_calls:
            for module, member in _candidates(target, caller, modules):
                if module.path != caller.path and member in module.calls.stepping:
                    targets.add(target)
                break
        if targets:
            found[caller.path] = frozenset(targets)
    return found


def pinned_parameters(files: dict[Path, RunCalls]) -> dict[Path, dict[str, frozenset[int | str]]]:
    """{file: {"f" or "C.m": positions or keywords}}: the parameters of each file's functions that another file of
    the run passes a pinned DataLoader (``evaluate(net, val_loader, device)`` with ``val_loader`` built in train.py
    with ``pin_memory=True``)."""
    modules = [_Module(p, _parts(p), c) for p, c in files.items()]
    found: dict[Path, dict[str, set[int | str]]] = {}
    for caller in modules:
        for target, where in caller.calls.pinned:
            for module, member in _candidates(target, caller, modules):
                if module.path != caller.path:
                    found.setdefault(module.path, {}).setdefault(member, set()).add(where)
                break
    return {path: {m: frozenset(w) for m, w in members.items()} for path, members in found.items()}


def _parts(path: Path) -> tuple[str, ...]:
    parts = path.resolve().with_suffix("").parts
    return parts[:-1] if parts and parts[-1] == "__init__" else parts


def _candidates(target: str, caller: _Module, modules: list[_Module], loose: bool = True):
    """(module, member) pairs ``target`` may name, the most specific first: a module of the run whose path ends with
    the import's module path (relative imports from the caller's folder) and defines the member; else the one module
    of the run that defines the member."""
    if target.startswith("@"):  # "@/abs/path.py:C.forward": a member of a file the run resolved (project.py)
        path, _, member = target[1:].partition(":")
        for module in modules:
            if module.path.resolve() == Path(path):
                yield module, member
                return
        return
    dots = len(target) - len(target.lstrip("."))
    names = target.lstrip(".").split(".")
    base = caller.path.resolve().parent.parts[: len(caller.path.resolve().parent.parts) - max(0, dots - 1)]
    for split in (len(names) - 1, len(names) - 2):
        if split < 0:
            continue
        module_parts, member = tuple(names[:split]), ".".join(names[split:])
        want = base + module_parts if dots else module_parts
        for module in modules:
            if member in module.calls.defines and want and module.parts[-len(want):] == want:
                yield module, member
                return
    if not loose:  # only a module whose path is the import's
        return
    member_options = (".".join(names[-2:]), names[-1]) if len(names) > 1 else (names[-1],)
    for member in member_options:
        defining = [m for m in modules if member in m.calls.defines]
        if len(defining) == 1:
            yield defining[0], member
            return


# -- collate functions that batch graphs -------------------------------------------------------------------------
_GRAPH_WORDS = (b"dgl", b"torch_geometric")


def graph_collates(paths: list[Path]) -> frozenset[str]:
    """The names of the functions and methods of the run's files whose body batches graphs (``dgl.batch``, PyG's
    ``Batch.from_data_list``): a DataLoader whose ``collate_fn`` is one of them (``collate_fn=dataset.collate``,
    the dataset class defined in another module) yields graph objects, which pinning does not pin (TL202). Only
    files that mention a graph library are parsed (Python's ``ast``), before the run, so that ``--fix`` never adds
    ``pin_memory=True`` there."""
    names: set[str] = set()
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if not any(word in data for word in _GRAPH_WORDS):
            continue
        try:
            tree = ast.parse(data)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        names.update(_graph_functions(tree))
    return frozenset(names)


def _imports(tree: ast.Module) -> dict[str, str]:
    """{bound name: qualified name} of a file's absolute imports."""
    imports: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imports[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else \
                    alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return imports


def _graph_functions(tree: ast.Module) -> set[str]:
    imports = _imports(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and _resolved(call.func, imports) in GRAPH_BATCHING:
                    found.add(node.name)
                    break
    return found


def _resolved(func: ast.expr, imports: dict[str, str]) -> str | None:
    """``func``'s dotted name with its head replaced through the file's imports."""
    dotted = ast_dotted_name(func)
    if dotted is None:
        return None
    head, _, rest = dotted.partition(".")
    head = imports.get(head, head)
    return f"{head}.{rest}" if rest else head


# -- precision settings of a program ---------------------------------------------------------------------------
# What a file does about the precision of CUDA matmuls (TL401, TL404): ``TF32`` enables TF32 matmuls, ``REDUCED``
# computes in fp16/bf16 (autocast, a half/bf16 model or dtype, a GradScaler, Lightning ``precision=``, accelerate
# ``mixed_precision=``), ``FULL`` asks for full fp32 on purpose (``set_float32_matmul_precision("highest")``,
# ``allow_tf32 = False``), ``EXTERNAL`` leaves it to a launcher's configuration (``Accelerator()`` without
# ``mixed_precision``, ``deepspeed.initialize``). And ``MATMUL``: the file computes matmuls that matter (``@``,
# ``torch.matmul`` / ``bmm`` / ``einsum``, ``F.linear`` in a class's methods, attention layers, an ``nn.Linear``
# of at least 2048 x 2048 weights (or one size of 2048 and one unknown) with its sizes found through the file's data
# flow (flow.py), a transformer by its class name, a transformers import): convolutions use TF32 by default, and the
# small MLPs of RL or a GAN, or a CNN's classifier head, gain little from it.
# Python's ``ast``, so that the settings of every file of a run are known before any is analysed.
TF32, REDUCED, FULL, EXTERNAL, MATMUL = "tf32", "reduced", "full", "external", "matmul"
_PRECISION_WORDS = (b"tf32", b"float32_matmul_precision", b"autocast", b"half", b"bfloat16", b"float16",
                    b"precision", b"GradScaler", b"amp", b"Accelerator", b"deepspeed", b"fp32_precision",
                    b"@", b"matmul", b"bmm", b"einsum", b"linear", b"Linear", b"ttention", b"ransformer", b"GPT",
                    b"Bert", b"Llama", b"transformers")
_MATMUL_OPS = frozenset({"torch.matmul", "torch.mm", "torch.bmm", "torch.baddbmm", "torch.addmm", "torch.einsum",
                         "torch.nn.functional.linear", "torch.nn.functional.scaled_dot_product_attention"})
_MATMUL_METHODS = frozenset({"matmul", "bmm", "mm", "baddbmm"})
_MATMUL_NAMES = _MATMUL_METHODS | frozenset(name.rsplit(".", 1)[-1] for name in _MATMUL_OPS)  # as written
_MATMUL_LAYERS = frozenset({"torch.nn.MultiheadAttention", "torch.nn.Transformer", "torch.nn.TransformerEncoderLayer",
                            "torch.nn.TransformerDecoderLayer", "torch.nn.TransformerEncoder"})
# Class names of models made of large matmuls (``Transformer(...)``, ``GPT(config)``, ``LlamaForCausalLM``).
_MATMUL_MODELS = re.compile(r"Transformer|GPT|Bert|BERT|Llama|LLaMA|Attention|ViT|T5|Mistral|Qwen|Gemma")
_LARGE_LINEAR = 2048
_REDUCED_DTYPES = frozenset({"torch.float16", "torch.half", "torch.bfloat16", "torch.float8_e4m3fn",
                             "torch.float8_e5m2"})
_PRECISION_TEXT = tuple(word.decode() for word in _PRECISION_WORDS)
_REDUCED_LEAVES = frozenset(name.rsplit(".", 1)[-1] for name in _REDUCED_DTYPES)
# The last names of the calls _precision_call judges (besides model classes, _MATMUL_MODELS, and precision= keywords)
_PRECISION_CALLS = frozenset({"Linear", "set_float32_matmul_precision", "half", "bfloat16", "autocast", "GradScaler",
                              "initialize", "scale_loss", "Accelerator"})
_FULL_PRECISION = frozenset({"32", "32-true", "64", "64-true", "no", "fp32", "float32", "highest", "ieee"})
_IMPORT_LINE = re.compile(rb"^[ \t]*(?:from[ \t]+([.\w]+)[ \t]+import[ \t]+\(?[ \t]*(\w+)|import[ \t]+([\w.]+))", re.M)


def precision_settings(text: str | bytes) -> frozenset[str]:
    """The precision settings (TF32, REDUCED, FULL, EXTERNAL, MATMUL) one file makes; empty when it makes none or
    Python's parser does not take it. (The screen finds the same on the tree it already has: ``PrecisionScan``.)"""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if not any(word in data for word in _PRECISION_WORDS):
        return frozenset()
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    scan = PrecisionScan(_imports(tree), cache(lambda: Flow(tree)))
    for node in ast.walk(tree):
        scan.visit(node)
    return scan.result()


def mentions_precision(text: str) -> bool:
    """Whether ``text`` may make a precision setting or compute matmuls (else ``precision_settings`` is empty)."""
    return any(word in text for word in _PRECISION_TEXT)


class PrecisionScan:
    """``precision_settings`` one node at a time, so that a walk of the tree for something else finds them too;
    ``imports``: {bound name: qualified name} of the file's imports; ``flow()``: the file's data flow (flow.py, made
    on first use: ``nn.Linear(d, 4 * d)`` in ``Block(1024)`` is a large matmul)."""

    def __init__(self, imports: dict[str, str], flow: Callable[[], Flow]) -> None:
        self.imports = imports
        self.flow = flow
        self.found: set[str] = set()
        if any(name.split(".")[0] == "transformers" for name in imports.values()):
            self.found.add(MATMUL)
        self.classes: list[tuple[int, int]] = []  # the lines of each class
        self.matmuls: list[int] = []  # the lines of ``@``, ``torch.matmul``, ``x.bmm``...

    def result(self) -> frozenset[str]:
        """The settings found; MATMUL also when a matmul lies in a class (``_class_matmul``: a model's method, not a
        mel filterbank applied in a data function)."""
        if MATMUL not in self.found and self.matmuls and self.classes:
            spans = sorted(self.classes)
            if any(first <= line <= last for line in self.matmuls for first, last in spans):
                self.found.add(MATMUL)
        return frozenset(self.found)

    def visit(self, node: ast.AST) -> None:
        imports, found = self.imports, self.found
        kind = type(node)
        if kind is ast.Attribute:
            if node.attr in _REDUCED_LEAVES and _resolved(node, imports) in _REDUCED_DTYPES:
                found.add(REDUCED)
        elif kind is ast.Call:
            func = node.func
            written = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            # the cheap look first: most calls name nothing _precision_call asks about (an alias of an import is
            # looked at in full)
            if written in _PRECISION_CALLS or _MATMUL_MODELS.search(written) or written in imports or any(
                    k.arg in ("precision", "mixed_precision") for k in node.keywords):
                found.update(_precision_call(node, imports, self._large))
            if (written in _MATMUL_NAMES or written in imports) and _matmul_call(node, imports):
                self.matmuls.append(node.lineno)
        elif kind is ast.BinOp:
            if type(node.op) is ast.MatMult:
                self.matmuls.append(node.lineno)
        elif kind is ast.ClassDef:
            self.classes.append((node.lineno, node.end_lineno or node.lineno))
        elif kind is ast.Assign:
            for target in node.targets:
                name = _resolved(target, imports) or ""
                if name.endswith(".allow_tf32") and name.startswith("torch.backends.cuda"):
                    found.add(FULL if _literal(node.value) is False else TF32)
                elif name.endswith("fp32_precision") and name.startswith("torch.backends"):
                    value = _literal(node.value)
                    found.add(FULL if value in ("ieee", "highest") else TF32)

    def _large(self, sizes: list[ast.expr | None]) -> bool:
        """An ``nn.Linear`` (``sizes``: in, out) whose weight has at least ``_LARGE_LINEAR`` squared elements, or,
        with one size unknown, whose other size is at least ``_LARGE_LINEAR``; sizes are literals or found through
        the file's data flow (the 4096 of ``nn.Linear(d, 4 * d)`` in ``Block(1024)``)."""
        if MATMUL in self.found:
            return False  # known already: no data flow needed
        known = [self._ints(size) for size in sizes]
        if all(known):
            return max(known[0]) * max(known[1]) >= _LARGE_LINEAR ** 2  # type: ignore[index]
        return any(max(k) >= _LARGE_LINEAR for k in known if k)

    def _ints(self, size: ast.expr | None) -> frozenset[int] | None:
        if size is None or isinstance(size, ast.Constant):
            value = getattr(size, "value", None)
            return frozenset({value}) if isinstance(value, int) and not isinstance(value, bool) else None
        return self.flow().ints(size)


def _precision_call(call: ast.Call, imports: dict[str, str],
                    large: Callable[[list[ast.expr | None]], bool]) -> set[str]:
    name = _resolved(call.func, imports) or ""
    last = name.rsplit(".", 1)[-1] if name else (call.func.attr if isinstance(call.func, ast.Attribute) else "")
    if name in _MATMUL_LAYERS or _MATMUL_MODELS.search(last) or name == "torch.nn.Linear" and large(
            [call.args[i] if len(call.args) > i else next((k.value for k in call.keywords if k.arg == key), None)
             for i, key in enumerate(("in_features", "out_features"))]):
        return {MATMUL}
    keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
    first = call.args[0] if call.args else None
    if name == "torch.set_float32_matmul_precision" and first is not None:
        return {FULL if _literal(first) == "highest" else TF32}
    if last in ("half", "bfloat16") and isinstance(call.func, ast.Attribute) and not call.args:
        return {REDUCED}  # model.half(), x.bfloat16()
    if last == "autocast":
        device = keywords.get("device_type", first)
        if _literal(keywords.get("enabled")) is False or _literal(device) == "cpu" or "cpu" in name.split("."):
            return set()
        return {REDUCED}
    if last == "GradScaler" or name in ("apex.amp.initialize", "apex.amp.scale_loss"):
        return {REDUCED}
    for key in ("precision", "mixed_precision"):
        if key in keywords:
            value = _literal(keywords[key])
            return set() if value is None and isinstance(keywords[key], ast.Constant) or \
                str(value).lower() in _FULL_PRECISION else {REDUCED}
    if last == "Accelerator" or name == "deepspeed.initialize":
        return {EXTERNAL}
    return set()


def _matmul_call(call: ast.Call, imports: dict[str, str]) -> bool:
    """``torch.bmm(a, b)``, ``F.linear(x, w)``, ``q.matmul(k)``: a matmul (counted when it lies in a class: a model's
    methods; matmuls outside classes, a mel filterbank applied in a data function, are small next to its layers)."""
    return _resolved(call.func, imports) in _MATMUL_OPS or \
        isinstance(call.func, ast.Attribute) and call.func.attr in _MATMUL_METHODS


def _literal(expr: ast.expr | None) -> object:
    return expr.value if isinstance(expr, ast.Constant) else None


# A file TL401 or TL404 may report on: a training step (``backward(``), or a layer (``Linear(``, ``Embedding(``,
# ``Conv2d(``...) in a file holding a number TL404 reports (at least 1024, not a multiple of 8); only such files need
# their program's settings.
_TRAINING_STEP = re.compile(rb"\.backward\(")  # a call: ``def backward(ctx, ...)`` of an autograd Function is none
# The sizes TL404 reads: a number given on the line of a layer's call, or a module-level constant (``VOCAB = 50257``)
_LAYER_SIZE = re.compile(rb"(?:Linear|Embedding|Conv[123]d)\([^\n]*?[(,=][ \t]*(\d{4,})(?![\w.])")
_CONSTANT = re.compile(rb"^\w+[ \t]*=[ \t]*(\d{4,})[ \t]*(?:#[^\n]*)?$", re.M)


# The words of a precision setting (not of matmuls): a file without one sets nothing TL404 asks about.
_SETTING_WORDS = (b"tf32", b"float32_matmul_precision", b"autocast", b"half", b"bfloat16", b"float16", b"precision",
                  b"GradScaler", b"torch.amp", b"cuda.amp", b"apex", b"Accelerator", b"deepspeed", b"fp32_precision")


def _needs(data: bytes) -> str | None:
    """What a file needs of its program: "all" (a training step: TL401 asks for TF32 and matmul evidence too),
    "settings" (a layer size off the tiles: TL404 asks only whether the program computes in fp16/bf16), or None."""
    if b"torch" not in data:
        return None
    if b".backward(" in data and _TRAINING_STEP.search(data):
        return "all"
    sizes = [*_LAYER_SIZE.findall(data), *_CONSTANT.findall(data)]
    if any(int(n) % 8 for n in sizes if int(n) >= 1024):
        return "settings"
    return None


def import_targets(data: bytes) -> tuple[str, ...]:
    """What a file imports, as ``pkg.utils.setup`` / ``.utils`` / ``pkg.utils`` (matched to the run's files by
    ``_module_candidates``)."""
    return tuple((module + (b"" if module.endswith(b".") else b".") + name if module else plain)
                 .decode("ascii", "replace") for module, name, plain in _IMPORT_LINE.findall(data))


def _programs(imports: dict[Path, tuple[str, ...]], asked: list[Path]) -> dict[Path, set[Path]]:
    """For each file of ``asked``, the files of its programs: itself, those it imports (directly or not) and those
    that import it (directly or not)."""
    modules = [_Module(p, _parts(p), RunCalls(frozenset({""}))) for p in imports]
    edges: dict[Path, set[Path]] = {}
    for module in modules:
        for target in imports[module.path]:
            for found, _member in _module_candidates(target, module, modules):
                edges.setdefault(module.path, set()).add(found.path)
    below: dict[Path, set[Path]] = {}
    for path in imports:  # the files each file imports, directly or not
        seen, work = {path}, [path]
        while work:
            for nxt in edges.get(work.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    work.append(nxt)
        below[path] = seen
    above: dict[Path, set[Path]] = {}  # the files that import each file, directly or not
    for path, seen in below.items():
        for p in seen:
            above.setdefault(p, set()).add(path)
    return {path: below.get(path, {path}) | above.get(path, set()) for path in asked}


def program_precision(paths: list[Path]) -> dict[Path, frozenset[str]]:
    """For each file of a run that TL401 or TL404 may report on, the precision settings of the programs it is part
    of: its own, those of the files it imports (directly or not: a ``setup()`` helper of the project), and those of
    the files that import it (the entry script sets TF32, then runs the training loop of a module of the project).
    Imports are resolved to the run's files by module path, as calls are (``resolve``). Only the files connected to
    such a file are parsed (with ``ast``, in this process); a file that sets nothing and is connected to no file that
    does is absent. A plain run does not call this: each file's settings come back with its analysis (``settle``);
    ``--fix`` does, as a fix must know before it is written."""
    texts: dict[Path, bytes] = {}
    imports: dict[Path, tuple[str, ...]] = {}
    for path in paths:
        try:
            data = texts[path] = path.read_bytes()
        except OSError:
            continue
        imports[path] = import_targets(data)
    needs = {p: need for p, data in texts.items() if (need := _needs(data))}
    if not needs:
        return {}
    programs = _programs(imports, list(needs))
    # Parse only the files connected to a needy one, and for a file that only asks about settings, only those that
    # name one (a timm model file is connected to most of the package, whose matmuls it does not ask about).
    full = set().union(*(programs[p] for p in needs if needs[p] == "all"))
    some = set().union(*(programs[p] for p in needs if needs[p] == "settings")) - full
    some = {p for p in some if any(word in texts[p] for word in _SETTING_WORDS)}
    settings = {p: found for p in full | some if (found := precision_settings(texts[p]))}
    out: dict[Path, frozenset[str]] = {}
    for path in needs:
        found = set().union(*(settings.get(p, ()) for p in programs[path]))
        if found:
            out[path] = frozenset(found)
    return out


def settle(calls: dict[Path, RunCalls]) -> dict[Path, frozenset[str]]:
    """The rules whose findings stand in each file with ``pending`` rules, once its programs' settings are known from
    the files' own (``RunCalls.precision``, found where each file was parsed): TL401 where the programs compute
    matmuls and set nothing else, TL404 where they compute in fp16/bf16."""
    asked = [p for p, c in calls.items() if c.pending]
    if not asked:
        return {}
    programs = _programs({p: c.imports for p, c in calls.items()}, asked)
    out: dict[Path, frozenset[str]] = {}
    for path in asked:
        found = set().union(*(calls[p].precision for p in programs[path] if p in calls))
        keep = {"TL401"} if found == {MATMUL} else set()
        if REDUCED in found:
            keep.add("TL404")
        out[path] = frozenset(calls[path].pending & keep)
    return out


def _module_candidates(target: str, caller: _Module, modules: list[_Module]):
    """The module of the run an import names, matched by the end of its path as ``_candidates`` matches calls:
    ``pkg.utils`` / ``.utils`` (a module), or ``pkg.utils.setup`` / ``from . import utils`` (a member of a module,
    or a module of a package)."""
    dots = len(target) - len(target.lstrip("."))
    names = tuple(n for n in target.lstrip(".").split(".") if n)
    folder = caller.path.resolve().parent.parts
    base = folder[: len(folder) - max(0, dots - 1)] if dots else ()
    for size in (len(names), len(names) - 1):
        want = base + names[:size]
        if size < 0 or not want or (not dots and size == 0):
            continue
        for module in modules:
            if module is not caller and (module.parts == want if dots else module.parts[-len(want):] == want):
                yield module, ""
                return
