"""What one item of a loader costs (TL201: a dataset of in-memory tensors with trivial indexing needs no worker
processes), and whether its collate function batches graphs (TL202: pinning does not help those)."""
from __future__ import annotations

import libcst as cst

from tracelint.source.loader.arguments import COLLATE_POS, DATASET_POS
from tracelint.source.loader.index import FileIndex
from tracelint.source.semantic.calls import Arguments, is_literal
from tracelint.source.semantic.model import callee_name, dotted_name, iter_descendants
from tracelint.source.vocab import GRAPH_BATCHING

# Cheap items (TL201): a dataset of tensors held in memory, indexed without per-item CPU work.
TENSOR_DATASETS = frozenset({"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"})
_SUBSETS = frozenset({"torch.utils.data.Subset", "torch.utils.data.dataset.Subset"})
_SPLITS = frozenset({"torch.utils.data.random_split", "torch.utils.data.dataset.random_split"})
_CONCATS = frozenset({"torch.utils.data.ConcatDataset", "torch.utils.data.dataset.ConcatDataset"})
_CHEAP_BUILTINS = frozenset({
    "int", "float", "str", "bool", "len", "range", "list", "tuple", "dict", "set", "min", "max", "abs", "sum", "zip",
    "enumerate", "round", "sorted", "reversed", "slice", "isinstance", "divmod", "hasattr", "getattr",
})
_CHEAP_TORCH = frozenset({
    "tensor", "as_tensor", "from_numpy", "stack", "cat", "full", "full_like", "zeros", "zeros_like", "ones",
    "ones_like", "empty", "arange", "LongTensor", "FloatTensor", "IntTensor", "BoolTensor", "Tensor",
    "pad_sequence", "pad", "flip", "where", "clamp", "randint", "rand", "randn", "randperm",
})
_CHEAP_METHODS = frozenset({
    "item", "tolist", "long", "float", "int", "half", "double", "bool", "type", "to", "clone", "contiguous", "view",
    "reshape", "squeeze", "unsqueeze", "flip", "t", "transpose", "permute", "narrow", "index_select", "astype",
    "copy", "join", "format", "split", "strip", "lower", "upper", "replace", "get", "keys", "values", "items",
    "append", "extend", "size", "dim", "numel", "unbind", "chunk", "fill_", "masked_fill", "masked_fill_", "clamp",
    "clamp_", "expand", "repeat", "new_full", "new_zeros", "new_ones",
})
# Storage read lazily by indexing (each item is a disk read): a dataset holding one is not in memory.
_LAZY_STORAGE = frozenset({"memmap", "open_memmap", "File", "open", "Environment", "open_file", "open_zarr"})


