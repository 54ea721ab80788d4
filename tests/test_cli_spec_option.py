"""--spec FILE on every command that reads the spec: the command really uses that spec and the files
next to it (SPEC.md, bounds.toml, conformance/, schema/), and says so when one is missing."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loopspec.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "oracle"
MESSAGE = "No such tool here (a custom spec)."

#: the commands that read the spec (fuzz and replay take it too once their module registers it)
READERS = ("spec", "vectors", "verify", "diagram", "check", "demo", "serve")


@pytest.fixture
def myspec(tmp_path: Path) -> Path:
    """A copy of spec/ whose data next to loop.toml differs where each command can show it: one batch scope
    of 2 calls, two conformance vectors, a ledger schema that wants one more field in run_started."""
    d = tmp_path / "myspec"
    shutil.copytree(ROOT / "spec", d)
    loop = d / "loop.toml"
    bounds = d / "bounds.toml"
    text = bounds.read_text().replace("calls = 6\n", "calls = 2\n", 1)
    bounds.write_text(text[: text.index("[scope.batch.expected]")])
    vectors = d / "conformance" / "batch.json"
    doc = json.loads(vectors.read_text())
    doc["cases"] = doc["cases"][:2]
    vectors.write_text(json.dumps(doc))
    schema = d / "schema" / "ledger-event.schema.json"
    doc = json.loads(schema.read_text())
    run_started = next(s for s in doc["oneOf"] if s["title"] == "run_started")
    run_started["required"].append("customField")
    schema.write_text(json.dumps(doc))
    return loop


def _custom_message(loop: Path) -> Path:
    """The same spec with another UNKNOWN_TOOL message: data the diagrams show, and a difference from the
    reference engine's own code table (which refuses to run it)."""
    loop.write_text(loop.read_text().replace("No tool of that name is available.", MESSAGE))
    return loop


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("command", READERS)
def test_the_command_has_the_shared_spec_option(command: str) -> None:
    sub = _subparsers(build_parser())[command]
    opt = next(a for a in sub._actions if "--spec" in a.option_strings)
    assert opt.dest == "spec" and opt.metavar == "FILE" and "default: the spec shipped with loopspec" in opt.help


def test_spec_reads_the_rules_next_to_the_file_or_says_it_did_not(myspec: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "--spec", str(myspec), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rulesFile"] == str(myspec.with_name("SPEC.md")) and len(doc["rules"]) > 20
    alone = tmp_path / "alone" / "loop.toml"
    alone.parent.mkdir()
    shutil.copy(myspec, alone)
    assert main(["spec", "--spec", str(alone)]) == 0
    cap = capsys.readouterr()
    assert "rules not checked (no SPEC.md next to the spec)" in cap.out.splitlines()[0]
    assert f"no rules text: {alone.with_name('SPEC.md')} does not exist" in cap.err
    assert " 0 rules" not in cap.out
    assert main(["spec", "--spec", str(alone), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["rules"] is None
    assert main(["spec", "--file", str(alone)]) == 0  # the old spelling still works
    capsys.readouterr()


def test_vectors_and_demo_run_the_vectors_next_to_the_spec(myspec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vectors", "--spec", str(myspec)]) == 0
    assert "2/2 vectors pass" in capsys.readouterr().out
    assert main(["demo", "--engine-only", "--spec", str(myspec), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["sections"]["batch"]["vectors"] == 2


def test_verify_explores_the_bounds_next_to_the_spec(myspec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--spec", str(myspec), "--scope", "batch", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bounds"] == str(myspec.with_name("bounds.toml"))
    assert report["scopes"][0]["bounds"]["calls"] == 2
    assert report["coverage"]["reachable"] is None  # this bounds file records no reachable set


def test_spec_reports_where_the_chosen_spec_and_the_engine_differ(myspec: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "--spec", str(_custom_message(myspec)), "--format", "json"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert any("UNKNOWN_TOOL" in p and MESSAGE in p for p in problems)


def test_a_spec_the_engine_cannot_run_is_a_usage_error(myspec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vectors", "--spec", str(_custom_message(myspec))]) == 2
    err = capsys.readouterr().err
    assert f"--spec {myspec}: the reference engine cannot run this spec" in err and "UNKNOWN_TOOL" in err
    assert "internal error" not in err


def test_diagram_draws_the_chosen_spec(myspec: Path, tmp_path: Path) -> None:
    text = myspec.read_text()
    doc = "No unprocessed proposal is pending."
    assert doc in text
    myspec.write_text(text.replace(doc, "A STATE DOC OF A CUSTOM SPEC.", 1))
    assert main(["diagram", "--spec", str(myspec), "--format", "md", "--out", str(tmp_path / "d")]) == 0
    assert "A STATE DOC OF A CUSTOM SPEC." in (tmp_path / "d" / "machine.md").read_text()


def test_check_validates_against_the_schema_next_to_the_spec(myspec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = str(GOLDEN / "ledger-pass.ndjson")
    assert main(["check", ledger, "--validate"]) == 0
    capsys.readouterr()
    assert main(["check", ledger, "--validate", "--spec", str(myspec)]) != 0
    assert "customField" in capsys.readouterr().out


def test_check_validate_without_a_schema_next_to_the_spec_is_a_usage_error(
        myspec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.rmtree(myspec.parent / "schema")
    assert main(["check", str(GOLDEN / "ledger-pass.ndjson"), "--validate", "--spec", str(myspec)]) == 2
    assert "ledger-event.schema.json" in capsys.readouterr().err


SERVE_INPUT = "".join(json.dumps(m) + "\n" for m in [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
    {"jsonrpc": "2.0", "id": 2, "method": "batch.run", "params": {
        "tools": [], "budget": 1, "mode": "continue", "principal": "a",
        "calls": [{"id": "c1", "name": "x", "arguments": {}}]}}])


def test_serve_runs_the_chosen_spec(myspec: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "loopspec", "serve", "--spec", str(myspec)], capture_output=True,
                       text=True, timeout=60, input=SERVE_INPUT)
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout.splitlines()[1])["result"]["results"][0]
    assert answer["code"] == "UNKNOWN_TOOL"
    # the same spec with a message the engine does not share: refused before serving, so serve read the file
    r = subprocess.run([sys.executable, "-m", "loopspec", "serve", "--spec", str(_custom_message(myspec))],
                       capture_output=True, text=True, timeout=60, input=SERVE_INPUT)
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert "the reference engine cannot run this spec" in r.stderr and MESSAGE in r.stderr


def test_a_missing_spec_file_is_a_usage_error_on_every_command(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    nope = str(tmp_path / "nope.toml")
    for argv in (["spec"], ["vectors"], ["verify", "--scope", "batch"], ["diagram", "--out", str(tmp_path)],
                 ["check", str(GOLDEN / "ledger-pass.ndjson")], ["demo", "--engine-only"], ["serve"]):
        assert main([*argv, "--spec", nope]) == 2, argv
        err = capsys.readouterr().err
        assert "cannot read the spec" in err and "Traceback" not in err
