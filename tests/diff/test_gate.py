"""The diff gate that noise cannot hide: a new finding fails it whatever the timing says, GPU time per step as the
steadier measure, several runs a side and their run-to-run noise, the noise floor, findings matched by place."""
from __future__ import annotations

import gzip
import json
import shutil
import statistics
from pathlib import Path

import pytest

from tests.diff.test_diff import fixture, raw_step_ms, tracelint
from tracelint.diff import diff_traces
from tracelint.diff.findings import finding_changes, finding_words
from tracelint.diff.noise import welch_band_pct
from tracelint.engine import Finding, Severity, SourceLocation, TraceLocation
from tracelint.engine.config import DEFAULT_NOISE_FLOOR_PCT, GPU_TIME, STEP_TIME, load_config_file
from tracelint.engine.stats import t975
from tracelint.render import render

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def raw_gpu_ms(path: Path) -> list[float]:
    """Per ProfilerStep, the summed duration of the kernels, copies and memsets whose launch (the runtime or driver
    call with the same correlation) falls inside it, NCCL kernels left out: read from the raw events."""
    events = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in events
                 if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    total = [0.0] * len(steps)
    for e in events:
        if e.get("cat") not in GPU_CATS or "nccl" in e["name"].lower():
            continue
        ts = launch_ts.get(e["args"].get("correlation"))
        for i, (s0, s1) in enumerate(steps):
            if ts is not None and s0 <= ts <= s1:
                total[i] += e["dur"]
                break
    return [t / 1000 for t in total]


# --- the done criteria of issue 28, item 3 --------------------------------------------------------------------------

