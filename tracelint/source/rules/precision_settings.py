"""The precision settings of a file and of the programs it is part of, which TL401 and TL404 (rules/precision.py)
judge a file by: read on the file's libcst tree and its data flow (flow.py), at most once per file content in a run.

What a file does about the precision of CUDA matmuls: ``TF32`` enables TF32 matmuls, ``REDUCED`` computes in
fp16/bf16 (autocast, a half/bf16 model or dtype, a GradScaler, Lightning ``precision=``, accelerate
``mixed_precision=``), ``FULL`` asks for full fp32 on purpose (``set_float32_matmul_precision("highest")``,
``allow_tf32 = False``), ``EXTERNAL`` leaves it to a launcher's configuration (``Accelerator()`` without
``mixed_precision``, ``deepspeed.initialize``).

What it computes: ``MATMUL``, models made of matmuls (attention layers, a transformer by its class name, a
transformers import); ``MATMUL_OPS``, matmuls that matter only in a program without convolutions (``@``,
``torch.matmul`` / ``bmm`` / ``einsum``, ``F.linear`` in a class's methods, an ``nn.Linear`` of at least 2048 x 2048
weights, or one size of 2048 and one unknown, its sizes found through the file's data flow); ``CONV``, convolutions
(a ``Conv1d``-``Conv3d`` layer, a convolution net by its class name, torchvision's model zoo). Convolutions use TF32
by default (cuDNN), and next to them those matmuls are a CNN's classifier or projection head, its loss (a
contrastive ``q @ k.T``) or an RL agent's noisy linear layers: TF32 matmuls buy nothing measurable there (one H200,
torch 2.11, fp32 training: ResNet-50 batch 64 32.16 ms with fp32 matmuls, 32.11 ms with TF32, 1.00x; ResNet-18 CIFAR
batch 256 6.12 / 6.46 ms; ``python bench/tl401_conv_tf32.py``). A matmul outside any class (a mel filterbank applied
in a data function) counts as none. ``matmul_bound(settings)``: the program computes matmuls that matter and chose
no precision (TL401).
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

import libcst as cst

from tracelint.source.document import DocumentError, read_document
from tracelint.source.limits import parsed_or_none
from tracelint.source.runcalls import RunCalls, import_targets, programs
from tracelint.source.semantic.calls import literal
from tracelint.source.semantic.flow import keywords, positional
from tracelint.source.semantic.model import FileContext
from tracelint.source.semantic.tree import evaluated, iter_children

TF32, REDUCED, FULL, EXTERNAL, MATMUL = "tf32", "reduced", "full", "external", "matmul"
MATMUL_OPS, CONV = "matmul-ops", "conv"
CHOICES = frozenset({TF32, REDUCED, FULL, EXTERNAL})  # what a program chose about its precision


def matmul_bound(settings: frozenset[str]) -> bool:
    """The program computes matmuls that matter (``MATMUL``, or matmul operations in a program without
    convolutions) and chose nothing about their precision: what TL401 reports."""
    return not settings & CHOICES and (MATMUL in settings or MATMUL_OPS in settings and CONV not in settings)


# A file that mentions none of these makes no setting and computes no matmul the scan counts: it is not parsed.
_PRECISION_WORDS = (b"tf32", b"float32_matmul_precision", b"autocast", b"half", b"bfloat16", b"float16",
                    b"precision", b"GradScaler", b"amp", b"Accelerator", b"deepspeed", b"fp32_precision",
                    b"@", b"matmul", b"bmm", b"einsum", b"linear", b"Linear", b"ttention", b"ransformer", b"GPT",
                    b"Bert", b"Llama", b"transformers", b"Conv", b"models", b"ResNe", b"VGG", b"DenseNet",
                    b"EfficientNet", b"MobileNet", b"Inception", b"UNet", b"RegNet", b"DCGAN")
_MATMUL_OPS = frozenset({"torch.matmul", "torch.mm", "torch.bmm", "torch.baddbmm", "torch.addmm", "torch.einsum",
                         "torch.nn.functional.linear", "torch.nn.functional.scaled_dot_product_attention"})
_MATMUL_METHODS = frozenset({"matmul", "bmm", "mm", "baddbmm"})
_MATMUL_NAMES = _MATMUL_METHODS | frozenset(name.rsplit(".", 1)[-1] for name in _MATMUL_OPS)  # as written
_MATMUL_LAYERS = frozenset({"torch.nn.MultiheadAttention", "torch.nn.Transformer", "torch.nn.TransformerEncoderLayer",
                            "torch.nn.TransformerDecoderLayer", "torch.nn.TransformerEncoder"})
# Class names of models made of large matmuls (``Transformer(...)``, ``GPT(config)``, ``LlamaForCausalLM``).
_CONV_LAYERS = frozenset(f"torch.nn.{kind}{n}d" for kind in ("Conv", "ConvTranspose") for n in (1, 2, 3))
_VISION_TRANSFORMERS = re.compile(r"vit|swin", re.I)  # torchvision's models that are no convolution nets
# Class names of convolution nets (``SupConResNet(...)``, ``VGG16()``, ``UNet(3, 1)``).
_CONV_MODELS = re.compile(r"ResNe[tX]|VGG|DenseNet|EfficientNet|MobileNet|ConvNe[xX]t|Inception|UNet|RegNet|DCGAN")
_MATMUL_MODELS = re.compile(r"Transformer|GPT|Bert|BERT|Llama|LLaMA|Attention|ViT|T5|Mistral|Qwen|Gemma")
_LARGE_LINEAR = 2048
_REDUCED_DTYPES = frozenset({"torch.float16", "torch.half", "torch.bfloat16", "torch.float8_e4m3fn",
                             "torch.float8_e5m2"})
_REDUCED_LEAVES = frozenset(name.rsplit(".", 1)[-1] for name in _REDUCED_DTYPES)
# The last names of the calls _precision_call judges (besides model classes, _MATMUL_MODELS, and precision= keywords)
_PRECISION_CALLS = frozenset({"Linear", "set_float32_matmul_precision", "half", "bfloat16", "autocast", "GradScaler",
                              "initialize", "scale_loss", "Accelerator",
                              *(name.rsplit(".", 1)[-1] for name in _CONV_LAYERS)})
_FULL_PRECISION = frozenset({"32", "32-true", "64", "64-true", "no", "fp32", "float32", "highest", "ieee"})

# The settings of each file content read in this process: ``file_settings`` (a rule, on the tree it has) and
# ``precision_settings`` (a text, parsed here) answer from it, so that a file is parsed once however both are asked.
_read: dict[bytes, frozenset[str]] = {}


def file_settings(ctx: FileContext) -> frozenset[str]:
    """The precision settings (TF32, REDUCED, FULL, EXTERNAL, MATMUL) the file of ``ctx`` makes, read on its tree."""
    return _remembered(_encoded(ctx.source), lambda: _scan(ctx))


def precision_settings(text: str | bytes) -> frozenset[str]:
    """``file_settings`` of a text: empty when it makes none, or when libcst does not take it."""
    data = _encoded(text)
    return _remembered(data, lambda: _parse_and_scan(data))


def _encoded(text: str | bytes) -> bytes:
    return text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text


def _remembered(data: bytes, read: Callable[[], frozenset[str]]) -> frozenset[str]:
    key = hashlib.blake2b(data, digest_size=16).digest()
    found = _read.get(key)
    if found is None:
        found = _read[key] = read() if _mentions(data) else frozenset()
    return found


def _mentions(data: bytes) -> bool:
    return any(word in data for word in _PRECISION_WORDS)


def _parse_and_scan(data: bytes) -> frozenset[str]:
    text = data.decode("utf-8", "replace")
    module = parsed_or_none(text)
    if module is None:
        return frozenset()
    try:
        return _scan(FileContext("", text, module))
    except RecursionError:
        return frozenset()


def _scan(ctx: FileContext) -> frozenset[str]:
    """One walk of the file's tree (a work list: generated code nests thousands deep)."""
    imports = ctx.imports
    found: set[str] = set()
    if any(name.split(".")[0] == "transformers" for name in imports.values()):
        found.add(MATMUL)
    in_class_matmul = False  # a matmul in a class: a model's method, not a mel filterbank applied in a data function

    def large(sizes: list[cst.BaseExpression | None]) -> bool:
        """An ``nn.Linear`` (``sizes``: in, out) whose weight has at least ``_LARGE_LINEAR`` squared elements, or,
        with one size unknown, whose other size is at least ``_LARGE_LINEAR``; sizes are literals or found through
        the file's data flow (the 4096 of ``nn.Linear(d, 4 * d)`` in ``Block(1024)``)."""
        if MATMUL_OPS in found or MATMUL in found:
            return False  # known already: no data flow needed
        known = [_ints(ctx, size) for size in sizes]
        if all(known):
            return max(known[0]) * max(known[1]) >= _LARGE_LINEAR ** 2  # type: ignore[index]
        return any(max(k) >= _LARGE_LINEAR for k in known if k)

    work: list[tuple[cst.CSTNode, bool]] = [(ctx.module, False)]
    while work:
        node, in_class = work.pop()
        kind = type(node)
        if kind is cst.Attribute:
            if node.attr.value in _REDUCED_LEAVES and ctx.spelled_name(node) in _REDUCED_DTYPES:
                found.add(REDUCED)
            elif node.attr.value == "models" and ctx.spelled_name(node) == "torchvision.models":
                found.add(CONV)  # ``torchvision.models.resnet50()``, ``models.__dict__[arch]()``
        elif kind is cst.Call:
            func = node.func
            written = func.attr.value if isinstance(func, cst.Attribute) else \
                func.value if isinstance(func, cst.Name) else ""
            # the cheap look first: most calls name nothing _precision_call asks about (an alias of an import is
            # looked at in full)
            if written in _PRECISION_CALLS or _MATMUL_MODELS.search(written) or _CONV_MODELS.search(written) or \
                    written in imports or any(
                    a.keyword is not None and a.keyword.value in ("precision", "mixed_precision") for a in node.args):
                found.update(_precision_call(ctx, node, large))
            if in_class and (written in _MATMUL_NAMES or written in imports) and _matmul_call(ctx, node):
                in_class_matmul = True
        elif kind is cst.BinaryOperation:
            if in_class and type(node.operator) is cst.MatrixMultiply:
                in_class_matmul = True
        elif kind is cst.Assign:
            for target in node.targets:
                name = ctx.spelled_name(target.target) or ""
                if name.endswith(".allow_tf32") and name.startswith("torch.backends.cuda"):
                    found.add(FULL if literal(node.value) is False else TF32)
                elif name.endswith("fp32_precision") and name.startswith("torch.backends"):
                    found.add(FULL if literal(node.value) in ("ieee", "highest") else TF32)
        if kind is cst.ClassDef:  # its decorators lie outside it
            work.extend((child, in_class or not isinstance(child, cst.Decorator)) for child in iter_children(node))
        elif kind is cst.Import or kind is cst.ImportFrom:
            continue  # read through the file's imports (ctx.imports), never as the names they spell
        else:
            work.extend((child, in_class) for child in iter_children(node))
    if in_class_matmul:
        found.add(MATMUL_OPS)
    if any(q == "torchvision.models" or q.startswith("torchvision.models.") and not _VISION_TRANSFORMERS.search(q)
           for q in imports.values()):
        found.add(CONV)  # ``from torchvision import models``, ``from torchvision.models import resnet50``
    return frozenset(found)


