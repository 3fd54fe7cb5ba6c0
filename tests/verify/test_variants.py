"""Patching: each variant is the script with exactly its fix (and the fixes it exposes); the user's file is never
written; precision variants only for scripts that look matmul-bound and chose no precision."""
from __future__ import annotations

import difflib
import hashlib
import textwrap

from tests.verify.conftest import SCRIPTS
from tracelint.verify.variants import plan, precision_modes


def changed_lines(before: str, after: str) -> list[str]:
    return [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), n=0, lineterm="")
            if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def test_each_variant_differs_from_the_script_only_by_its_fix(tmp_path):
    script = SCRIPTS / "train_cpu.py"
    digest = hashlib.sha256(script.read_bytes()).hexdigest()
    planned = plan(script, tmp_path, precision=[])
    by_key = {v.key.split(":")[0]: v for v in planned.variants}
    assert set(by_key) == {"TL202", "TL301", "TL101", "all"}
    assert changed_lines(planned.text, by_key["TL202"].text) == [
        "-loader = DataLoader(dataset, batch_size=32, num_workers=1, pin_memory=False)",
        "+loader = DataLoader(dataset, batch_size=32, num_workers=1, pin_memory=True)",
    ]
    assert changed_lines(planned.text, by_key["TL301"].text) == [
        "-        optimizer.zero_grad(set_to_none=False)", "+        optimizer.zero_grad()",
    ]
    tl101 = changed_lines(planned.text, by_key["TL101"].text)
    assert "+        running += loss.detach()" in tl101 and len(tl101) == 4  # the += and the read after the loop
    together = changed_lines(planned.text, by_key["all"].text)
    assert len(together) == 8 and not by_key["all"].safe
    assert hashlib.sha256(script.read_bytes()).hexdigest() == digest  # the user's file is untouched
    assert not any(p.name == script.name for p in tmp_path.rglob("*"))  # scratch copies are renamed


def test_a_fix_brings_the_safe_fixes_it_exposes(tmp_path):
    script = tmp_path / "pageable.py"
    script.write_text(textwrap.dedent("""\
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        model = torch.nn.Linear(8, 2).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=8, num_workers=2, pin_memory=False)
        for (x,) in loader:
            x = x.to("cuda")
            loss = model(x).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        """))
    planned = plan(script, tmp_path / "scratch", precision=[])
    (variant,) = planned.variants
    assert variant.finding.code == "TL202"
    assert variant.follow_ups and variant.follow_ups[0].startswith("TL203")
    assert "pin_memory=True" in variant.text and 'x.to("cuda", non_blocking=True)' in variant.text


def test_precision_variants_only_when_matmul_bound_and_no_precision_chosen():
    fp32 = "import torch\nmodel = torch.nn.Linear(4096, 4096)\ntorch.backends.cuda.matmul.allow_tf32 = False\n"
    assert precision_modes(fp32) == ["tf32", "bf16"]
    assert precision_modes('"""Compare with bf16 autocast."""\n' + fp32) == ["tf32", "bf16"]  # docstrings don't count
    assert precision_modes(fp32 + "torch.backends.cuda.matmul.allow_tf32 = True\n") == ["bf16"]
    assert precision_modes(fp32 + "with torch.autocast('cuda', dtype=torch.bfloat16):\n    pass\n") == []
    assert precision_modes("import torch\nx = torch.ones(3).sum()\n") == []


def test_select_keeps_the_findings_of_the_rules_named_and_their_follow_ups(tmp_path):
    script = SCRIPTS / "train_cpu.py"
    planned = plan(script, tmp_path, precision=[], select=["tl3"])
    assert [v.key.split(":")[0] for v in planned.variants] == ["TL301"]  # no "all" for one variant
    assert {f.code for f in planned.findings} == {"TL301"}
    both = plan(script, tmp_path / "two", precision=[], select=["TL301", "TL202"])
    keys = [v.key.split(":")[0] for v in both.variants]
    assert sorted(keys) == ["TL202", "TL301", "all"]
    together = next(v for v in both.variants if v.key == "all")
    assert "running += loss.item()" in together.text  # TL101 not selected: not in "all fixes" either


def test_against_measures_a_hand_written_fix_as_one_variant(tmp_path, monkeypatch):
    import tracelint.verify as verify

    seen = {}

    def fake_measure(original, variants, argv, settings, workdir, **kwargs):
        seen.update(original=original, variants=variants)
        return (), ()

    monkeypatch.setattr(verify, "measure", fake_measure)
    monkeypatch.setattr(verify, "probe", lambda device: ("CPU", "2.x"))
    fixed = tmp_path / "fixed.py"
    fixed.write_text("print('fixed')\n")
    result = verify.verify_against(SCRIPTS / "one_fix.py", fixed)
    (variant,) = seen["variants"]
    assert seen["original"] == (SCRIPTS / "one_fix.py").resolve()
    assert variant.key == "against" and variant.text == "print('fixed')\n" and "fixed.py" in variant.title
    assert result.target.endswith("one_fix.py") and result.device == "CPU"
