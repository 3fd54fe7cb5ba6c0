"""Baselines (issue #28 item 1): `--write-baseline` records today's findings, `--baseline` (or `baseline = "FILE"` in
[tool.tracelint]) reports only the others. Entries match by rule, file, the flagged line's normalized text and its
occurrence, never by line number: code moved down stays silenced, a new identical sync below an old one is reported.
On copies of the bundled fixtures and on the fixture traces."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURE_TRACES, FIXTURES
from tracelint.engine import Finding, Severity, SourceLocation
from tracelint.engine.baseline import Entry, entries_of, normalized, read_baseline

OLD_SYNC = "        running_loss += loss.item()\n"


def tracelint(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracelint", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def findings(*args: str, cwd: Path) -> tuple[list[dict], dict, int]:
    """The JSON report's findings and whole document, and the exit code."""
    proc = tracelint(*args, "--format", "json", cwd=cwd)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    return doc["findings"], doc, proc.returncode


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """Copies of fixtures/examples and fixtures/scenarios: the code a team adopts tracelint on."""
    for name in ("examples", "scenarios"):
        shutil.copytree(FIXTURES / name, tmp_path / name)
    return tmp_path


def shift_down(root: Path, lines: int = 2) -> None:
    """Insert ``lines`` lines at the top of every Python file: every line number moves."""
    for path in root.rglob("*.py"):
        path.write_text("# added above\n" * lines + path.read_text(encoding="utf-8"), encoding="utf-8")


def test_normalized_drops_comments_and_suppressions_and_collapses_whitespace():
    assert normalized("    running  +=\tloss.item()  # log it") == "running += loss.item()"
    assert normalized("x = loss.item()  # noqa: TL101") == "x = loss.item()"
    assert normalized("x = loss.item()  # noqa: E501, TL101  # why") == "x = loss.item()"
    assert normalized("x = loss.item()  # tracelint: ignore[TL101]") == "x = loss.item()"
    assert normalized('print("# not a comment", loss)  # a comment') == 'print("# not a comment", loss)'
    assert normalized("s = 'it''s # here' + \"\\\"#\"  # c") == "s = 'it''s # here' + \"\\\"#\""


def test_moved_code_stays_silenced_and_one_new_sync_is_reported(project: Path):
    before, _, code = findings("check", "examples", "scenarios", cwd=project)
    assert code == 1 and len(before) > 1
    wrote = tracelint("check", "--write-baseline", "tracelint-baseline.json", "examples", "scenarios", cwd=project)
    assert wrote.returncode == 0, wrote.stderr
    assert wrote.stdout == ""
    assert f"{len(before)} baseline entries" in wrote.stderr

    shift_down(project)
    script = project / "scenarios" / "item_per_step.py"
    text = script.read_text(encoding="utf-8")
    assert text.count(OLD_SYNC) == 1
    # the same statement two lines below the old one: identical text, told apart by its occurrence
    new_sync = "        if on_step is None:\n    " + OLD_SYNC
    script.write_text(text.replace(OLD_SYNC, OLD_SYNC + new_sync), encoding="utf-8")
    old = next(f for f in before if f["path"].endswith("item_per_step.py") and f["code"] == "TL101")

    after, doc, code = findings("check", "--baseline", "tracelint-baseline.json", "examples", "scenarios",
                                cwd=project)
    assert code == 1
    assert [(f["code"], f["path"], f["line"]) for f in after] == [("TL101", old["path"], old["line"] + 2 + 2)]
    assert doc["baseline"] == {"path": "tracelint-baseline.json", "hidden": len(before), "stale": 0}

    text_report = tracelint("check", "--baseline", "tracelint-baseline.json", "examples", "scenarios", cwd=project)
    assert text_report.returncode == 1
    assert f"Found 1 finding. {len(before)} findings hidden by the baseline." in text_report.stdout
    # the exit code follows --fail-on on what is left: a new warning does not fail an error gate
    gate = tracelint("check", "--baseline", "tracelint-baseline.json", "--fail-on", "error", "examples", "scenarios",
                     cwd=project)
    assert gate.returncode == 0


