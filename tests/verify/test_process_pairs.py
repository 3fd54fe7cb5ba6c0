"""Rounds spread over several pairs of processes (``--pairs``): the statistics over pairs (a pair's offset is in
its interval only when there are several pairs), and the schedule that starts them (both sides restarted, warmed
up at once, the budget shared, the target stop only in the last pair)."""
from __future__ import annotations

import json
import math
import random
import statistics
import sys
import textwrap
from dataclasses import replace

import pytest
from click.testing import CliRunner

from tests.verify.conftest import CPU, SCRIPTS, logging_session, report, synthetic
from tracelint.cli.verify import verify_cmd
from tracelint.verify.harness_control import RunOutcome, RunSettings
from tracelint.verify.measure import compare, measure
from tracelint.verify.stats import judge, paired_interval
from tracelint.verify.variants import Variant

T975 = {1: 12.706, 2: 4.303, 4: 2.776, 29: 2.045}  # Student-t table values, independent of engine.stats


def _blocks(offsets: list[float], rounds: int, speedup: float, noise: float, rng: random.Random):
    """Synthetic rounds: pair k's ratio is ``speedup * exp(offsets[k])`` (the pair's processes were set that way
    when they started), each round with a log-normal noise of SD ``noise``."""
    base, fixed, pair = [], [], []
    for k, offset in enumerate(offsets):
        for _ in range(rounds):
            b = 10.0 * math.exp(rng.gauss(0, noise))
            base.append(b)
            fixed.append(b / (speedup * math.exp(offset + rng.gauss(0, noise))))
            pair.append(k)
    return base, fixed, pair


def test_one_pair_with_an_offset_excludes_the_truth_several_pairs_cover_it():
    rng = random.Random(1)
    truth = 1.20
    base, fixed, pair = _blocks([0.15, -0.10, -0.05], 10, truth, 0.03, rng)
    one = paired_interval(base[:10], fixed[:10])  # the first pair alone: tight, and off by its offset
    assert one.pairs == 1 and not one.low <= truth <= one.high
    three = paired_interval(base, fixed, pair)
    assert three.pairs == 3 and three.rounds == 30 and three.low <= truth <= three.high


def test_the_pair_interval_is_the_wider_of_pairs_and_rounds():
    rng = random.Random(2)
    base, fixed, pair = _blocks([0.10, -0.08, 0.02], 8, 1.3, 0.02, rng)
    logs = [math.log(b / f) for b, f in zip(base, fixed, strict=True)]
    means = [statistics.fmean(logs[k * 8:(k + 1) * 8]) for k in range(3)]
    centre = statistics.fmean(means)
    between = T975[2] * statistics.stdev(means) / math.sqrt(3)
    within = 2.069 * statistics.stdev(logs) / math.sqrt(24)  # t(23)
    assert between > within
    iv = paired_interval(base, fixed, pair)
    assert iv.estimate == pytest.approx(math.exp(centre))
    assert (iv.low, iv.high) == pytest.approx((math.exp(centre - between), math.exp(centre + between)))
    assert iv.pair_estimates == pytest.approx(tuple(math.exp(m) for m in means))
    # pairs that happen to agree exactly: the interval keeps the rounds' width
    base, fixed, pair = _blocks([0.0, 0.0], 15, 1.3, 0.05, random.Random(3))
    logs = [math.log(b / f) for b, f in zip(base, fixed, strict=True)]
    shifted = [b * (1.0 if p == 0 else math.exp(statistics.fmean(logs[:15]) - statistics.fmean(logs[15:])))
               for b, p in zip(base, pair, strict=True)]  # the second pair's mean moved onto the first's
    logs = [math.log(b / f) for b, f in zip(shifted, fixed, strict=True)]
    iv = paired_interval(shifted, fixed, pair)
    half = T975[29] * statistics.stdev(logs) / math.sqrt(30)
    assert math.log(iv.high / iv.estimate) == pytest.approx(half, rel=1e-6)


