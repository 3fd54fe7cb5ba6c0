"""Linting one file: read, prefilter, parse once, run the enabled rules in one traversal, apply suppressions and
config, and with ``fix`` apply fixes until none is left (re-parsing each result before it is written)."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING

from tracelint.engine import Config, FileChecked, Finding, InputError, discover
from tracelint.engine.catalog import catalog
from tracelint.engine.suppress import is_suppressed
from tracelint.source.document import DocumentError, NotebookDocument, PythonDocument, read_document
from tracelint.source.fix import choose_fixes, write_atomic
from tracelint.source.screen import may_report, sites

if TYPE_CHECKING:
    import libcst as cst

    from tracelint.source.rule import SourceRule

# libcst (and so the rules) is imported only once a file needs parsing: importing it costs ~0.25 s, which a
# pre-commit run on files that never mention torch, or that hold nothing a rule reports on, should not pay.

MAX_FIX_PASSES = 5  # a fix may expose another; ruff iterates the same way


def source_rules() -> tuple[type[SourceRule], ...]:
    from tracelint.source.rule import SourceRule

    return discover("tracelint.source.rules", SourceRule)


class _ParseError(Exception):
    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.message, self.line = message, line


def _parse(text: str) -> cst.Module:
    import libcst as cst

    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        raise _syntax_error(text, exc) from None
    except RecursionError:
        raise _ParseError("expression nested too deeply to parse", None) from None


def _syntax_error(text: str, exc) -> _ParseError:
    """Python's own message and line (libcst's native parser reports the token after the error)."""
    try:
        ast.parse(text)
    except SyntaxError as err:
        return _ParseError(f"syntax error: {err.msg}", err.lineno)
    except (ValueError, RecursionError):
        pass
    detail = " ".join(str(exc.message).split())
    return _ParseError(f"syntax not supported by the parser (libcst): {detail}", exc.raw_line)


def _check(doc: PythonDocument | NotebookDocument, display: str, rules: list[type[SourceRule]],
           config: Config, found: frozenset[str] | None) -> list[Finding]:
    """The findings of ``rules`` on ``doc`` as the user sees them (config applied, suppressed ones dropped);
    ``found`` is ``screen.sites(doc.text)``."""
    active = [cls for cls in rules if cls.wanted(doc.text) and may_report(cls.code, found)]
    if not active:
        return []
    from tracelint.source.context import FileContext
    from tracelint.source.rule import run_rules

    module = _parse(doc.text)
    ctx = FileContext(display, doc.text, module, cell_lines=doc.cell_lines)
    found = run_rules(ctx, [cls(ctx) for cls in active])
    kept: list[Finding] = []
    for finding in found:
        loc = finding.source
        lines = {loc.line, loc.end_line or loc.line}
        if any(is_suppressed(doc.raw_line(n, loc.cell), finding.code) for n in lines):
            continue
        finding = config.apply(finding)
        if finding is not None:
            kept.append(finding)
    kept.sort(key=Finding.sort_key)
    return kept


def _error_line(doc, line: int | None) -> tuple[str, int | None]:
    """For a notebook, the syntax error's line as ``cell N`` text plus the line within the cell."""
    if line and doc.cell_lines and line <= len(doc.cell_lines):
        cell, in_cell = doc.cell_lines[line - 1]
        return f"cell {cell}: ", in_cell
    return "", line


def lint_file(path: Path, config: Config, *, fix: bool = False, unsafe_fixes: bool = False,
              display: str | None = None) -> list[Finding | InputError | FileChecked]:
    """All results for one file; never raises for bad input (an InputError instead)."""
    display = display or str(path)
    try:
        doc = read_document(path)
    except DocumentError as exc:
        return [InputError(display, exc.message, exc.line)]
    # Files that never mention torch cannot hold a torch anti-pattern: skip before parsing.
    if "torch" not in doc.text:
        return [FileChecked(display)]
    # Nor can a file without a site any enabled rule reports on (screen.py; the catalog says which rules are source
    # rules and their sites): then neither libcst nor the rules are imported, which is most of a one-file run.
    def wanted(code: str) -> bool:
        return config.enabled(code) and not config.ignored_for(display, code)

    found = sites(doc.text)
    codes = (code for code, rule_doc in catalog().items() if "source" in rule_doc.implemented_by)
    if found is not None and not any(may_report(code, found) for code in codes if wanted(code)):
        return [FileChecked(display)]
    rules = [cls for cls in source_rules() if wanted(cls.code)]
    try:
        findings = _check(doc, display, rules, config, found)
        fixed = 0
        if fix:
            findings, fixed, error = _fix(doc, display, rules, config, findings, unsafe_fixes)
            if error is not None:
                return [*findings, error, FileChecked(display, fixed=fixed)]
    except _ParseError as exc:
        prefix, line = _error_line(doc, exc.line)
        return [InputError(display, prefix + exc.message, line), FileChecked(display)]
    except RecursionError:
        return [InputError(display, "code nested too deeply to analyse"), FileChecked(display)]
    except Exception as exc:  # a rule bug must not stop the other files
        return [InputError(display, f"internal error while linting: {type(exc).__name__}: {exc}"), FileChecked(display)]
    return [*findings, FileChecked(display, fixed=fixed)]


def _fix(doc, display, rules, config, findings, unsafe):
    """Apply fixes pass by pass, then write once. Returns (remaining findings, fixes written, error or None)."""
    original, original_findings = doc, findings
    fixed, error = 0, None
    for _ in range(MAX_FIX_PASSES):
        fixes = choose_fixes(findings, unsafe=unsafe)
        if not fixes:
            break
        try:
            candidate = doc.with_edits([e for f in fixes for e in f.edits])
            _parse(candidate.text)  # checked even when no rule runs on the result
            candidate_findings = _check(candidate, display, rules, config, sites(candidate.text))
        except (_ParseError, ValueError) as exc:
            reason = getattr(exc, "message", str(exc))
            error = InputError(display, f"fixes not applied: the result would not parse ({reason})")
            break
        doc, findings = candidate, candidate_findings
        fixed += len(fixes)
    if fixed and doc.text != original.text:
        try:
            write_atomic(doc.path, doc.to_bytes())
        except (OSError, UnicodeEncodeError) as exc:
            return original_findings, 0, InputError(display, f"cannot write the fixed file: {exc}")
    return findings, fixed, error