def test_a_new_sync_fails_the_gate_that_timing_alone_would_pass(fixture_traces, tmp_path):
    fixed, bad = fixture(fixture_traces, "item_per_step_fixed"), fixture(fixture_traces, "item_per_step")
    proc = tracelint("--max-regression-pct", "100", fixed, bad, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("new finding: TL101 item-in-loop at fixtures/scenarios/item_per_step.py:54; +34.4%")
    assert lines[2].startswith("gate: REGRESSION: new finding TL101 item-in-loop at fixtures/scenarios/"
                               "item_per_step.py:54; 34.4% slower, within the 100% limit")
    # timing alone passes
    assert tracelint("--max-regression-pct", "100", "--no-fail-on-new-findings", fixed, bad,
                     cwd=tmp_path).returncode == 0
    # the reverse (the sync removed) and a trace against itself pass
    assert tracelint("--max-regression-pct", "100", bad, fixed, cwd=tmp_path).returncode == 0
    assert tracelint(bad, bad, cwd=tmp_path).returncode == 0
    assert tracelint(fixed, fixed, cwd=tmp_path).returncode == 0


def test_info_findings_do_not_fail_it_unless_fail_on_says_so(fixture_traces):
    fixed, bad = fixture(fixture_traces, "item_per_step_fixed"), fixture(fixture_traces, "item_per_step")
    report = diff_traces(fixed, bad, max_regression_pct=100)
    (d,) = report.diffs
    assert [f.code for f in d.gate.blocking] == ["TL101"] and d.gate.blocking[0].severity == Severity.WARNING
    from tracelint.engine import Config

    assert diff_traces(fixed, bad, max_regression_pct=100,
                       config=Config(fail_on=Severity.ERROR)).exit_code() == 0


def test_every_format_says_the_same(fixture_traces):
    from tests.render.test_sarif import assert_github_code_scanning_shape

    fixed, bad = fixture(fixture_traces, "item_per_step_fixed"), fixture(fixture_traces, "item_per_step")
    result = diff_traces(fixed, bad, max_regression_pct=100).run_result()
    words = "TL101 item-in-loop at fixtures/scenarios/item_per_step.py:54"
    doc = json.loads(render(result, "json"))
    (d,) = doc["diffs"]
    assert d["regression"] is True and d["gate"]["new_findings"] == [words]
    assert d["gate"]["measure"] == STEP_TIME and d["gate"]["slower"] is False  # gpu-bound → cpu-bound: step time
    assert d["summary"].startswith(f"new finding: {words};")
    assert d["summary"] in render(result, "text") and words in render(result, "markdown").replace("\\", "")
    sarif = json.loads(render(result, "sarif"))
    assert_github_code_scanning_shape(sarif)
    (res,) = sarif["runs"][0]["results"]
    assert res["ruleId"] == "TL101"
    assert res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "fixtures/scenarios/item_per_step.py"
    assert sarif["runs"][0]["properties"]["diffs"][0]["gate"] == d["gate"]


# --- GPU time per step --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["zero_grad_keep", "pageable_copies", "item_per_step", "gpt_eager_bf16"])
def test_gpu_time_per_step_against_the_raw_events(fixture_traces, name):
    path = fixture(fixture_traces, name)
    (d,) = diff_traces(path, path).diffs
    assert d.gpu.base_ms == pytest.approx(statistics.fmean(raw_gpu_ms(path)), abs=0.002)
    assert d.gpu.band_pct is not None


def test_gpu_bound_pairs_gate_on_gpu_time(fixture_traces):
    base, new = fixture(fixture_traces, "zero_grad_keep_fixed"), fixture(fixture_traces, "zero_grad_keep")
    (d,) = diff_traces(base, new).diffs
    assert d.verdict == ("gpu-bound", "gpu-bound") and d.gate.measure == GPU_TIME
    b, n = statistics.fmean(raw_gpu_ms(base)), statistics.fmean(raw_gpu_ms(new))
    assert d.gpu.change_pct == pytest.approx(100 * (n - b) / b, abs=0.01)
    assert d.gpu.noise_source == "floor" and d.gpu.noise_pct == DEFAULT_NOISE_FLOOR_PCT[GPU_TIME]


# --- several runs a side --------------------------------------------------------------------------------------------

def test_runs_give_run_to_run_noise(fixture_traces, tmp_path):
    """Two runs a side: the noise is Welch's 95 % band of the run means, computed here from the raw events."""
    runs_b = [fixture(fixture_traces, n) for n in ("item_per_step_fixed", "item_no_effect_fixed")]
    runs_n = [fixture(fixture_traces, n) for n in ("item_per_step", "item_no_effect")]
    report = diff_traces(runs_b, runs_n, fail_on_new_findings=False)
    (d,) = report.diffs
    means_b = [statistics.fmean(raw_step_ms(p)) for p in runs_b]
    means_n = [statistics.fmean(raw_step_ms(p)) for p in runs_n]
    vb, vn = statistics.variance(means_b) / 2, statistics.variance(means_n) / 2
    df = (vb + vn) ** 2 / (vb ** 2 + vn ** 2)
    steps_b = [x for p in runs_b for x in raw_step_ms(p)]
    band = 100 * t975(int(df)) * (vb + vn) ** 0.5 / statistics.fmean(steps_b)
    assert d.step.noise_source == "runs" and d.step.noise_pct == pytest.approx(band, abs=0.01)
    assert d.step.band_pct is None and (d.step.base_runs, d.step.new_runs) == (2, 2)
    doc = json.loads(render(report.run_result(), "json"))["diffs"][0]
    assert doc["runs"] == {"base": [str(p) for p in runs_b], "new": [str(p) for p in runs_n]}
    assert "95% band of 2 and 2 runs' means" in render(report.run_result(), "text")
    # the command: --base/--new repeated
    proc = tracelint("--base", runs_b[0], "--base", runs_b[1], "--new", runs_n[0], "--new", runs_n[1],
                     "--format", "json", cwd=tmp_path)
    assert proc.returncode == 1 and json.loads(proc.stdout)["diffs"][0]["step_ms"] == doc["step_ms"]
    # positional BASE NEW are the first run of each side
    proc = tracelint(runs_b[0], runs_n[0], "--base", runs_b[1], "--new", runs_n[1], "--format", "json", cwd=tmp_path)
    assert json.loads(proc.stdout)["diffs"][0]["step_ms"] == doc["step_ms"]


def test_one_run_against_several_takes_the_spread_of_the_several(fixture_traces):
    one = [fixture(fixture_traces, "gpu_bound")]
    two = [fixture(fixture_traces, "gpu_bound"), fixture(fixture_traces, "compiled")]
    (d,) = diff_traces(one, two).diffs
    means = [statistics.fmean(raw_gpu_ms(p)) for p in two]
    expected = welch_band_pct([statistics.fmean(raw_gpu_ms(one[0]))], means)
    assert d.gpu.noise_source == "runs" and d.gpu.noise_pct == pytest.approx(expected, abs=0.01)


def test_job_folders_as_runs_pair_by_rank(public_traces):
    job = public_traces / "param-dlrm-8rank"
    report = diff_traces([job, job], [job])
    assert [d.rank for d in report.diffs] == list(range(8)) and report.errors == ()
    assert all(d.step.noise_source == "runs" and d.step.change_pct == 0 and not d.regression for d in report.diffs)


def test_command_usage_errors(fixture_traces, tmp_path):
    good = fixture(fixture_traces, "item_per_step")
    for args in ((good,), (good, good, good), ("--base", good)):
        proc = tracelint(*args, cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and "BASE" in proc.stderr, args


# --- the noise floor ----------------------------------------------------------------------------------------------

def test_noise_floor_config_and_option(fixture_traces, tmp_path):
    toml = tmp_path / "pyproject.toml"
    toml.write_text("[tool.tracelint.diff]\nnoise-floor-pct = 40\nfail-on-new-findings = false\n")
    config = load_config_file(toml)
    assert config.diff_noise_floor_pct == 40 and config.diff_fail_on_new_findings is False
    fixed, bad = fixture(fixture_traces, "item_per_step_fixed"), fixture(fixture_traces, "item_per_step")
    # +34.4 %: over the 5 % limit, within a 40 % floor
    assert tracelint(fixed, bad, cwd=tmp_path).returncode == 0
    assert tracelint(fixed, bad, "--noise-floor-pct", "20", cwd=tmp_path).returncode == 1


# --- findings matched by place --------------------------------------------------------------------------------------

def _sync(line: int, path="/ckpt/a/train.py", event="aten::item", code="TL101", step=3) -> Finding:
    src = SourceLocation(path, line)
    return Finding(code, Severity.WARNING, f"syncs {line * 1.7:.1f} ms per step",
                   TraceLocation("t.json.gz", rank=0, step=step, start_us=1.0, end_us=2.0, event=event, source=src))


def test_findings_match_by_rule_and_place_not_message():
    base = (_sync(54),)
    # another run: other numbers in the message, another checkout's folder, another step
    elsewhere = _sync(54, "/other/b/train.py", step=7).location
    same = (Finding("TL101", Severity.WARNING, "syncs 99 ms per step", elsewhere),)
    assert finding_changes(base, same) == ((), ())
    # the code moved down two lines: still matched
    assert finding_changes(base, (_sync(56),)) == ((), ())
    # the old sync moved down two lines and a new one two lines below it: one new finding, the lower one
    new, fixed = finding_changes(base, (_sync(56), _sync(58)))
    assert [f.source.line for f in new] == [58] and fixed == ()
    # another event, rule or file is another finding
    for other in (_sync(54, event="aten::nonzero"), _sync(54, code="TL102"), _sync(54, path="eval.py")):
        new, fixed = finding_changes(base, (other,))
        assert new == (other,) and fixed == base
    # the same finding in several steps counts once
    assert finding_changes((), (_sync(54, step=1), _sync(54, step=2))) == ((_sync(54, step=1),), ())


def test_step_numbers_and_rank_files_in_events_do_not_make_findings_new():
    # The launch-bound finding names its step (ProfilerStep#12); a job finding names its rank's trace file (a host
    # and a time in the name): neither is the same from run to run.
    def at(event, rank=0, path="t.json.gz"):
        return Finding("TL401", Severity.WARNING, "m", TraceLocation(path, rank=rank, event=event))

    assert finding_changes((at("ProfilerStep#12"),), (at("ProfilerStep#40"),)) == ((), ())
    base = (at("/ci/run-1/prof/node-a_11.22.pt.trace.json", rank=1, path="/ci/run-1/prof"),)
    same = (at("/ci/run-2/prof/node-b_31.42.pt.trace.json", rank=1, path="/ci/run-2/prof"),)
    other = (at("/ci/run-2/prof/node-b_33.44.pt.trace.json", rank=0, path="/ci/run-2/prof"),)
    assert finding_changes(base, same) == ((), ())
    assert finding_changes(base, other) == (other, base)  # another rank is another finding


def test_finding_words():
    assert finding_words(_sync(54, "fixtures/train.py")) == "TL101 item-in-loop at fixtures/train.py:54"
    loc = TraceLocation("t.json.gz", rank=0, step=1, start_us=1.0, end_us=2.0, event="Memcpy HtoD (Pageable -> Device)")
    assert (finding_words(Finding("TL202", Severity.WARNING, "m", loc))
            == "TL202 dataloader-without-pinned-memory (Memcpy HtoD (Pageable -> Device)) in t.json.gz")


# --- bench/diff_noise_floor.py, the script that measured the default floors ----------------------------------------

def test_noise_floor_script_on_identical_repeats(fixture_traces, tmp_path):
    import importlib.util

    from tests.shared import REPO

    spec = importlib.util.spec_from_file_location("diff_noise_floor", REPO / "bench" / "diff_noise_floor.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # its percentile is numpy's linear one (statistics' inclusive quantiles), its pairs every ordered pair
    data = [0.3, 5.0, 1.2, 9.9, 2.2, 0.0, 7.5]
    assert bench.percentile(data, 95) == pytest.approx(statistics.quantiles(data, n=20, method="inclusive")[18])
    assert sorted(bench.pairwise_pct([100.0, 110.0])) == pytest.approx([100 / 11, 10.0])
    # two repeats of the same files: every change is 0, so is every floor, and no diff fails the gate
    names = ("gpu_bound", "item_per_step_fixed")
    for rep in ("rep1", "rep2"):
        (tmp_path / rep).mkdir()
        shutil.copy(fixture_traces / "manifest.json", tmp_path / rep)
        for name in names:
            shutil.copy(fixture(fixture_traces, name), tmp_path / rep)
    result = bench.analyze(tmp_path)
    assert sorted(result["scenarios"]) == sorted(names)
    assert {f["p95_abs_pct"] for f in result["floors"].values()} == {0.0}
    assert result["floors"][GPU_TIME]["pairs"] == 4 and result["floors"][STEP_TIME]["pairs"] == 4
    assert result["gate"]["pairs"] == 4 and result["gate"]["failed"] == 0
    gpu_ms = statistics.fmean(raw_gpu_ms(fixture(fixture_traces, "gpu_bound")))
    assert result["scenarios"]["gpu_bound"][GPU_TIME]["values_ms"][0] == pytest.approx(gpu_ms, abs=1e-3)


def test_every_json_key_of_a_diff_is_documented(fixture_traces):
    import tracelint.render.json as json_format

    doc = json_format.__doc__
    (d,) = json.loads(render(diff_traces(fixture(fixture_traces, "zero_grad_keep_fixed"),
                                         fixture(fixture_traces, "zero_grad_keep")).run_result(), "json"))["diffs"]
    keys = {*d, *d["gate"], *d["step_ms"], *d["gpu_ms"], *d["runs"], *d["steps"]}
    assert all(f'"{key}"' in doc for key in keys), sorted(k for k in keys if f"\"{k}\"" not in doc)