def test_each_pair_weighs_the_same_however_many_rounds_it_ran():
    base = [12.0] * 20 + [10.0] * 4
    fixed = [10.0] * 20 + [10.0] * 4  # 1.2 in twenty rounds, 1.0 in four
    iv = paired_interval(base, fixed, [0] * 20 + [1] * 4)
    assert iv.estimate == pytest.approx(math.sqrt(1.2))
    assert paired_interval(base, fixed).estimate == pytest.approx(math.exp((20 * math.log(1.2)) / 24))


def test_one_pair_is_the_round_interval_of_before():
    base, fixed = [10.0, 10.4, 9.8, 10.1, 10.3], [9.0, 9.5, 9.0, 9.1, 9.2]
    assert paired_interval(base, fixed, [0] * 5) == replace(paired_interval(base, fixed))
    iv = paired_interval(base, fixed)
    assert iv.pairs == 1 and len(iv.pair_estimates) == 1


def test_coverage_over_many_simulated_comparisons():
    """Each side's process draws its speed when it starts (SD 0.15 in logs), blocks within it vary 0.05: the
    one-pair interval covers the true speedup far less often than 95 %, three pairs with the wider rule about
    95 % or more."""
    rng = random.Random(7)
    covered = {1: 0, 3: 0}
    trials = 400
    for _ in range(trials):
        offsets = [rng.gauss(0, 0.15) - rng.gauss(0, 0.15) for _ in range(3)]
        base, fixed, pair = _blocks(offsets, 8, 1.25, 0.05, rng)
        one = paired_interval(*_blocks(offsets[:1], 24, 1.25, 0.05, rng)[:2])  # before: one pair, all rounds
        three = paired_interval(base, fixed, pair)
        covered[1] += one.low <= 1.25 <= one.high
        covered[3] += three.low <= 1.25 <= three.high
    assert covered[1] / trials < 0.5 and covered[3] / trials >= 0.9


def test_judge_counts_the_pairs():
    base, fixed, pair = _blocks([0.2, -0.2], 6, 1.1, 0.01, random.Random(4))
    outcome = RunOutcome(True, tuple(fixed))
    assert judge(base[:6], RunOutcome(True, tuple(fixed[:6])), True).status == "confirmed"  # one pair: tight
    spread = judge(base, outcome, True, pair_of=pair)
    assert spread.status == "no-effect" and spread.interval.pairs == 2


# --- the schedule ---------------------------------------------------------------------------------------------

class FakeSide:
    """A side of instant blocks (``ms``, or the values of a list in turn); ``relaunch``/``start`` log the new
    pair's process."""

    def __init__(self, label: str, log: list, ms: float | list[float], fail_start: int | None = None) -> None:
        self.label, self.log, self.fail_start = label, log, fail_start
        self.ms = ms if isinstance(ms, list) else [ms]
        self.failure, self.processes, self.turns = None, 1, 0

    def relaunch(self) -> None:
        self.processes += 1
        self.log.append(f"launch {self.label}")

    def start(self) -> bool:
        self.log.append(f"ready {self.label}")
        return self.fail_start is None or self.processes < self.fail_start

    def turn(self):
        self.log.append(self.label)
        self.turns += 1
        return self.ms[(self.turns - 1) % len(self.ms)]


def test_pairs_start_in_turn_each_with_its_rounds_and_the_target_waits_for_the_last():
    log: list[str] = []
    settings = RunSettings(blocks=4, budget_s=60, target=0.03, max_rounds=60, pairs=3)
    rounds = compare(FakeSide("B", log, 10.0), FakeSide("V", log, 8.0), settings)
    # exact blocks: the interval is tight from the 4th round on, but the first pairs run their share of rounds
    assert rounds.pair == [0] * 20 + [1] * 20 + [2] * 4 and rounds.stopped == "target"
    turns = [e for e in log if len(e) == 1]
    assert "".join(turns[:8]) == "BVVBBVVB" and "".join(turns[40:48]) == "BVVBBVVB"  # each pair starts B V
    restarts = [e for e in log if len(e) > 1]
    assert restarts == ["launch B", "launch V", "ready B", "ready V"] * 2  # both launched, then both waited for