class Items:
    """The datasets and collate functions of a file's loaders, judged by what the file shows of them."""

    def __init__(self, index: FileIndex) -> None:
        self.index = index
        self.ctx = index.ctx

    def cheap_items(self, args: Arguments) -> bool:
        """The loader's items cost no CPU work worth a worker process: an in-memory dataset (``TensorDataset``, a
        list, a class of the file whose ``__getitem__`` only indexes what it holds and converts to tensors) and no
        collate function, or one of the file doing the same."""
        dataset = args.get("dataset", DATASET_POS)
        if dataset is None or not self._cheap_dataset(dataset, 0):
            return False
        collate = args.get("collate_fn", COLLATE_POS)
        if collate is None or is_literal(collate, None):
            return True
        bodies = self._callable_bodies(collate)
        return bool(bodies) and all(self._cheap_body(body) for body in bodies)

    def _cheap_dataset(self, expr: cst.BaseExpression, depth: int) -> bool:
        if depth > 4:
            return False
        if isinstance(expr, (cst.List, cst.Tuple, cst.ListComp)):
            return True  # items already built and held in a list
        if isinstance(expr, cst.Name):
            value = self.index.value(expr)
            if value is not None:
                return self._cheap_dataset(value, depth + 1)
            split = self._split_of(expr)  # train_set, val_set = random_split(dataset, ...)
            return split is not None and self._cheap_dataset(split, depth + 1)
        if isinstance(expr, cst.Subscript):  # {"train": train_set, "test": test_set}[split]
            container = self.index.value(expr.value) if isinstance(expr.value, cst.Name) else expr.value
            return isinstance(container, cst.Dict) and bool(container.elements) and all(
                isinstance(e, cst.DictElement) and self._cheap_dataset(e.value, depth + 1) for e in container.elements)
        if not isinstance(expr, cst.Call):
            return False
        qualified = self.ctx.qualified_name(expr.func)
        if qualified in TENSOR_DATASETS:
            return True
        if qualified in _SUBSETS and expr.args:
            return self._cheap_dataset(expr.args[0].value, depth + 1)
        if qualified in _CONCATS and expr.args:
            parts = expr.args[0].value
            return isinstance(parts, cst.List | cst.Tuple) and all(
                self._cheap_dataset(e.value, depth + 1) for e in parts.elements)
        if qualified is None and isinstance(expr.func, cst.Name):
            classes = self.index.classes.get(expr.func.value, ())
            return bool(classes) and all(self._cheap_class(c, depth + 1) for c in classes)
        return False

    def _split_of(self, name: cst.Name) -> cst.BaseExpression | None:
        """The dataset split by ``random_split`` into the tuple ``name`` was unpacked from."""
        for target in (n for n in self.index.names.get(name.value, ()) if n in self.index.stores):
            packing = (cst.Element, cst.Tuple, cst.List, cst.AssignTarget)
            assign = next(a for a in self.ctx.ancestors(target) if not isinstance(a, packing))
            value = assign.value if isinstance(assign, cst.Assign) else None
            if isinstance(value, cst.Call) and self.ctx.qualified_name(value.func) in _SPLITS and value.args:
                return value.args[0].value
        return None

    def _cheap_class(self, cls: cst.ClassDef, depth: int) -> bool:
        if depth > 4:
            return False
        methods = {s.name.value: s for s in cls.body.body if isinstance(s, cst.FunctionDef)}
        init = methods.get("__init__")
        if init is not None and any(isinstance(n, cst.Call) and callee_name(n) in _LAZY_STORAGE and
                                    self.ctx.qualified_name(n.func) != "builtins.open"
                                    for n in iter_descendants(init)):
            return False  # np.memmap / h5py.File / lmdb.open: indexing reads the disk
        getitem = methods.get("__getitem__")
        if getitem is not None:
            return self._cheap_body(getitem)
        for base in cls.bases:
            qualified = self.ctx.qualified_name(base.value)
            if qualified in TENSOR_DATASETS:
                return True
            local = [c for c in self.index.classes.get(dotted_name(base.value) or "", ()) if c is not cls] \
                if qualified is None else []
            if local and all(self._cheap_class(c, depth + 1) for c in local):
                return True
        return False

    def _cheap_body(self, body: cst.CSTNode) -> bool:
        """``body`` only indexes what it holds and converts it: every call is one of ``_CHEAP_*`` (no file read,
        decode, transform or tokenizer), and no loop, comprehension or string formatting runs per item (minGPT's
        adder dataset, which formats and parses a few digits per item, ran 1.2x faster with 4 workers)."""
        for node in iter_descendants(body):
            if isinstance(node, (cst.With, cst.Yield, cst.For, cst.While, cst.ListComp, cst.SetComp, cst.DictComp,
                                 cst.GeneratorExp, cst.FormattedString)):
                return False
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo) and \
                    isinstance(node.left, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
                return False
            if not isinstance(node, cst.Call):
                continue
            qualified = self.ctx.qualified_name(node.func)
            leaf = callee_name(node)
            if qualified is not None:
                if qualified.startswith("builtins.") and leaf in _CHEAP_BUILTINS:
                    continue
                if qualified.startswith("torch.") and leaf in _CHEAP_TORCH:
                    continue
                return False
            if not (isinstance(node.func, cst.Attribute) and leaf in _CHEAP_METHODS):
                return False
        return True

    def _callable_bodies(self, expr: cst.BaseExpression, depth: int = 0) -> list[cst.CSTNode]:
        """The bodies ``expr`` (a collate function) may run: a function or lambda of this file, ``obj.method`` of a
        class of the file; [] when unknown."""
        if isinstance(expr, cst.Lambda):
            return [expr.body]
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name):  # collate = Collate(): its __call__
            return self._methods(expr.func.value, "__call__")
        if isinstance(expr, cst.Name) and self.ctx.qualified_name(expr) is None:
            value = self.index.value(expr)
            if value is not None:
                return self._callable_bodies(value, depth + 1) if depth < 4 else []
            return [f.body for f in self.index.functions.get(expr.value, ())]
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
            value = self.index.value(expr.value)
            cls = dotted_name(value.func) if isinstance(value, cst.Call) else None
            return self._methods(cls or "", expr.attr.value)
        return []

    def _methods(self, cls: str, name: str) -> list[cst.CSTNode]:
        return [s.body for c in self.index.classes.get(cls, ()) for s in c.body.body
                if isinstance(s, cst.FunctionDef) and s.name.value == name]

    # Graph-library batching in a collate function: DataLoader pinning pins tensors only, not these objects.
    def graph_batches(self, args: Arguments) -> bool:
        """The collate function batches graphs (``dgl.batch``, PyG's ``Batch.from_data_list``)."""
        collate = args.get("collate_fn", COLLATE_POS)
        if collate is None:
            return False
        if _last_name(collate) in self.ctx.graph_collates:  # defined in another file of the run
            return True
        return any(unpinnable_batch(self.index, body) for body in self._callable_bodies(collate))


