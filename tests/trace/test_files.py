"""Folder discovery (tracelint.trace.files): one rule for `tracelint DIR` and `tracelint trace DIR`, and the report
names what it skipped."""
from __future__ import annotations

import shutil

from tracelint.cli import main
from tracelint.engine import Config, InputError
from tracelint.trace import Report, analyze_paths
from tracelint.trace.files import Skipped, traces_in


def _job(tmp_path, fixture_traces):
    """A run folder as users have them: Kineto-named traces, one renamed by hand in a subfolder, a manifest."""
    src = fixture_traces / "gpu_bound.pt.trace.json.gz"
    shutil.copy(src, tmp_path / "w0.1.pt.trace.json.gz")
    (tmp_path / "old").mkdir()
    shutil.copy(src, tmp_path / "old" / "w0.2.pt.trace.json.gz")
    shutil.copy(src, tmp_path / "rank-0.json.gz")  # a trace not named *.trace.json: read in trace mode
    (tmp_path / "manifest.json").write_text('{"runs": ["w0"]}')
    (tmp_path / ".git").mkdir()
    shutil.copy(src, tmp_path / ".git" / "x.pt.trace.json.gz")  # excluded directory: never entered
    return tmp_path


def test_trace_mode_reads_every_json_recursively_and_skips_other_json_with_a_note(tmp_path, fixture_traces):
    folder = _job(tmp_path, fixture_traces)
    found = traces_in(folder, named_only=False, excluded=Config().excluded)
    assert [p.relative_to(folder).as_posix() for p in found] == [
        "manifest.json", "rank-0.json.gz", "w0.1.pt.trace.json.gz", "old/w0.2.pt.trace.json.gz"]
    results = list(analyze_paths([folder], config=Config()))
    reports = [r for r in results if isinstance(r, Report)]
    skipped = [r for r in results if isinstance(r, Skipped)]
    assert len(reports) == 3 and not [r for r in results if isinstance(r, InputError)]
    assert [s.path for s in skipped] == [str(folder / "manifest.json")]
    assert "no traceEvents" in skipped[0].reason


def test_code_folder_reads_only_trace_named_files_in_subfolders_too(tmp_path, fixture_traces):
    folder = _job(tmp_path, fixture_traces)
    found = traces_in(folder, named_only=True, excluded=Config().excluded)
    assert [p.relative_to(folder).as_posix() for p in found] == ["w0.1.pt.trace.json.gz", "old/w0.2.pt.trace.json.gz"]


def test_cli_says_what_it_skipped_on_stderr(tmp_path, fixture_traces, capsys):
    folder = _job(tmp_path, fixture_traces)
    try:
        main(["trace", str(folder), "--format", "json"])
    except SystemExit as exc:
        assert exc.code in (0, 1)
    err = capsys.readouterr().err
    assert f"note: skipped {folder / 'manifest.json'}: not a trace" in err


def test_a_json_file_named_by_the_user_is_still_an_error(tmp_path):
    other = tmp_path / "config.json"
    other.write_text('{"lr": 0.1}')
    (result,) = list(analyze_paths([other], config=Config()))
    assert isinstance(result, InputError) and "no traceEvents" in result.message