def _ints(ctx: FileContext, size: cst.BaseExpression | None) -> frozenset[int] | None:
    if size is None or isinstance(size, (cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString)) or \
            isinstance(size, cst.Name) and size.value in ("True", "False", "None"):
        return None  # a literal that is no integer: no data flow needed
    if isinstance(size, cst.Integer):
        value = evaluated(size)
        return frozenset({value}) if isinstance(value, int) else None
    return ctx.flow.ints(size)


def _precision_call(ctx: FileContext, call: cst.Call,
                    large: Callable[[list[cst.BaseExpression | None]], bool]) -> set[str]:
    name = ctx.spelled_name(call.func) or ""
    last = name.rsplit(".", 1)[-1] if name else (call.func.attr.value if isinstance(call.func, cst.Attribute) else "")
    given, named = positional(call), keywords(call)
    if name in _CONV_LAYERS or _CONV_MODELS.search(last) and not _MATMUL_MODELS.search(last):
        return {CONV}
    if name in _MATMUL_LAYERS or _MATMUL_MODELS.search(last):
        return {MATMUL}
    if name == "torch.nn.Linear" and large(
            [given[i] if len(given) > i else named.get(key) for i, key in enumerate(("in_features", "out_features"))]):
        return {MATMUL_OPS}  # large, yet a conv net's classifier or projection head (VGG's 25088x4096: 2 % of it)
    first = given[0] if given else None
    if name == "torch.set_float32_matmul_precision" and given:
        return {FULL if literal(first) == "highest" else TF32}
    if last in ("half", "bfloat16") and isinstance(call.func, cst.Attribute) and not given:
        return {REDUCED}  # model.half(), x.bfloat16()
    if last == "autocast":
        device = named.get("device_type", first)
        if literal(named.get("enabled")) is False or literal(device) == "cpu" or "cpu" in name.split("."):
            return set()
        return {REDUCED}
    if last == "GradScaler" or name in ("apex.amp.initialize", "apex.amp.scale_loss"):
        return {REDUCED}
    for key in ("precision", "mixed_precision"):
        if key in named:
            value = literal(named[key])  # precision=None: the default; a name: whatever it holds, not fp32
            return set() if value is None or str(value).lower() in _FULL_PRECISION else {REDUCED}
    if last == "Accelerator" or name == "deepspeed.initialize":
        return {EXTERNAL}
    return set()