def test_stale_entries_are_counted_and_rewritten_away(project: Path):
    tracelint("check", "--write-baseline", "base.json", "examples", "scenarios", cwd=project)
    entries = read_baseline(project / "base.json").entries
    train = project / "examples" / "train.py"
    gone = [e for e in entries if e.path == "examples/train.py" and e.rule == "TL101"]
    assert len(gone) == 1
    lines = train.read_text(encoding="utf-8").splitlines(keepends=True)
    flagged = [i for i, line in enumerate(lines) if normalized(line) == gone[0].text]
    assert len(flagged) == 1
    lines[flagged[0]] = lines[flagged[0]].replace("loss.item()", "0.0")  # the sync is fixed
    train.write_text("".join(lines), encoding="utf-8")

    after, doc, code = findings("check", "--baseline", "base.json", "examples", "scenarios", cwd=project)
    assert (after, code) == ([], 0)
    assert doc["baseline"]["stale"] == 1 and doc["baseline"]["hidden"] == len(entries) - 1
    text = tracelint("check", "--baseline", "base.json", "examples", "scenarios", cwd=project).stdout
    assert "1 baseline entry no longer matches" in text

    # a run over part of the code: the entries of the files it did not read are neither stale nor dropped
    part, doc, _ = findings("check", "--baseline", "base.json", "scenarios", cwd=project)
    assert part == [] and doc["baseline"]["stale"] == 0
    tracelint("check", "--write-baseline", "base.json", "scenarios", cwd=project)
    assert len(read_baseline(project / "base.json").entries) == len(entries)

    tracelint("check", "--write-baseline", "base.json", "examples", "scenarios", cwd=project)
    rewritten = read_baseline(project / "base.json").entries
    assert len(rewritten) == len(entries) - 1 and gone[0].key not in {e.key for e in rewritten}
    _, doc, _ = findings("check", "--baseline", "base.json", "examples", "scenarios", cwd=project)
    assert doc["baseline"]["stale"] == 0


def test_the_file_is_sorted_readable_and_written_the_same_twice(project: Path):
    tracelint("check", "--write-baseline", "a.json", "examples", "scenarios", cwd=project)
    tracelint("check", "--write-baseline", "b.json", "scenarios", "examples", cwd=project)
    a = (project / "a.json").read_bytes()
    assert a == (project / "b.json").read_bytes()
    doc = json.loads(a)
    assert doc["version"] == 1
    keys = [(e["origin"], e["path"], e["rule"], e["text"], e["occurrence"]) for e in doc["entries"]]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert all(set(e) == {"rule", "origin", "path", "text", "occurrence", "message"} for e in doc["entries"])
    assert a.decode().count("\n") > len(keys)  # indented: one key a line, for review in a pull request


BROKEN = {
    "invalid JSON": "{",
    "not an object": "[]",
    "no version": '{"entries": []}',
    "another version": '{"version": 2, "entries": []}',
    "no entries": '{"version": 1}',
    "an entry without keys": '{"version": 1, "entries": [{"rule": "TL101"}]}',
    "a negative occurrence": ('{"version": 1, "entries": [{"rule": "TL101", "origin": "source", "path": "a.py", '
                              '"text": "x", "occurrence": -1}]}'),
}