def unpinnable_batch(index: FileIndex, body: cst.CSTNode) -> bool:
    """A collate function's ``body`` builds what DataLoader pinning leaves in pageable memory: graphs batched by
    dgl or PyG, or an object of a class of the file that has no ``pin_memory`` method (DETR's ``NestedTensor``,
    built by a function of the file: pinning pins tensors, mappings, sequences and objects with a ``pin_memory()``
    method, and returns anything else as it is). Classes and functions are the file's, by name (``index``)."""
    ctx = index.ctx
    for node in iter_descendants(body):
        if not isinstance(node, cst.Call):
            continue
        if ctx.spelled_name(node.func) in GRAPH_BATCHING or _unpinnable_class(index, node.func):
            return True
        if isinstance(node.func, cst.Name):  # a function of the file that returns such an object
            for function in index.functions.get(node.func.value, ()):
                returns = [r.value for r in iter_descendants(function.body) if isinstance(r, cst.Return)]
                if any(isinstance(r, cst.Call) and _unpinnable_class(index, r.func) for r in returns):
                    return True
    return False


def _unpinnable_class(index: FileIndex, func: cst.BaseExpression) -> bool:
    """``func`` names the one class of the file of that name, with no base but ``object`` and no ``pin_memory``
    method."""
    if not isinstance(func, cst.Name):
        return False
    classes = index.classes.get(func.value, ())
    return len(classes) == 1 and all(dotted_name(base.value) == "object" for base in classes[0].bases) and not any(
        isinstance(s, cst.FunctionDef) and s.name.value == "pin_memory" for s in classes[0].body.body)


def _last_name(expr: cst.BaseExpression) -> str | None:
    """``collate`` for ``dataset.collate``, ``collate_fn``, ``partial(dataset.collate, ...)``."""
    if isinstance(expr, cst.Call) and (dotted_name(expr.func) or "").rsplit(".", 1)[-1] == "partial" and expr.args:
        expr = expr.args[0].value
    name = dotted_name(expr)
    return name.rsplit(".", 1)[-1] if name else None

