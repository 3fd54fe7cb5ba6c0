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

from tracelint.profile.settle import CAP

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # each test is a real run: a child process that imports torch

SCRIPTS = Path(__file__).resolve().parents[2] / "fixtures" / "run"
FAST = ("--wait", "3", "--warmup", "1", "--active", "3")
# A script of this many steps or more runs its recorded steps whatever the warm-up detection sees: at most the
# first, CAP steps of detection and the 7 steps of FAST.
ENOUGH = str(1 + CAP + 7)


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
                         "--", "--steps", ENOUGH, "--tag", "hello")
    assert proc.returncode in (0, 1), proc.stderr
    assert "tag=hello argv0=train_args.py" in proc.stdout and f"done {ENOUGH} steps" in proc.stdout  # its stdout
    assert "a line on stderr" in proc.stderr
    doc = report(project)
    run = doc["run"]
    assert run["steps"] == {"train_args": int(ENOUGH)} and run["clock"] == "optimizer" and run["failure"] is None
    assert run["argv"] == ["--steps", ENOUGH, "--tag", "hello"] and run["ended"] == ["returned"]
    (trace,) = doc["traces"]
    assert trace["path"] == run["traces"][0] and trace["path"].startswith("out/train_args.")
    assert trace["metrics"]["steps"] >= 2  # the recorded steps
    profiler = trace["profiler"]
    assert profiler["with_stack"] and not profiler["record_shapes"] and profiler["source"] == "tracelint.profile"
    assert profiler["unprofiled_steps"] == 2 and profiler["unprofiled_step_ms"] > 0  # 2 of the 3 wait steps, timed
    assert run["files_linted"] == 1
    # a trace finding always carries its evidence; a lint finding none on a CPU (nothing there to measure it by)
    assert all((f["evidence"] is None) == (f["origin"] == "source") for f in doc["findings"])


def test_a_failing_script_exits_2_naming_its_exception_with_its_traceback_once(project):
    proc = tracelint_run(project, *FAST, "--out", "out", "train_args.py", "--", "--steps", "100", "--fail-at",
                         str(int(ENOUGH) + 2))  # after the recorded steps
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
                         "--", "--steps", ENOUGH)
    assert proc.returncode in (0, 1), proc.stderr
    assert f"module argv: ['--steps', '{ENOUGH}'] package: pkg" in proc.stdout
    doc = report(project)
    assert doc["run"]["steps"] == {"train": int(ENOUGH)} and doc["run"]["kind"] == "module" and len(doc["traces"]) == 1
    assert doc["run"]["files_linted"] == 3  # pkg/__init__.py, pkg/train.py and pkg/helpers.py: what it imported


def test_torchrun_with_two_gloo_processes_gives_a_job_report(project):
    proc = tracelint_run(project, *FAST, "--out", "out", "--format", "json", "-o", "report.json",
                         sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "ddp_train.py",
                         "--steps", ENOUGH)
    assert proc.returncode in (0, 1), proc.stderr
    assert "rank 0 done" in proc.stdout and "rank 1 done" in proc.stdout
    doc = report(project)
    run = doc["run"]
    steps = int(ENOUGH)
    assert run["kind"] == "torchrun" and run["steps"] == {"ddp_train-rank0": steps, "ddp_train-rank1": steps}
    assert len(run["traces"]) == 2
    ranks = sorted(t["rank"] for t in doc["traces"] if t["rank"] is not None)
    job = [t for t in doc["traces"] if t["rank"] is None]
    assert ranks == [0, 1] and len(job) == 1 and job[0]["metrics"]["ranks"] == 2  # the job's own summary


