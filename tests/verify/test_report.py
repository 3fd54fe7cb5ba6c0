"""The report: the table (text), the JSON/SARIF data, the command's exit codes, and one end-to-end CPU run.
(tests/render/test_verify.py: the same result in every format.)"""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.verify.conftest import CPU, SCRIPTS, report, synthetic
from tracelint.cli.verify import verify_cmd
from tracelint.render import formats


def test_text_table_has_one_row_per_variant_and_shows_failures():
    text = report([synthetic()])
    assert text.startswith("tracelint verify train.py\nGPU X · torch 2.x")
    assert "not claims" in text  # CPU settings
    row = next(line for line in text.splitlines() if line.startswith("train.py:12"))
    assert "TL202" in row and "(safe)" in row and row.rstrip().endswith("confirmed")
    assert "1.43× (1.40–1.46)" in row and "3 (target)" in row  # the 95% interval of three rounds
    assert "10.10 (10.00–10.20)" in row and "7.05 (7.00–7.10)" in row
    bf16 = next(line for line in text.splitlines() if " bf16 " in line)
    assert "unsafe: changes numerics" in bf16 and bf16.rstrip().endswith("failed")
    assert "bf16 failed: exit code 1" in text and "  | RuntimeError: boom" in text


def test_json_carries_a_verification_object_per_measured_finding():
    doc = json.loads(report([synthetic()], "json"))
    (finding,) = doc["findings"]
    v = finding["details"]["verification"]
    assert v["status"] == "confirmed" and v["speedup"] == pytest.approx(10.1 / 7.05, rel=1e-3)
    assert v["ci95"] == pytest.approx([1.4016, 1.4643], abs=1e-4) and v["rounds"] == 3 and v["stopped"] == "target"
    assert v["baseline_blocks_ms"] == [10.0, 10.1, 10.2] and v["summary"] == "1.43× (1.40–1.46)"
    assert v["baseline_ms"] == 10.1 and v["fixed_ms"] == 7.05
    assert v["spread"] == {"baseline": [10.0, 10.2], "fixed": [7.0, 7.1]}
    assert (v["blocks"], v["steps"], v["device"], v["torch"]) == (CPU.blocks, CPU.steps, "GPU X", "2.x")
    (target,) = doc["verify"]
    assert target["timing_claims"] is False and target["baseline"]["status"] == "ok"
    statuses = {e["key"]: e["verification"]["status"] for e in target["variants"]}
    assert statuses == {"TL202:12": "confirmed", "bf16": "failed"}
    assert "RuntimeError: boom" in target["variants"][1]["verification"]["stderr_tail"]


def test_sarif_results_carry_the_verification():
    doc = json.loads(report([synthetic()], "sarif"))
    (result,) = doc["runs"][0]["results"]
    assert result["ruleId"] == "TL202" and result["properties"]["verification"]["status"] == "confirmed"
    assert doc["runs"][0]["properties"]["verify"][0]["target"] == "train.py"


