"""Word lists the source rules and the libcst-free screen (screen.py) both judge by: one copy of each.

Kept free of libcst so that the screen can use them without importing it.
"""
from __future__ import annotations

import builtins
import re

BUILTINS = frozenset(dir(builtins))
SYNCHRONIZE = frozenset({
    "torch.cuda.synchronize", "torch.mps.synchronize", "torch.xpu.synchronize", "torch.accelerator.synchronize",
})
MASK_METHODS = frozenset({
    "bool", "eq", "ne", "gt", "lt", "ge", "le", "isnan", "isinf", "isfinite", "isneginf", "isposinf",
    "logical_and", "logical_or", "logical_not", "logical_xor",
})
DATA_DEPENDENT = frozenset({"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive"})
LOGGING = frozenset({"debug", "info", "warning", "warn", "error", "critical", "log", "exception"})
STEP_HOOKS = frozenset({"training_step", "validation_step", "test_step", "predict_step", "train_step", "eval_step"})
HOST_METHODS = frozenset({
    "item", "tolist", "numpy", "cpu", "size", "dim", "ndimension", "numel", "nelement", "element_size",
    "data_ptr", "stride", "get_device", "is_contiguous", "keys", "items", "values", "format", "join", "split",
    "startswith", "endswith", "append", "get", "copy", "dumps", "is_floating_point", "is_complex", "storage_offset",
})
HOST_ATTRS = frozenset({"shape", "ndim", "device", "dtype", "is_cuda", "requires_grad", "layout", "is_leaf", "names"})
# Top-level modules whose functions are never a file of the run (callers.py, screen.py: calls across the run's files).
EXTERNAL_MODULES = frozenset({
    "torch", "torchvision", "torchaudio", "numpy", "builtins", "math", "os", "sys", "time", "random", "json",
    "logging", "collections", "functools", "itertools", "typing", "re", "wandb", "tqdm", "transformers", "pathlib",
    "shutil", "copy", "pickle", "argparse", "datetime", "scipy", "sklearn", "pandas", "PIL", "cv2", "matplotlib",
})
# Device evidence (values.Values.device_evidence): importing one of these modules puts work on an accelerator.
DEVICE_MODULES = ("torch.cuda", "torch.backends.cudnn", "torch.mps", "torch.xpu", "apex", "torch_xla", "pynvml")
# A process or framework setup that runs on an accelerator or on the CPU alike (gloo, DDP on CPU, Lightning's
# accelerator="cpu"): evidence unless the file itself pins the CPU (``device = torch.device("cpu")``, issue #34).
PROCESS_MODULES = ("torch.distributed", "torch.nn.parallel", "accelerate", "lightning", "pytorch_lightning",
                   "deepspeed", "fairscale")
# Text that names an accelerator anywhere in a file (lower case): substrings of identifiers, strings or comments
# (``torch.cuda``, ``"cuda:0"``, ``args.gpu``, ``"nccl"``), and whole words; then the text of a per-process setup
# (``LOCAL_RANK``, ``DistributedDataParallel``), which counts as PROCESS_MODULES do.
DEVICE_SUBSTRINGS = ("cuda", "gpu", "cudnn", "nccl")
PROCESS_SUBSTRINGS = ("local_rank", "accelerator", "dataparallel")
DEVICE_NAMES = ("mps", "xpu", "npu", "hpu")
# Calls that write or plot an array's values (TL102: the host copy feeding them is inherent to the output):
# by their last name, and by qualified-name prefix.
HOST_OUTPUT_CALLS = frozenset({"save_image", "imsave", "imwrite", "imshow", "fromarray", "mimsave", "mimwrite"})
HOST_OUTPUT_MODULES = (
    "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt", "torch.save", "torchaudio.save",
    "soundfile.write", "scipy.io.wavfile.write", "matplotlib.pyplot", "PIL.Image", "cv2.imwrite", "imageio",
)
# Methods that keep a boolean tensor boolean (TL106 masks: ``torch.eye(n, dtype=torch.bool).to(device)``).
JOINS = frozenset({"cat", "concat", "concatenate", "stack"})  # torch's joins: a join of masks is a mask (TL106)
MASK_KEEPING = frozenset({
    "to", "cuda", "detach", "clone", "contiguous", "view", "reshape", "flatten", "squeeze", "unsqueeze", "expand",
    "expand_as", "view_as", "reshape_as", "repeat", "t", "transpose", "permute",
})
# Calls that batch graph objects in a collate function (TL202: DataLoader pinning does not pin the graphs).
GRAPH_BATCHING = frozenset({"dgl.batch", "dgl.batch_hetero", "torch_geometric.data.Batch.from_data_list"})
# torch creation functions that take ``device=`` and fill the tensor where it is made (TL204): deterministically,
# or from a random generator (the device's draws other numbers than the host's).
FILLED_CREATION = frozenset({"zeros", "ones", "empty", "full", "arange", "eye", "linspace", "logspace"})
RANDOM_CREATION = frozenset({"randn", "rand", "randint", "randperm", "normal"})

# What names a per-step loop (semantic.steps decides with these; the prefilter's looser test, screen._steppy_loop,
# matches any of them): substrings of an iterable's text that mean one iteration per batch, words of it...
DATA_SUBSTRINGS = ("loader", "batches", "prefetch", "dataiter", "data_iter", "batch_iter", "batch_gen")
DATA_WORDS = frozenset({"dl", "data", "dataset", "iter", "iterator", "tqdm", "pbar", "progress", "stream"})
# ... and substrings / words of a range bound or a while test that mean steps, not epochs.
STEP_SUBSTRINGS = ("step", "iter", "loader", "update")
STEP_WORDS = frozenset({"it", "its", "n_it", "done", "terminated", "truncated"})

WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def words(text: str) -> frozenset[str]:
    """Lower-case words of identifiers in ``text``: ``trainLoader.next_batch`` -> {train, loader, next, batch}."""
    return frozenset(w.lower() for w in WORD.findall(text))


def head_word(text: str) -> str:
    """The last word of the last name in ``text``, what the name is (``action_loss`` is a loss, ``self.actions``
    actions): ``""`` when there is none."""
    found = WORD.findall(text.rsplit(".", 1)[-1])
    return found[-1].lower() if found else ""
