"""Output safety (issue #11, item 5): text from traces and source files is data in every format and on stderr.

Paths, messages, event names, metric names and values carrying ANSI and OSC escapes, CR/LF with a forged workflow
command, bidi controls, NUL, C1, undecodable file-name bytes, integers beyond 64 bits and NaN: no format lets a
control character through (beyond the line breaks it writes itself), no line starts a GitHub Actions workflow command
that tracelint did not write, and the JSON formats parse, round-trip and keep their shape.
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
import unicodedata
from dataclasses import replace
from pathlib import Path

import pytest

from tracelint.cli import main
from tracelint.engine import (
    Finding,
    Fix,
    InputError,
    RunResult,
    Severity,
    SourceLocation,
    TraceLocation,
    TraceSummary,
)
from tracelint.engine.escape import MAX_SAFE_INT, map_strings, no_commands, terminal
from tracelint.render import formats, render
from tracelint.render.text import render as render_text

from .test_sarif import assert_github_code_scanning_shape

ANSI = "\x1b[31mred\x1b[0m"
OSC = "\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\"
FORGED = "\r\n::error file=x::forged"
BIDI = "\u202eevil\u2066x\u2069\u202c"
LEGACY = "##[error]legacy"
NUL = "a\x00b\x7fc\x9b31m"  # NUL, DEL and a C1 CSI
BAD = os.fsdecode(b"bad\xff.py")  # a file name that is not UTF-8, as os.fsdecode gives it
HOSTILE = f"{ANSI} {OSC} {BIDI} {LEGACY} {NUL} {BAD}{FORGED}"
BIG = 2**70
NAN = float("nan")

# Every character a terminal or log acts on; "\n" is the one a report may write itself.
_UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")
_SGR = re.compile(r"\x1b\[[0-9;]*m")
_GITHUB_COMMAND = re.compile(r"^::(error|warning|notice)(?: ([^:]*))?::(.*)$")


def hostile_result() -> RunResult:
    source = Finding(
        "TL101", Severity.WARNING, f"`.item()` {HOSTILE}",
        SourceLocation(f"src/{ANSI}{BIDI}{FORGED}/{BAD}", 3, 5, 3, 11),
        fix=Fix(f"fix {HOSTILE}", (), safe=True),
    )
    at_bad = Finding("TL104", Severity.ERROR, "print syncs", SourceLocation(BAD, 7, 1, 7, 6))
    forged_line = Finding("TL101", Severity.INFO, "m", SourceLocation("::error::forged.py", 1, 1, 1, 3))
    trace = Finding(
        "TL202", Severity.WARNING, f"pageable copies {HOSTILE}",
        TraceLocation(f"{HOSTILE}.json", rank=BIG, step=BIG, start_us=NAN, end_us=float("inf"),
                      event=f"Memcpy {HOSTILE}", source=SourceLocation(f"{BAD}{FORGED}", BIG)),
        details=((f"bytes{ANSI}", BIG), ("nan", NAN), ("label", HOSTILE), (f"{FORGED}", -BIG)),
    )
    summary = TraceSummary(
        f"{HOSTILE}.json", "input-bound", f"GPU idle 81% {HOSTILE}",
        {"gpu_busy_pct": NAN, f"{ANSI}key{FORGED}": BIG, "kernels": -BIG, "nested": {HOSTILE: HOSTILE},
         "device_id": BIG, "list": [BIG, NAN, HOSTILE]},
        rank=BIG, warnings=(HOSTILE,),
        profiler={"with_stack": True, "source": HOSTILE, "unprofiled_step_ms": 3.0, "inferred": [HOSTILE]},
    )
    return RunResult(findings=[source, at_bad, forged_line, trace], traces=[summary],
                     errors=[InputError(f"{BAD}{FORGED}", f"no traceEvents (keys: {HOSTILE})", BIG)],
                     files_checked=2)


def commands(text: str) -> list[str]:
    """The lines GitHub Actions would run as workflow commands: ``::`` after blanks, or ``##[`` anywhere."""
    return [line for line in text.split("\n") if line.lstrip().startswith("::") or "##[" in line]


def unsafe(text: str) -> set[str]:
    return set(_UNSAFE.findall(text))


def safe_ints(value) -> bool:
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, int):
        return abs(value) <= MAX_SAFE_INT
    if isinstance(value, dict):
        return all(safe_ints(v) for v in value.values())
    if isinstance(value, list):
        return all(safe_ints(v) for v in value)
    return True


