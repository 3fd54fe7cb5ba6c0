"""What gets measured: the variants of a script, each a text (the script with fixes applied) and an optional
precision mode that the harness applies at run time. Pure text work over the source half; never imports torch.

- one variant per finding with a fix: the script with that fix applied, plus the safe fixes of findings the fix
  *exposes* (a finding absent from the original whose rule fires only once the first fix is in: TL203's
  ``non_blocking=True`` appears only after TL202 made the loader pinned);
- one variant per sync finding without a fix, where a device-side rewrite can be built (rewrite.py:
  ``losses.append(loss.item())``, ``print(f"{loss.item()}")``, ...); the findings for which none can be are
  ``Unmeasured``, with the reason;
- "all fixes": what ``tracelint --fix --unsafe-fixes`` writes (every fix, pass after pass), then the rewrites of
  the findings left without a fix;
- precision variants for scripts that look matmul-bound and have not chosen a precision (unsafe: they change
  numerics): TF32 matmuls and bf16 autocast, applied by the harness (see harness.py for how and the limits).
"""
from __future__ import annotations

import ast
import re
import shutil
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from tracelint.engine import Config, Finding, InputError, find_config
from tracelint.source import lint_paths
from tracelint.source.fix import apply_edits
from tracelint.verify.rewrite import NotBuilt, rewrite

MAX_FOLLOW_UP_PASSES = 3

# A script "looks matmul-bound" when it builds layers that run matmuls or convolutions...
_MATMUL_WORDS = re.compile(
    r"\bnn\.(Linear|Conv[123]d|ConvTranspose[123]d|MultiheadAttention|Transformer\w*|LSTM|GRU|Bilinear)\b"
    r"|\b(matmul|bmm|einsum|addmm|scaled_dot_product_attention)\b|torchvision\.models|timm\.create_model"
    r"|transformers\b|\bresnet\d+\(|\bvit_\w+\("
)
# ...and has not chosen a lower precision itself (then both variants would measure the script's own choice).
_PRECISION_CHOSEN = {
    "tf32": re.compile(r"allow_tf32\s*=\s*True|set_float32_matmul_precision\(\s*['\"](high|medium)|"
                       r"fp32_precision\s*=\s*['\"]tf32"),
    "bf16": re.compile(r"\bautocast\b|bfloat16|\.half\(\)|float16|\bamp\b"),
}
PRECISION_TITLES = {
    "tf32": "TF32 matmuls (allow_tf32 = True)",
    "bf16": "bf16 autocast around module calls",
}


@dataclass(frozen=True, slots=True)
class Unmeasured:
    """A finding for which no variant could be built, and why."""

    finding: Finding
    reason: str


@dataclass(frozen=True, slots=True)
class Variant:
    """One thing to measure against the baseline."""

    key: str                        # "TL101:54", "all", "tf32", "bf16"
    title: str
    safe: bool
    text: str
    precision: str | None = None    # applied by the harness at run time
    finding: Finding | None = None
    follow_ups: tuple[str, ...] = ()  # "TL203: Add non_blocking=True" applied with it


def lint_text(text: str, where: Path, config: Config) -> list[Finding]:
    """The findings of ``text`` written to ``where`` (a scratch file), under ``config``."""
    where.write_text(text, encoding="utf-8")
    return [f for f in lint_paths([where], config_for=lambda _p: config) if isinstance(f, Finding)]


def _signature(finding: Finding) -> tuple[str, str]:
    # Code and message, not the line: a fix may move lines.
    return finding.code, finding.message


def apply_with_follow_ups(text: str, finding: Finding, original: Iterable[Finding], scratch: Path,
                          config: Config) -> tuple[str, tuple[str, ...]]:
    """``text`` with the finding's fix, then with the safe fixes of the findings that fix exposed."""
    assert finding.fix is not None
    known = Counter(_signature(f) for f in original)
    text = apply_edits(text, finding.fix.edits)
    applied: list[str] = []
    for _ in range(MAX_FOLLOW_UP_PASSES):
        remaining = known.copy()
        exposed = []
        for f in lint_text(text, scratch, config):
            if remaining[_signature(f)] > 0:
                remaining[_signature(f)] -= 1
            elif f.fix is not None and f.fix.safe and f.fix.edits:
                exposed.append(f)
        if not exposed:
            break
        try:
            text = apply_edits(text, [e for f in _non_overlapping(exposed) for e in f.fix.edits])
        except ValueError:
            break
        applied.extend(f"{f.code}: {f.fix.title}" for f in exposed)
    return text, tuple(dict.fromkeys(applied))


def _non_overlapping(findings: list[Finding]) -> list[Finding]:
    from tracelint.source.fix import choose_fixes

    chosen = {id(fix) for fix in choose_fixes(findings, unsafe=False)}
    return [f for f in findings if id(f.fix) in chosen]


