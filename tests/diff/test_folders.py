"""tracelint diff on real profiler folders (issue 34 item 6): fixtures/traces/cpu_cycles, written by
``tensorboard_trace_handler`` over two profiling cycles of one CPU-only process a side (fixtures/make_cpu_cycles.py).
A side's cycles of one process are compared by their latest, and a note says so; CPU-only traces compare their
ProfilerStep times and say that the GPU measures are absent."""
from __future__ import annotations

import gzip
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURE_TRACES
from tracelint.diff import diff_traces
from tracelint.render import render
from tracelint.testing import TraceBuilder

CYCLES = FIXTURE_TRACES / "cpu_cycles"


def cycles(variant: str) -> list[Path]:
    """The folder's traces, oldest cycle first (tensorboard_trace_handler names them <worker>.<time_ns>.pt.trace…)."""
    return sorted((CYCLES / variant).glob("*.pt.trace.json.gz"), key=lambda p: int(p.name.split(".")[1]))


def profiler_step_ms(path: Path) -> list[float]:
    """The ProfilerStep#N spans of a trace, read from its raw events."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return [e["dur"] / 1000 for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"
            and e["name"].startswith("ProfilerStep#")]


def test_the_fixture_is_two_cycles_of_one_cpu_process_a_side():
    for variant in ("base", "wide"):
        traces = cycles(variant)
        assert len(traces) == 2 and len({p.name.split(".")[0] for p in traces}) == 1
        for trace in traces:
            data = json.loads(gzip.decompress(trace.read_bytes()))
            assert "distributedInfo" not in data and len(profiler_step_ms(trace)) == 2
            assert not any(e.get("cat") == "kernel" for e in data["traceEvents"])


def test_cycles_of_one_process_compare_their_latest_and_say_so():
    report = diff_traces(CYCLES / "base", CYCLES / "wide")
    assert report.errors == ()
    (d,) = report.diffs
    base, new = cycles("base")[-1], cycles("wide")[-1]
    assert (d.base, d.new) == (str(base), str(new))
    assert d.step.base_ms == pytest.approx(statistics.fmean(profiler_step_ms(base)), abs=0.002)
    assert d.step.new_ms == pytest.approx(statistics.fmean(profiler_step_ms(new)), abs=0.002)
    assert len(report.notes) == 2
    for note, side, chosen, older in zip(report.notes, ("base", "wide"), (base, new),
                                         (cycles("base")[0], cycles("wide")[0]), strict=True):
        assert note.startswith(f"{CYCLES / side}: 2 profiling cycles of one process")
        assert f"the latest, {chosen.name}" in note and older.name in note and "--base FILE --new FILE" in note


def test_cpu_only_traces_compare_step_times_without_gpu_measures():
    base, new = cycles("base")[0], cycles("wide")[0]
    report = diff_traces(base, new)
    assert report.errors == () and report.notes == ()
    (d,) = report.diffs
    expected = statistics.fmean(profiler_step_ms(new)) / statistics.fmean(profiler_step_ms(base)) * 100 - 100
    assert d.step.change_pct == pytest.approx(expected, abs=0.05)
    assert d.gpu is None and d.kernels == () and d.verdict == ("unknown", "unknown")
    assert "no GPU activity in either trace (CPU-only): step time is the host's ProfilerStep" in d.summary
    assert d.new_findings == ()  # the wide loop's loss.item() is on a CPU tensor: no sync
    record = report.run_result().diffs[0]
    assert record["gpu_ms"] is None and record["summary"] == d.summary
    text = render(report.run_result(), "text")
    assert "GPU time" not in text.split("\n\n")[1]  # the timing block lists step time only


def test_a_cpu_only_side_against_a_gpu_side_says_which_lacks_the_gpu(fixture_traces):
    report = diff_traces(cycles("base")[-1], fixture_traces / "gpu_bound.pt.trace.json.gz")
    assert report.errors == ()
    (d,) = report.diffs
    assert d.gpu is None and "no GPU activity in BASE (CPU-only)" in d.summary


def test_several_processes_without_ranks_cannot_pair_and_say_what_to_give(tmp_path):
    # two processes' traces in one folder (worker names differ) and nothing names their ranks
    folder = tmp_path / "two"
    folder.mkdir()
    for worker, trace in (("a_1", cycles("base")[-1]), ("b_2", cycles("wide")[-1])):
        shutil.copy(trace, folder / f"{worker}.{trace.name.split('.', 1)[1]}")
    report = diff_traces(folder, CYCLES / "wide")
    assert report.diffs == ()
    (error,) = report.errors
    assert error.path == str(folder)
    assert "2 processes" in error.message and "no rank" in error.message
    assert "--base FILE --new FILE" in error.message


def test_a_job_folders_cycles_compare_each_ranks_latest(tmp_path):
    # synthetic (an edge case: no recorded multi-cycle job): two ranks, two cycles each; the later cycle (by the
    # trace's clock, whatever the file names say) has longer kernels
    folder = tmp_path / "job"
    folder.mkdir()
    later = {}
    for rank in (0, 1):
        for cycle, (start, name_ns) in enumerate(((0.0, 200), (1e6, 100))):
            trace = TraceBuilder().device_properties().distributed(rank, 2)
            trace.now = start
            for _ in trace.steps(3):
                trace.kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", gpu_us=1000 * (1 + cycle))
            path = trace.write(folder / f"host_{rank}.{name_ns}.pt.trace.json")
            later[rank] = str(path)
    report = diff_traces(folder, folder)
    assert report.errors == () and [d.rank for d in report.diffs] == [0, 1]
    assert [(d.base, d.new) for d in report.diffs] == [(later[r], later[r]) for r in (0, 1)]
    (note,) = set(report.notes)
    assert note == (f"{folder}: 2 profiling cycles of each of 2 processes: comparing each one's latest; to compare "
                    "another cycle, give one trace a side: --base FILE --new FILE")


def test_the_command_prints_the_notes_on_stderr(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tracelint", "diff", str(CYCLES / "base"), str(CYCLES / "wide")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # the wide step is slower than the limit and the noise floor
    notes = proc.stderr.splitlines()
    assert len(notes) == 2 and all(n.startswith("note: ") and "profiling cycles" in n for n in notes)
    assert "Traceback" not in proc.stderr and "error" not in proc.stderr
    assert proc.stdout.splitlines()[0].endswith(cycles("wide")[-1].name)
