"""The collate functions of a run's files whose batches pinning cannot pin (TL202: DataLoader pinning does not pin
graph objects, nor objects of a class without a ``pin_memory`` method), found before the run's analysis."""
from __future__ import annotations

from pathlib import Path

from tracelint.source.limits import parsed_or_none

_GRAPH_WORDS = (b"dgl", b"torch_geometric")


def graph_collates(paths: list[Path]) -> frozenset[str]:
    """The names of the functions and methods of a run's files whose body builds batches pinning cannot pin
    (items.unpinnable_batch: graphs batched by ``dgl.batch`` or PyG's ``Batch.from_data_list``, DETR's
    ``NestedTensor``): a DataLoader whose ``collate_fn`` is one of them (``collate_fn=utils.collate_fn``, defined in
    another module) gains nothing from ``pin_memory=True`` (TL202). Only files that mention a graph library, or a
    collate function and a class, are parsed, before the run, so that ``--fix`` never adds ``pin_memory=True``
    there."""
    names: set[str] = set()
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if not any(word in data for word in _GRAPH_WORDS) and not (b"collate" in data and b"class " in data):
            continue
        # here: a run whose files mention no graph library, nor a collate and a class, never imports libcst for this
        from tracelint.source.loader.index import FileIndex
        from tracelint.source.loader.items import unpinnable_batch
        from tracelint.source.semantic.model import FileContext

        text = data.decode("utf-8", "replace")
        module = parsed_or_none(text)
        if module is None:
            continue
        index = FileIndex(FileContext(str(path), text, module))
        names.update(name for name, functions in index.functions.items()
                     if any(unpinnable_batch(index, fn.body) for fn in functions))
    return frozenset(names)
