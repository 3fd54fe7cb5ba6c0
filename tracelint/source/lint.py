"""Linting one file: read, prefilter, parse once, run the enabled rules in one traversal, apply suppressions and
config, and with ``fix`` apply fixes until none is left (re-parsing each result before it is written).

Hostile input never stops the run (issue #11): a file is refused with a one-line InputError before libcst's native
parser sees it when it is past one of the limits in limits.py (nesting, trailer chains, line length; file size in
document.py) or too complex for Python's own parser, and no file takes much longer than the per-file time limit
(``Config.file_time_limit``, ``file-time-limit`` in [tool.tracelint], 20 s by default; counted from the read):

- A file that parses in time (``limits.parses_in_time``: Python's parser took it, at most 256 kB, shallow) is
  analysed in this process
  under a timer (``signal.setitimer`` on POSIX, main thread only, when no one else uses SIGALRM) that interrupts
  the Python part (rules, positions, fixes); its native parse is short by construction.
- Any other file (Python's parser rejected it, so libcst alone judges it; or it is large or deep) is analysed in a
  forked child process (engine.workers) that is killed at the limit; a child that dies (SIGSEGV in the native
  parser, say) costs that file only. Forking costs a few milliseconds and most of a file's time in fresh memory,
  so the files that parse in time, nearly all real ones, do not pay it.
- Without fork (Windows) or with other threads running (fork would copy their locks), every file is analysed
  in-process: the timer where it can be set, else no time limit.
"""
from __future__ import annotations

import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from tracelint.engine import Config, FileChecked, Finding, InputError, discover
from tracelint.engine.catalog import catalog
from tracelint.engine.suppress import is_suppressed
from tracelint.engine.workers import WorkerFailed, can_fork, fork
from tracelint.source.cache import Cache, content_digest
from tracelint.source.cache import key as cache_key
from tracelint.source.document import DocumentError, NotebookDocument, PythonDocument, read_document
from tracelint.source.fix import NotWritten, choose_fixes, write_atomic
from tracelint.source.limits import hazard, parses_in_time
from tracelint.source.project import pinned_torch
from tracelint.source.runcalls import Entry, RunCalls, import_targets
from tracelint.source.screen import (
    PARAMETER_CALL,
    PROJECT_CALL,
    SYNC_KINDS,
    AstFacts,
    examine,
    may_report,
    parse_quietly,
    parses,
    sites,
)

if TYPE_CHECKING:
    import libcst as cst

    from tracelint.source.rule import SourceRule

# libcst (and so the rules) is imported only once a file needs parsing: importing it costs ~0.25 s, which a
# pre-commit run on files that never mention torch, or that hold nothing a rule reports on, should not pay.

MAX_FIX_PASSES = 5  # a fix may expose another; ruff iterates the same way

T = TypeVar("T")


def source_rules() -> tuple[type[SourceRule], ...]:
    from tracelint.source.rule import SourceRule

    return discover("tracelint.source.rules", SourceRule)


class ParseError(Exception):
    def __init__(self, message: str, line: int | None, lasting: bool = True) -> None:
        super().__init__(message)
        # ``lasting``: the same text always gives it (not so running out of memory): the result may be cached
        self.message, self.line, self.lasting = message, line, lasting


class _TimeUp(BaseException):
    """The per-file time limit passed (a BaseException: no ``except Exception`` on the way may swallow it)."""


class _Crashed(Exception):
    """The child process analysing a file died or could not report."""


# The last texts parsed and screened in this process: the rounds of a run (callers.py, project.py) analyse a file
# several times; its tree, screen and positions (semantic/model.py) are made once. libcst trees are immutable.
_KEEP = 64
_KEEP_AST_FACTS = 4096  # an AstFacts is a few small sets: every file of a large run
_parsed: dict[str, cst.Module] = {}
_ast_facts: dict[str, AstFacts] = {}


def _kept(cache: dict, text: str, value, keep: int = _KEEP):
    if len(cache) >= keep:
        cache.pop(next(iter(cache)))
    cache[text] = value
    return value


