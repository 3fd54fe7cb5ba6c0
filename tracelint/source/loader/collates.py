"""The collate functions of a run's files that batch graphs (TL202: DataLoader pinning does not pin graph objects),
found before the run's analysis."""
from __future__ import annotations

from pathlib import Path

from tracelint.source.limits import parsed_or_none
from tracelint.source.vocab import GRAPH_BATCHING

_GRAPH_WORDS = (b"dgl", b"torch_geometric")


def graph_collates(paths: list[Path]) -> frozenset[str]:
    """The names of the functions and methods of a run's files whose body batches graphs (``dgl.batch``, PyG's
    ``Batch.from_data_list``): a DataLoader whose ``collate_fn`` is one of them (``collate_fn=dataset.collate``, the
    dataset class defined in another module) yields graph objects, which pinning does not pin (TL202). Only files
    that mention a graph library are parsed, before the run, so that ``--fix`` never adds ``pin_memory=True`` there;
    a name is read as the model reads it (``FileContext.spelled_name``: through the file's imports and aliases)."""
    names: set[str] = set()
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if not any(word in data for word in _GRAPH_WORDS):
            continue
        import libcst as cst  # here: a run whose files mention no graph library never imports libcst for this

        from tracelint.source.semantic.model import FileContext, iter_descendants

        text = data.decode("utf-8", "replace")
        module = parsed_or_none(text)
        if module is None:
            continue
        ctx = FileContext(str(path), text, module)
        for node in iter_descendants(module):
            if isinstance(node, cst.FunctionDef) and any(
                    isinstance(call, cst.Call) and ctx.spelled_name(call.func) in GRAPH_BATCHING
                    for call in iter_descendants(node)):
                names.add(node.name.value)
    return frozenset(names)
