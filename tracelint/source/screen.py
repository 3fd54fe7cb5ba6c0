"""A first look at a file with Python's own ``ast``: which kinds of sites the source rules report on does it hold?

Importing libcst costs ~0.25 s, most of what a pre-commit run on one file takes, and parsing with it is several times
slower than ``ast.parse``. ``sites(text)`` walks the ``ast`` once and returns the site kinds below
(``SITE_KINDS``); a rule declares the kinds it can report on in its catalog doc (``sites: item`` in the front matter
of ``rules/TLxxx-*.md``), and a file in which none of a rule's kinds occurs is not parsed with libcst for that rule
(nor at all, when no rule remains). A rule whose doc declares no ``sites`` is never screened out.

Each kind is a *necessary* condition of its rules, deliberately looser than the rules themselves: the screen may let
a clean file through, it must never hold back one with findings. What it leaves to the rules: whether a loop is a
per-step loop, periodic/rare guards, most of the host/tensor inference. What it keeps, so that ordinary clean code
is screened out:
- the sync kinds (TL1xx) count only in files that import torch, only inside a ``for``/``while`` loop, a
  comprehension, a step hook (``training_step``, ...) or a function the file calls in a loop, a step hook or such a
  function (callers.py follows calls into it; a class body is not in the loop; a file analysed with entry points
  from other files of the run is not screened at all), and only where a value could be a tensor by the rules' own
  inference (``kind`` in values.py): literals and containers, ``is``/``in`` comparisons, ``and``/``or``, attributes
  like ``.shape``, calls of unshadowed builtins and host methods (``.item()``, ``.size()``, ...), and names only
  ever assigned such values are host values; anything else may be a tensor;
- DataLoader calls are calls whose name, after the file's imports and once-assigned aliases, ends in
  ``DataLoader``; ``zero_grad`` only with a literal ``set_to_none=False``.

``tests/source/test_screen.py`` checks the condition on every rule-test snippet, the catalog examples and the
fixtures: a file the screen holds back has no findings.
"""
from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass
from itertools import pairwise

from tracelint.engine.catalog import catalog
from tracelint.source.semantic.names import Names
from tracelint.source.vocab import (
    BUILTINS,
    DATA_DEPENDENT,
    DATA_SUBSTRINGS,
    DATA_WORDS,
    EXTERNAL_MODULES,
    FILLED_CREATION,
    HOST_ATTRS,
    HOST_METHODS,
    JOINS,
    LOGGING,
    MASK_KEEPING,
    MASK_METHODS,
    RANDOM_CREATION,
    STEP_HOOKS,
    STEP_SUBSTRINGS,
    STEP_WORDS,
    words,
)


# -- names and children in Python's own ``ast`` ------------------------------------------------------------
def ast_dotted_name(expr: ast.expr) -> str | None:
    """``a.b.c`` for an ``ast`` name or attribute chain, else None (semantic.tree.dotted_name for libcst)."""
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.id)
    return ".".join(reversed(parts))


# Fields that never hold what the walks look at: expression contexts (Load/Store/Del) and operators (Add, Eq...),
# nodes ``ast.iter_child_nodes`` yields all the same (a third of a typical tree).
_SKIPPED = frozenset({"ctx", "op", "ops", "type_comment"})
_FIELDS: dict[type, tuple[str, ...]] = {}
_LEAVES: dict[type, int] = {}


def skipped_depth(node: ast.AST) -> int:
    """1 when ``children`` leaves out a node below ``node`` (its context or operator), else 0: the depth of the tree
    is the same as with ``ast.iter_child_nodes``."""
    kind = type(node)
    found = _LEAVES.get(kind)
    if found is None:
        found = _LEAVES[kind] = int(any(f in _SKIPPED and f != "type_comment" for f in kind._fields))
    if found and type(node) is ast.Compare:
        return int(bool(node.ops))
    return found


def children(node: ast.AST) -> list[ast.AST]:
    """``list(ast.iter_child_nodes(node))`` without expression contexts and operators (see ``_SKIPPED``)."""
    kind = type(node)
    fields = _FIELDS.get(kind)
    if fields is None:
        fields = _FIELDS[kind] = tuple(f for f in kind._fields if f not in _SKIPPED)
    found: list[ast.AST] = []
    for name in fields:
        value = getattr(node, name, None)
        if isinstance(value, list):
            found.extend(item for item in value if isinstance(item, ast.AST))
        elif isinstance(value, ast.AST):
            found.append(value)
    return found


# Site kinds: what a rule doc's ``sites:`` may name.
ITEM = "item"                      # .item() (or add_scalar of a possible tensor) in a loop   TL101
HOST_COPY = "host-copy"            # .cpu() / .tolist() / .numpy(force=) / .to("cpu")   TL102
SCALAR = "scalar"                  # float()/int()/bool()/max()/min() of a possible tensor, tensor truth tests  TL103
FORMAT = "format"                  # print / f-string / % / .format / logging of a possible tensor             TL104
SYNCHRONIZE = "synchronize"        # a call of something named synchronize                TL105
DATA_DEPENDENT_CALL = "data-dependent"  # nonzero / unique / masked_select / where(...)   TL106
MASK_INDEX = "mask-index"          # x[mask] with a mask-shaped index                     TL106
DATALOADER = "dataloader"          # a DataLoader call                                    TL201, TL202
PINNED_COPY = "pinned-copy"        # .to() / .cuda() in a loop of a file that builds a DataLoader    TL203
ZERO_GRAD = "zero-grad"            # zero_grad(set_to_none=False)                         TL301
HOST_BUILT = "host-built"          # .cuda() / .to() of an expression holding a call named like a creation op
                                   # (zeros, arange...) or a legacy constructor (FloatTensor)           TL204
ELEMENT_LOOP = "element-loop"      # a loop in a loop: for i in range(n) indexing [i], or for row in a name  TL502
OFF_TILE = "off-tile-size"         # Linear/Embedding/ConvNd given a literal size >= 1024 not a multiple of 8, or a
                                   # size that is no literal (a name, arithmetic: the rule's data flow)   TL404
BIASED_NORM = "biased-norm"        # a Conv/ConvTranspose not given bias=False next to a BatchNorm (a Linear: next to
                                   # a BatchNorm1d / SyncBatchNorm): adjacent items of a Sequential call or a list
                                   # literal, or both built in one __init__ (each a call, or a name bound to one) TL403
KEPT_GRAPH = "kept-graph"          # ``acc.append(v)``, ``acc += v``, ``acc = acc + v`` where the sync kinds count, of a
                                   # ``v`` that may hold an autograd graph (_may_hold_graph)                TL306
COMPILED = "compiled"              # torch.compile or ``x.compile()`` (not ``re.compile``) of the file's own code: a
                                   # decorated function, a function given by name, or a class with a forward   TL503