def all_fixes(path: Path, scratch: Path, config: Config) -> str:
    """What ``tracelint --fix --unsafe-fixes`` makes of the script, computed on a copy."""
    shutil.copyfile(path, scratch)
    for _ in lint_paths([scratch], config_for=lambda _p: config, fix=True, unsafe_fixes=True):
        pass
    return scratch.read_text(encoding="utf-8")


def _code_only(text: str) -> str:
    """The script without comments and docstrings (a docstring that says "autocast" chooses no precision)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body[0] = ast.Pass()
    return ast.unparse(tree)


def precision_modes(text: str) -> list[str]:
    """The precision variants worth measuring for this script: none unless it looks matmul-bound."""
    text = _code_only(text)
    if not _MATMUL_WORDS.search(text):
        return []
    if _PRECISION_CHOSEN["bf16"].search(text):
        return []  # it already runs (partly) in 16-bit: TF32 or autocast on top would measure little of interest
    return [mode for mode in ("tf32", "bf16") if not _PRECISION_CHOSEN[mode].search(text)]


@dataclass(frozen=True, slots=True)
class Plan:
    """The variants of one script, the findings they came from, and what could not be planned or measured."""

    text: str
    findings: tuple[Finding, ...]
    variants: tuple[Variant, ...]
    errors: tuple[InputError, ...] = ()
    unmeasured: tuple[Unmeasured, ...] = ()


MAX_REWRITE_PASSES = 20


def rewrite_rest(text: str, scratch: Path, config: Config, filename: str) -> str:
    """``text`` with a device-side rewrite for each finding left without a fix, one after the other (each pass
    lints the text again: a rewrite moves what comes after it)."""
    failed: set[tuple[str, str, str]] = set()
    for _ in range(MAX_REWRITE_PASSES):
        lines = text.splitlines()
        for finding in lint_text(text, scratch, config):
            if finding.fix is not None and finding.fix.edits:
                continue
            line = finding.source.line if finding.source else 0
            key = (*_signature(finding), lines[line - 1].strip() if 0 < line <= len(lines) else "")
            if key in failed:
                continue
            try:
                text = rewrite(text, finding, filename).text
            except NotBuilt:
                failed.add(key)
                continue
            break
        else:
            return text
    return text


def plan(path: Path, scratch_dir: Path, *, precision: Iterable[str] | None = None,
         config_for: Callable[[Path], Config] | None = None, select: Iterable[str] | None = None) -> Plan:
    """Lint the script and build its variants; ``precision`` None means "decide from the text"; ``select``
    (code prefixes) keeps only the findings of those rules (the follow-up fixes they expose still apply)."""
    config = (config_for or (lambda p: find_config(p.resolve().parent)))(path)
    text = path.read_text(encoding="utf-8")
    items = list(lint_paths([path], config_for=lambda _p: config))
    errors = tuple(i for i in items if isinstance(i, InputError))
    findings = tuple(i for i in items if isinstance(i, Finding))
    prefixes = tuple(code.upper() for code in select or ())
    if prefixes:
        findings = tuple(f for f in findings if f.code.startswith(prefixes))
    scratch_dir.mkdir(parents=True, exist_ok=True)
    scratch = scratch_dir / f"lint_{path.name}"
    variants: list[Variant] = []
    unmeasured: list[Unmeasured] = []
    fixable = [f for f in findings if f.fix is not None and f.fix.edits]
    for finding in findings:
        if finding in fixable:
            fixed, follow_ups = apply_with_follow_ups(text, finding, findings, scratch, config)
            variants.append(Variant(f"{finding.code}:{finding.location.line}", finding.fix.title, finding.fix.safe,
                                    fixed, finding=finding, follow_ups=follow_ups))
            continue
        try:
            rewritten = rewrite(text, finding, path.name)
        except NotBuilt as exc:
            unmeasured.append(Unmeasured(finding, str(exc)))
            continue
        variants.append(Variant(f"{finding.code}:{finding.location.line}", rewritten.title, False, rewritten.text,
                                finding=finding))
    if len(variants) > 1:
        chosen = replace(config, select=prefixes) if prefixes else config
        together = all_fixes(path, scratch, chosen) if fixable else text
        together = rewrite_rest(together, scratch, chosen, path.name)
        safe = all(v.safe for v in variants)
        if together != text and all(together != v.text for v in variants):
            variants.append(Variant("all", "all fixes together", safe, together))
    modes = precision_modes(text) if precision is None else list(precision)
    if precision is None and any(v.finding is not None and v.finding.code == "TL401" for v in variants):
        modes = [m for m in modes if m != "tf32"]  # TL401's fix is that TF32 variant: measured once, as the finding
    variants.extend(Variant(m, PRECISION_TITLES[m], False, text, precision=m) for m in modes)
    return Plan(text, findings, tuple(variants), errors, tuple(unmeasured))