def strict_json(text: str):
    """json.loads that refuses NaN/Infinity, then a round trip through the encoder."""
    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    doc = json.loads(text, parse_constant=refuse)
    assert json.loads(json.dumps(doc, ensure_ascii=False)) == doc
    json.dumps(doc).encode("utf-8")  # valid Unicode all through
    assert safe_ints(doc)
    return doc


# --- every format ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", formats())
def test_no_control_character_and_no_forged_command(fmt):
    result = hostile_result()
    out = render(result, fmt)
    out.encode("utf-8")  # writable: no lone surrogate
    assert unsafe(out) == set(), fmt
    found = commands(out)
    if fmt == "github":
        # Exactly tracelint's own: one per finding, one per verdict, one per unreadable input.
        assert len(found) == len(out.splitlines()) == len(result.findings) + len(result.traces) + len(result.errors)
        assert all(_GITHUB_COMMAND.match(line) for line in found)
    else:
        assert found == []


def test_text_shows_escapes_where_the_data_had_controls():
    out = render_text(hostile_result(), color=False)
    assert "\\x1b[31mred\\x1b[0m" in out and "\\u202eevil" in out and "\\r\\n::error file=x::forged" in out
    assert "bad\\xff.py" in out  # the undecodable byte, as itself
    assert "a\\x00b\\x7fc\\x9b31m" in out
    assert "##\\x5b" in out
    assert "\\x3a:error::forged.py:1:1: TL101 info m" in out.splitlines()  # the file named like a command
    assert "1,180,591,620,717,411,303,424" in out  # a 70-bit integer is only a number here


def test_text_keeps_its_own_colors():
    out = render_text(hostile_result(), color=True)
    assert "\x1b[1;31mTL104\x1b[0m" in out and "\x1b[1;33mTL101\x1b[0m" in out and "\x1b[1;34mTL101\x1b[0m" in out
    assert "\x1b[1m" in out
    assert unsafe(_SGR.sub("", out)) == set()  # every escape left is one of tracelint's color codes
    assert commands(_SGR.sub("", out)) == []


def test_github_escapes_data_and_properties():
    lines = render(hostile_result(), "github").splitlines()
    kind, props, message = _GITHUB_COMMAND.match(lines[0]).groups()
    assert kind == "warning"
    # CR/LF keep the toolkit's escapes (GitHub shows line breaks); other controls are visible escapes.
    assert "%0D%0A::error file=x::forged" in message
    assert "\\x1b[31mred" in message and "\\u202e" in message and "bad\\xff.py" in message
    file_prop = dict(p.split("=", 1) for p in props.split(","))["file"]
    assert "%0D%0A%3A%3Aerror file=x%3A%3Aforged" in file_prop and "," not in file_prop
    assert _GITHUB_COMMAND.match(lines[1]).group(2).startswith("file=bad\\xff.py,")


@pytest.mark.parametrize("fmt", ["json", "sarif", "gitlab"])
def test_json_formats_parse_and_round_trip(fmt):
    strict_json(render(hostile_result(), fmt))


def test_json_keeps_the_data_and_makes_it_portable():
    doc = strict_json(render(hostile_result(), "json"))
    source, at_bad, _, trace = doc["findings"]
    assert source["message"] == f"`.item()` {HOSTILE}".replace(BAD, "bad\ufffd.py")  # lossless but the bad byte
    assert at_bad["path"] == "bad\ufffd.py"
    assert trace["trace"]["rank"] == str(BIG) and trace["trace"]["step"] == str(BIG)
    assert trace["trace"]["start_us"] is None and trace["trace"]["end_us"] is None
    assert trace["source"]["line"] == str(BIG)
    assert trace["details"][f"bytes{ANSI}"] == str(BIG) and trace["details"]["nan"] is None
    assert trace["details"][FORGED] == str(-BIG)
    (summary,) = doc["traces"]
    assert summary["rank"] == str(BIG)
    assert summary["metrics"]["device_id"] == str(BIG) and summary["metrics"]["gpu_busy_pct"] is None
    assert summary["metrics"]["list"] == [str(BIG), None, HOSTILE.replace(BAD, "bad\ufffd.py")]
    (error,) = doc["errors"]
    assert error["line"] == str(BIG)
    # The same characters, written as escapes a terminal or a log does not act on.
    text = render(hostile_result(), "json")
    assert "\\u202e" in text and "\\u009b" in text and "##\\u005b" in text


