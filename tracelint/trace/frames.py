"""Python frames (``python_function`` events, with_stack=True): which are user code, and the file, line and function
of those. Kineto names a frame ``path/to/train.py(42): step``; library frames are never a finding's source line."""
from __future__ import annotations

import re
import sys
from functools import lru_cache

_FRAME_RE = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.*)$")
# Frames of these places are library code; a finding's source line is the innermost frame outside them. Kineto
# writes paths relative to the sys.path entry they were found under ("torch/nn/modules/module.py", "typing.py"),
# so library code is also recognised by its first path component: the standard library and common packages.
_LIBRARY_MARKERS = ("site-packages", "dist-packages", "/lib/python", "\\Lib\\", "<")
_LIBRARY_ROOTS = frozenset(sys.stdlib_module_names) | frozenset({
    "torch", "torchvision", "torchaudio", "torchtext", "functorch", "triton", "numpy", "scipy", "pandas", "PIL",
    "transformers", "accelerate", "datasets", "huggingface_hub", "lightning", "pytorch_lightning", "lightning_fabric",
    "deepspeed", "timm", "apex", "einops", "xformers", "flash_attn", "torchmetrics", "tqdm", "wandb", "tensorboard",
    "hydra", "omegaconf", "fairscale", "megatron", "_pytest", "pytest", "pluggy", "typing_extensions", "packaging",
})


@lru_cache(maxsize=65536)
def is_library_file(file: str) -> bool:
    """Whether a frame's file is library code (never a finding's source line)."""
    if not file or any(m in file for m in _LIBRARY_MARKERS):
        return True
    first = re.split(r"[/\\]", file.lstrip("./\\"), maxsplit=1)[0]
    return first.removesuffix(".py") in _LIBRARY_ROOTS


@lru_cache(maxsize=65536)
def parse_user_frame(name: str) -> tuple[str, int, str] | None:
    """(file, line, function) of a ``path(line): function`` frame name of user code; None for library code."""
    m = _FRAME_RE.match(name)
    if m is None or is_library_file(m.group("file")):
        return None
    return m.group("file"), int(m.group("line")), m.group("func")


PIPELINING = "pipelining"  # what frame_of gives for a frame of torch.distributed.pipelining
EMPTY_CACHE = "empty_cache"  # ... and for torch.cuda.empty_cache() (torch/cuda/memory.py(212): empty_cache)


@lru_cache(maxsize=65536)
def frame_of(name: str) -> tuple[str, int, str] | str | None:
    """A python_function frame's user-code (file, line, function), PIPELINING for a frame of torch's pipelining
    schedules and stages (counted: the trace of a pipeline stage), EMPTY_CACHE for a call of
    torch.cuda.empty_cache() (kept: where the allocator hands its cache back), else None."""
    path = name.replace("\\", "/")
    if path.endswith("): empty_cache") and "torch/cuda/memory.py(" in path:
        return EMPTY_CACHE
    user = parse_user_frame(name)
    if user is None and "torch/distributed/pipelining/" in path:
        return PIPELINING
    return user


def innermost_user_frame(call_stack: str) -> str | None:
    # PyTorch <= 1.9 "Call stack": frames joined by ';', innermost first.
    for frame in call_stack.split(";"):
        if frame and parse_user_frame(frame.strip()) is not None:
            return frame.strip()
    return None