def test_a_budget_share_ends_a_pair_after_its_minimum_rounds():
    log: list[str] = []
    settings = RunSettings(blocks=3, budget_s=0, pairs=3)
    rounds = compare(FakeSide("B", log, 10.0), FakeSide("V", log, [9.0, 9.5, 8.5, 9.7]), settings)
    assert rounds.pair == [0, 0, 0, 1, 1, 1, 2, 2, 2] and rounds.stopped == "budget"
    log.clear()
    one = compare(FakeSide("B", log, 10.0), FakeSide("V", log, 9.0), replace(settings, pairs=1))
    assert one.pair == [0, 0, 0] and not [e for e in log if e.startswith("launch")]
    fresh = compare(FakeSide("B", log, 10.0), FakeSide("V", log, 9.0), replace(settings, processes="fresh"))
    assert fresh.pair == [0, 0, 0]  # fresh processes: every turn has its own already


def test_a_side_that_fails_to_start_a_new_pair_ends_the_comparison():
    log: list[str] = []
    settings = RunSettings(blocks=2, budget_s=0, pairs=3)
    assert compare(FakeSide("B", log, 10.0, fail_start=3), FakeSide("V", log, 9.0), settings).stopped \
        == "baseline-failed"
    assert compare(FakeSide("B", log, 10.0), FakeSide("V", log, 9.0, fail_start=2), settings).stopped \
        == "variant-failed"


def test_measure_restarts_both_sides_for_each_pair(tmp_path, monkeypatch):
    """Through measure(): each pair's processes in folders of their own, the old ones stopped first, both new
    ones started before either is waited for; the rows carry the pairs."""
    measure_module = sys.modules["tracelint.verify.measure"]
    log: list[str] = []
    monkeypatch.setattr(measure_module, "Session", logging_session(log, log_finish=True))
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    settings = RunSettings(blocks=2, budget_s=0, device="cpu", pairs=2)
    runs, (row,) = measure(script, [Variant("a", "a", True, "x = 2\n")], [], settings, tmp_path / "runs")
    assert log == ["start baseline", "start 01-a", "ready baseline", "ready 01-a",
                   "finish baseline", "start baseline-1", "finish 01-a", "start 01-a-1", "ready baseline-1",
                   "ready 01-a-1", "finish 01-a-1", "finish baseline-1"]
    assert row.verdict.interval.pairs == 2 and row.verdict.interval.rounds == 4
    assert [run.block_ms for run in runs] == [(10.0, 10.0), (10.0, 10.0)]  # each baseline process's blocks


def test_the_report_states_pairs_and_rounds():
    v = synthetic()
    base, fixed, pair = (10.0, 10.1, 10.2, 10.0), (7.0, 7.1, 7.05, 7.2), [0, 0, 1, 1]
    rows = (replace(v.rows[0], verdict=judge(base, RunOutcome(True, fixed, (2.0,)), True, stopped="budget",
                                                 pair_of=pair)), v.rows[1])
    v = replace(v, rows=rows, settings=replace(CPU, pairs=2))
    doc = json.loads(report([v], "json"))["verify"][0]
    assert doc["settings"]["pairs"] == 2 and "2 pairs of persistent processes" in doc["settings"]["method"]
    measured = doc["variants"][0]["verification"]
    assert measured["pairs"] == 2 and measured["rounds"] == 4
    assert measured["pair_speedups"] == pytest.approx([math.sqrt(10.0 * 10.1 / 7.0 / 7.1),
                                                       math.sqrt(10.2 * 10.0 / 7.05 / 7.2)], abs=1e-4)
    text = report([v])
    assert "4 in 2 pairs (budget)" in text and "warmed up 2 steps" in text
    assert "at least 3 rounds in each of 2 pairs of processes" in text
    assert "geometric mean of the pairs' speedups" in text
    # issue #38 item 4: the spread between the pairs of processes beside the interval, and between the baseline's
    # processes (one process here: none)
    words = ", ".join(f"{x:.2f}×" for x in measured["pair_speedups"])
    assert f"its 2 pairs of processes measured {words}" in text
    assert doc["baseline"]["between_process_pct"] is None and "between its" not in text


