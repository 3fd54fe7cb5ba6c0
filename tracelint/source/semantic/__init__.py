"""The semantic model of one source file: one libcst tree, and what the source rules ask of it.

- ``model``: ``FileContext``, the file as the rules see it (text, tree, positions, parents, names, the run's facts);
- ``names``: the one import resolver (``Names``), which both this model and the prefilter (screen.py) read their
  import statements into;
- ``tree``: how every analysis reads libcst nodes (dotted names, literals, the children that carry something);
- ``calls``: the arguments of a call, literals, and the edits fixes make to a call;
- ``flow``: constant and device data flow (the integers a name may hold, whether it names an accelerator);
- ``bindings`` and ``values``: each function's bindings, and what a value is (host, tensor, unknown; on a device);
- ``callers``: who calls what, in the file and across the run (functions, methods, ``model(x)`` into ``forward``);
- ``steps``: the one definition of "runs once per training step" (per-step loops, periodic and rare guards, step
  hooks, reached through calls) and the per-file ``Facts`` rules ask.

No module here imports the rules, the linter's run, or ``ast``: Python's own parser is used only by the prefilter
(screen.py), which never decides a finding.
"""