def _examine(text: str) -> AstFacts:
    facts = _ast_facts.get(text)
    return facts if facts is not None else _kept(_ast_facts, text, examine(text), _KEEP_AST_FACTS)


def parse(text: str) -> cst.Module:
    """``text``'s libcst tree, kept for the next analysis of the same text in this process (the rounds of a run,
    project.ProjectIndex); ParseError with the user's message when it cannot be parsed."""
    known = _parsed.get(text)
    if known is not None:
        return known
    refused = hazard(text)  # before the native parser: what it cannot take safely
    if refused is not None:
        raise ParseError(*refused)
    import libcst as cst

    try:
        return _kept(_parsed, text, cst.parse_module(text))
    except cst.ParserSyntaxError as exc:
        raise _syntax_error(text, exc) from None
    except RecursionError:
        raise ParseError("expression nested too deeply to parse", None) from None
    except MemoryError:
        raise ParseError("out of memory while parsing: not analysed", None, lasting=False) from None
    except (KeyboardInterrupt, SystemExit, _TimeUp):
        raise
    except BaseException as exc:  # noqa: BLE001 - a panic in the native parser is a BaseException (pyo3)
        raise ParseError(f"the parser (libcst) failed: {type(exc).__name__}: {_one_line(exc)}", None) from None


def callers_of(path: Path, data: bytes):
    """The call index (callers.Callers) of a project file a factory call leads to (project.ProjectIndex): parsed by
    ``parse`` (the run's tree, if it analysed the file already), no rule run; None when it is not UTF-8 or does not
    parse."""
    from tracelint.source.semantic.model import FileContext
    from tracelint.source.semantic.steps import facts

    try:
        text = data.decode("utf-8")
        module = parse(text)
    except (UnicodeDecodeError, ParseError):
        return None
    return facts(FileContext(str(path.resolve()), text, module)).callers


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc)[:2000].split())[:300]


def _syntax_error(text: str, exc) -> ParseError:
    """Python's own message and line (libcst's native parser reports the token after the error)."""
    try:
        parse_quietly(text)
    except SyntaxError as err:
        return ParseError(f"syntax error: {_one_line(err.msg)}", err.lineno)
    except (ValueError, RecursionError, MemoryError, OverflowError):
        pass
    return ParseError(f"syntax not supported by the parser (libcst): {_one_line(exc.message)}", exc.raw_line)


def _check(doc: PythonDocument | NotebookDocument, display: str, rules: list[type[SourceRule]],
           config: Config, found: frozenset[str] | None, run: _Run | None = None,
           facts: AstFacts | None = None) -> list[Finding]:
    """The findings of ``rules`` on ``doc`` as the user sees them (config applied, suppressed ones dropped);
    ``found`` is ``screen.sites(doc.text)``, ``facts`` the screen's ``AstFacts`` of it.
    With ``run`` (a run of several files: callers.py), the file's entry points from the other files are used, and
    what it tells the others is stored in ``run.calls``."""
    pinned = run.pinned if run is not None else {}
    active = [cls for cls in rules if (cls.wanted(doc.text) or pinned and cls.follows_pinned_loaders)
              and may_report(cls.code, found) and not (run is not None and run.calls_only)]
    if not active and run is None and facts is not None and facts.sites is not None:
        return []  # Python's parser took the file (else libcst must judge it: a syntax error is reported)
    from tracelint.source.rule import run_rules
    from tracelint.source.semantic.model import FileContext

    module = parse(doc.text)
    ctx = FileContext(display, doc.text, module, cell_lines=doc.cell_lines, entries=run.entries if run else None,
                      device_from_run=run.on_device if run else False,
                      graph_collates=run.graph_collates if run else frozenset(),
                      program_precision=run.precision if run and not run.alone else None,
                      defer_precision=run is not None and run.precision is None and not run.alone)
    ctx.pinned_parameters = pinned
    ctx.stepping_targets = run.stepping if run is not None else frozenset()
    ctx.factories = run.factories if run is not None else {}
    ctx.parameter_modules = run.parameters if run is not None else {}
    ctx.argument_kinds = run.arguments if run is not None else {}
    project_calls = _follows_calls(found, run)
    found = run_rules(ctx, [cls(ctx) for cls in active])
    if run is not None:
        from tracelint.source.semantic.steps import facts

        file_facts = facts(ctx)
        from tracelint.source.loader.facts import pinned_handoffs

        run.calls = replace(file_facts.callers.run_calls(on_device=file_facts.device_evidence(),
                                                         project_calls=project_calls, defines=run.defines),
                            pending=frozenset(ctx.pending), pinned=pinned_handoffs(ctx),
                            precision=_own_precision(ctx))
    line_of = _line_lookup(doc)
    kept: list[Finding] = []
    for finding in found:
        loc = finding.source
        lines = {loc.line, loc.end_line or loc.line}
        if any(is_suppressed(line_of(n, loc.cell), finding.code) for n in lines):
            continue
        finding = config.apply(finding)
        if finding is not None:
            kept.append(finding)
    kept.sort(key=Finding.sort_key)
    return kept


