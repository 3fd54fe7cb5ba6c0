"""MFU in ``tracelint diff``: the ``mfu`` block against the two traces' own ``tracelint trace`` metrics, when MFU is
not comparable (another peak, another step basis, other work, none on a side), and the gate on it: one test with
the step gate's for the same work, and what ``gate-measure = "mfu"`` changes (a bigger batch is not a regression)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.diff.test_diff import fixture, tracelint
from tracelint.diff import diff_traces
from tracelint.diff.mfu import mfu_change
from tracelint.diff.noise import Change, beyond
from tracelint.engine import Config
from tracelint.engine.config import ConfigError, parse_config
from tracelint.render import render

NO_SHAPES = "ddp36/ddp_default/rank0"  # a GPU trace recorded without record_shapes
NAMES = ("gpt_eager_bf16", "gpt_compiled", "gpt_fp32", "gpt_tiny_item", "gpt_eager_bf16_tlprofile",
         "gpt_compiled_tlprofile", NO_SHAPES)


@pytest.fixture(scope="module")
def own(fixture_traces) -> dict:
    """Each trace's metrics as ``tracelint trace --format json`` reports them, by fixture name."""
    paths = [fixture(fixture_traces, n) for n in NAMES]
    proc = subprocess.run([sys.executable, "-m", "tracelint", "trace", "--format", "json", *map(str, paths)],
                          capture_output=True, text=True)
    by_path = {t["path"]: t["metrics"] for t in json.loads(proc.stdout)["traces"]}
    return {n: next(m for p, m in by_path.items() if p.endswith(f"{n}.pt.trace.json.gz")) for n in NAMES}


def _diff(traces, base, new, **options):
    report = diff_traces(fixture(traces, base), fixture(traces, new), **options)
    assert report.errors == ()
    (d,) = report.diffs
    return d


@pytest.mark.parametrize(("base", "new", "why"), [
    ("gpt_eager_bf16", "gpt_compiled", None),  # the profiled compiled step is the slower one: MFU down
    ("gpt_eager_bf16_tlprofile", "gpt_compiled_tlprofile", None),  # over the unprofiled steps: MFU up
    ("gpt_fp32", "gpt_eager_bf16", "against different peaks, 67 → 990 TFLOP/s (a different dtype or device)"),
    ("gpt_eager_bf16", "gpt_eager_bf16_tlprofile",
     "NEW's MFU divides by the unprofiled step (tracelint.profile), BASE's by the profiled one"),
    ("gpt_tiny_item", "gpt_eager_bf16", "model FLOPs per step 0.0958 → 9.81 TFLOP (+10135.5%: a different model or "
                                        "batch)"),
    (NO_SHAPES, "gpt_eager_bf16", "no MFU in BASE: no op shapes (recorded without record_shapes=True)"),
])
def test_the_mfu_block_is_the_traces_own_mfu(own, fixture_traces, base, new, why):
    d = _diff(fixture_traces, base, new)
    block = d.as_dict()["mfu"]
    b, n = own[base]["mfu_pct"], own[new]["mfu_pct"]
    assert (block["base"], block["new"]) == (b, n)
    assert block["basis"] == {"base": own[base]["mfu_basis"], "new": own[new]["mfu_basis"]}
    fb, fn = own[base]["model_flop_per_step"], own[new]["model_flop_per_step"]
    assert block["model_flop_per_step"]["base"] == fb and block["model_flop_per_step"]["new"] == fn
    if b is None or n is None:
        assert block["change_pts"] is None and block["change_pct"] is None and not block["gateable"]
    else:
        assert block["change_pts"] == pytest.approx(n - b, abs=0.005)
        assert block["change_pct"] == pytest.approx(100 * (n - b) / b, abs=0.005)
        assert block["model_flop_per_step"]["change_pct"] == pytest.approx(100 * (fn - fb) / fb, abs=0.005)
    # the noise: the MFU drop a step as slow as the step time's noise makes
    step_noise = d.step.noise_pct
    assert block["noise_pct"] == pytest.approx(100 * step_noise / (100 + step_noise), abs=0.005)
    assert block["drop_limit_pct"] == pytest.approx(100 * 5 / 105, abs=0.005)
    assert block["why"] == why and block["comparable"] is (why is None)
    # the default gate measures time, whatever MFU did
    assert d.gate.measure in ("step_time", "gpu_time") and d.gate.note is None