def test_without_torch_one_line_and_exit_2(monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    result = CliRunner().invoke(verify_cmd, [str(SCRIPTS / "one_fix.py")])
    assert result.exit_code == 2
    assert result.output.strip() == "tracelint verify: needs torch with a CUDA device (torch not installed)"


@pytest.mark.parametrize("fmt", formats())
def test_the_command_writes_every_format_through_the_shared_plumbing(fmt, monkeypatch, tmp_path):
    """verify_script stubbed: what the command prints (stdout or -o) is the renderer's report of run_result."""
    import tracelint.verify

    monkeypatch.setattr(tracelint.verify, "verify_script", lambda *a, **k: synthetic())
    args = [str(SCRIPTS / "one_fix.py"), "--format", fmt, "--no-progress"]
    shown = CliRunner().invoke(verify_cmd, args)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout == report([synthetic()], fmt)
    out = tmp_path / "report"
    written = CliRunner().invoke(verify_cmd, [*args, "-o", str(out)])
    assert written.exit_code == 0 and written.stdout == ""
    assert out.read_text(encoding="utf-8") == report([synthetic()], fmt)


def test_progress_follows_the_shared_rule(monkeypatch):
    """Progress: on a terminal only, never under pre-commit (tracelint.cli.progress_enabled)."""
    from tracelint.cli.verify import _progress

    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    monkeypatch.setenv("PRE_COMMIT", "1")
    assert _progress(None) is None and _progress(True) is not None
    monkeypatch.delenv("PRE_COMMIT")
    assert _progress(None) is not None and _progress(False) is None


def test_usage_errors_exit_2():
    runner = CliRunner()
    assert runner.invoke(verify_cmd, []).exit_code == 2
    assert runner.invoke(verify_cmd, ["nope.py"]).exit_code == 2
    assert runner.invoke(verify_cmd, [str(SCRIPTS / "one_fix.py"), "--rule", "TL101"]).exit_code == 2


@pytest.mark.slow
def test_cuda_requested_on_a_machine_without_it_exits_2():
    pytest.importorskip("torch")
    from tests.conftest import _cuda_available

    if _cuda_available():
        pytest.skip("this machine has CUDA")
    result = CliRunner().invoke(verify_cmd, [str(SCRIPTS / "one_fix.py")])
    assert result.exit_code == 2 and "sees no CUDA device" in result.output


@pytest.mark.slow
def test_end_to_end_on_the_cpu(tmp_path):
    """One real verification (baseline twice + the TL301 fix) through the command, as JSON."""
    script = SCRIPTS / "one_fix.py"
    before = script.read_bytes()
    out = tmp_path / "report.json"
    result = CliRunner().invoke(verify_cmd, [str(script), "--device", "cpu", "--precision", "none", "--warmup", "2",
                                             "--steps", "3", "--blocks", "3", "--budget", "2", "--format", "json",
                                             "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert script.read_bytes() == before
    doc = json.loads(out.read_text())
    (finding,) = doc["findings"]
    v = finding["details"]["verification"]
    assert finding["code"] == "TL301" and v["status"] in ("confirmed", "small", "no-effect", "slower")
    assert v["rounds"] >= 3 and len(v["fixed_blocks_ms"]) == len(v["baseline_blocks_ms"]) == v["rounds"]
    assert v["baseline_ms"] > 0 and v["speedup"] > 0 and v["ci95"][0] <= v["speedup"] <= v["ci95"][1]
    assert v["stopped"] in ("target", "budget")
    (target,) = doc["verify"]
    # one baseline process per pair of processes (3 by default), each alternating with the variant's process of
    # its pair: every block it gave was paired with one of the variant
    runs = target["baseline"]["runs_ms"]
    assert len(runs) == v["pairs"] == len(v["pair_speedups"]) == 3 and target["settings"]["pairs"] == 3
    assert sum(len(run) for run in runs) == v["rounds"] and all(len(run) >= 3 for run in runs)


def test_a_finding_without_a_variant_is_reported_not_measured_with_its_reason():
    from dataclasses import replace

    from tracelint.engine import Finding, Severity, SourceLocation
    from tracelint.verify import Unmeasured

    mask = Finding("TL106", Severity.WARNING, "`x[x > 0]` in the loop ... every step",
                   SourceLocation("train.py", 30, 11, 30, 19))
    why = "no device-side rewrite for a boolean mask or nonzero(): the result's shape depends on the data"
    v = replace(synthetic(), findings=(*synthetic().findings, mask), unmeasured=(Unmeasured(mask, why),))
    text = report([v])
    row = next(line for line in text.splitlines() if line.startswith("train.py:30"))
    assert "TL106" in row and row.rstrip().endswith("not-measured")
    assert f"train.py:30 TL106 not measured: {why}" in text
    doc = json.loads(report([v], "json"))
    (measured,) = [f for f in doc["findings"] if f["code"] == "TL106"]
    assert measured["details"]["verification"]["status"] == "not-measured"
    assert measured["details"]["verification"]["reason"] == why
    assert doc["verify"][0]["not_measured"] == [{"rule": "TL106", "location": "train.py:30", "reason": why}]
    github = report([v], "github")
    assert "verify: not-measured (no device-side rewrite for a boolean mask" in github


def test_no_effect_is_phrased_with_the_measured_bound():
    from dataclasses import replace

    from tracelint.verify.harness_control import RunOutcome
    from tracelint.verify.measure import Row
    from tracelint.verify.stats import judge

    v = synthetic()
    same = RunOutcome(True, (10.1, 10.0, 10.3), (2.0,))
    row = Row(v.rows[0].variant, judge((10.0, 10.1, 10.2), same, True, stopped="budget"), same)
    v = replace(v, rows=(row,))
    bound = row.verdict.interval.bound
    text = report([v])
    line = next(line for line in text.splitlines() if line.startswith("train.py:12"))
    assert line.rstrip().endswith(f"no-effect: none larger than ±{row.verdict.summary().split('±')[1][:-2]}%")
    assert "3 (budget)" in line
    measured = json.loads(report([v], "json"))["findings"][0]["details"]["verification"]
    assert measured["status"] == "no-effect" and measured["bound_pct"] >= bound * 100
    assert measured["summary"] == f"no effect larger than ±{measured['bound_pct']:.1f} %"
    assert f"verify: no effect larger than ±{measured['bound_pct']:.1f}%" in report([v], "github")