def _line_lookup(doc: PythonDocument | NotebookDocument) -> Callable[[int, int | None], str]:
    """``line_of(line, cell)``: a raw line of ``doc``, each text (the file, or a cell) split once however many
    findings look lines up in it (a file with 17,000 findings once rescanned its text for each)."""
    split: dict[int | None, list[str]] = {}

    def line_of(line: int, cell: int | None) -> str:
        lines = split.get(cell)
        if lines is None:
            lines = split[cell] = doc.raw_lines(cell)
        return lines[line - 1] if 0 < line <= len(lines) else ""

    return line_of


def _error_line(doc, line: int | None) -> tuple[str, int | None]:
    """For a notebook, the syntax error's line as ``cell N`` text plus the line within the cell."""
    if line and doc.cell_lines and line <= len(doc.cell_lines):
        cell, in_cell = doc.cell_lines[line - 1]
        return f"cell {cell}: ", in_cell
    return "", line


@dataclass
class _Run:
    """A file's part in a run of several files (callers.py): its entry points in, what it tells the others out."""

    entries: dict[str, Entry] = field(default_factory=dict)
    on_device: bool = False  # a file of the run with device evidence calls this file's functions
    graph_collates: frozenset[str] = frozenset()  # loader.collates.graph_collates of the run
    precision: frozenset[str] | None = frozenset()  # precision_settings.program_precision of this file (None:
                                                     # settled after the analysis, precision_settings.standing_pending)
    pinned: dict[str, frozenset[int | str]] = field(default_factory=dict)  # runcalls.pinned_parameters of the file
    stepping: frozenset[str] = frozenset()  # runcalls.stepping_calls of the file
    alone: bool = False  # judged on its own settings (a one-file run, a project file a call leads to)
    factories: dict = field(default_factory=dict)  # project.factories of the file
    parameters: dict = field(default_factory=dict)  # project.parameter_modules of the file
    arguments: dict = field(default_factory=dict)  # runcalls.argument_kinds of the file
    calls_only: bool = False  # a round of call following: what the file tells the others, no rule runs
    defines: frozenset[str] | None = None  # the screen's AstFacts.defines (None: Python's parser did not take the file)
    calls: RunCalls | None = None


@dataclass
class _Outcome:
    """What the analysis of one file found; ``write`` is the content of the fixed file (None: nothing to write),
    ``before`` the findings of the file as read (reported instead when the write fails). Bytes and findings only:
    it comes back from a child process by pickle, which a deeply nested notebook would not survive."""

    findings: list[Finding] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)
    fixed: int = 0
    write: bytes | None = None
    before: list[Finding] = field(default_factory=list)
    resolved: int = 0
    exposed: int = 0
    exposed_fixed: int = 0
    calls: RunCalls | None = None
    lasting: bool = True  # the same input gives the same outcome (lint_in_run caches it)


def lint_file(path: Path, config: Config, *, fix: bool | str = False, unsafe_fixes: bool = False,
              display: str | None = None) -> list[Finding | InputError | FileChecked]:
    """All results for one file; never raises for bad input (an InputError instead)."""
    return lint_in_run(path, config, fix=fix, unsafe_fixes=unsafe_fixes, display=display)[0]