def _matmul_call(ctx: FileContext, call: cst.Call) -> bool:
    """``torch.bmm(a, b)``, ``F.linear(x, w)``, ``q.matmul(k)``: a matmul (counted when it lies in a class: a model's
    methods; matmuls outside classes, a mel filterbank applied in a data function, are small next to its layers)."""
    return ctx.spelled_name(call.func) in _MATMUL_OPS or \
        isinstance(call.func, cst.Attribute) and call.func.attr.value in _MATMUL_METHODS


# -- the programs of a run -----------------------------------------------------------------------------------------
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


def program_precision(paths: list[Path]) -> dict[Path, frozenset[str]]:
    """For each file of a run that TL401 or TL404 may report on, the precision settings of the programs it is part
    of: its own, those of the files it imports (directly or not: a ``setup()`` helper of the project), and those of
    the files that import it (the entry script sets TF32, then runs the training loop of a module of the project).
    Imports are resolved to the run's files by module path, as calls are (runcalls.programs). Only the files
    connected to such a file are parsed (in this process); a file that sets nothing and is connected to no file that
    does is absent. A plain run does not call this: the files' settings are read where they are analysed and the run
    settles the rest (``standing_pending``); ``--fix`` does, as a fix must know before it is written."""
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
    connected = programs(imports, list(needs))
    # Parse only the files connected to a needy one, and for a file that only asks about settings, only those that
    # name one (a timm model file is connected to most of the package, whose matmuls it does not ask about).
    full = set().union(*(connected[p] for p in needs if needs[p] == "all"))
    some = set().union(*(connected[p] for p in needs if needs[p] == "settings")) - full
    some = {p for p in some if any(word in texts[p] for word in _SETTING_WORDS)}
    settings = {p: found for p in full | some if (found := precision_settings(texts[p]))}
    out: dict[Path, frozenset[str]] = {}
    for path in needs:
        found = set().union(*(settings.get(p, ()) for p in connected[path]))
        if found:
            out[path] = frozenset(found)
    return out


