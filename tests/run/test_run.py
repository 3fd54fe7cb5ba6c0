"""``tracelint run`` end to end on the CPU: the script runs unmodified in a child process with its own arguments and
output, a few optimizer steps are profiled (the unprofiled ones timed), the traces are analyzed and merged with the
lint. Each test is one real run (CPU torch, a few seconds each); no test asserts a duration."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # each test is a real run: a child process that imports torch

SCRIPTS = Path(__file__).resolve().parents[2] / "fixtures" / "run"
FAST = ("--wait", "3", "--warmup", "1", "--active", "3")  # 8 optimizer steps before the recorded ones are exported


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of fixtures/run to run from (the default --out and the lint stay inside it)."""
    folder = tmp_path / "project"
    shutil.copytree(SCRIPTS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def tracelint_run(project: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                       os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "tracelint", "run", *args], cwd=project, capture_output=True,
                          text=True, timeout=timeout, env=env)


def report(project: Path) -> dict:
    return json.loads((project / "report.json").read_text())


def test_a_script_runs_with_its_arguments_and_output_and_its_steps_are_profiled(project):
    proc = tracelint_run(project, *FAST, "--out", "out", "--format", "json", "-o", "report.json", "train_args.py",
                         "--", "--steps", "14", "--tag", "hello")
    assert proc.returncode in (0, 1), proc.stderr
    assert "tag=hello argv0=train_args.py" in proc.stdout and "done 14 steps" in proc.stdout  # its stdout
    assert "a line on stderr" in proc.stderr
    doc = report(project)
    run = doc["run"]
    assert run["steps"] == {"train_args": 14} and run["clock"] == "optimizer" and run["failure"] is None
    assert run["argv"] == ["--steps", "14", "--tag", "hello"] and run["ended"] == ["returned"]
    (trace,) = doc["traces"]
    assert trace["path"] == run["traces"][0] and trace["path"].startswith("out/train_args.")
    assert trace["metrics"]["steps"] >= 2  # the recorded steps
    profiler = trace["profiler"]
    assert profiler["with_stack"] and not profiler["record_shapes"] and profiler["source"] == "tracelint.profile"
    assert profiler["unprofiled_steps"] == 2 and profiler["unprofiled_step_ms"] > 0  # wait steps 1-2, timed
    assert run["files_linted"] == 1
    assert all(f["evidence"] is not None for f in doc["findings"])


def test_a_failing_script_exits_2_naming_its_exception_with_its_traceback_once(project):
    proc = tracelint_run(project, *FAST, "--out", "out", "train_args.py", "--", "--steps", "30", "--fail-at", "10")
    assert proc.returncode == 2
    assert proc.stderr.count("Traceback (most recent call last)") == 1
    assert proc.stderr.count("ZeroDivisionError: division by zero") == 2  # the traceback's last line and ours
    assert "error: the script failed: ZeroDivisionError: division by zero" in proc.stderr
    assert "bootstrap.py" not in proc.stderr  # the traceback is the script's, as python prints it
    assert "finally ran" in proc.stdout
    assert "the script failed: ZeroDivisionError" in proc.stdout  # the report, of the traces it still recorded
    assert "train_args." in proc.stdout and ".pt.trace.json.gz" in proc.stdout


def test_max_steps_stops_the_script_cleanly(project):
    proc = tracelint_run(project, *FAST, "--max-steps", "9", "--out", "out", "--format", "json", "-o",
                         "report.json", "train_args.py", "--", "--steps", "100000")
    assert proc.returncode in (0, 1), proc.stderr
    assert "finally ran" in proc.stdout and "done" not in proc.stdout  # unwound through its finally, no further
    run = report(project)["run"]
    assert run["steps"] == {"train_args": 9} and run["ended"] == ["max-steps"] and len(run["traces"]) == 1


def test_a_module_runs_as_python_m_runs_it(project):
    proc = tracelint_run(project, *FAST, "--out", "out", "--format", "json", "-o", "report.json", "-m", "pkg.train",
                         "--", "--steps", "12")
    assert proc.returncode in (0, 1), proc.stderr
    assert "module argv: ['--steps', '12'] package: pkg" in proc.stdout
    doc = report(project)
    assert doc["run"]["steps"] == {"train": 12} and doc["run"]["kind"] == "module" and len(doc["traces"]) == 1
    assert doc["run"]["files_linted"] == 3  # pkg/__init__.py, pkg/train.py and pkg/helpers.py: what it imported


def test_torchrun_with_two_gloo_processes_gives_a_job_report(project):
    proc = tracelint_run(project, *FAST, "--out", "out", "--format", "json", "-o", "report.json",
                         sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "ddp_train.py",
                         "--steps", "12")
    assert proc.returncode in (0, 1), proc.stderr
    assert "rank 0 done" in proc.stdout and "rank 1 done" in proc.stdout
    doc = report(project)
    run = doc["run"]
    assert run["kind"] == "torchrun" and run["steps"] == {"ddp_train-rank0": 12, "ddp_train-rank1": 12}
    assert len(run["traces"]) == 2
    ranks = sorted(t["rank"] for t in doc["traces"] if t["rank"] is not None)
    job = [t for t in doc["traces"] if t["rank"] is None]
    assert ranks == [0, 1] and len(job) == 1 and job[0]["metrics"]["ranks"] == 2  # the job's own summary


