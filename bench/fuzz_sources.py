#!/usr/bin/env python3
"""Fuzzing the source half (issue #11): real training scripts mutated, hypothesmith programs, and notebooks made of
them with their JSON structure mutated, through the API (``tracelint.source.lint_paths``) and, with ``cli``, the
command line (``tracelint check FILE --format json``, one subprocess per case).

    python bench/fuzz_sources.py --cases 10000 --seed 1 --workdir bench/.cache/fuzz/sources [--cli 2000] [--jobs 2]

``campaign(n, seed, workdir, cli)`` is the interface bench/fuzz.py calls. Case ``i`` of a seed is the same however
the cases are split (each draws from ``random.Random(f"{seed}:{i}")``; the hypothesmith programs come from one
seeded hypothesis run). The mutations (``source_case``, ``notebook_case``) take a ``Draw``, so that
tests/source/test_hostile_sources.py drives the very same code with hypothesis (which then shrinks).

A failure is: an exception escaping the API; an InputError that does not name the file, spans lines or says
"internal error"; a finding of another file; a case slower than CASE_TIMEOUT_S; a worker that died (a signal in
the native parser); a fix that turns a file Python could parse into one it cannot. Through the CLI also: a
traceback or "internal error" on stderr, an exit code other than 0, 1 or 2, a signal, a run past CLI_TIMEOUT_S,
stdout that is not JSON, a stderr line that is not one message naming the file. The failing inputs are copied to
``workdir/failures`` with the error beside them.

The campaign sets ``file-time-limit = 5`` (a pyproject.toml in the workdir, the same Config for the API): the
limit is what is tested, and slow cases then cost 5 s rather than 20.
"""
from __future__ import annotations

import argparse
import codecs
import json
import os
import random
import re
import selectors
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

REPO = Path(__file__).resolve().parents[1]
SOURCES = [*sorted((REPO / "fixtures" / "scenarios").glob("*.py")), REPO / "fixtures" / "examples" / "train.py"]
FILE_TIME_LIMIT_S = 5.0
CASE_TIMEOUT_S = 60.0    # an API case (lint, and fix for some) beyond this is a failure: the per-file limit broke
CLI_TIMEOUT_S = 30.0
WORKER_TIMEOUT_S = 150.0  # the watchdog over one case in a worker (API + CLI), past which the worker is killed
T = TypeVar("T")


# -- drawing choices: random.Random for the campaign, hypothesis for the tests ------------------------------------
class Draw(Protocol):
    def choice(self, options: Sequence[T]) -> T: ...
    def integer(self, low: int, high: int) -> int: ...


class RandomDraw:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def choice(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)


def chance(draw: Draw, percent: int) -> bool:
    return draw.integer(0, 99) < percent


# -- mutations of a Python source ---------------------------------------------------------------------------------
_OPEN = "([{"
_CLOSE = {"(": ")", "[": "]", "{": "}"}
_DEPTHS = (5, 30, 31, 99, 100, 101, 150, 199, 201, 500, 1000, 3000, 15000)
_CHAINS = (10, 30, 31, 99, 100, 101, 300, 1000, 5000)
_LENGTHS = (200, 5000, 40_000, 99_990, 100_001, 250_000)
_SNIPPETS = (
    "for batch in loader:\n    loss = model(batch)\n    print(loss.item())\n",
    "while True:\n    x = y.cpu()\n    if x > 0:\n        continue\n    torch.cuda.synchronize()\n",
    "loader = DataLoader(ds, batch_size=8)\nfor b in loader:\n    b = b.to('cuda')\n",
    "for step in range(max_steps):\n    opt.zero_grad(set_to_none=False)\n    v = float(out)\n",
    "def training_step(self, batch):\n    idx = batch.nonzero()\n    return batch[batch > 0]\n",
)


def _insert(draw: Draw, text: str, piece: str) -> str:
    """``piece`` at the start of a random line (keeps indentation errors for other mutations to make)."""
    lines = text.split("\n")
    at = draw.integer(0, len(lines))
    return "\n".join([*lines[:at], piece, *lines[at:]])