def test_sarif_stays_valid_for_code_scanning():
    log = strict_json(render(hostile_result(), "sarif"))
    assert_github_code_scanning_shape(log)
    results = log["runs"][0]["results"]
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results]
    assert uris[1] == "bad%FF.py"  # the name's own byte, percent-encoded
    assert all(re.fullmatch(r"[A-Za-z0-9\-._~%!$&'()*+,;=:@/]+", uri) for uri in uris)
    # A trace stack's 70-bit line is no line of any file: the result sits at line 1.
    assert results[3]["locations"][0]["physicalLocation"]["region"] == {"startLine": 1}
    assert results[3]["properties"]["trace"]["rank"] == str(BIG)
    (note,) = log["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert "region" not in note["locations"][0]["physicalLocation"]
    # Messages are for people: escapes shown, as in the text format (properties keep the data).
    assert "\\x1b[31mred" in results[0]["message"]["text"] and "\\r\\n::error" in results[0]["message"]["text"]
    assert "bad\\xff.py" in results[0]["message"]["text"] and "\\u202e" in note["message"]["text"]
    assert results[3]["properties"]["label"] == HOSTILE.replace(BAD, "bad\ufffd.py")
    fingerprints = [r["partialFingerprints"]["tracelintFingerprint/v2"] for r in results]
    assert len(set(fingerprints)) == len(fingerprints)


def test_sarif_against_the_oasis_schema():
    from tests.render.test_sarif import assert_valid_sarif

    assert_valid_sarif(json.loads(render(hostile_result(), "sarif")))


def test_gitlab_issues_keep_their_shape():
    issues = strict_json(render(hostile_result(), "gitlab"))
    assert len(issues) == 4 and len({i["fingerprint"] for i in issues}) == 4
    for issue in issues:
        assert isinstance(issue["location"]["path"], str)
        assert isinstance(issue["location"]["lines"]["begin"], int) and issue["location"]["lines"]["begin"] >= 1
    assert issues[1]["location"]["path"] == "bad\ufffd.py"
    assert "\\x1b[31mred" in issues[0]["description"] and "\\r\\n::error" in issues[0]["description"]


def test_fingerprints_of_undecodable_names_stay_apart():
    one, two = (Finding("TL101", Severity.WARNING, "m", SourceLocation(os.fsdecode(name), 1)) for name in
                (b"a\xff.py", b"a\xfe.py"))
    doc = strict_json(render(RunResult(findings=[one, two]), "json"))
    assert doc["findings"][0]["fingerprint"] != doc["findings"][1]["fingerprint"]


def test_a_verify_report_keeps_stderr_lines_but_escapes_them():
    from tests.render.test_verify import baseline_failed
    from tracelint.verify import run_result
    from tracelint.verify.harness_control import RunOutcome

    target = baseline_failed()
    broken = RunOutcome(False, reason=f"exit code 1 {ANSI}", stderr_tail=f"Traceback\n{HOSTILE}\n::error::x")
    result = run_result([replace(target, baseline_runs=(broken,))])
    out = render(result, "text")
    assert unsafe(out) == set() and commands(out) == []
    assert "  | Traceback\n" in out and "  | ::error::x\n" in out and "\\x1b[31mred" in out
    for fmt in ("json", "sarif", "gitlab", "github"):
        text = render(result, fmt)
        assert unsafe(text) == set()
        if fmt != "github":
            strict_json(text)


# --- the helpers -----------------------------------------------------------------------------------------------

def test_terminal_escapes():
    assert terminal("plain: aten::mm ✓ 81%") == "plain: aten::mm ✓ 81%"
    assert terminal("a\tb\nc\rd\x00\x1b\x7f\x85\u2028") == "a\\tb\\nc\\rd\\x00\\x1b\\x7f\\x85\\u2028"
    assert terminal(BAD) == "bad\\xff.py" and terminal("\ud800") == "\\ud800"
    assert terminal("x\ny\r", keep="\n") == "x\ny\\r"
    for char in map(chr, [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]):
        assert terminal(char) == f"\\u{ord(char):04x}", unicodedata.name(char)


def test_no_commands():
    assert no_commands("::error::x\n  ::warning::y\nok :: fine\naten::mm") == (
        "\\x3a:error::x\n  \\x3a:warning::y\nok :: fine\naten::mm")
    assert no_commands("\x1b[1m::error::x\x1b[0m") == "\x1b[1m\\x3a:error::x\x1b[0m"
    assert no_commands("see ##[error]x") == "see ##\\x5b" + "error]x"
    assert no_commands("\u00a0\u2003::set-output name=a::b") == "\u00a0\u2003\\x3a:set-output name=a::b"


def test_map_strings_keeps_types_and_identity():
    result = hostile_result()
    mapped = map_strings(result, terminal)
    assert type(mapped.findings[0].location) is SourceLocation and mapped.findings[0].severity is Severity.WARNING
    assert mapped.traces[0].metrics["kernels"] == -BIG and math.isnan(mapped.traces[0].metrics["gpu_busy_pct"])
    clean = RunResult(findings=[Finding("TL101", Severity.INFO, "m", SourceLocation("a.py", 1))])
    assert map_strings(clean, terminal) is clean


# --- the command line: stdout and stderr -----------------------------------------------------------------------

def _run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def _assert_clean_stream(text: str) -> None:
    assert unsafe(text) == set()
    assert commands(text) == []


def test_cli_error_for_a_trace_with_hostile_keys(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("evil.json").write_text(json.dumps({"a\r\n::error::x": 1, ANSI: 2, LEGACY: 3, BIDI: 4}), encoding="utf-8")
    for fmt in formats():
        code, out, err = _run(capsys, "--format", fmt, "evil.json")
        assert code == 2
        _assert_clean_stream(err)
        (line,) = err.splitlines()
        assert line.startswith("error: evil.json: ") and "a\\r\\n::error::x" in line and "\\x1b[31m" in line
        if fmt == "github":
            assert len(commands(out)) == len(out.splitlines()) == 1
            assert out.startswith("::error file=evil.json,")
        else:
            _assert_clean_stream(out)


SOURCE = "import torch\n\nfor batch in loader:\n    loss = model(batch.cuda())\n    print(loss.item())\n"


def test_cli_file_named_with_a_newline_and_a_command(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    name = "name\n::error::forged\x1b[31m.py"
    Path(name).write_text(SOURCE, encoding="utf-8")
    for fmt in formats():
        code, out, err = _run(capsys, "check", "--format", fmt, name)
        assert code == 1, (fmt, out, err)
        assert unsafe(out) == set() and err == ""
        found = commands(out)
        if fmt == "github":
            assert found and len(found) == len(out.splitlines())  # one command per finding, nothing else
            assert all(line.startswith("::warning file=name%0A%3A%3Aerror%3A%3Aforged\\x1b[31m.py,")
                       or line.startswith("::notice file=name%0A") or line.startswith("::error file=name%0A")
                       for line in found)
        else:
            assert found == []
        if fmt == "text":
            assert out.startswith("name\\n::error::forged\\x1b[31m.py:")
        if fmt in ("json", "sarif", "gitlab"):
            strict_json(out)


def test_cli_missing_file_with_a_hostile_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(capsys, "check", f"gone{FORGED}{ANSI}.py")
    assert code == 2
    _assert_clean_stream(err)
    assert len(err.splitlines()) == 1 and "gone\\r\\n::error file=x::forged" in err


@pytest.mark.skipif(sys.platform == "darwin", reason="APFS refuses file names that are not UTF-8")
def test_cli_undecodable_file_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    try:
        Path(BAD).write_text(SOURCE, encoding="utf-8")
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system refuses file names that are not UTF-8")
    for fmt in formats():
        code, out, err = _run(capsys, "check", "--format", fmt, BAD)
        assert code == 1, (fmt, err)
        out.encode("utf-8")
        assert unsafe(out) == set() and err == ""
        if fmt in ("json", "gitlab"):
            assert "bad\ufffd.py" in out
            strict_json(out)
        if fmt == "sarif":
            log = strict_json(out)
            assert_github_code_scanning_shape(log)
            uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in log["runs"][0]["results"]}
            assert uris == {"bad%FF.py"}
        if fmt in ("text", "github"):
            assert "bad\\xff.py" in out


def test_cli_usage_error_quoting_the_user_is_escaped(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("pyproject.toml").write_text(f'[tool.tracelint]\nselect = ["{json.dumps(FORGED)[1:-1]}"]\n',
                                      encoding="utf-8")
    Path("a.py").write_text("x = 1\n", encoding="utf-8")
    code, _, err = _run(capsys, "check", "a.py")
    assert code == 2 and err
    _assert_clean_stream(err)
    code, _, err = _run(capsys, "check", "--threshold", f"{ANSI}{FORGED}=x", "a.py")
    assert code == 2 and "Error:" in err
    _assert_clean_stream(err)
