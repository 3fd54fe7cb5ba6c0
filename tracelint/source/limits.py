"""What libcst's parser can take safely: ``hazard(text)``, why a text must not reach it at all, and
``parses_in_time(text, facts)``, whether it parses the text in time for sure (lint.py parses the others in a child
process with a time limit); both judge by ``shape(text)``, a token-level scan that needs no valid syntax."""
from __future__ import annotations

import io
import re
from dataclasses import dataclass
from functools import lru_cache

from tracelint.source.screen import AstFacts

# libcst's native parser recurses once per nesting level and slows down more than linearly with nesting and with
# trailer chains (libcst 1.9, measured: 1,000 nested ``[`` 5 s, 1,000 nested calls 14 s, 3,000 nested brackets
# kill the process with SIGSEGV; ``a[0][0]...`` 1,000 long 2.4 s, 5,000 long 96 s). A file past one of these limits
# is refused with a one-line message before libcst sees it. Real code stays far below them: the figures are the
# largest of 8,600 .py files (torch 2.13, sympy, pygments, setuptools, libcst, the standard library, this repo).
MAX_NESTING = 100        # brackets open plus indentation levels at any point (real code: 28)
MAX_CHAIN = 100          # attributes, calls and subscripts in a row: a.b[0](x).c ... (real code: 36)
MAX_LINE = 100_000       # characters in one line (real code: 72,574, a generated table of names on one line)
# Within those limits libcst's time still grows faster than the text (a 40 kB file of 570-deep sums takes 9 s):
# a file beyond one of these "in time" levels, or that Python's parser rejects (then libcst alone judges it), is
# parsed in a child process that is killed at the per-file time limit (lint.py). Real code is within them but for
# generated files: the largest ast depth in torch is 94 (an elif chain), in sympy's generated tables 569.
IN_TIME_NESTING = 30
IN_TIME_CHAIN = 30
IN_TIME_DEPTH = 100         # depth of Python's syntax tree
IN_TIME_CHARS = 256 * 1024  # libcst parses real code at 0.05 to 1 MB/s

_STRING = (r"""'''[^'\\]*(?:(?:\\.|'(?!''))[^'\\]*)*(?:'''|\Z)"""
           r'''|"""[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*(?:"""|\Z)'''
           r"""|'[^'\\\r\n]*(?:\\.[^'\\\r\n]*)*'?|"[^"\\\r\n]*(?:\\.[^"\\\r\n]*)*"?""")
# One match per token that matters: a string (a prefix needs no matching), a comment, a bracket, a line break or
# the end; the possessive skip of everything else keeps the scan linear and in C.
_SCAN = re.compile(rf"[^'\"#()\[\]{{}}\r\n]*+(?:(?P<string>{_STRING})|(?P<comment>#[^\r\n]*)|(?P<open>[(\[{{])"
                   r"|(?P<close>[)\]}])|(?P<newline>\r\n?|\n)|(?P<end>\Z))", re.DOTALL)
_CHAIN_GAP = re.compile(r"[\s\\]*(?:\.[\s\\]*[^\W\d]\w*[\s\\]*)*")  # between two trailers: .name .name
_ATTRIBUTES = re.compile(rf"(?:\.[ \t]*[^\W\d]\w*[ \t]*){{{MAX_CHAIN + 1}}}")  # a.b.c... without brackets
_INDENT = re.compile(r"[ \t\f]*")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class Shape:
    """The largest nesting (brackets plus indentation levels), trailer chain and line length of a text, with the
    line where each first occurs. A token-level scan that needs no valid syntax: strings and comments are skipped,
    the rest is approximate (a keyword before a bracket counts as a name), which limits far above real code allow."""

    nesting: int = 0
    nesting_line: int = 0
    chain: int = 0
    chain_line: int = 0
    line_length: int = 0
    long_line: int = 0