# Not a rule's kind: a per-step call of a function the file imports from outside the known libraries (a module of
# the project), which a run of several files must analyse to follow (callers.py).
PROJECT_CALL = "project-call"
# Nor this: a call on a parameter (``model(x)``, ``agent.update()``) or on ``self`` in code that may run per step:
# where the modules other files pass this file's functions (project.parameter_modules) lead to their classes.
PARAMETER_CALL = "parameter-call"

SYNC_KINDS = frozenset({ITEM, HOST_COPY, SCALAR, FORMAT, SYNCHRONIZE, DATA_DEPENDENT_CALL, MASK_INDEX})
# an item of os.environ assigned, or a call named setdefault, update or putenv, in a file that names
# CUDA_LAUNCH_BLOCKING (``os.environ["CUDA_LAUNCH_BLOCKING"] = "1"``: TL702 sets nothing else, and only by that literal)
ENV_SETTING = "env-setting"
SITE_KINDS = SYNC_KINDS | {DATALOADER, PINNED_COPY, ZERO_GRAD, HOST_BUILT, ELEMENT_LOOP, OFF_TILE, BIASED_NORM,
                           ENV_SETTING, COMPILED, KEPT_GRAPH}
_CONVS = frozenset({"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"})
_BATCH_NORMS = frozenset({"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm"})
_FLAT_NORMS = frozenset({"BatchNorm1d", "SyncBatchNorm"})  # what a Linear feeds
_SIZED_LAYERS = frozenset({"Linear", "Embedding", "Conv1d", "Conv2d", "Conv3d"})
_ARITHMETIC = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
_TOTAL = (ast.Add, ast.Sub, ast.Mult)  # defined for a right operand of 0
_MAX_INTS = 8
_MAYBE = -1  # in _Screen._ints: a value the flow may find off-tile


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    args = fn.args
    return {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}


def _parameter_default(scope: ast.AST, name: str) -> ast.expr | None:
    """The default of parameter ``name`` of the function ``scope`` (None: no such parameter or no default)."""
    if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    args = scope.args
    positional = [*args.posonlyargs, *args.args]
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults,
                        strict=True))
    defaults.update((a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None)
    return defaults.get(name)


def _off_tile(value: object) -> bool:
    """A layer size TL404 reports: at least 1024 and not a multiple of 8 (a vocabulary of 50,257)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1024 and value % 8 != 0
# A generic kind a new rule can declare without touching this module: ``call:NAME``, a call anywhere in the file
# whose callee's last name, as written or resolved through imports and aliases, is NAME (``call:barrier`` for
# ``dist.barrier()`` and ``from torch.distributed import barrier as b; b()``).
CALL_PREFIX = "call:"


def is_site_kind(kind: str) -> bool:
    """A kind a rule doc may name in ``sites:``: one of SITE_KINDS, or ``call:NAME``."""
    return kind in SITE_KINDS or (kind.startswith(CALL_PREFIX) and kind[len(CALL_PREFIX):].isidentifier())
_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_HOST_VALUES = (ast.Constant, ast.JoinedStr, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp, ast.DictComp,
                ast.SetComp)
_MEMBERSHIP = (ast.Is, ast.IsNot, ast.In, ast.NotIn)
_BIT_OPS = (ast.BitAnd, ast.BitOr, ast.BitXor)
_MAX_DEPTH = 12
_LAUNCH_BLOCKING = "CUDA_LAUNCH_BLOCKING"
_ENV_CALLS = frozenset({"setdefault", "update", "putenv"})
_STATEMENT_LOOPS = frozenset({ast.For, ast.AsyncFor, ast.While})
# The node types pass 1 reads (_collect_node), that start a frame of pass 2 (_walk: defs, lambdas, classes, loops),
# and that pass 2 judges (assignments, calls, and what _other reads)
_COLLECTED = frozenset({ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr, ast.For,
                        ast.AsyncFor, ast.With, ast.AsyncWith, ast.Call, ast.ExceptHandler,
                        ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.arg, ast.comprehension})
_FRAMES = frozenset({*_LOOPS, *_SCOPES, ast.ClassDef})
_JUDGED = frozenset({ast.Assign, ast.AugAssign, ast.Call, ast.If, ast.While, ast.Assert, ast.IfExp, ast.UnaryOp,
                     ast.comprehension, ast.JoinedStr, ast.BinOp, ast.Subscript, ast.List})
_CREATION_CALLS = FILLED_CREATION | RANDOM_CREATION
_READS_OFF_GRAPH = frozenset({"detach", "detach_", "item", "tolist", "numpy"})  # KEPT_GRAPH: hold no graph


def sites(text: str) -> frozenset[str] | None:
    """The site kinds in ``text``; None when ``ast`` cannot parse it (then every rule runs, and libcst reports)."""
    return examine(text).sites


@dataclass(frozen=True, slots=True)
class AstFacts:
    """What Python's own parser says of a text: its site kinds (None when it could not parse it), whether it gave
    up as the text is too complex for it (nested too deeply: RecursionError or MemoryError), and the depth of the
    syntax tree (0 when not parsed)."""

    sites: frozenset[str] | None
    too_complex: bool = False
    depth: int = 0
    defines: frozenset[str] = frozenset()  # "f", "C.m": module-level functions and methods (runcalls.RunCalls)
    parsed: bool = False  # Python's parser took the text (``sites`` may still be None: the screen gave up)


def parse_quietly(text: str) -> ast.Module:
    """``ast.parse`` without the warnings it prints on stderr (``SyntaxWarning: invalid decimal literal``...)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(text)


def parses(text: str) -> bool:
    """Whether Python's own parser takes ``text`` (too deep for it counts as taken: libcst and the limits judge)."""
    try:
        parse_quietly(text)
    except (SyntaxError, ValueError, OverflowError):
        return False
    except (RecursionError, MemoryError):
        return True
    return True


def examine(text: str) -> AstFacts:
    """``ast.parse`` and the screen: CPython's own parser (the one that imports the file) is safe on any text, with
    its own limits (200 nested brackets, 100 indentation levels, a guard against deep recursion)."""
    try:
        tree = parse_quietly(text)
    except (RecursionError, MemoryError):
        return AstFacts(None, too_complex=True)
    except (SyntaxError, ValueError, OverflowError):
        return AstFacts(None)
    screen = _Screen(tree, _LAUNCH_BLOCKING in text)
    try:
        found = screen.run()
        return AstFacts(found, depth=screen.depth, defines=_defines(tree), parsed=True)
    except Exception:  # noqa: BLE001 - RecursionError, or a bug here: then nothing is screened out (always sound)
        return AstFacts(None, depth=screen.depth, parsed=True)


# The prefilter's step words: the model's own (semantic.steps judges loops by them) and looser ones of its own.
_STEP_TEXT = ("batch", "epoch", "train", "data", "tqdm", "backward", "done", *DATA_SUBSTRINGS, *STEP_SUBSTRINGS)
_STEP_NAME_WORDS = DATA_WORDS | STEP_WORDS


def _steppy_loop(loop: ast.AST) -> bool:
    """A loop that may be a per-step loop (semantic.steps decides, on the same words; this is a looser test, so that
    a project call in ``for blk in self.blocks:`` does not make a file worth parsing): ``while True``, or a header or
    body that names loaders, batches, steps, iterations, epochs or data, or calls backward/step."""
    if isinstance(loop, ast.While) and isinstance(loop.test, ast.Constant) and loop.test.value:
        return True
    if not isinstance(loop, (ast.For, ast.AsyncFor, ast.While)):  # a comprehension: its iterables' names
        names = [n.id if isinstance(n, ast.Name) else n.attr for gen in loop.generators  # type: ignore[attr-defined]
                 for n in ast.walk(gen.iter) if isinstance(n, (ast.Name, ast.Attribute))]
        return any(_step_name(name) for name in names)
    header = loop.test if isinstance(loop, ast.While) else loop.iter  # type: ignore[attr-defined]
    names = [n.id for n in ast.walk(header) if isinstance(n, ast.Name)] + \
            [n.attr for n in ast.walk(header) if isinstance(n, ast.Attribute)]
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        names += [n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)]
    if any(_step_name(name) for name in names):
        return True
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("backward", "step")
               for stmt in loop.body for n in ast.walk(stmt))