def _span(draw: Draw, text: str) -> tuple[int, int]:
    start = draw.integer(0, len(text))
    return start, min(len(text), start + draw.integer(0, 200))


def _nesting(draw: Draw, depth: int) -> str:
    shape = draw.choice(("mixed", "paren", "call", "list", "dict", "indent", "unbalanced"))
    if shape == "indent":
        depth = min(depth, 300)
        return "".join(" " * i + "if x:\n" for i in range(depth)) + " " * depth + "y = t.item()"
    pairs = {"paren": ("(", ")"), "call": ("f(", ")"), "list": ("[", "]"), "dict": ("{1: ", "}")}
    chosen = [pairs[shape] if shape in pairs else (lambda o: (o, _CLOSE[o]))(draw.choice(_OPEN))
              for _ in range(min(depth, 60))]
    chosen = (chosen * (depth // max(1, len(chosen)) + 1))[:depth]
    opens = [o for o, _ in chosen]
    closes = "".join(c for _, c in reversed(chosen))
    if shape == "unbalanced":
        closes = closes[: draw.integer(0, len(closes))]
    return "x = " + "".join(opens) + "1" + closes


def _chain(draw: Draw, length: int) -> str:
    link = draw.choice(("[0]", ".b", "()", ".c(1)[2]", "[i].item()", ".to(d)"))
    return "y = a" + link * length


def _deep_expression(draw: Draw, depth: int) -> str:
    kind = draw.choice(("sum", "ternary", "lambda", "not", "minus", "compare", "and", "power", "strings", "await"))
    if kind == "await":
        return "async def f():\n    x = " + "await " * depth + "a"
    body = {
        "sum": lambda: " + ".join(["a"] * depth),
        "ternary": lambda: "a if b else " * depth + "c",
        "lambda": lambda: "lambda: " * depth + "1",
        "not": lambda: "not " * depth + "a",
        "minus": lambda: "-" * depth + "a",
        "compare": lambda: " < ".join(["a"] * depth),
        "and": lambda: " and ".join(["a"] * depth),
        "power": lambda: " ** ".join(["a"] * depth),
        "strings": lambda: " ".join(['"s"'] * depth),
    }[kind]()
    return f"x = ({body})" if chance(draw, 50) else f"x = {body}"


def _long_line(draw: Draw, length: int) -> str:
    kind = draw.choice(("list", "string", "comment", "sum", "call"))
    if kind == "list":
        return "x = [" + "1, " * (length // 3) + "]"
    if kind == "string":
        return "s = '" + "a" * length + "'"
    if kind == "comment":
        return "# " + "c" * length
    if kind == "sum":
        return "x = " + "+".join(["b"] * (length // 2))
    return "f(" + ", ".join(["t.item()"] * (length // 10)) + ")"


def _text_mutation(draw: Draw, text: str, programs: Sequence[str]) -> str:
    kind = draw.choice(("delete", "duplicate", "swap", "truncate", "nesting", "chain", "deep", "long-line",
                        "null", "line-ends", "tabs", "unicode", "program", "loop", "snippet", "many-findings"))
    if kind == "delete":
        a, b = _span(draw, text)
        return text[:a] + text[b:]
    if kind == "duplicate":
        a, b = _span(draw, text)
        at = draw.integer(0, len(text))
        return text[:at] + text[a:b] * draw.integer(1, 3) + text[at:]
    if kind == "swap":
        lines = text.split("\n")
        i, j = draw.integer(0, len(lines) - 1), draw.integer(0, len(lines) - 1)
        lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines)
    if kind == "truncate":
        return text[: draw.integer(0, len(text))]
    if kind == "nesting":
        return _insert(draw, text, _nesting(draw, draw.choice(_DEPTHS)))
    if kind == "chain":
        return _insert(draw, text, _chain(draw, draw.choice(_CHAINS)))
    if kind == "deep":
        return _insert(draw, text, _deep_expression(draw, draw.choice((50, 100, 101, 400, 1000, 3000))))
    if kind == "long-line":
        return _insert(draw, text, _long_line(draw, draw.choice(_LENGTHS)))
    if kind == "null":
        at = draw.integer(0, len(text))
        return text[:at] + "\x00" * draw.integer(1, 3) + text[at:]
    if kind == "line-ends":
        style = draw.choice(("\r\n", "\r", "mixed", "\x0c", "\u2028", "\x85", "\x1c"))
        if style == "mixed":
            return "".join(line + draw.choice(("\n", "\r\n", "\r")) for line in text.split("\n"))
        if style in ("\r\n", "\r"):
            return text.replace("\n", style)
        at = draw.integer(0, len(text))
        return text[:at] + style + text[at:]
    if kind == "tabs":
        if chance(draw, 50):
            return text.replace("    ", "\t")
        return "\n".join(line.replace("    ", "\t", 1) if chance(draw, 30) else line for line in text.split("\n"))
    if kind == "unicode":
        at = draw.integer(0, len(text))
        return text[:at] + draw.choice(("é", "\u200b", "\u202e", "😀", "\U000e0001", "ℌ", "\ufeff", "ß")) + text[at:]
    if kind == "program" and programs:
        return _insert(draw, text, draw.choice(programs))
    if kind == "loop":
        body = "\n".join("    " + line for line in text.split("\n"))
        return "import torch\nfor batch in loader:\n" + body
    if kind == "many-findings":
        count = draw.choice((10, 100, 1000, 5000))
        return text + "\nfor b in loader:\n" + "    y = b.item()\n" * count
    return _insert(draw, text, draw.choice(_SNIPPETS))


def _encode(draw: Draw, text: str) -> bytes:
    if chance(draw, 65):
        return text.encode("utf-8", "surrogatepass")
    kind = draw.choice(("bom", "utf-16", "latin-1", "cookie-mismatch", "bad-cookie", "flip", "flip", "high-bytes",
                        "cp1252"))
    if kind == "bom":
        return codecs.BOM_UTF8 + text.encode("utf-8", "surrogatepass")
    if kind == "utf-16":
        return text.encode(draw.choice(("utf-16", "utf-16-le", "utf-16-be")), "surrogatepass")
    if kind in ("latin-1", "cp1252"):
        cookie = f"# -*- coding: {kind} -*-\n" if chance(draw, 70) else ""
        return (cookie + text + "\n# café\n").encode(kind, "replace")
    if kind == "cookie-mismatch":
        return codecs.BOM_UTF8 + b"# coding: latin-1\n" + text.encode("utf-8", "surrogatepass")
    if kind == "bad-cookie":
        codec = draw.choice(("rot13", "nope", "utf-32", "hex", "utf-7", "undefined", "idna", "cp037"))
        return f"# coding: {codec}\n{text}".encode("utf-8", "surrogatepass")
    data = bytearray(text.encode("utf-8", "surrogatepass"))
    if kind == "flip" and data:
        for _ in range(draw.integer(1, 8)):
            data[draw.integer(0, len(data) - 1)] = draw.integer(0, 255)
    elif kind == "high-bytes":
        at = draw.integer(0, len(data))
        data[at:at] = bytes(draw.integer(0x80, 0xFF) for _ in range(draw.integer(1, 4)))
    return bytes(data)


def source_case(draw: Draw, sources: Sequence[str], programs: Sequence[str]) -> bytes:
    """A mutated real script, or a hypothesmith program made to reach the rules (it imports torch, has a loop)."""
    if programs and chance(draw, 15):
        text = "import torch\n" + draw.choice(programs) + "\nfor b in loader:\n    b.item()\n"
    else:
        text = draw.choice(sources)
    for _ in range(draw.integer(1, 3)):
        text = _text_mutation(draw, text, programs)
    return _encode(draw, text)


# -- notebooks ----------------------------------------------------------------------------------------------------
_MAGICS = ("%matplotlib inline", "!pip install torch", "%%time", "x = !ls", "model?", "%load_ext autoreload",
           "%%bash\necho hi")


def _cells(draw: Draw, text: str) -> list[dict]:
    cells: list[dict] = []
    for chunk in text.split("\n\n"):
        if chance(draw, 15):
            chunk = draw.choice(_MAGICS) + "\n" + chunk
        cell: dict[str, Any] = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                                "source": chunk.splitlines(keepends=True) if chance(draw, 70) else chunk}
        cells.append(cell)
        if chance(draw, 20):
            cells.append({"cell_type": "markdown", "metadata": {}, "source": ["# notes\n", "text"]})
    return cells


def _deep(depth: int) -> Any:
    value: Any = 1
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def _json_mutation(draw: Draw, nb: dict) -> Any:
    cells = nb.get("cells") if isinstance(nb.get("cells"), list) else []
    kind = draw.choice(("source-type", "source-items", "cells-type", "cell-type", "cell-kind", "metadata",
                        "nbformat", "outputs", "top-level", "surrogate", "numbers", "no-cells", "language"))
    dicts = [cell for cell in cells if isinstance(cell, dict)]
    pick = (lambda: dicts[draw.integer(0, len(dicts) - 1)]) if dicts else (lambda: {})
    odd = draw.choice((5, None, True, 1.5, {"a": 1}, [1, 2], [["x"]], "text", [None], {}))
    if kind == "source-type":
        pick()["source"] = odd
    elif kind == "source-items":
        cell = pick()
        cell["source"] = [*(cell.get("source") if isinstance(cell.get("source"), list) else ["x\n"]), odd]
    elif kind == "cells-type":
        nb["cells"] = odd
    elif kind == "cell-type" and cells:
        cells[draw.integer(0, len(cells) - 1)] = odd
    elif kind == "cell-kind":
        cell = pick()
        if chance(draw, 30):
            cell.pop("cell_type", None)
        else:
            cell["cell_type"] = draw.choice((5, None, ["code"], "raw", "code ", "CODE", {"code": 1}))
    elif kind == "metadata":
        nb["metadata"] = draw.choice((_deep(draw.choice((10, 500, 990, 5000, 100_000))), odd,
                                      {"kernelspec": odd}, {"kernelspec": {"language": odd}}))
    elif kind == "nbformat":
        if chance(draw, 20):
            nb.pop("nbformat", None)
        else:
            nb["nbformat"] = draw.choice((3, "4", None, 4.5, True, 5, -1, 10**30))
        if chance(draw, 20):
            nb["worksheets"] = [{"cells": cells}]
    elif kind == "outputs":
        cell = pick()
        cell["outputs"] = [{"output_type": "stream", "name": "stdout",
                            "text": ["x" * draw.choice((10, 100_000, 2_000_000))]}, odd]
    elif kind == "top-level":
        return draw.choice(([nb], "notebook", 42, None, [], [1, {"cells": []}]))
    elif kind == "surrogate":
        pick()["source"] = draw.choice(("import torch\nx = '\ud800'\n", ["a\n", "\udfff"]))
    elif kind == "numbers":
        nb["metadata"] = {"n": draw.choice((float("nan"), float("inf"), 10**200, -0.0))}
    elif kind == "no-cells":
        nb.pop("cells", None)
    else:
        nb["metadata"] = {"kernelspec": {"language": draw.choice(("R", "julia", "", "Python", 5))}}
    return nb


def notebook_case(draw: Draw, sources: Sequence[str], programs: Sequence[str]) -> bytes:
    """A notebook of a (possibly mutated) script's code cells, with its JSON structure or bytes damaged."""
    text = draw.choice(sources)
    if chance(draw, 40):
        text = _text_mutation(draw, text, programs)
    nb: Any = {"cells": _cells(draw, text), "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
               "nbformat": 4, "nbformat_minor": 5}
    for _ in range(draw.integer(0, 2)):
        if isinstance(nb, dict):
            nb = _json_mutation(draw, nb)
    try:
        body = json.dumps(nb, indent=draw.choice((None, 1, 2, 4)), ensure_ascii=chance(draw, 50))
    except (RecursionError, ValueError):
        body = "[" * 100_000 + "]" * 100_000
    damage = draw.choice(("none", "none", "none", "truncate", "flip", "bom", "utf-16", "duplicate-key", "deep-json"))
    if damage == "truncate":
        body = body[: draw.integer(0, len(body))]
    elif damage == "duplicate-key":
        body = body.replace('"cells":', '"cells": 1, "cells":', 1)
    elif damage == "deep-json":
        body = body.replace('"metadata":', '"metadata": ' + "[" * 200_000 + "]" * 200_000 + ', "m2":', 1)
    data = body.encode("utf-8", "surrogatepass")
    if damage == "flip" and data:
        data = bytearray(data)
        for _ in range(draw.integer(1, 6)):
            data[draw.integer(0, len(data) - 1)] = draw.integer(0, 255)
        data = bytes(data)
    elif damage == "bom":
        data = codecs.BOM_UTF8 + data
    elif damage == "utf-16":
        data = body.encode("utf-16", "surrogatepass")
    return data


def read_sources() -> list[str]:
    return [path.read_text(encoding="utf-8") for path in SOURCES]


def programs(count: int, seed: int) -> list[str]:
    """``count`` hypothesmith programs (from the grammar, and a few from libcst nodes), from one seeded run."""
    if count <= 0:
        return []
    import hypothesmith
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded

    found: list[str] = []
    for strategy, share in ((hypothesmith.from_grammar(), 0.85), (hypothesmith.from_node(), 0.15)):
        @seeded(seed)
        @settings(max_examples=max(1, int(count * share)), database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(strategy)
        def collect(program: str) -> None:
            found.append(program)

        collect()
    return found


# -- checking one case ----------------------------------------------------------------------------------------------
def check_api(path: Path, config, *, fix: bool = False, unsafe: bool = False,
              outcome: list[str] | None = None) -> list[str]:
    """What is wrong with the API's answer on ``path`` (empty: nothing); ``outcome`` gets what the answer was
    ("findings", "clean", or the kind of its first InputError)."""
    import ast

    from tracelint.engine import FileChecked, Finding, InputError
    from tracelint.source import lint_paths

    problems: list[str] = []
    before = path.read_bytes() if fix else b""
    started = time.monotonic()
    try:
        items = list(lint_paths([path], config_for=lambda _p: config, fix=fix, unsafe_fixes=unsafe))
    except BaseException as exc:  # noqa: BLE001 - exactly what must not happen
        return [f"{'fix: ' if fix else ''}raised {type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}"]
    seconds = time.monotonic() - started
    if outcome is not None:
        outcome.append(_outcome(items))
    if seconds > CASE_TIMEOUT_S:
        problems.append(f"took {seconds:.1f} s")
    for item in items:
        if isinstance(item, InputError):
            if item.path != str(path):
                problems.append(f"InputError names {item.path!r}, not the file")
            if not item.message or "\n" in item.message or "\r" in item.message:
                problems.append(f"InputError not one line: {item.message!r}")
            if "internal error" in item.message:
                problems.append(f"InputError: {item.message}")
        elif isinstance(item, Finding):
            if item.path != str(path):
                problems.append(f"finding of {item.path!r}")
        elif not isinstance(item, FileChecked):
            problems.append(f"unexpected item {item!r}")
    if fix and path.suffix == ".py" and path.read_bytes() != before:
        try:
            ast.parse(before)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            pass
        else:
            try:
                ast.parse(path.read_bytes())
            except (SyntaxError, ValueError) as exc:
                problems.append(f"fix broke the file: {exc}")
            except (RecursionError, MemoryError):
                pass
    return [("fix: " if fix else "") + p for p in problems]


def _outcome(items: list) -> str:
    """"findings", "clean", or the kind of the first InputError (its message up to a colon, numbers as N)."""
    from tracelint.engine import Finding, InputError

    errors = [i.message for i in items if isinstance(i, InputError)]
    if errors:
        message = re.sub(r"^cell \d+: ", "", errors[0])
        return re.sub(r"\d[\d,.]*", "N", re.split(r"[:(]", message)[0]).strip()[:60]
    return "findings" if any(isinstance(i, Finding) for i in items) else "clean"


def _tracelint_command() -> list[str]:
    script = Path(sys.executable).with_name("tracelint")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tracelint"]


def check_cli(path: Path, cwd: Path) -> list[str]:
    """What is wrong with ``tracelint check FILE --format json`` on ``path``."""
    try:
        proc = subprocess.run([*_tracelint_command(), "check", str(path), "--format", "json"], cwd=cwd,
                              capture_output=True, timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return [f"cli: no answer in {CLI_TIMEOUT_S:g} s"]
    problems = []
    out, err = proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")
    if proc.returncode < 0:
        problems.append(f"cli: killed by signal {-proc.returncode}")
    elif proc.returncode not in (0, 1, 2):
        problems.append(f"cli: exit code {proc.returncode}")
    if "Traceback" in err or "internal error" in err:
        problems.append(f"cli: stderr: {err[-1500:]}")
    if out.strip():
        try:
            json.loads(out)
        except ValueError as exc:
            problems.append(f"cli: stdout is not JSON ({exc})")
    elif proc.returncode in (0, 1):
        problems.append("cli: no output")
    for line in err.splitlines():
        if line and not (line.startswith(("error: ", "note: ")) and str(path) in line):
            problems.append(f"cli: stderr line that is not one message naming the file: {line[:300]!r}")
            break
    return problems


# -- the campaign: worker processes, each fed one case at a time, under a watchdog ----------------------------------
def _worker(workdir: Path) -> None:
    """Answers one JSON line per case read on stdin: {"index", "path", "fix", "unsafe", "cli"} -> problems."""
    from tracelint.engine import Config

    config = Config(root=workdir, file_time_limit=FILE_TIME_LIMIT_S)
    answer = os.fdopen(os.dup(1), "w", buffering=1)
    sys.stdout = sys.stderr  # the protocol owns the real stdout
    for line in sys.stdin:
        case = json.loads(line)
        path = Path(case["path"])
        outcome: list[str] = []
        started = time.monotonic()
        problems = check_api(path, config, outcome=outcome)
        seconds = time.monotonic() - started
        if case["fix"]:
            copy = path.with_name("fix-" + path.name)
            shutil.copyfile(path, copy)
            problems += check_api(copy, config, fix=True, unsafe=case["unsafe"])
            copy.unlink(missing_ok=True)
        if case["cli"]:
            problems += check_cli(path, workdir)
        answer.write(json.dumps({"index": case["index"], "problems": problems, "outcome": outcome[0] if outcome
                                 else "raised", "seconds": round(seconds, 2)}) + "\n")


class _Worker:
    def __init__(self, workdir: Path) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", str(workdir)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
                                     bufsize=1)
        self.case: dict | None = None
        self.started = 0.0

    def send(self, case: dict) -> None:
        self.case, self.started = case, time.monotonic()
        self.proc.stdin.write(json.dumps(case) + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _make_case(index: int, seed: int, sources: list[str], progs: list[str], cases_dir: Path, cli: bool) -> dict:
    draw = RandomDraw(random.Random(f"{seed}:{index}"))
    notebook = chance(draw, 18)
    data = (notebook_case if notebook else source_case)(draw, sources, progs)
    path = cases_dir / f"case{index:06d}{'.ipynb' if notebook else '.py'}"
    path.write_bytes(data)
    return {"index": index, "path": str(path), "fix": chance(draw, 15), "unsafe": chance(draw, 50), "cli": cli}


def campaign(n: int, seed: int, workdir: Path, cli: bool, *, cli_cases: int | None = None,
             jobs: int | None = None, start: int = 0) -> dict:
    """Run cases ``start .. start+n-1`` of ``seed``; with ``cli`` the first ``cli_cases`` of them (default: all)
    also through the command line. Returns {"cases", "cli_cases", "failures": [{"input", "error"}], "seconds"}."""
    workdir = Path(workdir).resolve()
    cases_dir, failures_dir = workdir / "cases", workdir / "failures"
    if start == 0:  # a new campaign in this workdir: the cases and failures of an earlier one go
        shutil.rmtree(cases_dir, ignore_errors=True)
        shutil.rmtree(failures_dir, ignore_errors=True)
    cases_dir.mkdir(parents=True, exist_ok=True)
    failures_dir.mkdir(parents=True, exist_ok=True)
    (workdir / "pyproject.toml").write_text(f"[tool.tracelint]\nfile-time-limit = {FILE_TIME_LIMIT_S:g}\n")
    began = time.monotonic()
    sources = read_sources()
    progs = programs(min(400, max(10, n // 25)), seed)
    cli_left = n if cli_cases is None else cli_cases
    pending = []
    for index in range(start, start + n):
        pending.append(_make_case(index, seed, sources, progs, cases_dir, cli and cli_left > 0))
        cli_left -= 1
    pending.reverse()
    failures: list[dict] = []
    outcomes: dict[str, int] = {}
    slowest: list[tuple[float, str]] = []

    def fail(case: dict, error: str) -> None:
        source = Path(case["path"])
        kept = failures_dir / source.name
        if source.exists():
            shutil.copyfile(source, kept)
        kept.with_name(kept.name + ".error.txt").write_text(error, encoding="utf-8")
        failures.append({"input": str(kept), "error": error})

    workers = [_Worker(workdir) for _ in range(max(1, min(jobs or os.cpu_count() or 1, n)))]
    selector = selectors.DefaultSelector()
    for worker in workers:
        selector.register(worker.proc.stdout, selectors.EVENT_READ, worker)
    busy = 0
    try:
        while pending or busy:
            for worker in workers:
                if worker.case is None and pending:
                    worker.send(pending.pop())
                    busy += 1
            for key, _ in selector.select(timeout=1.0):
                worker = key.data
                line = worker.proc.stdout.readline()
                case = worker.case
                if line:
                    answer = json.loads(line)
                    outcomes[answer["outcome"]] = outcomes.get(answer["outcome"], 0) + 1
                    slowest.append((answer["seconds"], Path(case["path"]).name))
                    slowest[:] = sorted(slowest, reverse=True)[:5]
                    if answer["problems"]:
                        fail(case, "\n".join(answer["problems"]))
                    Path(case["path"]).unlink(missing_ok=True)
                else:  # the worker died on this case
                    worker.stop()
                    fail(case, f"worker died (exit status {worker.proc.returncode})")
                    selector.unregister(worker.proc.stdout)
                    workers[workers.index(worker)] = worker = _Worker(workdir)
                    selector.register(worker.proc.stdout, selectors.EVENT_READ, worker)
                worker.case = None
                busy -= 1
            now = time.monotonic()
            for i, worker in enumerate(workers):
                if worker.case is not None and now - worker.started > WORKER_TIMEOUT_S:
                    case = worker.case
                    selector.unregister(worker.proc.stdout)
                    worker.stop()
                    fail(case, f"hang: no answer in {WORKER_TIMEOUT_S:g} s")
                    workers[i] = _Worker(workdir)
                    selector.register(workers[i].proc.stdout, selectors.EVENT_READ, workers[i])
                    busy -= 1
    finally:
        for worker in workers:
            if worker.proc.stdin:
                worker.proc.stdin.close()
            worker.stop()
    cli_count = min(n, cli_cases if cli_cases is not None else n) if cli else 0
    return {"cases": n, "cli_cases": cli_count, "failures": failures, "seconds": round(time.monotonic() - began, 1),
            "outcomes": dict(sorted(outcomes.items(), key=lambda kv: -kv[1])), "slowest": slowest}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="index of the first case")
    ap.add_argument("--cli", type=int, default=0, help="how many of the cases also go through the CLI")
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: one per core)")
    ap.add_argument("--workdir", type=Path, default=REPO / "bench" / ".cache" / "fuzz" / "sources")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(args.worker)
        return 0
    result = campaign(args.cases, args.seed, args.workdir, args.cli > 0, cli_cases=args.cli, jobs=args.jobs,
                      start=args.start)
    print(f"{result['cases']} cases ({result['cli_cases']} also through the CLI) in {result['seconds']} s: "
          f"{len(result['failures'])} failures")
    print("outcomes (API, first InputError of each case):")
    for kind, count in result["outcomes"].items():
        print(f"  {count:6d}  {kind}")
    print("slowest API cases:", ", ".join(f"{name} {seconds:.1f} s" for seconds, name in result["slowest"]))
    for failure in result["failures"]:
        print(f"- {failure['input']}: {failure['error'].splitlines()[0][:300]}")
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
