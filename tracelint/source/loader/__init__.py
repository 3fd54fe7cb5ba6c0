"""What a file shows of its torch DataLoaders, for the TL2xx rules (rules/input.py), in layers:

- ``arguments``: torch's DataLoader call, its argument positions and the arguments the fixes set;
- ``index``: one walk of the module (``FileIndex``): names, attributes, classes, functions, and how a value flows
  through them (the value a name holds, the reads of a binding, the parameters an argument binds);
- ``draws``: where a loader's batches are drawn: a loop over it (through ``enumerate``, ``tqdm``, ``zip``, ``iter``),
  ``next(it)``, followed through names, ``self`` attributes, functions and methods of the file it is passed to,
  factories of the file that return it, and ``accelerator.prepare`` / ``fabric.setup_dataloaders``;
- ``batches``: where those batches go: ``.to(device)`` / ``.cuda()`` / ``.type(cuda type)`` (a device copy), a call
  that takes a device, a consumer the file does not show, an RPC send, host-only reads;
- ``items``: what one item costs: a dataset of in-memory tensors with trivial indexing needs no worker processes;
- ``facts``: ``LoaderFacts``, the questions the rules ask, answered from the above once per file (``loader_facts``).
"""