def standing_pending(calls: dict[Path, RunCalls]) -> dict[Path, frozenset[str]]:
    """The rules whose findings stand in each file with ``pending`` rules, once its programs' settings are known:
    TL401 where the programs compute matmuls and set nothing else, TL404 where they compute in fp16/bf16. The
    settings of a file with pending rules come with its analysis (``RunCalls.precision``); those of the other files
    of its programs are read here (only theirs)."""
    asked = [p for p, c in calls.items() if c.pending]
    if not asked:
        return {}
    connected = programs({p: c.imports for p, c in calls.items()}, asked)
    read: dict[Path, frozenset[str]] = {}

    def own(path: Path) -> frozenset[str]:
        if path not in read:  # a file with pending rules brings its own (its rules read them)
            read[path] = calls[path].precision if calls[path].pending else _document_settings(path)
        return read[path]

    out: dict[Path, frozenset[str]] = {}
    for path in asked:
        found = set().union(*(own(p) for p in connected[path] if p in calls))
        keep = {"TL401"} if matmul_bound(frozenset(found)) else set()
        if REDUCED in found:
            keep.add("TL404")
        out[path] = frozenset(calls[path].pending & keep)
    return out


def _document_settings(path: Path) -> frozenset[str]:
    """``precision_settings`` of a file as analysed (a notebook: its code cells)."""
    try:
        return precision_settings(read_document(path).text)
    except DocumentError:
        return frozenset()