def lint_in_run(path: Path, config: Config, *, fix: bool | str = False, unsafe_fixes: bool = False,
                display: str | None = None, run: _Run | None = None, cache: Cache | None = None,
                ) -> tuple[list[Finding | InputError | FileChecked], RunCalls | None]:
    """``lint_file``, as one file of a run of several (``run``: see ``_check``): the results, and what the file
    tells the others of the run (None when it was not analysed). With ``cache``, a run without fixes takes them from
    there when the file's text, the config and the run's part are those of an earlier run (``_entry``), and stores
    them there otherwise."""
    display = display or str(path)
    started = time.monotonic()  # the time limit counts reading and screening too
    try:
        doc = read_document(path)
    except DocumentError as exc:
        return [InputError(display, exc.message, exc.line)], None
    entry = _entry(doc, config, display, run) if cache is not None and not fix else None
    known = _known(cache, entry)
    if known is not None:
        return known
    items, calls, lasting = _lint_document(doc, config, fix, unsafe_fixes, display, run, started)
    if entry is not None and lasting:
        cache.put(entry, (items, calls))
    return items, calls


def cached(path: Path, config: Config, cache: Cache, *, display: str | None = None, run: _Run | None = None,
           ) -> tuple[list[Finding | InputError | FileChecked], RunCalls | None] | None:
    """What ``lint_in_run`` (without fixes) stored in ``cache`` for the file as it is now; None when nothing is.
    The run asks before it starts worker processes: a run whose files are all cached imports no libcst."""
    try:
        doc = read_document(path)
    except DocumentError:
        return None
    return _known(cache, _entry(doc, config, display or str(path), run))


def _known(cache: Cache | None, entry: str | None):
    known = cache.get(entry) if cache is not None and entry is not None else None
    return known if isinstance(known, tuple) and len(known) == 2 else None


def _entry(doc: PythonDocument | NotebookDocument, config: Config, display: str, run: _Run | None) -> str:
    """The cache key of ``doc``'s results: everything they depend on besides tracelint's own code (cache.Cache
    keeps one folder per build): the text as analysed (a notebook's cells and where they start), the path the
    findings name and where the file is, its config, its part in the run (``run``: entry points, device, loaders
    and factories from the other files) and the torch version its project pins (TL401)."""
    text = doc.text.encode("utf-8", "surrogatepass")
    cells = (doc.cell_lines, doc.sources) if isinstance(doc, NotebookDocument) else None
    where = doc.path.resolve()
    return cache_key("lint", str(where), display, content_digest(text), cells, replace(config, cache_dir=None), run,
                     pinned_torch(where))


