"""msgspec is optional (tracelint[fast]): without it the loader reads every chunk as dicts and the report is the
same, byte for byte."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "msgspec" or name.startswith("msgspec."):
            raise ImportError("msgspec blocked by the test")
sys.meta_path.insert(0, Block())
from tracelint.cli import main
import tracelint.trace.events as events
assert not events.AVAILABLE
sys.argv = ["tracelint", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("name", ["gpt_fp32", "pageable_copies"])
def test_a_report_without_msgspec_is_the_same(name):
    pytest.importorskip("msgspec")  # the comparison needs both paths
    args = ["trace", str(REPO / "fixtures" / "traces" / f"{name}.pt.trace.json.gz"), "--format", "json"]
    env = {"PYTHONPATH": str(REPO), "PATH": ""}
    without = subprocess.run([sys.executable, "-c", BLOCK, *args], capture_output=True, text=True, env=env, cwd=REPO)
    with_it = subprocess.run([sys.executable, "-m", "tracelint", *args], capture_output=True, text=True, env=env,
                             cwd=REPO)
    assert without.returncode == with_it.returncode and without.returncode in (0, 1), without.stderr[-500:]
    assert without.stdout == with_it.stdout and '"traces"' in with_it.stdout
