"""MFU in ``tracelint diff``: the ``mfu`` block against the two traces' own ``tracelint trace`` metrics, its noise
from the time it divides by (GPU time per step, or the step time where a side has its unprofiled step), when MFU is
not comparable (another peak, another step basis, other work, none on a side), and the gate on it: one test with
the GPU-time gate's for the same work over the GPU's busy time, and what ``gate-measure = "mfu"`` changes (a bigger
batch is not a regression; nor, on its own, a slower profiled step)."""
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


def _unprofiled(metrics: dict) -> bool:
    return bool(metrics["unprofiled_step_ms"])


@pytest.mark.parametrize(("base", "new", "why"), [
    ("gpt_eager_bf16", "gpt_compiled", None),  # over the GPU's busy time: compiled's is the shorter, MFU up
    ("gpt_compiled", "gpt_eager_bf16", None),  # ... and down the other way, with GPU time's noise
    ("gpt_eager_bf16_tlprofile", "gpt_compiled_tlprofile", None),  # over the unprofiled steps: MFU up
    ("gpt_fp32", "gpt_eager_bf16", "against different peaks, 67 → 989 TFLOP/s (a different dtype or device)"),
    ("gpt_eager_bf16", "gpt_eager_bf16_tlprofile",
     "NEW's MFU divides by the unprofiled step (tracelint.profile), BASE's by the GPU's busy time per profiled step"),
    ("gpt_compiled_tlprofile", "gpt_compiled",
     "BASE's MFU divides by the unprofiled step (tracelint.profile), NEW's by the GPU's busy time per profiled step"),
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
    if why is None:  # same FLOPs and peak: MFU moves as 1 / the time it divides by, each side's mfu_step_ms
        tb, tn = own[base]["mfu_step_ms"], own[new]["mfu_step_ms"]
        assert block["change_pct"] == pytest.approx(100 * (tb / tn - 1), abs=0.05)
    # the noise: the MFU drop a time as slow as its noise makes: GPU time per step's where neither side has its
    # unprofiled step (both divide by the GPU's busy time), else the step time's
    busy = not _unprofiled(own[base]) and not _unprofiled(own[new])
    source = d.gpu if busy else d.step
    assert source.noise_pct == (0.9 if busy else 16.8)  # the two floors: one trace a side, two steps
    assert block["noise_pct"] == pytest.approx(100 * source.noise_pct / (100 + source.noise_pct), abs=0.005)
    assert block["drop_limit_pct"] == pytest.approx(100 * 5 / 105, abs=0.005)
    assert block["why"] == why and block["comparable"] is (why is None)
    # the default gate measures time, whatever MFU did
    assert d.gate.measure in ("step_time", "gpu_time") and d.gate.note is None


def test_mfu_figures_on_the_gpt_fixtures(own):
    """The figures the diff reports (issue 37): eager → compiled on one H200, the same 9.81 TFLOP per step; over the
    GPU's busy time per profiled step without an unprofiled record, else over the unprofiled step."""
    assert own["gpt_eager_bf16"]["mfu_pct"] == 30.16 and own["gpt_compiled"]["mfu_pct"] == 35.16
    assert own["gpt_eager_bf16_tlprofile"]["mfu_pct"] == 29.38 and own["gpt_compiled_tlprofile"]["mfu_pct"] == 33.91
    assert own["gpt_fp32"]["mfu_pct"] == 62.56  # against fp32's 66.9 TFLOP/s, bf16's against 989.4
    assert own["gpt_tiny_item"]["mfu_pct"] == 2.55
    for name in NAMES[:-1]:
        m = own[name]
        step_ms = m["unprofiled_step_ms"] or m["gpu_busy_us"] / m["steps"] / 1000
        assert m["mfu_step_ms"] == pytest.approx(step_ms, abs=0.0005)
        assert m["mfu_basis"].startswith(f"unprofiled step {step_ms:.2f} ms" if _unprofiled(m) else
                                         f"GPU busy {step_ms:.2f} ms per profiled step (no unprofiled record")
        assert m["mfu_peak_tflops"] == (66.9 if name == "gpt_fp32" else 989.4)
        assert m["mfu_pct"] == pytest.approx(100 * m["model_flop_per_step"] / (step_ms / 1e3)
                                             / (m["mfu_peak_tflops"] * 1e12), abs=0.005)
    assert own[NO_SHAPES]["mfu_pct"] is None and own[NO_SHAPES]["mfu_step_ms"] is None
    assert own[NO_SHAPES]["mfu_basis"] == "no MFU: no op shapes (recorded without record_shapes=True)"


def test_the_text_line(own, fixture_traces):
    """Over the unprofiled steps: the step time's noise floor (one trace a side, two steps), as an MFU drop."""
    base, new = "gpt_eager_bf16_tlprofile", "gpt_compiled_tlprofile"
    d = _diff(fixture_traces, base, new).as_dict()
    b, n = own[base]["mfu_pct"], own[new]["mfu_pct"]
    noise = 100 * 16.8 / 116.8
    line = (f"  MFU        {b:.1f}% → {n:.1f}%  {n - b:+.1f} pts ({100 * (n - b) / b:+.1f}%)  noise ±{noise:.1f}% "
            "(the step time's ±16.8%, as an MFU drop)")
    assert line == ("  MFU        29.4% → 33.9%  +4.5 pts (+15.4%)  noise ±14.4% (the step time's ±16.8%, as an MFU "
                    "drop)")
    text = render(_result(d), "text")
    assert line in text.splitlines()
    assert "| MFU | 29.4% | 33.9% | +4.5 pts (+15.4%) | noise ±14.4% (the step time's ±16.8%, as an MFU drop) |" in \
        render(_result(d), "markdown")
    assert ("<p class='evidence'>MFU 29.4% → 33.9%  +4.5 pts (+15.4%)  noise ±14.4% (the step time&#x27;s ±16.8%, as "
            "an MFU drop)</p>") in render(_result(d), "html")


def test_the_text_line_over_the_gpu_busy_time(own, fixture_traces):
    """Without an unprofiled record: GPU time per step's noise floor (±0.9 %), as an MFU drop (0.89 %)."""
    d = _diff(fixture_traces, "gpt_eager_bf16", "gpt_compiled").as_dict()
    b, n = own["gpt_eager_bf16"]["mfu_pct"], own["gpt_compiled"]["mfu_pct"]
    noise = 100 * 0.9 / 100.9
    start = f"  MFU        {b:.1f}% → {n:.1f}%  {n - b:+.1f} pts ({100 * (n - b) / b:+.1f}%)  noise ±{noise:.1f}% ("
    assert start == "  MFU        30.2% → 35.2%  +5.0 pts (+16.6%)  noise ±0.9% ("
    assert [line for line in render(_result(d), "text").splitlines() if line.startswith(start)]
    assert "| MFU | 30.2% | 35.2% | +5.0 pts (+16.6%) | noise ±0.9% (" in render(_result(d), "markdown")


def test_the_text_says_why_when_a_side_has_none(fixture_traces):
    d = _diff(fixture_traces, NO_SHAPES, "gpt_eager_bf16").as_dict()
    assert "  MFU        n/a → 30.2%  no MFU in BASE: no op shapes (recorded without record_shapes=True)" in \
        render(_result(d), "text").splitlines()
    fp32 = _diff(fixture_traces, "gpt_fp32", "gpt_eager_bf16").as_dict()
    assert ("  MFU        62.6% → 30.2%  -32.4 pts (-51.8%)  not comparable: against different peaks, 67 → 989 "
            "TFLOP/s (a different dtype or device)") in render(_result(fp32), "text").splitlines()


def _result(diff: dict):
    from tracelint.engine.result import RunResult

    return RunResult(diffs=[diff])


# --- the gate ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("floor", [0.9, 5.0, 16.57, 16.58, 16.59, 16.8, 40.0])
@pytest.mark.parametrize(("base", "new"), [("gpt_eager_bf16", "gpt_compiled"), ("gpt_compiled", "gpt_eager_bf16"),
                                           ("gpt_compiled_tlprofile", "gpt_eager_bf16_tlprofile")])
def test_for_the_same_work_the_mfu_gate_is_the_gpu_time_gate(fixture_traces, base, new, floor):
    """Same FLOPs, same peak, MFU over the GPU's busy time per profiled step: an MFU drop beyond L and the noise is
    GPU time per step slower beyond them, its noise GPU time's. Compiled → eager is 16.58 % more GPU time and a
    16.58 % MFU slowdown (35.16 / 30.16 − 1): the floors 16.57 / 16.58 / 16.59 are the boundary, the two tests agree
    on each side of it and at it. (The tlprofile pair's MFU divides by the unprofiled step: its noise is the step
    time's, and it may disagree with either time gate.)"""
    d = _diff(fixture_traces, base, new, gate_measure="mfu", noise_floor_pct=floor, fail_on_new_findings=False)
    assert d.gate.measure == "mfu" and d.mfu.comparable
    if "tlprofile" in base:
        assert d.mfu.noise_pct == pytest.approx(100 * d.step.noise_pct / (100 + d.step.noise_pct), abs=0.005)
    else:
        assert d.mfu.noise_pct == pytest.approx(100 * d.gpu.noise_pct / (100 + d.gpu.noise_pct), abs=0.005)
        assert d.gate.slower == beyond(d.gpu, 5.0)
        # the limit too: gated at L = the slowdown itself, just under and just over it
        for limit in (16.57, 16.58, 16.59):
            at = _diff(fixture_traces, base, new, gate_measure="mfu", noise_floor_pct=floor, max_regression_pct=limit,
                       fail_on_new_findings=False)
            assert at.gate.slower == beyond(at.gpu, limit)
    assert d.regression is d.gate.slower


def test_the_boundary_pair(fixture_traces):
    """The figures the boundary above rests on, and that the profiled step disagrees: compiled → eager is a step
    33 % faster (the profiler's host overhead on the compiled one) with 16.58 % more GPU time, MFU 14.2 % lower."""
    d = _diff(fixture_traces, "gpt_compiled", "gpt_eager_bf16", gate_measure="mfu", fail_on_new_findings=False)
    assert d.gpu.change_pct == 16.58 and round(100 * (d.mfu.base / d.mfu.new - 1), 2) == 16.58
    assert d.mfu.change_pct == -14.22 and d.step.change_pct == pytest.approx(-33.0, abs=0.05)
    assert d.regression and d.mfu.dropped and not beyond(d.step, 5.0)


def test_an_mfu_drop_over_the_gpu_busy_time_fails_and_its_reverse_passes(fixture_traces, tmp_path):
    """Compiled → eager over the GPU's busy time: MFU 35.16 → 30.16, a 14.2 % drop (16.6 % more GPU time per step):
    over the 4.76 % limit and GPU time's ±0.9 % floor (±0.9 % as an MFU drop), though the profiled step is 33 %
    faster; within a 20 % floor's ±16.7 %. The reverse (MFU up) passes, though its profiled step is 49 % slower."""
    (tmp_path / "pyproject.toml").write_text('[tool.tracelint.diff]\ngate-measure = "mfu"\n')
    fast, slow = fixture(fixture_traces, "gpt_compiled"), fixture(fixture_traces, "gpt_eager_bf16")
    dropped = tracelint(fast, slow, cwd=tmp_path)
    assert dropped.returncode == 1, dropped.stderr
    assert ("gate: REGRESSION: MFU 14.2% lower, over the 4.76% limit (a 5% slower GPU time per step) and the "
            "±0.9% noise" in dropped.stdout.splitlines())
    assert any(line.startswith("  MFU        35.2% → 30.2%  -5.0 pts (-14.2%)  noise ±0.9% (the GPU time per "
                               "step's ±0.9%, as an MFU drop)")
               and line.endswith("  [gate]") for line in dropped.stdout.splitlines())
    within = tracelint(fast, slow, "--noise-floor-pct", "20", cwd=tmp_path)
    assert within.returncode == 0
    assert ("gate: ok: MFU 14.2% lower, over the 4.76% limit (a 5% slower GPU time per step) but within the ±16.7% "
            "noise") in within.stdout.splitlines()
    up = tracelint(slow, fast, "--no-fail-on-new-findings", cwd=tmp_path)
    assert up.returncode == 0 and "gate: ok: MFU 16.6% higher; new findings" in up.stdout


def test_an_mfu_drop_over_the_unprofiled_step_fails_and_its_reverse_passes(fixture_traces, tmp_path):
    """Compiled → eager over the unprofiled steps: MFU 33.91 → 29.38, a 13.4 % drop (the step 15.4 % slower): over
    the 4.76 % limit; within the step floor's ±14.4 % (the noise is the step time's: both sides have their unprofiled
    step), beyond a 5 % floor's ±4.8 %. The reverse (MFU up) passes."""
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
    floor, and MFU 2.55 → 30.16 %: the step gate fails, the MFU gate passes (it judges the cost of a FLOP)."""
    by_step = _diff(fixture_traces, "gpt_tiny_item", "gpt_eager_bf16", fail_on_new_findings=False)
    by_mfu = _diff(fixture_traces, "gpt_tiny_item", "gpt_eager_bf16", fail_on_new_findings=False, gate_measure="mfu")
    assert by_step.regression and by_step.gate.measure == "step_time"
    assert not by_mfu.regression and by_mfu.gate.measure == "mfu" and by_mfu.mfu.gateable
    assert not by_mfu.mfu.comparable  # said so: other work
    assert (by_mfu.mfu.base, by_mfu.mfu.new) == (2.55, 30.16)
    # and less work at a faster step fails it: MFU 30.16 → 2.55
    assert _diff(fixture_traces, "gpt_eager_bf16", "gpt_tiny_item", fail_on_new_findings=False,
                 gate_measure="mfu").regression


def test_gate_measure_mfu_falls_back_to_time_and_says_why(fixture_traces):
    d = _diff(fixture_traces, "gpt_fp32", "gpt_eager_bf16", gate_measure="mfu")
    assert d.gate.measure == "step_time" and not d.regression  # 70 % faster; MFU 63 → 30 % against another peak
    assert d.gate.note == ('gate-measure = "mfu", but against different peaks, 67 → 989 TFLOP/s (a different dtype '
                           'or device): gated on step time')
    assert d.as_dict()["gate"]["note"] == d.gate.note
    none = _diff(fixture_traces, NO_SHAPES, "gpt_eager_bf16", gate_measure="mfu")
    assert none.gate.measure == "step_time" and none.gate.note.startswith('gate-measure = "mfu", but no MFU in BASE')
    mixed = _diff(fixture_traces, "gpt_eager_bf16", "gpt_eager_bf16_tlprofile", gate_measure="mfu")
    assert mixed.gate.measure == "step_time" and mixed.gate.note == (
        "gate-measure = \"mfu\", but NEW's MFU divides by the unprofiled step (tracelint.profile), BASE's by the "
        "GPU's busy time per profiled step: gated on step time")


def _metrics(step_ms: float, *, unprofiled: bool = False, flop: float = 1e13, peak: float = 989.4) -> dict:
    """A side whose MFU divides by ``step_ms``: its unprofiled step, else its GPU's busy time per profiled step."""
    return {"mfu_pct": 100 * flop / (step_ms / 1e3) / (peak * 1e12), "model_flop_per_step": flop,
            "mfu_step_ms": step_ms, "mfu_peak_tflops": peak, "unprofiled_step_ms": step_ms if unprofiled else None,
            "flop_unattributed_pct": 0.0,
            "mfu_basis": f"unprofiled step {step_ms:.2f} ms" if unprofiled else f"GPU busy {step_ms:.2f} ms per step"}


@pytest.mark.parametrize("unprofiled", [False, True])
@pytest.mark.parametrize("noise", [0.9, 5.0, 16.8, None])
@pytest.mark.parametrize("slower_pct", [-30.0, 0.0, 4.0, 5.0, 5.2, 5.3, 16.0, 17.0, 30.0, 200.0])
def test_the_derived_noise_and_limit_agree_with_the_time_gate(slower_pct, noise, unprofiled):
    """MFU ∝ 1/T with F and P fixed: a T s slower drops MFU by s/(1+s); the MFU test is the test of the Change of T
    (GPU time per step over the GPU's busy time, the step over the unprofiled step), at the boundary too."""
    base_ms = 50.0
    new_ms = base_ms * (1 + slower_pct / 100)
    base, new = (_metrics(t, unprofiled=unprofiled) for t in (base_ms, new_ms))
    timed = Change(base_ms, new_ms, slower_pct, noise, 3, 3)
    m = mfu_change(base, new, timed, 5.0)
    assert m.comparable and m.dropped == beyond(timed, 5.0)
    assert m.noise_pct == (None if noise is None else pytest.approx(100 * noise / (100 + noise), abs=0.005))


@pytest.mark.parametrize(("base", "new", "why"), [
    (_metrics(50.0, unprofiled=True), _metrics(50.0),
     "BASE's MFU divides by the unprofiled step (tracelint.profile), NEW's by the GPU's busy time per profiled step"),
    (_metrics(50.0), _metrics(50.0, unprofiled=True),
     "NEW's MFU divides by the unprofiled step (tracelint.profile), BASE's by the GPU's busy time per profiled step"),
    (_metrics(50.0), _metrics(50.0, peak=66.9), "against different peaks, 989 → 67 TFLOP/s (a different dtype or "
                                                "device)"),
    (_metrics(50.0, peak=989.4), _metrics(50.0, peak=900.0), None),  # within 10 %: one peak
    (_metrics(50.0), _metrics(50.0, flop=1.04e13), "model FLOPs per step 10 → 10.4 TFLOP (+4.0%: a different "
                                                   "model or batch)"),
])
def test_when_two_mfus_are_comparable(base, new, why):
    m = mfu_change(base, new, Change(50.0, 50.0, 0.0, 0.9, 3, 3), 5.0)
    assert m.why == why and m.gateable is (why is None or why.startswith("model FLOPs"))


def test_gate_measure_in_the_config(tmp_path):
    assert parse_config({"diff": {"gate-measure": "mfu"}}, tmp_path, tmp_path / "pyproject.toml").diff_gate_measure \
        == "mfu"
    assert Config().diff_gate_measure == "time"
    with pytest.raises(ConfigError, match="gate-measure must be 'time' or 'mfu', not 'MFU'"):
        parse_config({"diff": {"gate-measure": "MFU"}}, tmp_path, tmp_path / "pyproject.toml")


def test_gate_measure_on_the_command_line(fixture_traces, tmp_path):
    """``--gate-measure mfu`` does what the config's ``gate-measure = "mfu"`` does, and ``--gate-measure time`` undoes
    the config's: compiled → eager is 33 % faster by step time, 14.2 % lower by MFU over the GPU's busy time."""
    fast, slow = fixture(fixture_traces, "gpt_compiled"), fixture(fixture_traces, "gpt_eager_bf16")
    by_time = tracelint(fast, slow, "--no-fail-on-new-findings", cwd=tmp_path)
    by_mfu = tracelint(fast, slow, "--no-fail-on-new-findings", "--gate-measure", "mfu", cwd=tmp_path)
    assert (by_time.returncode, by_mfu.returncode) == (0, 1), (by_time.stdout, by_mfu.stderr)
    assert "gate: REGRESSION: MFU 14.2% lower" in by_mfu.stdout
    (tmp_path / "pyproject.toml").write_text('[tool.tracelint.diff]\ngate-measure = "mfu"\n')
    back = tracelint(fast, slow, "--no-fail-on-new-findings", "--gate-measure", "time", cwd=tmp_path)
    assert back.returncode == 0 and "gate: ok" in back.stdout