@pytest.mark.parametrize(("script", "args", "steps"), [
    # Lightning's automatic optimization: optimizer.step(closure), 2 micro-batches per step: 20 batches x 4 epochs
    ("lightning_style.py", ("--epochs", "4", "--accumulate", "2"), 40),
    # HF Trainer through accelerate's optimizer wrapper, gradient accumulation 2, max_steps 40
    ("hf_trainer_style.py", ("--max-steps", "40", "--accumulation", "2"), 40),
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
                         "report.json", "no_optimizer.py", "--", "--steps", ENOUGH)
    assert proc.returncode in (0, 1), proc.stderr
    assert f"ran {ENOUGH} steps" in proc.stdout
    run = report(project)["run"]
    assert list(run["steps"].values()) == [int(ENOUGH)] and run["clock"] == "function" and len(run["traces"]) == 1


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


# ---- issue #34: what a new user hit in the first hour ---------------------------------------------------------------

def _profiler_steps(trace: Path) -> list[int]:
    """The ProfilerStep#N numbers a trace holds."""
    import gzip

    with gzip.open(trace, "rt", encoding="utf-8") as handle:
        events = json.load(handle)["traceEvents"]
    return sorted({int(e["name"].split("#")[1]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")})


def test_the_steps_timed_without_the_profiler_come_after_the_warm_up(project):
    """The unprofiled block timed steps 1-4, start-up included (a 6-9 ms step read 676 ms, and the verdict followed
    it). Here the first 6 steps sleep 320, 160, ..., 10 ms: the timed steps come after them, and the run record,
    the trace's record and the report say which they are."""
    proc = tracelint_run(project, *FAST, "--max-steps", "60", "--out", "out", "--format", "json", "-o",
                         "report.json", "slow_start.py", "--", "--slow", "6")
    assert proc.returncode in (0, 1), proc.stderr
    doc = report(project)
    timed = doc["run"]["unprofiled"]
    assert timed["first_step"] > 6 and timed["steps"] == 2  # --wait 3: the step that starts the profiler, then 2
    warmup = timed["warmup"]
    assert warmup["first_step"] == 2 and len(warmup["steps_ms"]) >= 5  # steps 2-6 at least: all slow, all unlike
    assert timed["first_step"] == warmup["first_step"] + len(warmup["steps_ms"]) + 1
    (path,) = doc["run"]["traces"]
    import gzip

    with gzip.open(project / path, "rt", encoding="utf-8") as handle:
        record = json.load(handle)["tracelint"]
    (block,) = record["unprofiled"]["blocks"]
    assert record["warmup"]["profiler_step_0"] + block["first_step"] == timed["first_step"]
    last = timed["first_step"] + timed["steps"] - 1
    assert f"steps {timed['first_step']}-{last} timed without the profiler" in "\n".join(doc["run"]["summary"])


def test_max_steps_below_the_schedule_is_said_up_front_and_the_header_names_what_the_trace_holds(project):
    """--max-steps 8 printed 'recorded steps 7-11' over a trace of one empty step."""
    proc = tracelint_run(project, "--max-steps", "8", "--out", "out", "--format", "json", "-o", "report.json",
                         "train_args.py", "--", "--steps", "100")
    assert proc.returncode in (0, 1), proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "below the schedule" in line]
    assert len(notes) == 1 and "recording steps 7-8 instead" in notes[0], proc.stderr
    assert proc.stderr.index(notes[0]) < proc.stderr.index("a line on stderr")  # before the script starts
    doc = report(project)
    recorded = doc["run"]["recorded"]
    assert (recorded["first_step"], recorded["last_step"], recorded["complete"]) == (7, 8, True)
    (path,) = doc["run"]["traces"]
    first, last = recorded["profiler_steps"]
    assert _profiler_steps(project / path) == list(range(first, last + 1)) and last - first == 1
    assert doc["traces"][0]["metrics"]["steps"] == 2
    assert "recorded steps 7-8" in "\n".join(doc["run"]["summary"])


def test_a_script_that_fails_inside_the_recorded_steps_is_said_to_have_cut_them_short(project):
    """A script that failed at step 9 printed the schedule's range, not what the trace held. --max-steps 11 leaves
    the warm-up detection its 3 steps exactly: the recorded steps are 9-11, and the script fails in step 11."""
    proc = tracelint_run(project, *FAST, "--max-steps", "11", "--out", "out", "--format", "json", "-o",
                         "report.json", "train_args.py", "--", "--steps", "100", "--fail-at", "10")
    assert proc.returncode == 2
    assert "below the schedule" not in proc.stderr
    doc = report(project)
    recorded = doc["run"]["recorded"]
    assert (recorded["first_step"], recorded["last_step"], recorded["complete"]) == (9, 11, False)
    (path,) = doc["run"]["traces"]
    first, last = recorded["profiler_steps"]
    assert _profiler_steps(project / path) == list(range(first, last + 1))
    summary = "\n".join(doc["run"]["summary"])
    assert "recorded steps 9-11" in summary and "step 11 cut short: the script failed during it" in summary


@pytest.mark.parametrize(("args", "words"), [
    (("-m", "no_such_module"), "No module named no_such_module"),
    (("broken.py",), "SyntaxError"),
])
def test_a_script_that_never_started_is_one_error_line_and_no_report(project, args, words):
    """`tracelint run -m no_such_module` printed the ImportError three times and 'All checks passed.'"""
    (project / "broken.py").write_text("import torch\ndef f(:\n    pass\n", encoding="utf-8")
    proc = tracelint_run(project, "--out", "out", *args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and lines[0].startswith("error: "), proc.stderr
    assert not (project / "out").exists()  # the folder it made for the traces, empty, is gone again


def test_the_profilers_own_notes_do_not_reach_the_output(project):
    """Kineto's 'USDT: ... profiler_start' lines and torch's 'Profiler clears events' warning are the profiler's,
    not the script's: they are left out, the script's own output is not."""
    proc = tracelint_run(project, *FAST, "--max-steps", "40", "--out", "out", "train_args.py", "--", "--steps",
                         "100")
    assert proc.returncode in (0, 1), proc.stderr
    assert "tag=none" in proc.stdout and "a line on stderr" in proc.stderr
    assert "USDT:" not in proc.stderr and "profiler_start" not in proc.stderr
    assert "Profiler clears events" not in proc.stderr


@pytest.mark.parametrize("steps", ["3", "100"])
def test_lint_findings_are_not_called_unseen_where_nothing_could_be_seen(tmp_path, steps):
    """On a CPU (no GPU work: no sync or copy can be measured) and where nothing was recorded (the script ended
    first), every lint finding said 'not seen in the profiled steps'. The findings stay, without that line; the
    run's header says once why none is measured."""
    example = tmp_path / "fixtures" / "examples"
    example.mkdir(parents=True)
    shutil.copy(SCRIPTS.parent / "examples" / "train.py", example)
    proc = tracelint_run(tmp_path, "--max-steps", "40", "--out", "out", "fixtures/examples/train.py", "--",
                         "--batch-size", "1", "--steps", steps)
    assert proc.returncode == 1, proc.stderr
    report_text = proc.stdout[proc.stdout.index("tracelint run: "):]
    assert ": TL101 " in report_text and ": TL202 " in report_text
    assert "not seen" not in report_text
    header = report_text[:report_text.index("\n\n")]
    assert ("nothing recorded" in header) == (steps == "3")
    assert ("no GPU work" in header) == (steps == "100")


def test_a_plan_without_profiler_warm_up_keeps_torchs_warning_about_it_out(project):
    # Seen by #34's run colleague: '--max-steps 2' plans --warmup 0, and torch warned "Profiler won't be using
    # warmup, this can skew profiler results" in the middle of the output; tracelint's own note says the plan.
    proc = tracelint_run(project, *FAST, "--max-steps", "2", "--out", "out", "train_args.py", "--", "--steps", "100")
    assert proc.returncode in (0, 1), proc.stderr
    assert "won't be using warmup" not in proc.stderr
    assert "--max-steps 2" in proc.stderr  # the note that says what will be recorded instead


SCENARIOS = SCRIPTS.parent / "scenarios"


def _on_cpu(name: str, folder: Path) -> Path:
    """fixtures/scenarios/<name>.py on the CPU, smaller (its text otherwise unchanged: lines stay where they are)."""
    text = (SCENARIOS / f"{name}.py").read_text()
    for old, new in {'DEVICE = "cuda"': 'DEVICE = "cpu"', "WIDTH = 1024": "WIDTH = 64",
                     "BATCH = 256": "BATCH = 32"}.items():
        assert old in text, old
        text = text.replace(old, new)
    script = folder / f"{name}.py"
    script.write_text(text)
    return script


@pytest.mark.parametrize("name, line", [("profiler_left_on", 39), ("profiler_left_on_fixed", 40)])
def test_a_script_with_its_own_profiler_runs_unprofiled_and_the_report_says_why(tmp_path, name, line):
    """Two profilers cannot run in one process: the TL704 pair crashed under tracelint run (SIGSEGV on CPU, torch
    2.13; on the GPU the script's profiler raised at its exit). The run steps aside: no trace, the script runs to
    --max-steps with its own profiler, the lint reports, and one line says why nothing was recorded."""
    _on_cpu(name, tmp_path)
    proc = tracelint_run(tmp_path, *FAST, "--max-steps", "20", "--out", "out", "--format", "json", "-o",
                         "report.json", f"{name}.py")
    assert proc.returncode in (0, 1), proc.stderr
    assert "killed by signal" not in proc.stderr and "Kineto" not in proc.stderr
    doc = report(tmp_path)
    run = doc["run"]
    assert run["failure"] is None and run["ended"] == ["max-steps"] and run["steps"] == {name: 20}
    assert run["traces"] == [] and doc["traces"] == []
    assert run["aside"]["where"] == f"{name}.py:{line}" and run["aside"]["after_step"] == 0
    assert run["aside"]["first_step"] == 2 and len(run["aside"]["steps_ms"]) == 19  # step 1's end starts the clock
    (why,) = [s for s in run["summary"] if "own torch profiler" in s]
    assert f"({name}.py:{line})" in why and "recorded no trace" in why and "nothing recorded" not in run["summary"]
    assert [f["code"] for f in doc["findings"]] == (["TL704"] if name == "profiler_left_on" else [])


def test_a_profiler_the_script_starts_late_and_max_steps_cuts_short_is_stopped(tmp_path):
    """The script starts a profiler (line 7) after the recorded steps and never stops it before --max-steps ends
    the run: the trace already written stands, and the script's profiler is turned off before the process exits
    (left on after StopRun went through an op's record, the process died with SIGSEGV, torch 2.13 CPU)."""
    late = int(ENOUGH) + 2  # after the recorded steps, however long warm-up detection takes on a loaded machine
    (tmp_path / "late.py").write_text(
        "import torch\n"
        "model = torch.nn.Linear(8, 8)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(100):\n"
        f"    if step == {late}:\n"
        "        prof = torch.autograd.profiler.profile()\n"
        "        prof.__enter__()\n"
        "    loss = model(torch.randn(4, 8)).sum()\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n")
    proc = tracelint_run(tmp_path, *FAST, "--max-steps", str(late + 8), "--out", "out", "--format", "json", "-o",
                         "report.json", "late.py")
    assert proc.returncode in (0, 1), proc.stderr
    run = report(tmp_path)["run"]
    assert run["failure"] is None and run["aside"]["where"] == "late.py:7" and run["aside"]["after_step"] == late
    assert len(run["traces"]) == 1 and run["recorded"]["complete"]
    assert "kept what it had recorded before" in " ".join(run["summary"])
    assert any("still on when the run ended" in note for note in run["notes"])
