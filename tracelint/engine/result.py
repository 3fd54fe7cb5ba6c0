"""What a run produces: findings, per-trace summaries and input errors, and the exit code they imply."""
from __future__ import annotations

from dataclasses import dataclass, field

from tracelint.engine.finding import Finding, Severity

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


@dataclass(frozen=True, slots=True)
class InputError:
    """A file that could not be read or parsed; one line for the user, never a traceback."""

    path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}"


@dataclass(frozen=True, slots=True)
class FileChecked:
    """Emitted by the source half once per file it read, with the number of fixes it wrote to it."""

    path: str
    fixed: int = 0  # fixes applied (a fix may expose a finding the next pass fixes too)
    resolved: int = 0  # findings of the file as read that the fixes made go away
    exposed: int = 0  # findings the fixes brought up that the file as read did not have, left in the fixed file
    exposed_fixed: int = 0  # findings the fixes brought up and a later pass fixed (a pinned loader's blocking copies)
    diff: str | None = None  # under --diff: what the fixes would change, as a unified diff (nothing is written)


@dataclass(frozen=True, slots=True)
class TraceSummary:
    """The verdict and metrics of one trace (one rank of it)."""

    path: str
    verdict: str
    evidence: str
    metrics: dict = field(hash=False)
    rank: int | None = None
    warnings: tuple[str, ...] = ()
    profiler: dict | None = field(default=None, hash=False)  # what the profiler recorded (tracelint.trace.recording)
    # What the HTML report charts (tracelint.trace.timeline): bounded, not part of equality or of the JSON report.
    timeline: dict | None = field(default=None, hash=False, compare=False, repr=False)
    # Achieved TFLOP/s per family and op of the work the ops' shapes give (tracelint.trace.roofline); in JSON reports.
    roofline: dict | None = field(default=None, hash=False, repr=False)


@dataclass(frozen=True, slots=True)
class BaselineUse:
    """What ``--baseline`` did to a run (tracelint.engine.baseline): the file, the findings it hid, and its entries
    for the files and rules checked that matched no finding (``stale``: fixed or changed since it was written)."""

    path: str
    hidden: int
    stale: int


@dataclass
class RunResult:
    findings: list[Finding] = field(default_factory=list)
    traces: list[TraceSummary] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)
    files_checked: int = 0
    paths_checked: list[str] = field(default_factory=list)  # the source files read, as their findings name them
    fixed: int = 0
    resolved: int = 0  # FileChecked.resolved and .exposed, summed: what --fix did to the findings a plain run reports
    exposed: int = 0
    exposed_fixed: int = 0
    diffs_of_fixes: list[str] = field(default_factory=list)  # --diff: one unified diff per file the fixes change
    # Files a folder search passed over and why (tracelint.trace.files.Skipped): notes, not errors.
    skipped: list = field(default_factory=list)
    # `tracelint verify`: one plain record per target (script or catalog pair), the JSON report's `verify` entries;
    # the measured findings carry their own result in details["verification"].
    verifications: list[dict] = field(default_factory=list)
    # `tracelint diff`: one plain record per compared pair (tracelint.diff.TraceDiff.as_dict); None for every other
    # command, so that a diff whose inputs were all unreadable still renders as a diff (no records, its errors).
    diffs: list[dict] | None = None
    # `tracelint run`: the run's plain record (what ran, how it was profiled, how it ended: tracelint.run.report);
    # its findings carry their Evidence and come in the order of their measured cost. None for every other command.
    run: dict | None = None
    # `--baseline`: what the baseline hid; None when the run used none.
    baseline: BaselineUse | None = None

    def exit_code(self, fail_on: Severity = Severity.WARNING, exit_zero: bool = False) -> int:
        if self.errors:
            return EXIT_ERROR
        if not exit_zero and any(f.severity >= fail_on for f in self.findings):
            return EXIT_FINDINGS
        return EXIT_CLEAN