@lru_cache(maxsize=2)
def shape(text: str) -> Shape:
    depth, line = 0, 1
    indents: list[int] = []
    nesting = nesting_line = longest_chain = chain_line = 0
    close_end: dict[int, int] = {}  # depth -> where the last bracket closed back to that depth
    chain: dict[int, int] = {}      # depth -> trailers in the chain that ends there
    for match in _SCAN.finditer(text):
        kind = match.lastgroup
        if kind == "open":
            start = match.end() - 1
            after = close_end.pop(depth, None)  # consumed: a gap is matched once
            if after is not None and _CHAIN_GAP.fullmatch(text, after, start):
                count = chain.get(depth, 0) + 1 + text.count(".", after, start)
            else:
                j = start - 1
                while j >= 0 and text[j] in " \t":
                    j -= 1
                count = 1 if j >= 0 and (text[j].isalnum() or text[j] == "_") else 0
            chain[depth] = count
            if count > longest_chain:
                longest_chain, chain_line = count, line
            depth += 1
            close_end.pop(depth, None)
            if depth + len(indents) > nesting:
                nesting, nesting_line = depth + len(indents), line
        elif kind == "close":
            depth = max(depth - 1, 0)
            close_end[depth] = match.end()
        elif kind == "newline":
            line += 1
            where = match.start("newline")
            if depth or text[where - 1:where] == "\\":  # inside brackets, or a continued line
                continue
            close_end.pop(0, None)
            indent = _INDENT.match(text, match.end())
            first = indent.end()
            if first >= len(text) or text[first] in "\r\n#\\":  # a blank or comment line
                continue
            width = len(indent.group().expandtabs(8))
            while indents and width < indents[-1]:
                indents.pop()
            if width > (indents[-1] if indents else 0):
                indents.append(width)
                if len(indents) > nesting:
                    nesting, nesting_line = len(indents), line
        elif kind == "string":
            token = match.group("string")
            if "\n" in token or "\r" in token:
                line += token.count("\n") + token.count("\r") - token.count("\r\n")
    attributes = _ATTRIBUTES.search(text)
    if attributes is not None and longest_chain <= MAX_CHAIN:
        longest_chain, chain_line = MAX_CHAIN + 1, _line_of(text, attributes.start())
    # Line lengths in C and constant memory (universal newlines: \r\n and \r read as \n); the line break counts
    # until the longest line is over the limit, when it is located and measured exactly.
    longest, long_line = max(map(len, io.StringIO(text, newline=None)), default=0), 0
    if longest > MAX_LINE:
        for number, line in enumerate(io.StringIO(text, newline=None), start=1):
            if len(line) == longest:
                longest, long_line = len(line.rstrip("\n")), number
                break
    return Shape(nesting, nesting_line, longest_chain, chain_line, longest, long_line)


def _line_of(text: str, offset: int) -> int:
    return len(_LINE_BREAK.findall(text, 0, offset)) + 1


def hazard(text: str) -> tuple[str, int] | None:
    """Why libcst must not parse ``text``, as (message, line); None when it may."""
    found = shape(text)
    if found.line_length > MAX_LINE:
        return f"a line longer than {MAX_LINE:,} characters: not analysed", found.long_line
    if found.nesting > MAX_NESTING:
        return f"nesting deeper than {MAX_NESTING} levels (brackets and indentation): not analysed", found.nesting_line
    if found.chain > MAX_CHAIN:
        return f"more than {MAX_CHAIN} attributes, calls or subscripts in a row: not analysed", found.chain_line
    return None


def parses_in_time(text: str, facts: AstFacts) -> bool:
    """Whether libcst parses ``text`` in time for sure (else it is parsed in a child process with a time limit)."""
    found = shape(text)
    return facts.sites is not None and facts.depth <= IN_TIME_DEPTH and len(text) <= IN_TIME_CHARS \
        and found.nesting <= IN_TIME_NESTING and found.chain <= IN_TIME_CHAIN


def parsed_or_none(text: str):
    """libcst's tree of ``text`` for the scans a run makes before its analysis (the precision settings of its
    programs, the collate functions of its files), or None when it refuses the text or cannot parse it: the
    analysis proper reports that file, with its message, where it parses it."""
    if hazard(text) is not None:  # what the native parser cannot take safely (lint.py refuses it too)
        return None
    import libcst as cst  # only here: the prefilter runs before anything needs libcst

    try:
        return cst.parse_module(text)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # noqa: BLE001 - a syntax error, or a panic in the native parser (pyo3)
        return None
