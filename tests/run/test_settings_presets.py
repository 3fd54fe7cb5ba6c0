"""`tracelint run --settings`: the presets the CLI offers, the words the header uses and what the child process
asks torch.profiler for are the same set, and `memory` (issue #40) records the [memory] events and the stacks that
name the lines allocating, without shapes."""
from __future__ import annotations

import importlib.util

from tracelint.cli.run import run_cmd
from tracelint.run import launch


def _bootstrap_settings() -> dict:
    spec = importlib.util.spec_from_file_location("tl_bootstrap_for_test", launch.BOOTSTRAP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SETTINGS


def test_the_presets_agree_and_memory_records_memory_and_stacks():
    offered = next(p for p in run_cmd.params if p.name == "settings").type.choices
    child = _bootstrap_settings()
    assert list(offered) == list(launch.SETTINGS) == list(child) == list(launch.SETTINGS_WORDS)
    assert child["memory"] == {"with_stack": True, "profile_memory": True}  # no record_shapes: the cheaper
    assert not child["stacks"].get("profile_memory")