def test_mfu_figures_on_the_gpt_fixtures(own):
    """The figures the diff reports (issue 37): eager → compiled on one H200, the same 9.81 TFLOP per step."""
    assert own["gpt_eager_bf16"]["mfu_pct"] == 14.23 and own["gpt_compiled"]["mfu_pct"] == 9.54
    assert own["gpt_eager_bf16_tlprofile"]["mfu_pct"] == 29.38 and own["gpt_compiled_tlprofile"]["mfu_pct"] == 33.91
    assert own["gpt_fp32"]["mfu_pct"] == 62.23  # against fp32's 66.9 TFLOP/s, bf16's against 989.4
    assert own[NO_SHAPES]["mfu_pct"] is None and own[NO_SHAPES]["mfu_basis"] is None


def test_the_text_line(own, fixture_traces):
    d = _diff(fixture_traces, "gpt_eager_bf16", "gpt_compiled").as_dict()
    b, n = own["gpt_eager_bf16"]["mfu_pct"], own["gpt_compiled"]["mfu_pct"]
    noise = 100 * 16.8 / 116.8  # the step time's noise floor (one trace a side, two steps), as an MFU drop
    line = (f"  MFU        {b:.1f}% → {n:.1f}%  {n - b:+.1f} pts ({100 * (n - b) / b:+.1f}%)  noise ±{noise:.1f}% "
            "(the step time's ±16.8%, as an MFU drop)")
    assert line == "  MFU        14.2% → 9.5%  -4.7 pts (-33.0%)  noise ±14.4% (the step time's ±16.8%, as an MFU drop)"
    text = render(_result(d), "text")
    assert line in text.splitlines()
    assert "| MFU | 14.2% | 9.5% | -4.7 pts (-33.0%) | noise ±14.4% (the step time's ±16.8%, as an MFU drop) |" in \
        render(_result(d), "markdown")


def test_the_text_says_why_when_a_side_has_none(fixture_traces):
    d = _diff(fixture_traces, NO_SHAPES, "gpt_eager_bf16").as_dict()
    assert "  MFU        n/a → 14.2%  no MFU in BASE: no op shapes (recorded without record_shapes=True)" in \
        render(_result(d), "text").splitlines()
    fp32 = _diff(fixture_traces, "gpt_fp32", "gpt_eager_bf16").as_dict()
    assert ("  MFU        62.2% → 14.2%  -48.0 pts (-77.1%)  not comparable: against different peaks, 67 → 990 "
            "TFLOP/s (a different dtype or device)") in render(_result(fp32), "text").splitlines()


def _result(diff: dict):
    from tracelint.engine.result import RunResult

    return RunResult(diffs=[diff])


# --- the gate ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("floor", [1.0, 5.0, 16.8, 40.0])
@pytest.mark.parametrize(("base", "new"), [("gpt_eager_bf16", "gpt_compiled"), ("gpt_compiled", "gpt_eager_bf16"),
                                           ("gpt_compiled_tlprofile", "gpt_eager_bf16_tlprofile")])
def test_for_the_same_work_the_mfu_gate_is_the_step_gate(fixture_traces, base, new, floor):
    """Same FLOPs, same peak, MFU over the profiled step: an MFU drop beyond L and the noise is a step slowdown beyond
    them (the tlprofile pair's MFU divides by the unprofiled step: it may disagree, and is gated on MFU)."""
    d = _diff(fixture_traces, base, new, gate_measure="mfu", noise_floor_pct=floor, fail_on_new_findings=False)
    assert d.gate.measure == "mfu" and d.mfu.comparable
    if "tlprofile" not in base:
        assert d.gate.slower == beyond(d.step, 5.0)
    assert d.regression is d.gate.slower


def test_a_constructed_mfu_drop_fails_and_its_reverse_passes(fixture_traces, tmp_path):
    """Compiled → eager over the unprofiled steps: MFU 33.91 → 29.38, a 13.4 % drop (the step 15.4 % slower): over
    the 4.76 % limit; within the step floor's ±14.4 %, beyond a 5 % floor's ±4.8 %. The reverse (MFU up) passes."""
    (tmp_path / "pyproject.toml").write_text('[tool.tracelint.diff]\ngate-measure = "mfu"\n')
    fast, slow = fixture(fixture_traces, "gpt_compiled_tlprofile"), fixture(fixture_traces, "gpt_eager_bf16_tlprofile")
    dropped = tracelint(fast, slow, "--noise-floor-pct", "5", cwd=tmp_path)
    assert dropped.returncode == 1, dropped.stderr
    assert ("gate: REGRESSION: MFU 13.4% lower, over the 4.76% limit (a 5% slower step) and the ±4.8% noise"
            in dropped.stdout.splitlines())
    assert ("  MFU        33.9% → 29.4%  -4.5 pts (-13.4%)  noise ±4.8% (the step time's ±5.0%, as an MFU drop)"
            "  [gate]") in dropped.stdout.splitlines()
    within = tracelint(fast, slow, cwd=tmp_path)
    assert within.returncode == 0
    assert "gate: ok: MFU 13.4% lower, over the 4.76% limit (a 5% slower step) but within the ±14.4% noise" in \
        within.stdout.splitlines()
    up = tracelint(slow, fast, "--noise-floor-pct", "5", cwd=tmp_path)
    assert up.returncode == 0 and "gate: ok: MFU 15.4% higher" in up.stdout.splitlines()