@pytest.mark.parametrize(("script", "args", "steps"), [
    # Lightning's automatic optimization: optimizer.step(closure), 2 micro-batches per step: 20 batches x 2 epochs
    ("lightning_style.py", ("--epochs", "2", "--accumulate", "2"), 20),
    # HF Trainer through accelerate's optimizer wrapper, gradient accumulation 2, max_steps 10
    ("hf_trainer_style.py", ("--max-steps", "10", "--accumulation", "2"), 10),
])
def test_framework_loops_step_through_the_same_hook(project, script, args, steps):
    proc = tracelint_run(project, *FAST, "--out", "out", "--format", "json", "-o", "report.json", script, "--",
                         *args)
    assert proc.returncode in (0, 1), proc.stderr
    assert f"global_step={steps}" in proc.stdout
    doc = report(project)
    assert list(doc["run"]["steps"].values()) == [steps] and doc["traces"][0]["metrics"]["steps"] >= 2


@pytest.mark.parametrize("function", ["no_optimizer:train_step", "stepper:sgd_step"])
def test_a_step_function_marks_the_steps(project, function):
    proc = tracelint_run(project, *FAST, "--step-function", function, "--out", "out", "--format", "json", "-o",
                         "report.json", "no_optimizer.py", "--", "--steps", "12")
    assert proc.returncode in (0, 1), proc.stderr
    assert "ran 12 steps" in proc.stdout
    run = report(project)["run"]
    assert list(run["steps"].values()) == [12] and run["clock"] == "function" and len(run["traces"]) == 1


def test_no_optimizer_step_in_time_profiles_a_time_window(project):
    proc = tracelint_run(project, "--no-step-timeout", "1", "--window", "2", "--out", "out", "--format", "json",
                         "-o", "report.json", "no_optimizer.py", "--", "--steps", "0", "--seconds", "6")
    assert proc.returncode in (0, 1), proc.stderr
    doc = report(project)
    assert doc["run"]["window"] is True and doc["run"]["clock"] is None and len(doc["traces"]) == 1
    assert "no optimizer step within 1 s: profiled a time window of 2 s instead" in doc["run"]["summary"][0]
    assert doc["traces"][0]["path"].startswith("out/no_optimizer-time-window.")
    assert doc["traces"][0]["metrics"]["has_steps"] is False  # the analyzer reads the window as one step


@pytest.mark.parametrize(("args", "words"), [
    ((), "give a SCRIPT"),
    (("missing.py",), "missing.py: no such file"),
    (("--step-function", "nocolon", "train_args.py"), "expected module:qualname"),
    (("--out", "pkg", "train_args.py"), "holds files already"),
])
def test_usage_errors_exit_2(project, args, words):
    proc = tracelint_run(project, *args)
    assert proc.returncode == 2 and words in proc.stderr


def test_torch_missing_is_one_line_and_exit_2(project, monkeypatch, capsys):
    from tracelint.cli import main
    from tracelint.run import launch

    monkeypatch.chdir(project)
    monkeypatch.setattr(launch, "torch_installed", lambda: False)
    with pytest.raises(SystemExit) as exit_:
        main(["run", "train_args.py"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip() == ("tracelint run: needs torch in this Python environment "
                                               "(pip install torch-tracelint[verify])")


def _masked(text: str) -> list[str]:
    """The lines with their numbers masked (timings, the trace's nanosecond name, counts) and without TL003, whose
    note on the profiler's overhead comes and goes with this machine's load."""
    lines, skip = [], False
    for line in text.splitlines():
        if ": TL003 " in line:
            skip = True
            continue
        if skip and line.startswith("  "):
            continue
        skip = False
        lines.append(re.sub(r"\d+(\.\d+)?", "N", line))
    return lines


def test_the_readme_shows_the_run_report_as_it_prints(tmp_path):
    readme = (SCRIPTS.parents[1] / "README.md").read_text(encoding="utf-8")
    command = re.search(r"```bash\n(tracelint run [^\n]+)\n```", readme).group(1)
    after = readme[readme.index("After the script's own output"):]
    block = after[after.index("```\n") + 4:after.index("```", after.index("```\n") + 4)]
    example = tmp_path / "fixtures" / "examples"
    example.mkdir(parents=True)
    shutil.copy(SCRIPTS.parent / "examples" / "train.py", example)
    proc = tracelint_run(tmp_path, *shlex.split(command)[2:])
    assert proc.returncode == 1, proc.stderr  # findings at --fail-on warning
    report_text = proc.stdout[proc.stdout.index("tracelint run: "):]
    assert _masked(report_text) == _masked(block)


def test_ctrl_c_reaches_the_script_and_its_traces_are_still_analyzed(project):
    """A terminal's Ctrl-C goes to the whole foreground process group: the script gets KeyboardInterrupt (its
    traceback, once), tracelint waits for it and reports the traces it recorded, exit 2."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SCRIPTS.parents[1]), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "tracelint", "run", *FAST, "--out", "out", "train_args.py", "--",
                             "--steps", "100000000"], cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        sizes: list[int] = []
        while (len(sizes) < 3 or len(set(sizes[-3:])) > 1 or not sizes[-1]) and time.monotonic() < deadline:
            time.sleep(0.5)  # until the recorded steps are exported (the file stops growing): the script runs on
            sizes.append(sum(p.stat().st_size for p in (project / "out").glob("*.pt.trace.json.gz")))
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 2, stderr
    assert stderr.count("Traceback (most recent call last)") == 1 and "KeyboardInterrupt" in stderr
    assert "error: the script failed: KeyboardInterrupt" in stderr
    assert "finally ran" in stdout and ".pt.trace.json.gz" in stdout[stdout.index("tracelint run: "):]
