"""Issue #26 without a GPU: the calibration pairs (fixtures/verify) are what they claim to be, each twin is the
change verify measures, bench/verify_calibration.py plans a verify run that measures each class and judges the
agreement as the issue states it, and ab_time.py times fresh processes in ABBA order."""
from __future__ import annotations

import ast
import difflib
import json
import sys
from pathlib import Path

import pytest

from tracelint.engine import Finding
from tracelint.source import lint_paths
from tracelint.verify.variants import plan

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures" / "verify"
sys.path.insert(0, str(REPO / "bench"))
import verify_calibration as bench  # noqa: E402  (a script, not a package module)

sys.path.insert(0, str(FIXTURES))
import ab_time  # noqa: E402


def code_of(text: str) -> list[str]:
    """The script's lines without its module docstring and blank lines (the twins document themselves)."""
    tree = ast.parse(text)
    lines = text.splitlines()
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant):
        lines = lines[tree.body[0].end_lineno:]
    return [line for line in lines if line.strip()]


def changed(before: str, after: str) -> list[str]:
    return [line for line in difflib.unified_diff(code_of(before), code_of(after), n=0, lineterm="")
            if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def entry(name: str) -> bench.Entry:
    return next(e for e in bench.ENTRIES if e.name == name)


def verify_plan(e: bench.Entry, folder: Path, tmp: Path):
    """What `tracelint verify` plans for the entry's options (--select, --precision)."""
    options = dict(zip(e.verify[::2], e.verify[1::2], strict=True))
    precision = {"none": []}.get(options.get("--precision"), [options.get("--precision")])
    select = [options["--select"]] if "--select" in options else None
    return plan(folder / e.script, tmp, precision=precision, select=select)


def test_the_bench_covers_every_class_the_issue_lists():
    labels = " ".join(row.label for e in bench.ENTRIES for row in e.rows)
    for word in ("`total += loss.item()`", "append(loss.item())", "TL102", "TL202 + TL203", "TL204", "TL301",
                 "TL303", "TL401", "bf16", "TL404"):
        assert word in labels, word
    assert sum(len(e.rows) for e in bench.ENTRIES) >= 10
    loaders = [e for e in bench.ENTRIES if "workers" in e.what]
    assert len(loaders) >= 2 and any("host-bound" in e.what for e in bench.ENTRIES)


@pytest.mark.parametrize("name", [e.name for e in bench.ENTRIES if "--against" not in e.verify])
def test_verify_measures_exactly_the_rows_of_each_entry(tmp_path, name):
    e = entry(name)
    planned = verify_plan(e, FIXTURES, tmp_path)
    rules = [v.finding.code if v.finding is not None else v.precision for v in planned.variants]
    assert rules == [row.rule for row in e.rows] and not planned.unmeasured


@pytest.mark.parametrize("name, fixed", [
    ("item_loader", "item_loader_fixed.py"), ("pinned", "pinned_fixed.py"), ("host_tensors", "host_tensors_fixed.py"),
    ("zero_grad_keep", "zero_grad_keep_fixed.py"), ("foreach_off", "foreach_off_fixed.py"),
    ("mlp_fp32", "mlp_fp32_tf32.py"),
])
def test_each_fixed_twin_is_the_variant_verify_measures(tmp_path, name, fixed):
    variant = verify_plan(entry(name), FIXTURES, tmp_path).variants[0]
    assert variant.finding is not None and variant.finding.fix is not None
    assert code_of(variant.text) == code_of((FIXTURES / fixed).read_text())


def test_the_rewrite_twins_change_only_the_synced_line():
    """losses_append and cpu_log have no --fix: verify measures its device-side rewrite, read once per block of
    20 steps; the twins do the same by hand, READ_EVERY = 20."""
    diff = changed((FIXTURES / "losses_append.py").read_text(), (FIXTURES / "losses_append_fixed.py").read_text())
    assert "-        losses.append(loss.item())" in diff
    assert "+READ_EVERY = 20  # verify's read interval: one block" in diff
    assert len([line for line in diff if line.startswith("-")]) == 2  # the append, and the final print
    diff = changed((FIXTURES / "cpu_log.py").read_text(), (FIXTURES / "cpu_log_fixed.py").read_text())
    assert diff[0].startswith("+READ_EVERY = 20") and [line for line in diff if line.startswith("-")] == [
        '-        log.debug("step %d: predictions %s", step, logits.argmax(dim=1)[:8].cpu())']


def test_the_bf16_and_padding_twins_change_only_what_they_say():
    assert changed((FIXTURES / "mlp_fp32.py").read_text(), (FIXTURES / "mlp_fp32_bf16.py").read_text()) == [
        "-        out = model(x)",
        "+        with torch.autocast(DEVICE, dtype=torch.bfloat16):  # the change",
        "+            out = model(x)",
        "+        out = out.float()",
    ]
    assert changed((FIXTURES / "vocab_head.py").read_text(), (FIXTURES / "vocab_head_fixed.py").read_text()) == [
        "-VOCAB = 50257", "+VOCAB = 50304  # the change: padded to a multiple of 64"]
    codes = {name: {f.code for f in lint_paths([FIXTURES / name]) if isinstance(f, Finding)}
             for name in ("vocab_head.py", "vocab_head_fixed.py")}
    assert "TL404" in codes["vocab_head.py"] and "TL404" not in codes["vocab_head_fixed.py"]


def test_smoke_copies_keep_their_findings_and_run_on_the_cpu(tmp_path):
    folder = bench.fixture_folder(True, tmp_path, list(bench.ENTRIES))
    for e in bench.ENTRIES:
        text = (folder / e.script).read_text()
        assert ".pin_memory()" not in text and 'else "cpu"' in text
        compile(text, e.script, "exec")
        if "--against" not in e.verify:
            planned = verify_plan(e, folder, tmp_path / e.name)
            assert [v.finding.code if v.finding else v.precision for v in planned.variants] == \
                [row.rule for row in e.rows], e.name


def report(rule: str, status: str, ci: list[float], speedup: float, idle=None) -> dict:
    return {"verify": [{"baseline": {"reason": None}, "not_measured": [], "settings": {"method": "m"},
                        "variants": [{"rule": rule, "verification": {
                            "status": status, "summary": status, "speedup": speedup, "ci95": ci, "rounds": 9,
                            "stopped": "budget", "baseline_ms": 10.0, "fixed_ms": 10.0 / speedup, "idle": idle}}]}]}


def test_agreement_needs_overlapping_intervals_and_estimates_within_3_percent():
    e = entry("losses_append")
    ab = {"against": [{"speedup": 1.10, "ci95": [1.07, 1.13], "b_ms": [9.0, 9.2]}], "rounds": 6, "a_ms": [10.0, 10.2]}
    (row,) = bench.rows_of({"verify": report("TL101", "confirmed", [1.10, 1.15], 1.125), "ab": ab}, e)
    assert row["agree"] and row["ab"]["a_ms"] == pytest.approx(10.1)
    (row,) = bench.rows_of({"verify": report("TL101", "confirmed", [1.12, 1.19], 1.16), "ab": ab}, e)
    assert not row["agree"] and "+5.5 %" in row["agreement"]  # the issue's H100 case: overlap, 5.5 % apart
    (row,) = bench.rows_of({"verify": report("TL101", "confirmed", [1.14, 1.15], 1.145), "ab": ab}, e)
    assert not row["agree"] and "DISJOINT" in row["agreement"]
    (row,) = bench.rows_of({"verify": None, "verify_step": {"status": "timeout", "rc": None, "tail": "x"}, "ab": ab},
                           e)
    assert not row["agree"] and row["verify"]["status"] == "missing"


def test_the_table_shows_both_estimates_the_baselines_and_the_waiting_side():
    e = entry("item_loader")
    idle = {"baseline": {"cpu_ms_per_s": 0.4, "stopped_processes": 5}, "variant": {"cpu_ms_per_s": 0.2}}
    ab = {"against": [{"speedup": 1.0, "ci95": [0.98, 1.02], "b_ms": [14.0]}], "rounds": 5, "a_ms": [14.0],
          "method": "ab"}
    rows = bench.rows_of({"verify": report("TL101", "no-effect", [0.99, 1.01], 1.0, idle), "ab": ab}, e)
    text = bench.summary({"env": {"device": "GPU", "mode": "gpu"}, "rows": rows, "steps": [], "cause": [
        {"class": "x", "pause": "workers (before #26)", "row": {**rows[0]["verify"], "summary": "1.03×"}}]})
    assert "1 of 1 classes agree" in text
    line = next(line for line in text.splitlines() if line.startswith("| TL101"))
    assert "1.000× (0.990–1.010)" in line and "10.00 / 14.00" in line and "0 / 0" in line and "| yes" in line
    assert "## The waiting side paused whole (new), its workers only (before #26)" in text and "| 5 / — |" in text


def test_ab_time_runs_fresh_processes_in_abba_order(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "a.py"
    script.write_text("import torch\nmodel = torch.nn.Linear(8, 8)\nopt = torch.optim.SGD(model.parameters(), "
                      "lr=0.01)\nfor step in range(10**9):\n    opt.zero_grad()\n    model(torch.randn(4, 8))"
                      ".sum().backward()\n    opt.step()\n")
    twin = tmp_path / "b.py"
    twin.write_text(script.read_text())
    out = tmp_path / "ab.json"
    assert ab_time.main([str(script), str(twin), "--warmup", "2", "--steps", "3", "--blocks", "1", "--min-rounds",
                         "2", "--max-rounds", "2", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [r["script"] for r in doc["runs"]] == [str(script), str(twin), str(twin), str(script)]
    assert doc["rounds"] == 2 and doc["ci95"] and doc["against"][0]["b"] == str(twin)
    assert "forked from a server" in doc["method"] and doc["device"]


def test_process_spread_separates_a_per_process_offset_from_block_noise():
    """Processes whose blocks are constant but whose levels differ by known factors: no within-process noise, and
    the between-process SD is the SD of the log factors (computed here by hand); noise inside each process with no
    offsets is the other way round."""
    import math
    import statistics

    factors = [0.8, 1.0, 1.25, 1.1]
    runs = [{"script": "a.py", "block_ms": [10.0 * f] * 4} for f in factors]
    runs.append({"script": "b.py", "block_ms": [1.0, 2.0]})  # another script's run is not counted
    spread = bench.process_spread(runs, "a.py")
    expected = 100 * statistics.stdev(math.log(10.0 * f) for f in factors)
    assert spread["processes"] == 4 and spread["within_pct"] == 0.0
    assert spread["between_pct"] == pytest.approx(expected, abs=0.05)
    assert spread["process_pct"] == pytest.approx(expected, abs=0.05)
    noisy = [{"script": "a.py", "block_ms": [9.0, 11.0, 9.0, 11.0]} for _ in range(3)]
    spread = bench.process_spread(noisy, "a.py")
    assert spread["between_pct"] == 0.0 and spread["process_pct"] == 0.0 and spread["within_pct"] > 5
    assert bench.process_spread(runs[:2], "a.py") is None  # too few processes to say