def test_gate_measure_mfu_passes_more_work_at_a_slower_step(fixture_traces):
    """The tiny GPT (0.0958 TFLOP per step) against the 124M one (9.81): the step is 22.5 % slower, beyond the step
    floor, and MFU 0.17 → 14.23 %: the step gate fails, the MFU gate passes (it judges the cost of a FLOP)."""
    by_step = _diff(fixture_traces, "gpt_tiny_item", "gpt_eager_bf16", fail_on_new_findings=False)
    by_mfu = _diff(fixture_traces, "gpt_tiny_item", "gpt_eager_bf16", fail_on_new_findings=False, gate_measure="mfu")
    assert by_step.regression and by_step.gate.measure == "step_time"
    assert not by_mfu.regression and by_mfu.gate.measure == "mfu" and by_mfu.mfu.gateable
    assert not by_mfu.mfu.comparable  # said so: other work
    # and less work at a faster step fails it: MFU 14.23 → 0.17
    assert _diff(fixture_traces, "gpt_eager_bf16", "gpt_tiny_item", fail_on_new_findings=False,
                 gate_measure="mfu").regression


def test_gate_measure_mfu_falls_back_to_time_and_says_why(fixture_traces):
    d = _diff(fixture_traces, "gpt_fp32", "gpt_eager_bf16", gate_measure="mfu")
    assert d.gate.measure == "step_time" and not d.regression  # 70 % faster; MFU 62 → 14 % against another peak
    assert d.gate.note == ('gate-measure = "mfu", but against different peaks, 67 → 990 TFLOP/s (a different dtype '
                           'or device): gated on step time')
    assert d.as_dict()["gate"]["note"] == d.gate.note
    none = _diff(fixture_traces, NO_SHAPES, "gpt_eager_bf16", gate_measure="mfu")
    assert none.gate.measure == "step_time" and none.gate.note.startswith('gate-measure = "mfu", but no MFU in BASE')


def _metrics(mfu: float, step_ms: float, flop: float = 1e13) -> dict:
    return {"mfu_pct": mfu, "model_flop_per_step": flop, "step_cpu_us_mean": step_ms * 1e3,
            "flop_unattributed_pct": 0.0, "mfu_basis": "profiled step"}


@pytest.mark.parametrize("noise", [0.9, 5.0, 16.8, None])
@pytest.mark.parametrize("slower_pct", [-30.0, 0.0, 4.0, 5.0, 5.2, 5.3, 16.0, 17.0, 30.0, 200.0])
def test_the_derived_noise_and_limit_agree_with_the_step_gate(slower_pct, noise):
    """MFU ∝ 1/T with F and P fixed: a step s slower drops MFU by s/(1+s); the MFU test is the step test."""
    base_ms, peak = 50.0, 989.4e12
    new_ms = base_ms * (1 + slower_pct / 100)
    base, new = (_metrics(100 * 1e13 / (t / 1e3) / peak, t) for t in (base_ms, new_ms))
    step = Change(base_ms, new_ms, slower_pct, noise, 3, 3)
    m = mfu_change(base, new, step, 5.0)
    assert m.comparable and m.dropped == beyond(step, 5.0)
    assert m.noise_pct == (None if noise is None else pytest.approx(100 * noise / (100 + noise), abs=0.005))


def test_gate_measure_in_the_config(tmp_path):
    assert parse_config({"diff": {"gate-measure": "mfu"}}, tmp_path, tmp_path / "pyproject.toml").diff_gate_measure \
        == "mfu"
    assert Config().diff_gate_measure == "time"
    with pytest.raises(ConfigError, match="gate-measure must be 'time' or 'mfu', not 'MFU'"):
        parse_config({"diff": {"gate-measure": "MFU"}}, tmp_path, tmp_path / "pyproject.toml")