def _step_name(name: str) -> bool:
    low = name.lower()
    return any(word in low for word in _STEP_TEXT) or bool(words(name) & _STEP_NAME_WORDS)


# The methods an instance call (``model(x)``, ``self.block(x)``: callers.Modules) or a construction runs.
_MODULE_CALLS = frozenset({"forward", "__call__", "__init__"})


def _defines(tree: ast.Module) -> frozenset[str]:
    names: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(stmt.name)
        elif isinstance(stmt, ast.ClassDef):
            names.update(f"{stmt.name}.{item.name}" for item in stmt.body
                         if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return frozenset(names)


def _element_loop(loop: ast.AST) -> bool:
    """A loop (or comprehension) with a name target over a name (``for row in x``), or over ``range(non-literal)``
    with a body that indexes by that name: what TL502 could report when it runs per step."""
    generators = [loop] if isinstance(loop, (ast.For, ast.AsyncFor)) else getattr(loop, "generators", [])
    for gen in generators:
        target, iterable = gen.target, gen.iter
        if isinstance(iterable, ast.Call) and ast_dotted_name(iterable.func) == "enumerate" and iterable.args:
            iterable = iterable.args[0]
            if isinstance(target, ast.Tuple) and len(target.elts) == 2:
                target = target.elts[1]
        if isinstance(iterable, ast.Call) and ast_dotted_name(iterable.func) == "zip":
            return True  # ``for name, p in zip(vocab, out.amax(-1))``: one of them may be a tensor
        if not isinstance(target, ast.Name):
            continue
        if isinstance(iterable, (ast.Name, ast.Attribute, ast.Subscript)) or isinstance(iterable, ast.Call) and \
                ast_dotted_name(iterable.func) != "range":
            return True  # ``for t in pred[0]``, ``for p in out.amax(-1)``
        if not (isinstance(iterable, ast.Call) and ast_dotted_name(iterable.func) == "range" and iterable.args) or \
                isinstance(iterable.args[-1], ast.Constant):
            continue
        if any(isinstance(n, ast.Subscript) and any(isinstance(i, ast.Name) and i.id == target.id
                                                    for i in ast.walk(n.slice)) for n in ast.walk(loop)):
            return True
    return False


def _biased_pair(first: frozenset[str] | set[str], second: frozenset[str] | set[str]) -> bool:
    return "conv" in first and "norm" in second or "linear" in first and "flat-norm" in second


def _applied_pairs(cls: ast.ClassDef, attrs: dict[str, frozenset[str]]):
    """What ``self.A`` and ``self.B`` may build, for each ``self.B(self.A(...))``, and each statement ``t =
    self.A(...)`` followed by ``u = self.B(...)`` or ``return self.B(...)``, in a method of ``cls`` (TL403's
    ``_forward_pairs``, loosely: any arguments)."""
    def built(expr) -> frozenset[str]:
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and \
                isinstance(expr.func.value, ast.Name) and expr.func.value.id == "self":
            return attrs.get(expr.func.attr, frozenset())
        return frozenset()

    for method in cls.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) or method.name == "__init__":
            continue
        for node in ast.walk(method):
            if isinstance(node, ast.Call) and node.args:
                yield built(node.args[0]), built(node)
            for field in ("body", "orelse", "finalbody"):
                statements = getattr(node, field, None)
                if isinstance(statements, list):
                    for first, second in pairwise(statements):
                        if isinstance(first, ast.Assign) and isinstance(second, (ast.Assign, ast.Return)):
                            yield built(first.value), built(second.value)


