"""Conv nets trained in a file (TL405's and TL406's facts): the model's construction, its 16-bit training, and what
shows its input shapes are fixed. The rules live in precision.py, the module of their family.

A conv net: a class of the file that builds ``nn.Conv2d`` layers, or a torchvision / timm CNN constructor
(``resnet50()``, ``timm.create_model("efficientnet_b0")``). Trained: the file calls ``backward()``. In 16 bits: an
autocast (``torch.autocast``, ``torch.cuda.amp.autocast``; not the CPU's), a ``GradScaler``, or ``.half()`` /
``.bfloat16()`` / ``.to(torch.float16)``. These facts are the file's own: a model built in another file of the run is
not followed.
"""
from __future__ import annotations

import libcst as cst

from tracelint.source.rule import SourceRule
from tracelint.source.semantic.calls import call_arguments, literal
from tracelint.source.semantic.model import callee_name, dotted_name, iter_descendants

# torchvision.models' CNN constructors by prefix (resnet50, efficientnet_v2_s, convnext_tiny, regnet_y_400mf, ...);
# timm's model names start the same way.
CNN_PREFIXES = ("resnet", "resnext", "wide_resnet", "efficientnet", "convnext", "vgg", "regnet", "mobilenet",
                "densenet", "inception", "googlenet", "shufflenet", "mnasnet", "squeezenet", "alexnet")
_CONV = frozenset({"torch.nn.Conv2d", "torch.nn.modules.conv.Conv2d"})
_AUTOCAST = frozenset({"torch.autocast", "torch.cuda.amp.autocast", "torch.amp.autocast", "torch.amp.autocast_mode."
                                                                                           "autocast"})
_SCALER = frozenset({"torch.cuda.amp.GradScaler", "torch.amp.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler"})
_HALF_DTYPES = frozenset({"torch.float16", "torch.half", "torch.bfloat16"})
# Inputs of fixed size: image datasets of one resolution, crops to a fixed size, a synthetic NCHW batch.
_FIXED_DATASETS = frozenset({"MNIST", "FashionMNIST", "KMNIST", "EMNIST", "CIFAR10", "CIFAR100", "SVHN", "STL10"})
_FIXED_CROPS = frozenset({"RandomResizedCrop", "CenterCrop", "RandomCrop"})
_SYNTHETIC = frozenset({"torch.randn", "torch.rand", "torch.zeros", "torch.ones", "torch.empty"})


class ConvNet:
    """The facts of one file (``facts(rule)``)."""

    def __init__(self, rule: SourceRule) -> None:
        ctx = rule.ctx
        self.constructions: list[cst.Call] = []  # calls that build the conv net, in file order
        self.precision: str | None = None  # how it trains in 16 bits ("bf16 autocast", ".half()", ...)
        self.backward: cst.Call | None = None
        self.fixed_shapes: str | None = None  # what shows the input size is fixed
        conv_classes = set()
        calls = [n for n in iter_descendants(ctx.module) if isinstance(n, cst.Call)]
        for call in calls:
            name = ctx.qualified_name(call.func) or ""
            if name in _CONV:
                owner = next((a for a in ctx.ancestors(call) if isinstance(a, cst.ClassDef)), None)
                if owner is not None:
                    conv_classes.add(owner.name.value)
        for call in calls:
            name = ctx.qualified_name(call.func) or ""
            last = name.rsplit(".", 1)[-1]
            func = call.func
            if name.startswith("torchvision.models.") and last.startswith(CNN_PREFIXES) or \
                    name == "timm.create_model" and call.args and \
                    str(literal(call.args[0].value)).startswith(CNN_PREFIXES) or \
                    isinstance(func, cst.Name) and func.value in conv_classes and name == "" and \
                    not any(isinstance(a, cst.ClassDef) and a.name.value == func.value for a in ctx.ancestors(call)):
                self.constructions.append(call)
            if self.precision is None:
                self.precision = _precision(ctx, call, name)
            if self.backward is None and isinstance(func, cst.Attribute) and func.attr.value == "backward":
                self.backward = call
            fixed = _fixed(ctx, call, name, last)
            if fixed is not None and (self.fixed_shapes is None or self.fixed_shapes.startswith("a `")):
                self.fixed_shapes = fixed  # a dataset or a crop says more than a synthetic batch