def _lint_document(doc: PythonDocument | NotebookDocument, config: Config, fix: bool | str, unsafe_fixes: bool,
                   display: str, run: _Run | None, started: float,
                   ) -> tuple[list[Finding | InputError | FileChecked], RunCalls | None, bool]:
    """``lint_in_run`` on a document read; the third value says whether the same input always gives the same
    results (not when the time limit cut the analysis short or something failed: those are not cached)."""
    # Files that never mention torch cannot hold a torch anti-pattern: skip before the screen and libcst, once
    # Python's parser has taken them (a file that does not parse is an error on every path: issue #34).
    if "torch" not in doc.text and run is None and parses(doc.text):
        return [FileChecked(display)], None, True
    if "torch" not in doc.text and run is not None and not (run.entries or run.arguments or run.parameters):
        # In a run it tells the others what it defines: a helper that never names torch may still be called
        # every step with tensors (``def accuracy(out, y): return (out.argmax(1) == y).sum().item()``); then it
        # is analysed with what the calls bring.
        facts = _examine(doc.text)
        if facts.parsed or facts.too_complex:  # (as ``parses``: one parse, the screen's)
            return [FileChecked(display)], _with_imports(RunCalls(facts.defines), doc), True
    facts = _examine(doc.text)
    if facts.too_complex:
        return [InputError(display, "nested too deeply for Python's own parser: not analysed"),
                FileChecked(display)], None, True
    # Nor can a file without a site any enabled rule reports on (screen.py; the catalog says which rules are source
    # rules and their sites): then neither libcst nor the rules are imported, which is most of a one-file run.
    def wanted(code: str) -> bool:
        return config.enabled(code) and not config.ignored_for(display, code)

    if run is not None and facts.sites is not None:
        run.defines = facts.defines
    # an entry point makes any body per-step; a pinned loader passed in makes any loop over a parameter a draw
    found = facts.sites if run is None or not (run.entries or run.pinned) else None
    codes = (code for code, rule_doc in catalog().items() if "source" in rule_doc.implemented_by)
    if found is not None and not any(may_report(code, found) for code in codes if wanted(code)):
        if run is None or not _follows_calls(found, run):
            # no rule reports here whatever the run tells it of devices: none to tell (runcalls.resolve)
            calls = _with_imports(RunCalls(facts.defines, sync_sites=False), doc) if run is not None else None
            return [FileChecked(display)], calls, True
    rules = [cls for cls in source_rules() if wanted(cls.code)]  # imports libcst and the rules: before any timer
    limit = config.file_time_limit

    def analyse() -> _Outcome:
        return _analyse(doc, display, rules, config, found, fix, unsafe_fixes, run, facts)

    left = max(0.001, started + limit - time.monotonic())
    try:
        if parses_in_time(doc.text, facts) or not can_fork():
            with _deadline(left) as timer:
                outcome = analyse()
            if timer.expired:  # whatever the analysis made of the interruption (libcst may turn it into a KeyError)
                raise _TimeUp
        else:
            outcome = _in_child(analyse, left)
    except _TimeUp:
        message = f"took longer than {limit:g} s (the per-file time limit, `file-time-limit`): not analysed"
        return [InputError(display, message), FileChecked(display)], None, False
    except _Crashed as exc:
        return [InputError(display, f"{exc}: not analysed"), FileChecked(display)], None, False
    done = FileChecked(display, fixed=outcome.fixed, resolved=outcome.resolved, exposed=outcome.exposed,
                       exposed_fixed=outcome.exposed_fixed)
    if outcome.write is not None and fix == "diff":
        done = replace(done, diff=_unified_diff(doc.path, outcome.write, display))
    elif outcome.write is not None:
        try:
            write_atomic(doc.path, outcome.write, doc)
        except NotWritten as exc:
            return [*outcome.before, InputError(display, str(exc)), FileChecked(display)], outcome.calls, False
        except (OSError, ValueError, RecursionError) as exc:
            error = InputError(display, f"cannot write the fixed file: {_one_line(exc)}")
            return [*outcome.before, error, FileChecked(display)], outcome.calls, False
    calls = outcome.calls
    if calls is not None and facts.sites is not None and not facts.sites & SYNC_KINDS:
        calls = replace(calls, sync_sites=False)
    return ([*outcome.findings, *outcome.errors, done], _with_imports(calls, doc) if calls is not None else None,
            outcome.lasting)


def _follows_calls(found: frozenset[str] | None, run: _Run | None) -> bool:
    """Whether the file may call code of another file per step, which a run of several files follows: not screened,
    a per-step call of a project function, or (a module passed in makes a call on a parameter a call of another
    file: ``converter.decode(...)``) a per-step call on a parameter of a function other files pass modules to."""
    return found is None or PROJECT_CALL in found or bool(run is not None and run.parameters and
                                                          PARAMETER_CALL in found)


def _with_imports(calls: RunCalls, doc) -> RunCalls:
    """``calls`` with the file's imports, which the run needs to settle the programs' precision (the files' own
    settings: ``_own_precision``, else read when the run settles)."""
    return replace(calls, imports=import_targets(doc.text.encode("utf-8", "surrogatepass")))


def _own_precision(ctx) -> frozenset[str]:
    """The file's own precision settings where its rules left findings to settle (they have read them: the run
    need not parse the file again); empty otherwise (the run reads them if a program asks)."""
    if not ctx.pending:
        return frozenset()
    from tracelint.source.rules.precision_settings import file_settings

    return file_settings(ctx)


