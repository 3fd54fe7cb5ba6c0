"""The source half's on-disk cache (issue #35): a run on unchanged files gives what a run without the cache gives,
without analysing them again; a change to anything the results depend on is seen; a damaged cache is no error."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracelint.cli import cli
from tracelint.engine import Config
from tracelint.source import lint, lint_paths
from tracelint.source.cache import Cache, canonical, default_folder, key

REPO = Path(__file__).resolve().parents[2]

NET = """\
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            y = self.fc(x)
            if y.abs().max().item() > 1e3:                   # line 11: a sync every forward
                y = y / 2
            return y
    """
TRAIN = """\
    import torch
    from pkg.model import Net

    model = Net().cuda()
    for x, y in loader:
        out = model(x.cuda())
        loss = (out - y.cuda()).pow(2).mean()
        print(loss.item())
        loss.backward()
        optimizer.step()
    """
# A factory in a file no run names (models/__init__.py) returns a criterion of models/detr.py that a loop of
# engine.py calls every step (DETR's layout).
DETR_LIKE = {
    "models/__init__.py": """\
        from .detr import build


        def build_model(args):
            return build(args)
        """,
    "models/detr.py": """\
        import torch
        import torch.nn as nn


        class SetCriterion(nn.Module):
            def forward(self, outputs, targets):
                num_boxes = torch.clamp(outputs.sum(), min=1).item()       # line 7: every step
                return outputs.sum() / num_boxes


        def build(args):
            model = nn.Linear(8, 8)
            criterion = SetCriterion()
            return model, criterion
        """,
    "engine.py": """\
        import torch


        def train_one_epoch(model, criterion, loader, optimizer):
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
        """,
    "main.py": """\
        import torch
        from models import build_model
        from engine import train_one_epoch

        model, criterion = build_model(None)
        model.cuda()
        for epoch in range(10):
            train_one_epoch(model, criterion, loader, optimizer)
        """,
}


def write(root: Path, files: dict[str, str]) -> dict[str, Path]:
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    paths = {}
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        paths[name] = path
    return paths


def results(paths, cache_dir: Path | None, **config) -> list:
    chosen = Config(root=Path("/nonexistent"), cache_dir=cache_dir, **config)
    return list(lint_paths(list(paths), config_for=lambda _p: chosen))


def entries(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and p.name not in (".gitignore", "CACHEDIR.TAG")]


def forbid_analysis(monkeypatch) -> None:
    def analysed(*args, **kwargs):
        raise AssertionError("analysed although cached")

    monkeypatch.setattr(lint, "_lint_document", analysed)


@pytest.fixture
def project(tmp_path):
    return write(tmp_path, {"pkg/__init__.py": "", "pkg/model.py": NET, "train.py": TRAIN})


def test_a_warm_run_gives_what_a_run_without_cache_gives_without_analysing(project, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    plain = results([project["train.py"]], None)
    assert [(Path(f.location.path).name, f.location.line) for f in plain if hasattr(f, "code")] == [
        ("train.py", 8), ("model.py", 11)]  # the reached model file too
    assert results([project["train.py"]], cache) == plain
    assert entries(cache)
    forbid_analysis(monkeypatch)
    assert results([project["train.py"]], cache) == plain


def test_an_edit_of_a_file_the_run_reached_is_seen(project, tmp_path):
    cache = tmp_path / "cache"
    results([project["train.py"]], cache)
    project["pkg/model.py"].write_text(textwrap.dedent(NET).replace(".item() > 1e3", ".sum() > 1e3"))
    after = results([project["train.py"]], cache)
    assert after == results([project["train.py"]], None)
    assert [Path(f.location.path).name for f in after if hasattr(f, "code")] == ["train.py"]


def test_a_factory_in_a_file_no_run_names_is_read_again_when_it_changes(tmp_path, monkeypatch):
    paths = write(tmp_path, DETR_LIKE)
    cache = tmp_path / "cache"
    named = [paths["main.py"], paths["engine.py"]]
    plain = results(named, None)
    assert [(Path(f.location.path).name, f.location.line) for f in plain if hasattr(f, "code")] == [("detr.py", 7)]
    assert results(named, cache) == plain
    # the factory now returns something else: no criterion of detr.py is called every step
    factory = paths["models/__init__.py"]
    factory.write_text(factory.read_text().replace("return build(args)", "return None, None"))
    changed = results(named, None)
    assert [f for f in changed if hasattr(f, "code")] == []
    assert results(named, cache) == changed
    factory.write_text(textwrap.dedent(DETR_LIKE["models/__init__.py"]))
    forbid_analysis(monkeypatch)  # back as it was: every result is in the cache
    assert results(named, cache) == plain


def test_the_config_and_the_path_are_part_of_the_key(project, tmp_path):
    cache = tmp_path / "cache"
    results([project["train.py"]], cache)
    assert results([project["train.py"]], cache, ignore=("TL101",)) == \
        results([project["train.py"]], None, ignore=("TL101",))
    moved = tmp_path / "train_copy.py"
    moved.write_bytes(project["train.py"].read_bytes())
    assert results([moved], cache) == results([moved], None)


def test_a_damaged_or_foreign_entry_is_a_miss(project, tmp_path):
    cache = tmp_path / "cache"
    plain = results([project["train.py"]], None)
    results([project["train.py"]], cache)
    for i, entry in enumerate(entries(cache)):
        entry.write_bytes([b"", b"garbage", b"tracelint-cache 1\n\x80\x05garbage"][i % 3])
    assert results([project["train.py"]], cache) == plain
    assert results([project["train.py"]], cache) == plain


def test_a_failed_analysis_is_not_cached(project, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    plain = results([project["train.py"]], None)

    def crash(*args, **kwargs):
        raise RuntimeError("a rule bug")

    with monkeypatch.context() as patch:
        patch.setattr(lint, "_check", crash)
        failed = results([project["train.py"]], cache)
    assert any("internal error" in str(item) for item in failed)
    assert results([project["train.py"]], cache) == plain


def test_the_key_is_the_same_in_every_process():
    """Sets of strings iterate in another order under another hash seed: the key may not follow that order."""
    code = ("from tracelint.source.cache import key; "
            "print(key({'b': frozenset({'x', 'y', 'z'}), 'a': {'m', 'n'}}, ('t', 1)))")
    keys = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in (1, 2, 3)}
    assert len(keys) == 1
    assert canonical({"b": 1, "a": 2}) == canonical({"a": 2, "b": 1})
    assert key(Config(root=Path("/a"))) != key(replace(Config(root=Path("/a")), ignore=("TL101",)))


def test_entries_are_written_whole_and_read_back(tmp_path):
    cache = Cache(tmp_path / "c")
    assert cache.get(key("x")) is None
    cache.put(key("x"), {"value": [1, 2]})
    assert cache.get(key("x")) == {"value": [1, 2]}
    assert (tmp_path / "c" / ".gitignore").read_text().splitlines()[-1] == "*"
    assert (tmp_path / "c" / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert not [p for p in (tmp_path / "c").rglob(".tmp-*")]
    cache.put(key("y"), lambda: None)  # not picklable: not cached, no error
    assert cache.get(key("y")) is None


def test_an_unwritable_cache_is_no_error(project, tmp_path):
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the folder would be")
    assert results([project["train.py"]], blocker) == results([project["train.py"]], None)


# -- the command line -------------------------------------------------------------------------------------------
def test_the_command_keeps_its_cache_at_the_project_root(project, tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert default_folder() == tmp_path / ".tracelint_cache"
    runner = CliRunner()
    first = runner.invoke(cli, ["check", str(project["train.py"])])
    assert (tmp_path / ".tracelint_cache" / ".gitignore").is_file()
    assert entries(tmp_path / ".tracelint_cache")
    second = runner.invoke(cli, ["check", str(project["train.py"])])
    assert (first.exit_code, first.output) == (second.exit_code, second.output) == (1, first.output)
    # nothing beside the user's files but the cache folder
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tracelint_cache", "pkg", "pyproject.toml", "sub",
                                                          "train.py"]


def test_no_cache_and_cache_dir(project, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    plain = runner.invoke(cli, ["check", "--no-cache", str(project["train.py"])])
    assert not (tmp_path / ".tracelint_cache").exists()
    elsewhere = tmp_path / "elsewhere"
    again = runner.invoke(cli, ["check", "--cache-dir", str(elsewhere), str(project["train.py"])])
    assert again.output == plain.output
    assert entries(elsewhere) and not (tmp_path / ".tracelint_cache").exists()


def test_a_warm_run_does_not_import_libcst(project, tmp_path):
    """What makes a warm pre-commit run fast: every result it needs is cached, so libcst (~0.25 s to import) and
    the rules are never imported."""
    code = textwrap.dedent("""\
        import sys
        from tracelint.cli import cli
        try:
            cli(["check", "train.py"])
        except SystemExit:
            pass
        print("libcst" in sys.modules)
        """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = [sys.executable, "-c", code]
    cold = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    warm = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert cold.stdout.splitlines()[-1] == "True"
    assert warm.stdout.splitlines()[-1] == "False"
    assert warm.stdout.splitlines()[:-1] == cold.stdout.splitlines()[:-1]


def test_the_torch_version_the_project_pins_is_part_of_the_key(tmp_path, monkeypatch):
    """TL303 and TL401 read the torch pin of the project's requirements (rules/precision.py): a file that did not
    change is judged again when the pin does."""
    from tracelint.source import project
    from tracelint.source.rules import precision

    assert precision.pinned_torch is project.pinned_torch  # one reading of the pin, the rules' and the key's
    paths = write(tmp_path, {"train.py": """\
        import torch
        model = torch.nn.Linear(4096, 4096).cuda()
        opt = torch.optim.AdamW(model.parameters())
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
            loss.backward()
            opt.step()
        """})
    cache = tmp_path / "cache"
    assert [f.code for f in results([paths["train.py"]], cache) if hasattr(f, "code")] == ["TL401"]
    (tmp_path / "requirements.txt").write_text("torch==1.10.0\n")
    project._pinned_in.cache_clear()
    assert [f.code for f in results([paths["train.py"]], cache) if hasattr(f, "code")] == ["TL303"]