def test_the_baseline_processes_spread_is_reported():
    """Two baseline processes whose median steps are 10.1 and 11.1 ms: 100 × 1.0 / 10.6 = 9.4 % apart."""
    v = synthetic()
    runs = (RunOutcome(True, (10.0, 10.1, 10.2), (2.0,), device="GPU X", torch="2.x"),
            RunOutcome(True, (11.0, 11.1, 11.2), (2.0,), device="GPU X", torch="2.x"))
    v = replace(v, baseline_runs=runs)
    doc = json.loads(report([v], "json"))["verify"][0]
    assert doc["baseline"]["between_process_pct"] == pytest.approx(100 * 1.0 / 10.6, abs=0.05)
    assert "; between its 2 processes 9.4%" in report([v])


def test_the_command_passes_pairs(monkeypatch):
    import tracelint.verify

    seen = {}

    def fake(path, argv, settings, **kwargs):
        seen["settings"] = settings
        return synthetic()

    monkeypatch.setattr(tracelint.verify, "verify_script", fake)
    args = [str(SCRIPTS / "one_fix.py"), "--no-progress", "--format", "json"]
    assert CliRunner().invoke(verify_cmd, args).exit_code == 0 and seen["settings"].pairs == 3
    assert CliRunner().invoke(verify_cmd, [*args, "--pairs", "1"]).exit_code == 0 and seen["settings"].pairs == 1
    assert CliRunner().invoke(verify_cmd, [*args, "--pairs", "0"]).exit_code == 2
    with pytest.raises(ValueError):
        RunSettings(pairs=0)
    assert RunSettings(pairs=4, processes="fresh").planned_pairs == 1


FINITE = """\
import sys
import torch

model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 8)
for step in range(int(sys.argv[1])):
    opt.zero_grad(set_to_none=False)
    model(x).pow(2).mean().backward()
    opt.step()
"""


@pytest.mark.slow
def test_real_processes_in_two_pairs_restart_when_they_run_out_of_steps(tmp_path):
    """On the CPU: two pairs of real processes; a script of 14 steps gives 3 turns (2 warm-up, then 1 + 3 steps
    each), so each pair's 4 rounds need a second process of each side: both restarts work together."""
    pytest.importorskip("torch")
    script = tmp_path / "finite.py"
    script.write_text(textwrap.dedent(FINITE))
    fixed = FINITE.replace("set_to_none=False", "set_to_none=True")
    settings = replace(CPU, blocks=4, budget_s=0, resume_warmup=1, pairs=2)
    runs, (row,) = measure(script, [Variant("TL301:8", "fix", True, fixed)], ["14"], settings, tmp_path / "runs")
    assert row.verdict.status in ("confirmed", "small", "no-effect", "slower"), row.verdict.reason
    iv = row.verdict.interval
    assert iv.pairs == 2 and iv.rounds == 8 and len(iv.pair_estimates) == 2
    assert len(runs) == 4 and all(run.ok for run in runs)  # two baseline processes per pair
    assert sum(len(run.block_ms) for run in runs) == 8
    folders = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert folders == ["01-TL301_8", "01-TL301_8-1", "01-TL301_8-2", "01-TL301_8-3",
                       "baseline", "baseline-1", "baseline-2", "baseline-3"]