def _unified_diff(path: Path, fixed: bytes, display: str) -> str:
    """--diff: what the fixes change in the file, as ``diff -u`` shows it (a notebook's JSON as it would be written)."""
    import difflib

    before = path.read_bytes().decode("utf-8", "replace").splitlines(keepends=True)
    after = fixed.decode("utf-8", "replace").splitlines(keepends=True)
    lines = difflib.unified_diff(before, after, f"a/{display}", f"b/{display}")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _analyse(doc, display: str, rules, config: Config, found, fix: bool, unsafe: bool,
             run: _Run | None = None, facts: AstFacts | None = None) -> _Outcome:
    """The findings (and with ``fix`` the fixed document) of one file; every failure an InputError in the outcome.
    Writes nothing: it may run in a child process, and the time limit must never cut a write short."""
    try:
        findings = _check(doc, display, rules, config, found, run, facts)
        if fix:
            outcome = _fix(doc, display, rules, config, findings, unsafe)
        else:
            outcome = _Outcome(findings)
        outcome.calls = run.calls if run is not None else None
        return outcome
    except ParseError as exc:
        prefix, line = _error_line(doc, exc.line)
        return _Outcome(errors=[InputError(display, prefix + exc.message, line)], lasting=exc.lasting)
    except Exception as exc:  # a rule bug must not stop the other files
        return _Outcome(errors=[InputError(display, _failure(exc))], lasting=False)


def _failure(exc: BaseException) -> str:
    """The one line for an exception out of the analysis. libcst's position pass turns an exception inside it into
    a KeyError in its cleanup: the first cause in the chain is what happened. Never raises, and never formats a
    libcst node (the repr of a deep one is itself a RecursionError, and may run to megabytes)."""
    seen = exc
    for _ in range(32):
        if isinstance(seen, RecursionError):
            return "code nested too deeply to analyse"
        if isinstance(seen, MemoryError):
            return "out of memory while analysing: not analysed"
        if seen.__context__ is None:
            break
        seen = seen.__context__
    if isinstance(exc, LookupError) and exc.args and not isinstance(exc.args[0], (str, int)):
        detail = f"a {type(exc.args[0]).__name__}"
    else:
        try:
            detail = _one_line(exc)
        except Exception:  # noqa: BLE001 - a message that cannot be made
            detail = "(no message)"
    return f"internal error while linting: {type(exc).__name__}: {detail}"


def _fix(doc, display, rules, config, findings, unsafe) -> _Outcome:
    """Apply fixes pass by pass; the outcome's ``write`` is the fixed document when it differs from ``doc``."""
    original, original_findings = doc, findings
    fixed, errors = 0, []
    applied: Counter[str] = Counter()  # the fingerprints of the findings whose fixes were applied, every pass
    for _ in range(MAX_FIX_PASSES):
        open_findings = _not_baselined(doc, display, findings, config)
        fixes = choose_fixes(open_findings, unsafe=unsafe)
        if not fixes:
            break
        try:
            candidate = doc.with_edits([e for f in fixes for e in f.edits])
            parse(candidate.text)  # checked even when no rule runs on the result
            candidate_findings = _check(candidate, display, rules, config, sites(candidate.text))
        except (ParseError, ValueError, DocumentError) as exc:
            reason = getattr(exc, "message", str(exc))
            errors.append(InputError(display, f"fixes not applied: the result would not parse ({reason})"))
            break
        doc, findings = candidate, candidate_findings
        fixed += len(fixes)
        chosen = {id(fix) for fix in fixes}
        applied.update(f.fingerprint() for f in open_findings if id(f.fix) in chosen)
    if not fixed or doc.text == original.text:
        return _Outcome(findings, errors, fixed, None, original_findings)
    # A plain run reports original_findings: say how many of them the fixes made go away, and how many findings
    # they exposed (the same finding keeps its fingerprint when lines move).
    before, after = Counter(f.fingerprint() for f in original_findings), Counter(f.fingerprint() for f in findings)
    try:
        data = doc.to_bytes()
    except (UnicodeEncodeError, ValueError, RecursionError) as exc:
        error = InputError(display, f"cannot write the fixed file: {_one_line(exc)}")
        return _Outcome(original_findings, [error], 0, None, original_findings)
    return _Outcome(findings, errors, fixed, data, original_findings, resolved=(before - after).total(),
                    exposed=(after - before).total(), exposed_fixed=(applied - before).total())