def facts(rule: SourceRule) -> ConvNet:
    return rule.ctx.memo("conv-net", lambda ctx: ConvNet(rule))


def _precision(ctx, call: cst.Call, name: str) -> str | None:
    if name in _AUTOCAST:
        args = call_arguments(ctx, call)
        device = literal(args.get("device_type", 0)) if name in ("torch.autocast", "torch.amp.autocast") else "cuda"
        if device == "cpu" or is_false(args.get("enabled")):
            return None
        dtype = ctx.qualified_name(args.get("dtype")) if args.get("dtype") is not None else None
        return f"{'bf16' if dtype == 'torch.bfloat16' else 'fp16'} autocast"
    if name in _SCALER:
        return "fp16 with a GradScaler"
    method = callee_name(call)
    if isinstance(call.func, cst.Attribute) and method in ("half", "bfloat16") and not call.args:
        return f"`.{method}()`"
    if isinstance(call.func, cst.Attribute) and method == "to":
        for arg in call.args:
            if ctx.qualified_name(arg.value) in _HALF_DTYPES:
                return f"`.to({dotted_name(arg.value)})`"
    return None


def is_false(expr) -> bool:
    return expr is not None and literal(expr) is False


def _fixed(ctx, call: cst.Call, name: str, last: str) -> str | None:
    if name.startswith("torchvision.") and last in _FIXED_DATASETS:
        return f"`{last}` images"
    if name.startswith("torchvision.") and last in _FIXED_CROPS:
        return f"`{last}` crops"
    sizes = [a.value for a in call.args if a.keyword is None and not a.star]
    if name in _SYNTHETIC and len(sizes) == 4 and not any(literal(size) == 1 for size in sizes[2:]):
        return f"a `{dotted_name(call.func)}` batch of images"  # (n, c, h, w); not a (b, 1, 1, 1) broadcast
    return None


def describe(rule: SourceRule, call: cst.Call) -> str:
    return " ".join(rule.ctx.code_for(call.func).split()) + "()"


class ChannelsLastCheck(SourceRule):
    """TL405's check (its class, precision.HalfPrecisionConvWithoutChannelsLast, gives the code): a conv net
    trained in 16 bits in a file that never mentions ``channels_last``; reported once, at the model's
    construction."""

    triggers = ("backward",)

    def finish(self) -> None:
        net = facts(self)
        if not net.constructions or net.precision is None or net.backward is None or \
                self.ctx.mentions("channels_last"):
            return
        built = net.constructions[0]
        self.report(built, f"the conv net `{describe(self, built)}` trains in {net.precision} in PyTorch's default "
                           "NCHW memory format: cuDNN's 16-bit Tensor Core convolutions work in NHWC, so each "
                           "convolution converts its activations and gradients to NHWC and back, and batch norm and "
                           "pooling run their slower NCHW kernels. Put the model and its input in channels_last "
                           "(`model.to(memory_format=torch.channels_last)`, `x.to(memory_format="
                           "torch.channels_last)`): on the project's bf16 ResNet-50 fixture (H200) the step went "
                           "from 54.5 to 29.3 ms (1.86x; `tracelint verify --rule TL405`: 1.87x)")


class CudnnBenchmarkCheck(SourceRule):
    """TL406's check (its class, precision.ConvNetWithoutCudnnBenchmark, gives the code): a conv net trained on
    inputs of a fixed size in a file that never sets ``cudnn.benchmark``; reported once, at the model's
    construction."""

    triggers = ("backward",)

    def finish(self) -> None:
        net = facts(self)
        if not net.constructions or net.backward is None or net.fixed_shapes is None or \
                self.ctx.mentions("cudnn.benchmark") or self.ctx.mentions("cudnn_benchmark"):
            return
        built = net.constructions[0]
        self.report(built, f"the conv net `{describe(self, built)}` trains on inputs of a fixed size "
                           f"({net.fixed_shapes}) with `torch.backends.cudnn.benchmark` off (the default): cuDNN "
                           "picks each convolution's algorithm by a heuristic. With `torch.backends.cudnn.benchmark "
                           "= True` it times the candidates once per input shape and keeps the fastest; whether that "
                           "pays depends on the model and the GPU (on the project's fp32 ResNet-18 fixture, H200: "
                           "12.58 against 12.40 ms a step, 1.5 %, at the level of run-to-run noise; time both with "
                           "`tracelint verify --against`)")
