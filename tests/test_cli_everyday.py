"""The conveniences a ruff or flake8 user reaches for (issue #18): help per command, --statistics, --show-source,
--quiet, --diff, --exclude, stdin, --watch, rule lookup by name, honest --fix counts, compact and verbose trace
reports."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tracelint.engine.metrics import EXPLAINS, registry

EXAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "examples" / "train.py"
FINDING = re.compile(r"^(?P<path>\S+):(?P<line>\d+):(?P<col>\d+): (?P<code>TL\d+) (?P<sev>info|warning|error) ")


def tracelint(*args: str, cwd: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracelint", *args], capture_output=True, text=True, cwd=cwd,
                          input=stdin)


@pytest.fixture
def example(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    shutil.copy(EXAMPLE, path)
    return path


def _findings(out: str) -> list[re.Match]:
    return [m for m in map(FINDING.match, out.splitlines()) if m]


def test_each_command_lists_its_own_options():
    check, trace = tracelint("check", "--help").stdout, tracelint("trace", "--help").stdout
    for option in ("--fix", "--diff", "--stdin-filename", "--watch"):
        assert option in check and option not in trace
    for option in ("--threshold", "--verbose"):
        assert option in trace and option not in check
    for option in ("--statistics", "--show-source", "--quiet", "--exclude"):
        assert option in check and option in trace


def test_a_usage_error_of_the_bare_form_names_the_command_typed(tmp_path):
    proc = tracelint("--no-such-flag", "x.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert "tracelint auto" not in proc.stderr and "Usage: tracelint [OPTIONS] PATHS..." in proc.stderr


def test_finding_lines_carry_the_severity(example):
    found = _findings(tracelint("check", str(example)).stdout)
    assert found and all(m["sev"] == "warning" for m in found)


def test_statistics_count_per_rule(example):
    plain = _findings(tracelint("check", str(example)).stdout)
    proc = tracelint("check", "--statistics", str(example))
    assert proc.returncode == 1
    rows = [line.split() for line in proc.stdout.splitlines() if re.match(r"^\s*\d+\s+TL\d+", line)]
    counts = {row[1]: int(row[0]) for row in rows}
    expected: dict[str, int] = {}
    for m in plain:
        expected[m["code"]] = expected.get(m["code"], 0) + 1
    assert counts == expected
    assert not _findings(proc.stdout)  # the counts replace the list
    fixable = {row[1] for row in rows if row[-1] == "[*]"}
    assert fixable == {"TL202", "TL301"}


def test_show_source_puts_carets_under_the_span(example):
    out = tracelint("check", "--show-source", str(example)).stdout.splitlines()
    lines = example.read_text().splitlines()
    checked = 0
    for i, text in enumerate(out):
        m = FINDING.match(text)
        if not m:
            continue
        number, col = int(m["line"]), int(m["col"])
        assert out[i + 2].strip().startswith(f"{number} |") and out[i + 2].endswith(lines[number - 1].expandtabs(1))
        code_start = out[i + 2].index("| ") + 2
        caret = out[i + 3]
        assert caret.index("^") - code_start == col - 1
        checked += 1
    assert checked == len(_findings("\n".join(out)))


def test_quiet_prints_the_findings_only(example):
    out = tracelint("check", "-q", str(example)).stdout.splitlines()
    assert out and all(FINDING.match(line) for line in out)


def test_diff_shows_the_fixes_and_writes_nothing(example, tmp_path):
    before = example.read_bytes()
    proc = tracelint("check", "--diff", str(example))
    assert proc.returncode == 1
    assert example.read_bytes() == before
    assert proc.stdout.startswith("--- a/") and "+++ b/" in proc.stdout
    assert "+    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, pin_memory=True)" in proc.stdout
    assert "Would fix 2 findings" in proc.stderr
    # the diff is exactly what --fix writes
    patched = tmp_path / "patched"
    patched.mkdir()
    fixed = patched / "train.py"
    shutil.copy(example, fixed)
    tracelint("check", "--fix", str(fixed))
    applied = subprocess.run(["patch", "-s", "-o", "-", str(example)], input=proc.stdout, capture_output=True,
                             text=True) if shutil.which("patch") else None
    if applied is not None:
        assert applied.stdout == fixed.read_text()
    clean = tmp_path / "clean.py"
    clean.write_text("import torch\nx = torch.ones(3)\n")
    proc = tracelint("check", "--diff", str(clean))
    assert proc.returncode == 0 and proc.stdout == ""


def test_fix_counts_agree_with_a_plain_run(example):
    plain = len(_findings(tracelint("check", str(example)).stdout))
    fixed = tracelint("check", "--fix", str(example))
    remaining = len(_findings(fixed.stdout))
    m = re.search(r"Found (\d+) findings? \((\d+) fixed, (\d+) remaining\)\.", fixed.stdout)
    assert m, fixed.stdout
    assert int(m[1]) == plain and int(m[2]) + int(m[3]) == plain
    assert remaining == int(m[3])  # nothing exposed here: what is listed is what remains of the plain run
    assert len(_findings(tracelint("check", str(example)).stdout)) == remaining


def test_exclude_on_the_command_line(tmp_path):
    (tmp_path / "legacy").mkdir()
    shutil.copy(EXAMPLE, tmp_path / "legacy" / "old.py")
    shutil.copy(EXAMPLE, tmp_path / "train.py")
    paths = {Path(m["path"]).name for m in _findings(tracelint("check", ".", cwd=tmp_path).stdout)}
    assert paths == {"old.py", "train.py"}
    excluded = {Path(m["path"]).name for m in _findings(tracelint("check", "--exclude", "legacy", ".",
                                                                  cwd=tmp_path).stdout)}
    assert excluded == {"train.py"}


def test_stdin_is_linted_under_its_given_name(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.tracelint.per-file-ignores]\n"scripts/*.py" = ["TL104"]\n')
    source = EXAMPLE.read_text()
    proc = tracelint("check", "-", "--stdin-filename", "src/train.py", cwd=tmp_path, stdin=source)
    assert proc.returncode == 1
    found = _findings(proc.stdout)
    assert found and {m["path"] for m in found} == {"src/train.py"}
    assert "TL104" in {m["code"] for m in found}
    ignored = tracelint("check", "-", "--stdin-filename", "scripts/train.py", cwd=tmp_path, stdin=source)
    assert "TL104" not in {m["code"] for m in _findings(ignored.stdout)}  # per-file-ignores by the given name
    fixed = tracelint("check", "-", "--fix", "--stdin-filename", "train.py", cwd=tmp_path, stdin=source)
    assert "pin_memory=True" in fixed.stdout and "import torch" in fixed.stdout  # the fixed code on stdout
    assert "Found" in fixed.stderr  # the report on stderr
    shown = tracelint("check", "-", "--diff", "--stdin-filename", "train.py", cwd=tmp_path, stdin=source)
    assert shown.returncode == 1 and shown.stdout.startswith("--- a/train.py")  # --diff of the code from stdin
    assert list(tmp_path.iterdir()) == [tmp_path / "pyproject.toml"]  # nothing written beside the user's files
    assert tracelint("check", "-", "a.py", cwd=tmp_path, stdin="").returncode == 2


def test_rule_by_name():
    by_code, by_name = tracelint("rule", "TL101"), tracelint("rule", "item-in-loop")
    assert by_name.returncode == 0 and by_name.stdout == by_code.stdout
    typo = tracelint("rule", "item-in-lop")
    assert typo.returncode == 2 and "did you mean 'item-in-loop'" in typo.stderr


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="POSIX process groups")
def test_watch_runs_again_when_a_file_changes(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("import torch\nx = torch.ones(3)\n")
    proc = subprocess.Popen([sys.executable, "-m", "tracelint", "check", "--watch", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    try:
        deadline = time.monotonic() + 30

        def wait_for(text: str) -> None:
            while not any(text in line for line in lines):
                assert time.monotonic() < deadline, lines
                time.sleep(0.1)

        wait_for("All checks passed.")
        time.sleep(1.0)  # a new mtime
        shutil.copy(EXAMPLE, path)
        wait_for("Found 4 findings")
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=10)


def _metric_rows(text: str) -> set[str]:
    """The metric names a report lists: a name, then the column gap before its value."""
    names = set(registry())
    return {m[1] for m in re.finditer(r"(?<!\S)([a-z][a-z0-9_]*) {2,}\S", text) if m[1] in names}


def test_trace_report_is_compact_by_default_and_verbose_on_request(fixture_traces):
    trace = str(fixture_traces / "item_per_step.pt.trace.json.gz")
    compact, verbose = tracelint("trace", trace).stdout, tracelint("trace", "--verbose", trace).stdout
    assert compact.splitlines()[0] == verbose.splitlines()[0]  # the verdict first, either way
    shown = _metric_rows(compact)
    assert shown and shown <= {m.name for m in EXPLAINS["cpu-bound"]}
    assert "host_syncs_per_step" in shown and "idle_host_sync_pct" in shown
    assert len(_metric_rows(verbose)) > 2 * len(shown)
    assert "TL101" in compact and "--verbose shows them all" in compact


def test_a_job_folder_reads_at_a_glance(public_traces):
    job = str(public_traces / "param-dlrm-8rank")
    compact, verbose = tracelint("trace", job).stdout, tracelint("trace", "-v", job).stdout
    assert len(compact.splitlines()) * 3 < len(verbose.splitlines())
    assert "straggler_rank" in compact and "rank  verdict" in compact  # the job's table and what explains it
    assert "h2d_pinned_bytes" not in compact and "h2d_pinned_bytes" in verbose
    codes = lambda text: sorted(re.findall(r": (TL\d+) (?:info|warning|error) ", text))  # noqa: E731
    assert codes(compact) == codes(verbose)  # every finding, either way
    quiet = tracelint("trace", "-q", job).stdout.splitlines()
    assert quiet[0] == compact.splitlines()[0] and not _metric_rows("\n".join(quiet))


def _readme_block(after: str) -> str:
    """The first fenced block of the README after the line that starts with ``after``."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    rest = readme[readme.index(after):]
    start = rest.index("```\n") + 4
    return rest[start:rest.index("```", start)]


def test_readme_shows_the_output_as_it_prints(fixture_traces):
    """The README's finding line, --statistics output and compact trace report are what the commands print."""
    root = Path(__file__).resolve().parents[1]
    stats = tracelint("check", "--statistics", "train.py", cwd=EXAMPLE.parent).stdout
    assert _readme_block("`--statistics` counts them per rule") == stats
    line = _readme_block("A lint finding, as it prints").strip()
    assert line in tracelint("check", "train.py", cwd=EXAMPLE.parent).stdout.splitlines()
    trace = "fixtures/traces/dataloader_main_process.pt.trace.json.gz"
    assert _readme_block("The first line of a trace report") == tracelint("trace", trace, cwd=root).stdout