def _not_baselined(doc, display: str, findings: list[Finding], config: Config) -> list[Finding]:
    """``findings`` (of ``doc``, as the fixes have left it so far) less those the run's baseline holds
    (Config.baseline, set by the CLI for the run): --fix leaves them alone, as the report does. All of them without
    a baseline, or when it cannot be read (the CLI read it first and said so)."""
    if config.baseline is None or not findings:
        return findings
    from tracelint.engine.baseline import BaselineError, held, read_baseline_once
    from tracelint.engine.sourcelines import SourceLines

    try:
        baseline = read_baseline_once(config.baseline)
    except BaselineError:
        return findings
    try:
        data = doc.to_bytes()  # the lines as the fixes have left them, not as on disk
    except (UnicodeEncodeError, ValueError):  # the fixed file could not be written either: fix nothing more
        return []
    lines = SourceLines({display: data})
    return [f for f, h in zip(findings, held(findings, baseline, lines), strict=True) if not h]


# -- the per-file time limit ------------------------------------------------------------------------------------
class _Timer:
    expired = False  # the time ran out (an interrupted library may have raised something else instead of _TimeUp)


# The alarm raises only where the analysis runs: in a frame of tracelint or libcst, never in whatever else Python
# may be running at that instant (a gc callback, the hook reporting an unraisable exception, a logging handler);
# there it waits for the next tick. Raised there, it would escape as "Exception ignored in ..." on stderr, or
# break the other code's bookkeeping (pytest's unraisable hook died of it: "Failed to process unraisable exception").
_OURS = ("tracelint.", "libcst.")


def _interruptible(frame) -> bool:
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    if not name.startswith(_OURS):
        return False
    while frame is not None:
        if frame.f_code is _unraisable_hook.__code__:
            return False
        frame = frame.f_back
    return True


def _unraisable_hook(unraisable, *, previous) -> None:
    """While a deadline runs: our own alarm, landed in a finalizer, is dropped (the next tick raises where it
    counts); anything else goes to the hook that was there before."""
    if not isinstance(unraisable.exc_value, _TimeUp):
        previous(unraisable)


@contextmanager
def _deadline(seconds: float):
    """Raise _TimeUp in this thread once ``seconds`` have passed (Python code only: a native call finishes first);
    yields a _Timer that tells whether it did. A no-op off the main thread, without setitimer, or when someone else
    already uses SIGALRM."""
    timer = _Timer()
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread() \
        and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None) and not signal.getitimer(signal.ITIMER_REAL)[0]
    if not usable:
        yield timer
        return

    def time_up(signum, frame):
        timer.expired = True
        if _interruptible(frame):
            raise _TimeUp

    previous_hook = sys.unraisablehook
    sys.unraisablehook = partial(_unraisable_hook, previous=previous_hook)
    signal.signal(signal.SIGALRM, time_up)
    # Repeating after the first: code that swallows an exception (a gc callback, a __del__, an ``except
    # BaseException``) cannot swallow the time limit.
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.05)
    try:
        yield timer
    finally:
        while True:  # an alarm may land here too: disarm until it sticks
            try:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                break
            except _TimeUp:
                continue
        sys.unraisablehook = previous_hook


def _in_child(task: Callable[[], T], seconds: float) -> T:
    """``task()`` run in a forked child; _TimeUp when it takes longer than ``seconds`` (the child is killed),
    _Crashed when the child dies or cannot send its result back."""
    try:
        with fork(task, time_limit=seconds) as child:
            return child.result()
    except WorkerFailed as failed:
        if failed.cause == "time":
            raise _TimeUp from None
        if failed.cause == "signal":
            raise _Crashed(f"the parser crashed ({failed.signal})") from None
        if failed.cause == "exit":
            raise _Crashed(f"the analysis failed (its process ended with status {failed.status} and no result)"
                           ) from None
        raise _Crashed(f"internal error while linting: {type(failed.error).__name__}: {_one_line(failed.error)}"
                       ) from None
