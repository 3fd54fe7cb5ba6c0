"""Whole jobs at scale (issue #17): each rank analyzed alone where it is read (this process, local worker processes, a
Dask cluster), the job judged in the parent from the ranks' small results. Checked against the full analysis of
every rank judged with its job (what analyze_paths did before), on the public 8-rank DLRM job and on synthetic jobs
where the job changes a rank's TL601 and verdict; and for the failures: a corrupt rank, a truncated one, a worker
killed mid-run (SIGKILL, as the OOM killer does) locally and on Dask."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracelint.cli import cli
from tracelint.engine import Config, InputError
from tracelint.engine import metrics as M
from tracelint.testing import TraceBuilder
from tracelint.trace import analyze, pool
from tracelint.trace.analyze import Report, analyze_paths
from tracelint.trace.job.rank_digest import digest_of
from tracelint.trace.job.ranks import analyze_job

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas"


def _as_data(items: list) -> list:
    """Everything a report says (verdicts, evidence, metrics, findings with their details), comparable."""
    out = []
    for item in items:
        if isinstance(item, Report):
            out.append(("report", item.path, item.warnings, item.truncated,
                        [(s.path, s.rank, s.verdict, s.evidence, s.metrics, s.warnings, s.profiler)
                         for s in item.summaries],
                        [(f.code, f.severity, f.message, f.location, f.details) for f in item.findings]))
        else:
            out.append((type(item).__name__, str(item)))
    return out


def _job(folder: Path, sleep_us: float, gemms: int) -> Path:
    """Two ranks; rank 1 sleeps ``sleep_us`` on the host before each all-reduce, so rank 0 waits in it."""
    r0, r1 = ranks = [TraceBuilder().device_properties().distributed(r, 2) for r in (0, 1)]
    for _ in zip(r0.steps(4), r1.steps(4), strict=True):
        r1.idle(sleep_us)
        for trace in ranks:
            for _ in range(gemms):
                trace.kernel(GEMM, gpu_us=500)
        r1.collective("all_reduce", gpu_us=2_000)
        r0.collective("all_reduce", until=r1.gpu_end)
    folder.mkdir(parents=True)
    for rank, trace in enumerate(ranks):
        trace.write(folder / f"rank{rank}.pt.trace.json")
    return folder


@pytest.fixture
def dlrm(public_traces, tmp_path) -> Path:
    folder = tmp_path / "dlrm"
    shutil.copytree(public_traces / "param-dlrm-8rank", folder)
    return folder


@pytest.fixture
def pooled(monkeypatch):
    """Worker processes even for small files (a few small files are otherwise analyzed in this process)."""
    monkeypatch.setattr(analyze, "POOL_MIN_BYTES", 0)


def _rank_file(folder: Path, rank: int) -> Path:
    return next(folder.glob(f"worker{rank}_*"))


# ---- the job judged from small results equals the full analysis -------------------------------------------------


def _judged_in_full(folder: Path, config: Config) -> dict[str, Report]:
    """Every rank read in full and judged with its job, every rule run on the full analysis (no shortcut)."""
    reads = [analyze._read(path, config) for path in sorted(folder.glob("*.json*"))]
    job = analyze_job({r.analyses[0].rank: digest_of(r.analyses[0], r.truncated) for r in reads}, config)
    return {r.path: analyze._judge(r, config, job.waits.get(r.analyses[0].rank))[0] for r in reads}


@pytest.mark.parametrize("case", ["dlrm", "straggler", "small-wait"])
def test_ranks_judged_from_small_results_equal_the_full_analysis(case, public_traces, tmp_path):
    folder = {"dlrm": public_traces / "param-dlrm-8rank",
              "straggler": lambda: _job(tmp_path / "job", sleep_us=30_000, gemms=20),
              "small-wait": lambda: _job(tmp_path / "job", sleep_us=3_000, gemms=4)}[case]
    folder = folder if isinstance(folder, Path) else folder()
    config = Config()
    full = _judged_in_full(folder, config)
    items = list(analyze_paths([folder], config=config, keep_analyses=False))
    reports = [i for i in items if isinstance(i, Report) and i.summaries[0].rank is not None]
    assert len(reports) == len(full) and all(not r.analyses for r in reports)
    assert _as_data(reports) == _as_data([full[r.path] for r in reports])
    # the shortcut is exercised: waits were found, and alone the ranks read differently
    waits = [M.COMM_WAIT_US.of(r.metrics) for r in reports]
    assert all(w is not None for w in waits) and any(w > 0 for w in waits)
    if case != "dlrm":
        alone = [analyze.analyze_file(r.path, config).report for r in reports]
        assert _as_data(alone) != _as_data(reports)
        tl601 = {r.summaries[0].rank: [f for f in r.findings if f.code == "TL601"] for r in reports}
        alone601 = {r.summaries[0].rank: [f for f in r.findings if f.code == "TL601"] for r in alone}
        assert alone601[0]  # alone, rank 0's wait reads as its own exposed communication
        if case == "straggler":
            assert not tl601[0]  # with its peer, the wait is TL602's
        else:
            assert "not counting" in tl601[0][0].message and tl601[0][0].message != alone601[0][0].message


def test_pool_and_this_process_give_the_same_items_in_the_same_order(dlrm, tmp_path, pooled, fixture_traces):
    _job(dlrm.parent / "other" / "job", sleep_us=3_000, gemms=4)
    paths = [dlrm, dlrm.parent / "other", fixture_traces / "gpu_bound.pt.trace.json.gz"]
    here = list(analyze_paths(paths, jobs=1, keep_analyses=False))
    pooled_items = list(analyze_paths(paths, jobs=2))
    assert _as_data(pooled_items) == _as_data(here)
    assert sum(isinstance(i, Report) and Path(i.path).is_dir() for i in here) == 2  # two job summaries


def test_the_cli_gives_one_report_whatever_the_jobs(dlrm, pooled):
    def run(*args):
        result = CliRunner().invoke(cli, ["trace", str(dlrm), "--format", "json", *args])
        assert result.exit_code == 1, result.output  # findings
        return json.loads(result.stdout)

    assert run("--jobs", "2") == run("--jobs", "1")


def test_few_small_files_are_analyzed_in_this_process():
    assert pool.workers(None, files=1, total_bytes=1 << 40, min_bytes=16 << 20) == 1
    assert pool.workers(8, files=20, total_bytes=1 << 20, min_bytes=16 << 20) == 1
    assert pool.workers(8, files=3, total_bytes=1 << 30, min_bytes=16 << 20) == 3
    assert pool.workers(1, files=20, total_bytes=1 << 30, min_bytes=16 << 20) == 1


def test_progress_counts_the_traces_on_stderr(dlrm, pooled, capsys):
    list(analyze_paths([dlrm], jobs=2, progress=True))
    err = capsys.readouterr().err
    assert "tracelint: 8/8 traces, 0.5/0.5 MB read" in err and "tracelint: analyzed 8 traces" in err


# ---- failures -------------------------------------------------------------------------------------------------


def _summary(items: list) -> Report:
    (summary,) = [i for i in items if isinstance(i, Report) and i.summaries[0].rank is None]
    return summary


def _check_corrupt_rank(items: list, dlrm: Path) -> None:
    bad = _rank_file(dlrm, 5)
    (error,) = [i for i in items if isinstance(i, InputError)]
    assert error.path == str(bad) and error.message.startswith("not a JSON trace: ")
    assert sorted(i.summaries[0].rank for i in items if isinstance(i, Report) and i.summaries[0].rank is not None) \
        == [0, 1, 2, 3, 4, 6, 7]
    summary = _summary(items)
    assert summary.metrics["ranks"] == 7
    assert f"rank 5 of 8 missing (1 file here could not be analyzed: {bad.name})" in summary.warnings


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_corrupt_rank_is_its_error_and_the_job_finishes_without_it(dlrm, pooled, jobs):
    _rank_file(dlrm, 5).write_bytes(b"\x00garbage, not a trace\n" * 100)
    _check_corrupt_rank(list(analyze_paths([dlrm], jobs=jobs)), dlrm)


def test_a_truncated_rank_gives_a_partial_report(dlrm, pooled):
    path = _rank_file(dlrm, 2)
    raw = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(raw[: len(raw) * 3 // 4]))
    items = list(analyze_paths([dlrm], jobs=2))
    (cut,) = [i for i in items if isinstance(i, Report) and i.path == str(path)]
    assert cut.truncated and not [i for i in items if isinstance(i, InputError)]


def test_a_killed_worker_costs_its_file_only(dlrm, pooled, monkeypatch):
    victim = _rank_file(dlrm, 3)
    real = analyze._read

    def read(path, *args, **kwargs):  # forked workers run this: SIGKILL, as the kernel's OOM killer sends
        if Path(path) == victim:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(analyze, "_read", read)
    items = list(analyze_paths([dlrm], jobs=2))
    (error,) = [i for i in items if isinstance(i, InputError)]
    assert error.path == str(victim) and error.message.startswith("worker died while analyzing: ")
    assert len([i for i in items if isinstance(i, Report)]) == 8  # 7 ranks and the job summary
    assert any(w.startswith("rank 3 of 8 missing") for w in _summary(items).warnings)


# ---- on a Dask cluster ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=40) as cluster:
        yield cluster
    # distributed keeps a thread for the life of the process; the forked parallel read of one trace
    # (tracelint.trace.load) is not used beside threads, so the tests that run later would read serially
    import distributed.utils

    offload = getattr(distributed.utils, "_offload_executor", None)
    if offload is not None:
        offload.shutdown(wait=True)


def test_dask_gives_the_local_report(dlrm, cluster):
    _rank_file(dlrm, 5).write_bytes(b"\x00garbage, not a trace\n" * 100)
    local = list(analyze_paths([dlrm], jobs=1, keep_analyses=False))
    remote = list(analyze_paths([dlrm], scheduler=cluster.scheduler_address))
    assert _as_data(remote) == _as_data(local)
    _check_corrupt_rank(remote, dlrm)


def test_dask_workers_read_fsspec_urls(dlrm, cluster):
    pytest.importorskip("fsspec")
    local = list(analyze_paths([dlrm], jobs=1, keep_analyses=False))
    remote = list(analyze_paths([f"file://{dlrm}"], scheduler=cluster.scheduler_address))
    assert [i.path for i in remote] == [f"file://{i.path}" for i in local]
    assert [(s.verdict, s.evidence, s.metrics) for i in remote for s in i.summaries] \
        == [(s.verdict, s.evidence, s.metrics) for i in local for s in i.summaries]


def _kill_first_reader(marker: str) -> None:
    """Run on each Dask worker: the first file any worker reads kills that worker (SIGKILL) mid-task."""
    from tracelint.trace import analyze

    real = analyze._read

    def read(path, *args, **kwargs):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return real(path, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)

    analyze._real_read, analyze._read = real, read


def _restore_reader() -> None:
    from tracelint.trace import analyze

    analyze._read = getattr(analyze, "_real_read", analyze._read)


def test_dask_retries_the_task_of_a_killed_worker(dlrm, cluster, tmp_path):
    import cloudpickle
    from distributed import Client

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import the test module
    marker = tmp_path / "killed"
    with Client(cluster.scheduler_address) as client:
        client.run(_kill_first_reader, str(marker))
        try:
            remote = list(analyze_paths([dlrm], scheduler=cluster.scheduler_address))
        finally:
            client.run(_restore_reader)
    assert marker.exists()  # a worker was killed while it analyzed a rank: the scheduler ran that task again
    assert _as_data(remote) == _as_data(list(analyze_paths([dlrm], jobs=1, keep_analyses=False)))


def test_dask_scheduler_without_dask_says_how_to_install_it(dlrm, monkeypatch):
    monkeypatch.setattr(pool, "dask_installed", lambda: False)
    result = CliRunner().invoke(cli, ["trace", str(dlrm), "--dask-scheduler", "tcp://127.0.0.1:1"])
    assert result.exit_code == 2
    assert result.stderr == 'error: --dask-scheduler needs Dask: pip install "torch-tracelint[dask]"\n'