def _is_str(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and isinstance(expr.value, str)


class _Screen:
    def __init__(self, tree: ast.Module, launch_blocking: bool = False) -> None:
        self.tree = tree
        self.launch_blocking = launch_blocking  # the text names CUDA_LAUNCH_BLOCKING (ENV_SETTING)
        self.found: set[str] = set()
        self.names = Names()                    # imports and once-assigned aliases (semantic.names)
        self.imports = self.names.imports       # bound name -> what it imports
        self.aliases = self.names.aliases       # name bound exactly once, to a dotted name -> that name
        self.bound: set[str] = set()            # every name the file binds (shadows a builtin)
        self.values: dict[ast.AST, dict[str, list[ast.expr]]] = {}  # scope -> name -> assigned values
        self.torch = False
        self.called: set[str] = set()           # the last names of every callee (the call:NAME kinds)
        self.loop_calls: list[tuple[str, tuple[ast.AST, ...]]] = []  # (callee name as written, the loops of its
                                                # function it is called in, outermost first) (pass 1)
        self.hot_loops: set[ast.AST] = set()    # loops that may run per step, or run inside one (pass 1)
        self.calls_in: dict[str, set[str]] = {}  # def name -> callee names called in its body (pass 1)
        self.hot_functions: set[str] = set()    # defs that may run per step (pass 1, see _collect)
        self.depth = 0                          # the depth of the tree
        self.device_copy = False
        self.layer_runs: list[list[ast.expr]] = []  # BIASED_NORM: a Sequential call's arguments, a list's items
        self.bound_anywhere: dict[str, list[ast.expr]] | None = None  # name -> its values in any scope (lazily)
        self.steppy = False  # the file has a loop that may be a training loop (_steppy_loop)
        self.functions: set[str] = set()  # the names of the file's own functions and methods
        self.parameter_names: set[str] = set()  # every parameter's name (PARAMETER_CALL)
        self.buffers: set[str] = set()  # ``self.register_buffer("queue_ptr", ...)``: tensors (values.Values._buffers)
        self.sizes: list[tuple[ast.expr, ast.AST]] = []  # the sizes given to Linear/Embedding/ConvNd (OFF_TILE)
        self.off_tile_callees: set[str] = set()  # the names of the callees given an off-tile literal
        self.off_tile_literal = False  # an off-tile integer literal anywhere in the file
        self.attributes: dict[str, list[tuple[ast.expr, ast.AST]]] = {}  # ``obj.x = v``: x -> (v, its scope)
        # a method -> the name of its class (a parameter of ``__init__`` gets what ``C(...)`` passes) (pass 1)
        self.owners: dict[ast.AST, str] = {}
        self.classes: dict[ast.AST, ast.ClassDef] = {}  # each ``__init__`` -> its class (pass 1)
        self.steppy_loops: dict[ast.AST, bool] = {}  # _steppy_loop of each loop asked about
        # pass 1 records what pass 2 reads, so that pass 2 walks no tree: the nodes that change where the nodes
        # below them run (defs, lambdas, classes, loops), each with the index of the innermost one above it (-1: the
        # module), in the order of the walk (a parent before its children); and the nodes pass 2 judges
        # (assignments, calls, and the tests, formats and subscripts _other reads) with the index of the innermost
        # such node above them or the node itself
        self.frames: list[tuple[ast.AST, int]] = []
        self.judged: list[tuple[ast.AST, int]] = []

    # -- pass 1: imports, aliases, bindings ---------------------------------------------------------------------
    def run(self) -> frozenset[str]:
        self._collect(self.tree, self.tree)
        self.names.finish()
        self._walk()
        found = self.found
        found.update(CALL_PREFIX + name for name in self.called)
        if self.launch_blocking and self.called & _ENV_CALLS:
            found.add(ENV_SETTING)
        if OFF_TILE not in found and any(self._may_be_off_tile(size, scope) for size, scope in self.sizes):
            found.add(OFF_TILE)
        if self._biased_norm():
            found.add(BIASED_NORM)
        if self.device_copy and DATALOADER in found:
            found.add(PINNED_COPY)
        if not self.torch:
            found -= SYNC_KINDS | {ELEMENT_LOOP, KEPT_GRAPH}
        if not self.steppy:  # TL502 reports in a training step: a model's loops over its layers are none (a function
            found.discard(ELEMENT_LOOP)  # another file calls per step is analysed whatever its sites: lint.py)
        return frozenset(found)

    def _collect(self, node: ast.AST, scope: ast.AST) -> None:
        # fn: the name of the enclosing def (None at module level); loops: the loops of the same function (or of the
        # lambda's function) around the node, outermost first; frame: see ``frames``
        work: list[tuple[ast.AST, ast.AST, int, tuple[ast.AST, ...], str | None, int]] = \
            [(node, scope, 1, (), None, -1)]
        deepest = 0
        all_loops: list[tuple[ast.AST, tuple[ast.AST, ...]]] = []
        frames, judged = self.frames, self.judged
        while work:
            node, scope, depth, loops, fn, frame = work.pop()
            if depth + 1 > deepest and depth + skipped_depth(node) > deepest:
                deepest = depth + skipped_depth(node)
            kind = type(node)  # (ast.parse makes no subclasses of its node types)
            if kind in _COLLECTED:
                self._collect_node(node, scope, loops, fn)
            inner = scope
            if kind in _FRAMES:
                frames.append((node, frame))
                frame = len(frames) - 1
                if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                    inner, loops, fn = node, (), node.name
                elif kind is ast.Lambda:
                    inner = node
                elif kind is ast.ClassDef:
                    loops, fn = (), None
                else:
                    all_loops.append((node, loops))
                    loops = (*loops, node)
            if kind in _JUDGED:
                judged.append((node, frame))
            # the leaves (a name, a literal) are read here, not walked: a third of the nodes
            for child in children(node):
                leaf = type(child)
                if leaf is ast.Name:  # its depth, with its context, is all there is to it
                    deepest = max(deepest, depth + 2)
                elif leaf is ast.Constant:
                    deepest = max(deepest, depth + 1)
                    if type(child.value) is int and _off_tile(child.value):  # type: ignore[attr-defined]
                        self.off_tile_literal = True
                else:
                    work.append((child, inner, depth + 1, loops, fn, frame))
        self.depth = deepest
        self.hot_loops = self._hot_loops(all_loops)
        # The functions that may run per step: called in a loop that may be a per-step loop (or inside one) or in a
        # step hook, or from such a function (by name).
        hot: set[str] = set()
        frontier = set(STEP_HOOKS) | {name for name, loops in self.loop_calls if loops[-1] in self.hot_loops}
        if any(loops[-1] in self.hot_loops for _, loops in self.loop_calls):
            frontier |= _MODULE_CALLS  # ``model(x)`` in such a loop runs a module's forward (callers.Modules)
        while frontier:
            name = frontier.pop()
            if name not in hot:
                hot.add(name)
                frontier |= self.calls_in.get(name, set()) - hot
        self.hot_functions = hot

    def _collect_node(self, node: ast.AST, scope: ast.AST, loops: tuple[ast.AST, ...], fn: str | None) -> None:
        """Pass 1 on one node of a kind in ``_COLLECTED``."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                self._torch_module(alias.name)
                self.bound.add(self.names.import_module(alias.name, alias.asname))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                self._torch_module(node.module or "")
            for alias in node.names:
                if alias.name != "*":
                    self.bound.add(self.names.import_from(node.module or "", node.level, alias.name, alias.asname))
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(node, ast.Assign) and isinstance(target, ast.Name):
                    self.names.assign(target.id, ast_dotted_name(node.value))
                    self.bound.add(target.id)
                else:
                    self._count(target)
                if node.value is not None:
                    self._bind(scope, target, node.value)
        elif isinstance(node, ast.NamedExpr):
            self._bind(scope, node.target, node.value)
            self.bound.add(node.target.id)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self._count(node.target)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    self._count(item.optional_vars)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name is not None:
                if loops:
                    self.loop_calls.append((name, loops))
                if fn is not None:
                    self.calls_in.setdefault(fn, set()).add(name)
                if name == "register_buffer" and node.args and _is_str(node.args[0]):
                    self.buffers.add(node.args[0].value)  # type: ignore[attr-defined]
        elif isinstance(node, ast.ExceptHandler):
            if node.name:
                self.names.assign(node.name)
                self.bound.add(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.bound.add(node.name)
            if not isinstance(node, ast.ClassDef):
                self.functions.add(node.name)
            else:
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == "__init__":
                        self.owners[item] = node.name
                        self.classes[item] = node
        elif isinstance(node, ast.arg):
            self.bound.add(node.arg)
            self.parameter_names.add(node.arg)
        elif isinstance(node, ast.comprehension):
            for name in ast.walk(node.target):
                if isinstance(name, ast.Name):
                    self.bound.add(name.id)

    def _steppy(self, loop: ast.AST) -> bool:
        """``_steppy_loop(loop)``, once per loop (it walks the loop's body)."""
        known = self.steppy_loops.get(loop)
        if known is None:
            known = self.steppy_loops[loop] = _steppy_loop(loop)
        return known

    def _hot_loops(self, all_loops: list[tuple[ast.AST, tuple[ast.AST, ...]]]) -> set[ast.AST]:
        """The loops in which a per-step loop (loops.loop_description, ``_comprehension_loop``) may run its body:
        a loop that may be one itself (``_steppy_loop``, looser), a loop whose body calls a function of the file
        that steps the optimizer or calls backward (directly or not: ``for x in items: self.train_one(x)``), and every
        loop inside such a loop. A model's ``for blk in self.blocks:`` is none of them: the sync kinds found there
        make no file worth parsing (a function another file calls per step is analysed unscreened: lint.py)."""
        stepping = {fn for fn, names in self.calls_in.items() if names & {"backward", "step"}}
        callers: dict[str, set[str]] = {}
        for fn, names in self.calls_in.items():
            for name in names:
                callers.setdefault(name, set()).add(fn)
        frontier = set(stepping)
        while frontier:
            for caller in callers.get(frontier.pop(), ()):
                if caller not in stepping:
                    stepping.add(caller)
                    frontier.add(caller)
        # a loop calling such a function, and the loops around it (their bodies step through it)
        calls_stepping = {loop for name, loops in self.loop_calls if name in stepping for loop in loops}
        hot: set[ast.AST] = set()
        for loop, outer in sorted(all_loops, key=lambda pair: len(pair[1])):  # outer loops first
            if any(o in hot for o in outer) or loop in calls_stepping or self._steppy(loop):
                hot.add(loop)
        return hot

    def _may_be_off_tile(self, size: ast.expr, scope: ast.AST) -> bool:
        """Whether TL404's data flow (flow.Flow.ints) may find an off-tile value for ``size``, on this tree and as
        loosely as the flow goes: literals and ``+ - * // %`` of them; names through their assignments in the
        function, else the module; ``obj.x`` through every assignment of an attribute or a class field named ``x``;
        a parameter through the calls of its function or class in the file (``Block(1027)``) and its default; an
        attribute nothing in the file assigns (``args.vocab``: an option's default) when the file holds an off-tile
        literal. What the flow cannot know (a call's result, a parameter only other files pass) is not one."""
        values = self._ints(size, scope, 0)
        return values is not None and any(v == _MAYBE or _off_tile(v) for v in values)

    def _ints(self, expr: ast.expr, scope: ast.AST, depth: int) -> set[int] | None:
        """The integers ``expr`` may hold (None: unknown; ``_MAYBE``: an off-tile one, unsaid), at most _MAX_INTS."""
        if depth > 6:
            return None
        if isinstance(expr, ast.Constant):
            return {expr.value} if type(expr.value) is int else set()
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, tuple(_ARITHMETIC)):
            left, right = self._ints(expr.left, scope, depth + 1), self._ints(expr.right, scope, depth + 1)
            if left is None or right is None:
                return None
            if _MAYBE in left or _MAYBE in right:
                return {_MAYBE}
            out = {_ARITHMETIC[type(expr.op)](a, b) for a in left for b in right if b or type(expr.op) in _TOTAL}
            return out if len(out) <= _MAX_INTS else None
        if isinstance(expr, ast.Name):
            for where in (scope, self.tree):
                bound = self.values.get(where, {}).get(expr.id)
                if bound:
                    return self._union([(value, where) for value in bound], depth)
            if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) and expr.id in _parameters(scope):
                owner = self.owners.get(scope, scope.name)
                if owner in self.off_tile_callees:
                    return {_MAYBE}  # ``Block(1027)`` may give it
                default = _parameter_default(scope, expr.id)
                return self._ints(default, self.tree, depth + 1) if default is not None else None
            return None
        if isinstance(expr, ast.Attribute):
            bound = self.attributes.get(expr.attr, []) + [(v, self.tree) for v in
                                                          self.values.get(self.tree, {}).get(expr.attr, ())]
            if bound:
                return self._union(bound, depth)
            # the flow follows ``args.vocab`` to an option's default, ``self.cfg.vocab`` and ``Config(...).vocab``
            # through what holds the receiver; never ``self.x`` nothing assigns (a class field is an assignment, in a
            # class nested in a function too), nor a receiver it cannot name (``self.convs[0].out_channels``)
            root = expr.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(expr.value, ast.Name) and expr.value.id == "self" and expr.attr not in self._anywhere() \
                    or not isinstance(root, (ast.Name, ast.Call)):
                return None
            return {_MAYBE} if self.off_tile_literal else None
        return None

    def _union(self, bound: list[tuple[ast.expr, ast.AST]], depth: int) -> set[int] | None:
        found: set[int] = set()
        for value, where in bound:
            got = self._ints(value, where, depth + 1)
            if got is None:
                return None
            found |= got
        return found if len(found) <= _MAX_INTS else None

    def _torch_module(self, module: str) -> None:
        if module == "torch" or module.startswith("torch."):
            self.torch = True

    def _count(self, target: ast.expr) -> None:
        for name in ast.walk(target):
            if isinstance(name, ast.Name):
                self.names.assign(name.id)
                self.bound.add(name.id)

    def _bind(self, scope: ast.AST, target: ast.expr, value: ast.expr) -> None:
        """Record ``value`` for the names ``target`` binds; ``a, b = x, y`` pairs them up, as values.py does."""
        if isinstance(target, ast.Starred):
            target = target.value
        if isinstance(target, ast.Attribute):
            self.attributes.setdefault(target.attr, []).append((value, scope))
        if isinstance(target, ast.Name):
            self.values.setdefault(scope, {}).setdefault(target.id, []).append(value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            pairs = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
            for i, element in enumerate(target.elts):
                self._bind(scope, element, value.elts[i] if pairs else value)

    # -- names ---------------------------------------------------------------------------------------------------
    def _leaves(self, func: ast.expr) -> set[str]:
        """The last name of a callee, as written (``f``, ``(a == b).nonzero``, ``stream().synchronize``) and as
        resolved through imports and aliases."""
        leaves = {func.attr} if isinstance(func, ast.Attribute) else {func.id} if isinstance(func, ast.Name) else set()
        dotted = ast_dotted_name(func)
        if dotted is not None:
            leaves.add(self.names.spelled(dotted).rsplit(".", 1)[-1])
        return leaves

    def _compiles(self, func: ast.expr) -> bool:
        """``func`` may be ``torch.compile`` or a module's ``compile`` method: TL503's roots (``re.compile``,
        ``compile()`` the builtin and other names the file imports are not)."""
        return "compile" in self._leaves(func) and \
            self.names.qualified(ast_dotted_name(func)) in (None, "torch.compile")

    def _builtin_call(self, func: ast.expr, *names: str) -> bool:
        """A call of one of the builtins ``names`` (or of a name that may be one through an alias)."""
        if not isinstance(func, ast.Name):
            return False
        return func.id in names or self.names.spelled(func.id) in names

    # -- BIASED_NORM: a layer with a bias straight before a BatchNorm (TL403's pairs, loosely) ------------------
    def _biased_norm(self) -> bool:
        """Whether a pair TL403 judges may hold a biased layer and then a BatchNorm: adjacent items of a Sequential
        call or a list literal, or (its pairs of ``self.A`` and ``self.B`` applied one after the other) the values
        one ``__init__`` assigns to attributes."""
        for run in self.layer_runs:
            kinds = [self._layer_kinds(item) for item in run]
            if any(_biased_pair(a, b) for a, b in pairwise(kinds)):
                return True
        built: dict[ast.ClassDef, dict[str, frozenset[str]]] = {}  # class -> attribute -> what it may build
        for attr, values in self.attributes.items():
            for value, scope in values:
                kinds = self._layer_kinds(value) if scope in self.classes else frozenset()
                if kinds:
                    attrs = built.setdefault(self.classes[scope], {})
                    attrs[attr] = attrs.get(attr, frozenset()) | kinds
        return any(_biased_pair(a, b) for cls, attrs in built.items() for a, b in _applied_pairs(cls, attrs))

    def _anywhere(self) -> dict[str, list[ast.expr]]:
        """Every name the file assigns -> its values, in any scope."""
        if self.bound_anywhere is None:
            self.bound_anywhere = {}
            for names in self.values.values():
                for name, values in names.items():
                    self.bound_anywhere.setdefault(name, []).extend(values)
        return self.bound_anywhere

    def _layer_kinds(self, expr: ast.expr, depth: int = 0) -> frozenset[str]:
        """What layer ``expr`` may build: "conv" / "linear" (not given bias=False), "norm" / "flat-norm" (a
        BatchNorm); a name, what any assignment of it in the file may build (TL403 reads two names deep)."""
        if isinstance(expr, ast.Name) and depth < 2:
            return frozenset().union(*(self._layer_kinds(v, depth + 1) for v in self._anywhere().get(expr.id, ())))
        if not isinstance(expr, ast.Call):
            return frozenset()
        leaves = self._leaves(expr.func)
        if leaves & _BATCH_NORMS:
            return frozenset(("norm", "flat-norm") if leaves & _FLAT_NORMS else ("norm",))
        if leaves & _CONVS or "Linear" in leaves:
            bias = next((k.value for k in expr.keywords if k.arg == "bias"), None)
            if not (isinstance(bias, ast.Constant) and bias.value is False):
                return frozenset(("conv",) if leaves & _CONVS else ("linear",))
        return frozenset()

    # -- may this expression be a tensor? (a superset of values.Values.kind(expr) is TENSOR) --------------
    def _may_tensor(self, expr: ast.expr | None, scope: ast.AST, depth: int = 0) -> bool:
        if expr is None or depth > _MAX_DEPTH:
            return depth > _MAX_DEPTH
        if isinstance(expr, _HOST_VALUES):
            return False
        if isinstance(expr, ast.Name):
            if expr.id in ("True", "False", "None"):
                return False
            values = self.values.get(scope, {}).get(expr.id, ())
            return any(self._may_tensor(v, scope, depth + 1) for v in values)
        if isinstance(expr, ast.Attribute):
            if expr.attr in self.buffers and isinstance(expr.value, ast.Name) and expr.value.id == "self":
                return True
            return expr.attr not in HOST_ATTRS and self._may_tensor(expr.value, scope, depth + 1)
        if isinstance(expr, (ast.Subscript, ast.Starred)):
            return self._may_tensor(expr.value, scope, depth + 1)
        if isinstance(expr, ast.Call):
            return self._call_may_tensor(expr)
        if isinstance(expr, ast.BinOp):
            return self._may_tensor(expr.left, scope, depth + 1) or self._may_tensor(expr.right, scope, depth + 1)
        if isinstance(expr, ast.UnaryOp):
            return self._may_tensor(expr.operand, scope, depth + 1)
        if isinstance(expr, ast.Compare):
            if any(isinstance(op, _MEMBERSHIP) for op in expr.ops):
                return False
            return any(self._may_tensor(e, scope, depth + 1) for e in (expr.left, *expr.comparators))
        if isinstance(expr, ast.IfExp):
            return self._may_tensor(expr.body, scope, depth + 1) and self._may_tensor(expr.orelse, scope, depth + 1)
        return False  # and/or, lambdas, generators, await, ...: never a tensor to the rules

    def _may_hold_graph(self, expr: ast.expr, scope: ast.AST, depth: int = 0) -> bool:
        """KEPT_GRAPH: ``expr`` may hold an autograd graph (a superset of what TL306 finds one in: rules/memory.py
        GraphKeptAcrossSteps._origin): anything but literals, containers, results of unshadowed builtins and values
        read off the graph (``.detach()``, ``.item()``, ``.tolist()``, ``.numpy()``); a name the function never
        assigns (a parameter, a loop target) may."""
        if depth > _MAX_DEPTH:
            return True
        if isinstance(expr, ast.Name):
            values = self.values.get(scope, {}).get(expr.id)
            return not values or any(self._may_hold_graph(v, scope, depth + 1) for v in values)
        if isinstance(expr, ast.BinOp):
            return self._may_hold_graph(expr.left, scope, depth + 1) or self._may_hold_graph(expr.right, scope,
                                                                                             depth + 1)
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Name):
                return not (func.id in BUILTINS and func.id not in self.bound)
            return not (isinstance(func, ast.Attribute) and func.attr in _READS_OFF_GRAPH)
        return isinstance(expr, (ast.Attribute, ast.Subscript))

    def _call_may_tensor(self, call: ast.Call) -> bool:
        func = call.func
        if isinstance(func, ast.Name):
            return not (func.id in BUILTINS and func.id not in self.bound)
        if isinstance(func, ast.Attribute):
            root = func
            while isinstance(root, ast.Attribute):
                root = root.value
            plain = isinstance(root, ast.Name) and root.id not in self.imports and root.id not in self.aliases \
                and root.id not in BUILTINS
            return not (func.attr in HOST_METHODS and (plain or not isinstance(root, ast.Name)))
        return False

    def _first_tensor(self, values, scope: ast.AST) -> bool:
        for value in values:
            if isinstance(value, ast.Tuple):
                if self._first_tensor(value.elts, scope):
                    return True
            elif self._may_tensor(value, scope):
                return True
        return False

    def _tensor_truth(self, test: ast.expr, scope: ast.AST) -> bool:
        if isinstance(test, ast.BoolOp):
            return any(self._tensor_truth(v, scope) for v in test.values)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self._tensor_truth(test.operand, scope)
        return self._may_tensor(test, scope)

    def _mask_like(self, index: ast.expr, scope: ast.AST, depth: int) -> bool:
        if isinstance(index, ast.Compare):
            return not any(isinstance(op, _MEMBERSHIP) for op in index.ops)
        if isinstance(index, ast.UnaryOp):
            return isinstance(index.op, ast.Invert)
        if isinstance(index, ast.BinOp):  # ``a & b``, and ``(u > 0) * (l == u)``: bool x bool stays bool
            return isinstance(index.op, _BIT_OPS) or isinstance(index.op, ast.Mult) and \
                self._mask_like(index.left, scope, depth) and self._mask_like(index.right, scope, depth)
        if isinstance(index, ast.Call):  # m.bool(), torch.eye(n, dtype=torch.bool), (x > 0).to(device)
            func = index.func
            if depth and (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)) in \
                    self.functions:  # ``m = self.assign(x)``: what the file's function returns (values.returned)
                return True
            # ``m.clone()`` of a parameter ``m`` (a name the function never assigns): what its callers pass may be a
            # mask (YOLOX's ``fg_mask[fg_mask.clone()] = ...`` in simota_matching)
            return isinstance(func, ast.Attribute) and (func.attr in MASK_METHODS or func.attr in JOINS or
                                                        func.attr in MASK_KEEPING and (
                                                            self._mask_like(func.value, scope, depth) or
                                                            isinstance(func.value, ast.Name) and not depth and
                                                            not self.values.get(scope, {}).get(func.value.id))) or \
                any(k.arg == "dtype" for k in index.keywords) or any(ast_dotted_name(a) in ("torch.bool", "bool")
                                                                     for a in index.args)
        if isinstance(index, ast.Name) and depth == 0:
            values = self.values.get(scope, {}).get(index.id, ())
            return any(self._mask_like(v, scope, 1) for v in values)
        return False

    # -- pass 2: sites ---------------------------------------------------------------------------------------------
    def _walk(self) -> None:
        """Pass 2, over what pass 1 recorded (``frames``, ``judged``). Where a node runs: ``scope`` (the innermost
        def or lambda, else the module), ``hot`` (in a function the file may call per step, or in a loop that may
        run per step: _collect), ``loop`` (the innermost for/while loop of the same function, for PROJECT_CALL) and
        ``step`` (inside a loop that may be a training loop (_steppy_loop) and is no element loop over a range, or in
        a function called in a loop; ELEMENT_LOOP: ``for i in range(batch_size)`` in a collate function is no
        training step)."""
        outside: tuple[ast.AST, bool, ast.AST | None, bool] = (self.tree, False, None, False)
        states: list[tuple[ast.AST, bool, ast.AST | None, bool]] = []
        for node, parent in self.frames:
            scope, hot, loop, step = states[parent] if parent >= 0 else outside
            kind = type(node)
            if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                # a decorator without arguments is called too (``@torch.compile``: call:compile)
                self.called.update(*(self._leaves(d) for d in node.decorator_list if not isinstance(d, ast.Call)))
                if any(self._compiles(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list):
                    self.found.add(COMPILED)
                # a function the file calls may be called per step (callers.py follows the call)
                scope, hot, loop = node, node.name in self.hot_functions, None
                step = hot
            elif kind is ast.Lambda:
                scope = node  # a lambda runs where it is called (map(lambda t: t.item(), ...) in the loop)
            elif kind is ast.ClassDef:
                hot, loop, step = False, None, False
            else:  # a loop or a comprehension
                element = _element_loop(node)
                statement = kind in _STATEMENT_LOOPS
                over_range = element and isinstance(getattr(node, "iter", None), ast.Call) and \
                    ast_dotted_name(node.iter.func) == "range"  # for i in range(batch_size): x[i] is no training loop
                steppy = not over_range and self._steppy(node)
                # a comprehension over batches that walks each one's elements is both (the model judges its
                # generators as loops: ``[x.item() for y, n in zip(batches, sizes) for x in y[:n]]``)
                if (step or steppy and not statement) and ELEMENT_LOOP not in self.found and element:
                    self.found.add(ELEMENT_LOOP)
                if steppy and statement:
                    self.steppy = step = True
                elif steppy:
                    self.steppy = True
                hot = hot or node in self.hot_loops
                if statement:
                    loop = node
            states.append((scope, hot, loop, step))
        for node, frame in self.judged:
            scope, hot, loop, _step = states[frame] if frame >= 0 else outside
            kind = type(node)
            if kind is ast.Assign and self.launch_blocking and any(
                    isinstance(t, ast.Subscript) and "environ" in self._leaves(t.value)
                    for t in node.targets):  # type: ignore[attr-defined]
                self.found.add(ENV_SETTING)
            if kind is ast.List:
                self.layer_runs.append(node.elts)  # type: ignore[attr-defined]
            elif kind is ast.Call:
                self._call(node, scope, hot)  # type: ignore[arg-type]
                if loop is not None and PROJECT_CALL not in self.found and \
                        self._project_call(node.func, scope) and self._steppy(loop):  # type: ignore[attr-defined]
                    self.found.add(PROJECT_CALL)
                if PARAMETER_CALL not in self.found and self._parameter_call(node.func) and \
                        (hot or loop is not None and self._steppy(loop)):  # type: ignore[attr-defined]
                    self.found.add(PARAMETER_CALL)
            elif hot:
                self._other(node, scope)

    def _other(self, node: ast.AST, scope: ast.AST) -> None:
        found = self.found
        if isinstance(node, (ast.If, ast.While, ast.Assert, ast.IfExp)) and SCALAR not in found:
            if self._tensor_truth(node.test, scope):
                found.add(SCALAR)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and SCALAR not in found:
            if self._may_tensor(node.operand, scope):
                found.add(SCALAR)  # ``not t.all()`` anywhere
        elif isinstance(node, ast.comprehension) and SCALAR not in found:
            if any(self._tensor_truth(test, scope) for test in node.ifs):
                found.add(SCALAR)
        elif isinstance(node, ast.JoinedStr) and FORMAT not in found:
            if any(self._may_tensor(v.value, scope) for v in node.values if isinstance(v, ast.FormattedValue)):
                found.add(FORMAT)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_str(node.left):
            if FORMAT not in found and self._first_tensor([node.right], scope):
                found.add(FORMAT)
        elif isinstance(node, ast.Subscript) and MASK_INDEX not in found:
            indices = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]  # ``x[:, m]`` too
            if any(not isinstance(i, ast.Slice) and self._mask_like(i, scope, 0) for i in indices):
                found.add(MASK_INDEX)
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and KEPT_GRAPH not in found:
            if self._may_hold_graph(node.value, scope):
                found.add(KEPT_GRAPH)  # ``total += loss``
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Add) \
                and len(node.targets) == 1 and KEPT_GRAPH not in found:
            target, value = ast_dotted_name(node.targets[0]), node.value
            kept = value.right if ast_dotted_name(value.left) == target else \
                value.left if ast_dotted_name(value.right) == target else None
            if target is not None and kept is not None and self._may_hold_graph(kept, scope):
                found.add(KEPT_GRAPH)  # ``total = total + loss``

    def _call(self, node: ast.Call, scope: ast.AST, hot: bool) -> None:
        found = self.found
        func = node.func
        method = func.attr if isinstance(func, ast.Attribute) else None
        leaves = self._leaves(func)
        self.called |= leaves
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        if "DataLoader" in leaves:
            found.add(DATALOADER)
        if "Sequential" in leaves:
            self.layer_runs.append(node.args)
        if COMPILED not in found and self._compiles(func) and (
                "forward" in self.functions or  # a module of the file's classes, or a function of the file by name
                node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in self.functions):
            found.add(COMPILED)
        if any(isinstance(arg, ast.Constant) and _off_tile(arg.value) for arg in (*node.args, *(k.value for k in
                                                                                           node.keywords))):
            self.off_tile_callees |= leaves  # ``Block(1027)``: a parameter of Block may hold it (flow.Flow.ints)
        if leaves & _SIZED_LAYERS and OFF_TILE not in found:
            # a size that is no literal may be one through the rule's data flow (VOCAB = 50257 ... nn.Linear(d,
            # VOCAB); Block(1027)): the rule judges it; a call, a subscript... the data flow never knows
            self.sizes.extend((arg, scope) for arg in (*positional, *(k.value for k in node.keywords)))
        if method == "zero_grad":
            arg = next((k.value for k in node.keywords if k.arg == "set_to_none"), None)
            if arg is None and positional:
                arg = positional[0]
            if isinstance(arg, ast.Constant) and arg.value is False:
                found.add(ZERO_GRAD)
        if method in ("to", "cuda", "type_as", "type"):
            self.device_copy = True  # anywhere: TL203 follows batch names into defs nested in the loop
            if hot and isinstance(func.value, (ast.Call, ast.BinOp, ast.UnaryOp)) and any(
                    isinstance(n, ast.Call) and (self._leaves(n.func) & _CREATION_CALLS or
                                                 any(leaf.endswith("Tensor") for leaf in self._leaves(n.func)))
                    for n in ast.walk(func.value)):
                found.add(HOST_BUILT)  # where the sync kinds count: TL204 reports in the same per-step code
        if not hot:
            return
        if "synchronize" in leaves:
            found.add(SYNCHRONIZE)
        if leaves & DATA_DEPENDENT or "where" in leaves:
            found.add(DATA_DEPENDENT_CALL)
        if method == "append" and len(node.args) == 1 and not node.keywords and KEPT_GRAPH not in found and \
                self._may_hold_graph(node.args[0], scope):
            found.add(KEPT_GRAPH)
        if method == "item" and not node.args and not node.keywords:
            found.add(ITEM)
        elif method == "add_scalar" and any(self._may_tensor(v, scope) for v in (
                *positional[1:2], *(k.value for k in node.keywords if k.arg == "scalar_value"))):
            found.add(ITEM)  # TensorBoard's add_scalar calls .item() on a tensor
        elif method in ("cpu", "tolist") and not node.args and not node.keywords:
            found.add(HOST_COPY)
        elif method == "numpy" and any(k.arg == "force" and not (isinstance(k.value, ast.Constant)
                                                                   and k.value.value is False) for k in node.keywords):
            found.add(HOST_COPY)
        elif method == "to" and any(self._cpu(a) for a in (*positional, *(k.value for k in node.keywords
                                                                             if k.arg == "device"))):
            found.add(HOST_COPY)
        if SCALAR not in found:
            if self._builtin_call(func, "any", "all") and positional:
                found.add(SCALAR)  # ``any(t > 0 for t in losses)``: the truth of each element
            elif self._builtin_call(func, "float", "int", "bool"):
                if len(node.args) == len(positional) == 1 and not node.keywords and \
                        self._may_tensor(positional[0], scope):
                    found.add(SCALAR)
            elif self._builtin_call(func, "max", "min"):
                if len(positional) >= 2 and any(self._may_tensor(v, scope) for v in positional):
                    found.add(SCALAR)
            elif self.names.spelled(ast_dotted_name(func) or "").startswith("math."):  # math.isnan(t)
                if any(self._may_tensor(v, scope) for v in positional):
                    found.add(SCALAR)
        if FORMAT not in found:
            if self._builtin_call(func, "print", "str", "repr"):
                values = positional
            elif method == "format" and _is_str(func.value) or \
                    method in ("set_postfix", "set_postfix_str", "set_description"):
                values = [*positional, *(k.value for k in node.keywords if k.arg is not None)]
            elif method in LOGGING and (node.args or node.keywords):  # all but the first argument (the format)
                values = [*(a for a in node.args[1:] if not isinstance(a, ast.Starred)),
                          *(k.value for k in node.keywords if k.arg is not None)]
            else:
                values = []
            if values and self._first_tensor(values, scope):
                found.add(FORMAT)

    def _project_call(self, func: ast.expr, scope: ast.AST) -> bool:
        """``helper(x)``/``mod.helper(x)`` of an import, or ``obj.m(x)`` where ``obj = Imported(...)``, when the
        import is not of a known library."""
        root = func
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name):
            return False
        if root.id in self.imports:
            return self.imports[root.id].lstrip(".").split(".")[0] not in EXTERNAL_MODULES or \
                self.imports[root.id].startswith(".")
        if func is root:  # ``model(x)`` with ``model = Net().cuda()`` (any scope: a prefilter may be loose)
            return any(isinstance(name, ast.Name) and name.id in self.imports and self._project_call(name, scope)
                       for values in self.values.values() for value in values.get(root.id, ())
                       for name in ast.walk(value))
        if isinstance(func, ast.Attribute) and func.value is root:
            for value in self.values.get(scope, {}).get(root.id, ()):
                if isinstance(value, ast.Call) and value.func is not func:
                    callee = value.func
                    while isinstance(callee, ast.Attribute):
                        callee = callee.value
                    if isinstance(callee, ast.Name) and callee.id in self.imports and self._project_call(value.func,
                                                                                                        scope):
                        return True
        return False

    def _parameter_call(self, func: ast.expr) -> bool:
        """``func`` is a parameter, ``self``, or an attribute of one (``model``, ``self.net.head``)."""
        while isinstance(func, ast.Attribute):
            func = func.value
        return isinstance(func, ast.Name) and (func.id == "self" or func.id in self.parameter_names)

    def _cpu(self, expr: ast.expr) -> bool:
        if _is_str(expr):
            return expr.value == "cpu"
        if isinstance(expr, ast.Call) and expr.args:
            return self._cpu(expr.args[0])
        return False


def may_report(code: str, found: frozenset[str] | None) -> bool:
    """Whether rule ``code`` could report in a file with the site kinds ``found`` (None: not screened). The rule's
    kinds are the ``sites`` of its catalog doc; a rule without them (or without a doc) may report anywhere."""
    doc = catalog().get(code)
    kinds = doc.sites if doc is not None else None
    return found is None or kinds is None or not kinds.isdisjoint(found)