@pytest.mark.parametrize("content", list(BROKEN.values()), ids=list(BROKEN))
def test_a_malformed_baseline_is_one_usage_error_naming_the_file(tmp_path: Path, content: str):
    (tmp_path / "a.py").write_text("import torch\nfor x in loader:\n    print(x.item())\n")
    (tmp_path / "my-baseline.json").write_text(content)
    proc = tracelint("check", "--baseline", "my-baseline.json", "a.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "my-baseline.json" in proc.stderr


def test_a_missing_baseline_and_conflicting_options_are_usage_errors(tmp_path: Path):
    (tmp_path / "a.py").write_text("x = 1\n")
    missing = tracelint("check", "--baseline", "nope.json", "a.py", cwd=tmp_path)
    assert missing.returncode == 2 and "nope.json" in missing.stderr and "Traceback" not in missing.stderr
    (tmp_path / "folder").mkdir()
    for option in ("--baseline", "--write-baseline"):
        proc = tracelint("check", option, "folder", "a.py", cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "folder" in proc.stderr, proc.stderr
    assert list((tmp_path / "folder").iterdir()) == []  # no temporary file left behind
    both = tracelint("check", "--baseline", "a.json", "--write-baseline", "b.json", "a.py", cwd=tmp_path)
    assert both.returncode == 2 and not (tmp_path / "b.json").exists()


def test_the_config_names_the_baseline_relative_to_itself(project: Path):
    (project / "ci").mkdir()
    tracelint("check", "--write-baseline", "ci/base.json", "examples", "scenarios", cwd=project)
    (project / "pyproject.toml").write_text('[tool.tracelint]\nbaseline = "ci/base.json"\n')
    found, doc, code = findings("check", "examples", "scenarios", cwd=project)
    assert (found, code) == ([], 0) and doc["baseline"]["hidden"] > 0
    # from another folder, through --config: the same file
    elsewhere = project / "examples"
    found, doc, code = findings("check", "--config", "../pyproject.toml", "train.py", cwd=elsewhere)
    assert (found, code) == ([], 0)
    assert (elsewhere / doc["baseline"]["path"]).resolve() == (project / "ci" / "base.json").resolve()
    (project / "pyproject.toml").write_text("[tool.tracelint]\nbaseline = 3\n")
    bad = tracelint("check", "examples", cwd=project)
    assert bad.returncode == 2 and "baseline" in bad.stderr


NEW_LOOP = """

def later(opt, batches):
    for b in batches:
        opt.zero_grad(set_to_none=False)
        print(b.cuda().sum().item())
"""


def test_fix_leaves_baselined_findings_alone_and_counts_what_the_report_shows(project: Path):
    # A pre-commit hook running `check --fix` with the project's baseline must not rewrite the legacy code the
    # baseline accepts; it fixes the new findings, and its count is the plain run's (hidden ones apart).
    (project / "pyproject.toml").write_text('[tool.tracelint]\nbaseline = "base.json"\n')
    assert tracelint("check", "--write-baseline", "base.json", "examples", "scenarios", cwd=project).returncode == 0
    train = project / "examples" / "train.py"
    legacy = train.read_text(encoding="utf-8")
    train.write_text(legacy + NEW_LOOP, encoding="utf-8")
    plain, doc, _ = findings("check", "examples", "scenarios", cwd=project)
    assert sorted(f["code"] for f in plain) == ["TL101", "TL301"]
    hidden = doc["baseline"]["hidden"]
    untouched = {p: p.read_bytes() for p in project.rglob("*.py") if p != train}

    fixed = tracelint("check", "--fix", "examples", "scenarios", cwd=project)
    assert fixed.returncode == 1, fixed.stderr
    assert fixed.stdout.splitlines()[-1] == (f"Found 2 findings (1 fixed, 1 remaining). {hidden} findings hidden by "
                                             "the baseline.")
    text = train.read_text(encoding="utf-8")
    assert text[:len(legacy)] == legacy  # not one legacy byte changed, though its findings have safe fixes
    assert "        opt.zero_grad()\n" in text[len(legacy):]
    assert {p: p.read_bytes() for p in untouched} == untouched
    after, doc, code = findings("check", "examples", "scenarios", cwd=project)
    assert [f["code"] for f in after] == ["TL101"]
    assert (doc["baseline"]["hidden"], doc["baseline"]["stale"]) == (hidden, 0)
    # Without the baseline --fix fixes the legacy code too (as before).
    tracelint("check", "--fix", "--config", "/dev/null", "examples", cwd=project)
    assert train.read_text(encoding="utf-8")[:len(legacy)] != legacy


def test_fix_with_a_baseline_in_worker_processes_and_notebooks(tmp_path: Path):
    # From 24 files the linter runs in worker processes: the baseline reaches them with each file's config.
    legacy = "import torch\n\ndef step(opt):\n    opt.zero_grad(set_to_none=False)\n"
    for i in range(30):
        (tmp_path / f"m{i:02d}.py").write_text(legacy, encoding="utf-8")
    nb = tmp_path / "nb.ipynb"
    nb_cell = ["opt = torch.optim.SGD(model.parameters(), lr=0.1)\n", "opt.zero_grad(set_to_none=False)\n"]
    nb.write_text(notebook([NB_SETUP, nb_cell]), encoding="utf-8")
    assert tracelint("check", "--write-baseline", "base.json", ".", cwd=tmp_path).returncode == 0
    (tmp_path / "m07.py").write_text(legacy + "\ndef again(opt):\n    opt.zero_grad(set_to_none=False)\n")
    nb.write_text(notebook([NB_SETUP, nb_cell, ["opt.zero_grad(set_to_none=False)\n"]]), encoding="utf-8")
    fixed = tracelint("check", "--fix", "--baseline", "base.json", ".", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert fixed.stdout.splitlines()[-1].startswith("Found 2 findings (2 fixed, 0 remaining). 31 findings hidden")
    assert (tmp_path / "m07.py").read_text() == legacy + "\ndef again(opt):\n    opt.zero_grad()\n"
    assert all((tmp_path / f"m{i:02d}.py").read_text() == legacy for i in range(30) if i != 7)
    cells = [c["source"] for c in json.loads(nb.read_text(encoding="utf-8"))["cells"]]
    assert cells == [NB_SETUP, nb_cell, ["opt.zero_grad()\n"]]


def notebook(cells: list[list[str]]) -> str:
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": lines}
                    for lines in cells],
          "metadata": {"kernelspec": {"language": "python", "name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


NB_SETUP = ["import torch\n", "model = torch.nn.Linear(4, 4).cuda()\n"]
NB_LOOP = ["for step in range(10):\n", "    loss = model(torch.ones(4, device='cuda')).sum()\n",
           "    total = loss.item()\n"]


def test_notebooks_match_by_cell_text_not_by_cell_or_line(tmp_path: Path):
    path = tmp_path / "nb.ipynb"
    path.write_text(notebook([NB_SETUP, NB_LOOP]), encoding="utf-8")
    before, _, code = findings("check", "nb.ipynb", cwd=tmp_path)
    assert code == 1 and [f["code"] for f in before] == ["TL101"]
    tracelint("check", "--write-baseline", "base.json", "nb.ipynb", cwd=tmp_path)
    # a new cell above, and a line inserted above the loop: cell and line numbers move
    path.write_text(notebook([["# notes\n"], NB_SETUP, ["# here\n", *NB_LOOP]]), encoding="utf-8")
    after, doc, code = findings("check", "--baseline", "base.json", "nb.ipynb", cwd=tmp_path)
    assert (after, code, doc["baseline"]["hidden"]) == ([], 0, 1)
    path.write_text(notebook([["# notes\n"], NB_SETUP, ["# here\n", *NB_LOOP, "    total = loss.item()\n"]]),
                    encoding="utf-8")
    after, _, code = findings("check", "--baseline", "base.json", "nb.ipynb", cwd=tmp_path)
    assert code == 1 and [(f["code"], f["cell"], f["line"]) for f in after] == [("TL101", 3, 5)]


def test_occurrences_count_in_file_order_per_rule_file_and_text(tmp_path: Path):
    """An independent count: the occurrence of each finding is the number of earlier findings (by line) with the
    same rule, file and normalized text."""
    lines = ["x = a.item()", "y = 1", "x  =  a.item()  # again", "x = a.item()", "z = b.item()"]
    (tmp_path / "f.py").write_text("\n".join(lines) + "\n")
    made = [Finding("TL101", Severity.WARNING, "m", SourceLocation(str(tmp_path / "f.py"), n, 1))
            for n in (5, 4, 3, 1)]  # out of order on purpose
    got = entries_of(made, tmp_path)
    expected = []
    for finding in made:
        text = normalized(lines[finding.location.line - 1])
        earlier = sum(1 for n in range(1, finding.location.line) if n in (1, 3, 4, 5)
                      and normalized(lines[n - 1]) == text)
        expected.append(Entry("source", "f.py", "TL101", text, earlier))
    assert [e.key for e in got] == [e.key for e in expected]


def test_trace_baseline_on_fixture_traces(tmp_path: Path, repo: Path):
    """A trace gate that adopts a baseline: today's trace findings are known; the trace of a change that adds a
    sync per step reports that TL101 only, and the baseline's entries that the new run lacks are stale."""
    fixed = FIXTURE_TRACES / "item_per_step_fixed.pt.trace.json.gz"
    slow = FIXTURE_TRACES / "item_per_step.pt.trace.json.gz"
    base = tmp_path / "trace-baseline.json"
    on_fixed, _, _ = findings("trace", str(fixed), cwd=repo)
    on_slow, _, _ = findings("trace", str(slow), cwd=repo)
    wrote = tracelint("trace", "--write-baseline", str(base), str(fixed), cwd=repo)
    assert wrote.returncode == 0, wrote.stderr
    assert len(read_baseline(base).entries) == len(on_fixed)

    same, doc, code = findings("trace", "--baseline", str(base), str(fixed), cwd=repo)
    assert (same, code) == ([], 0) and doc["baseline"]["hidden"] == len(on_fixed)

    new, doc, code = findings("trace", "--baseline", str(base), str(slow), cwd=repo)
    fixed_keys = {(f["code"], f["source"]["line"] if f["source"] else f["trace"]["event"]) for f in on_fixed}
    expected = [f for f in on_slow if (f["code"], f["source"]["line"] if f["source"] else f["trace"]["event"])
                not in fixed_keys]
    assert "TL101" in {f["code"] for f in expected}
    assert [f["code"] for f in new] == [f["code"] for f in expected]
    assert code == 1
    # the sync's entry: its source file and line text, read from the script the trace's stack names
    tracelint("trace", "--write-baseline", str(base), str(slow), cwd=repo)
    sync = next(e for e in read_baseline(base).entries if e.rule == "TL101")
    assert sync.origin == "trace" and sync.path.endswith("fixtures/scenarios/item_per_step.py")
    assert sync.text == normalized(OLD_SYNC)
    _, doc, code = findings("trace", "--baseline", str(base), str(fixed), cwd=repo)
    assert doc["baseline"]["stale"] >= 1 and code == 0


def test_job_findings_match_by_rank_not_by_the_rank_files_names(tmp_path: Path, multi_gpu_traces: Path):
    # Rank traces are named after their host and a time (torch.profiler's default), and a CI job downloads them to
    # a new folder each run: a job finding (TL602 here, on the real straggler job) must match by rule and rank.
    ranks = sorted((multi_gpu_traces / "ddp-2xh100" / "ddp_straggler").glob("rank*.pt.trace.json.gz"))
    assert len(ranks) == 2
    for run, host in (("run-1187", "node-a17"), ("run-1188", "gpu-b03")):
        (tmp_path / run).mkdir()
        for i, rank in enumerate(ranks):
            shutil.copy(rank, tmp_path / run / f"{host}_{4100 + 7 * i}.{1732600000 + i}.pt.trace.json.gz")
    first, _, code = findings("trace", "run-1187", cwd=tmp_path)
    assert code == 1 and [(f["code"], f["trace"]["rank"]) for f in first if f["code"] == "TL602"] == [("TL602", 1)]
    assert tracelint("trace", "--write-baseline", "base.json", "run-1187", cwd=tmp_path).returncode == 0
    entries = read_baseline(tmp_path / "base.json").entries
    assert ("TL602", "rank 1") in {(e.rule, e.text) for e in entries}
    assert not any("node-a17" in e.text or "run-" in e.text for e in entries)
    after, doc, code = findings("trace", "--baseline", "base.json", "run-1188", cwd=tmp_path)
    assert (after, code) == ([], 0) and (doc["baseline"]["hidden"], doc["baseline"]["stale"]) == (len(first), 0)
    # SARIF: the same fingerprints for both runs' results
    prints = []
    for run in ("run-1187", "run-1188"):
        sarif = json.loads(tracelint("trace", "--format", "sarif", run, cwd=tmp_path).stdout)
        prints.append(sorted(r["partialFingerprints"]["tracelintFingerprint/v2"] for r in sarif["runs"][0]["results"]))
    assert prints[0] == prints[1] and len(prints[0]) == len(first)


def test_event_identity_keeps_the_rank_and_drops_run_numbers():
    from tracelint.engine.location import TraceLocation, event_identity

    job = "/ci/run-7/prof"
    assert event_identity(TraceLocation(job, rank=1, event=f"{job}/host-a_12.34.pt.trace.json")) == "rank 1"
    assert event_identity(TraceLocation(job, rank=0, event=f"{job}/host-b_56.78.pt.trace.json.gz")) == "rank 0"
    assert event_identity(TraceLocation("t.json", rank=0, event="ProfilerStep#12")) == "ProfilerStep#N"
    assert event_identity(TraceLocation("t.json", event="ampere_sgemm_128x64_nn")) == "ampere_sgemm_NxN_nn"
    assert event_identity(TraceLocation("t.json")) == ""


def test_json_documents_the_baseline_key():
    from tracelint.render import json as json_format

    assert '"baseline": {' in json_format.__doc__ and '"hidden": int' in json_format.__doc__
