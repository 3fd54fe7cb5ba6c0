"""render(result, fmt): formats are the modules of tracelint.render; an unknown name is a ValueError."""
from __future__ import annotations

import pytest

from tracelint.engine import RunResult
from tracelint.render import formats, render


def test_formats_are_discovered_from_modules():
    assert formats() == ("github", "gitlab", "html", "json", "markdown", "sarif", "text")


def test_unknown_format_is_a_value_error():
    with pytest.raises(ValueError, match="unknown output format 'xml'"):
        render(RunResult(), "xml")


@pytest.mark.parametrize("fmt", ["github", "gitlab", "html", "json", "markdown", "sarif", "text"])
def test_every_format_renders_every_kind_of_input(fmt, full_result):
    text = render(full_result, fmt)
    assert isinstance(text, str) and text.endswith("\n")


@pytest.mark.parametrize("fmt", ["gitlab", "json", "sarif"])
def test_documents_of_an_empty_run_are_valid_json(fmt):
    import json

    json.loads(render(RunResult(), fmt))
