"""One CLI vocabulary (issue 30): every command's --help runs, and the shared options of docs/cli.md mean the
same thing on every command. The table "Which command has which" in docs/cli.md is checked against the
parsers, so the page cannot drift from the code."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loopspec.cli import COMMAND_MODULES, build_parser, main
from loopspec.cli._common import default_out, resolve_jobs

ROOT = Path(__file__).resolve().parents[1]
CLI_MD = ROOT / "docs" / "cli.md"


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _option(sub: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    """``flag`` of a command; a command with actions of its own (frameworks install) has it on each action."""
    nested = next((a for a in sub._actions if isinstance(a, argparse._SubParsersAction)), None)
    if nested is not None:
        found = [_option(p, flag) for p in nested.choices.values()]
        assert all(f is not None for f in found) or all(f is None for f in found), flag
        return found[0]
    return next((a for a in sub._actions if flag in a.option_strings), None)


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # --help
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def _table() -> dict[str, dict[str, str]]:
    """docs/cli.md's "Which command has which" table: command -> column -> cell."""
    text = CLI_MD.read_text(encoding="utf-8")
    block = text[text.index("## Which command has which"):]
    block = block[:block.index("\n## ", 3)]
    rows = [ln for ln in block.splitlines() if ln.startswith("| `")]
    head = next(ln for ln in block.splitlines() if ln.startswith("| command"))
    cols = [c.strip().replace("`", "") for c in head.strip("|").split("|")]
    table = {}
    for row in rows:
        cells = [c.strip().replace("`", "") for c in row.strip("|").split("|")]
        table[cells[0].split()[0]] = dict(zip(cols[1:], cells[1:], strict=True))
    return table


@pytest.mark.parametrize("command", COMMAND_MODULES)
def test_every_command_help_runs(command: str) -> None:
    code, out, err = _run(command, "--help")
    assert code == 0 and out.startswith(f"usage: loopspec {command}"), err
    nested = next((a for a in _subparsers()[command]._actions if isinstance(a, argparse._SubParsersAction)), None)
    for action in (nested.choices if nested else ()):
        code, out, err = _run(command, action, "--help")
        assert code == 0 and out.startswith(f"usage: loopspec {command} {action}"), err


def test_the_table_of_docs_cli_lists_every_command() -> None:
    assert set(_table()) == set(COMMAND_MODULES)


@pytest.mark.parametrize("command", COMMAND_MODULES)
def test_docs_cli_table_matches_the_parser(command: str) -> None:
    row = _table()[command]
    sub = _subparsers()[command]
    fmt = _option(sub, "--format")
    if row["--format"] == "–":
        assert fmt is None
    else:
        listed = [c.strip() for c in row["--format"].split(",")]
        assert fmt is not None and {"text", "json"} <= set(fmt.choices) and (fmt.default or "text") == listed[0], command
        assert fmt.help and "text (" in fmt.help and "json (" in fmt.help
    for flag in ("--quiet", "--progress", "--jobs"):
        assert (_option(sub, flag) is not None) == (row[flag] == "yes"), (command, flag)
    out = _option(sub, "--out")
    if row["--out (default)"] == "–":
        assert out is None, command
    else:
        assert out is not None and out.help and out.help.startswith("the directory this command writes its files into")
        want = row["--out (default)"]
        assert out.default == (None if want == "none" else want), command
        if want != "none":
            assert want == default_out(command)
    html = _option(sub, "--html") is not None and _option(sub, "--junit") is not None
    assert html == (row["--html/--junit"] == "yes"), command


@pytest.mark.parametrize("command", [c for c in COMMAND_MODULES if c != "serve"])
def test_every_command_but_serve_has_format_text_and_json(command: str) -> None:
    """serve's stdout is the adapter protocol itself (docs/cli.md says why it is the exception)."""
    fmt = _option(_subparsers()[command], "--format")
    assert fmt is not None and {"text", "json"} <= set(fmt.choices)


def test_jobs_zero_means_one_per_cpu_everywhere() -> None:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert resolve_jobs(0) == cpus and resolve_jobs(3) == 3
    for command, sub in _subparsers().items():
        jobs = _option(sub, "--jobs")
        if jobs is None:
            continue
        assert jobs.help and "0 = one per CPU" in jobs.help, command
        assert jobs.type is not None and jobs.type("0") == 0, command
        with pytest.raises(argparse.ArgumentTypeError):
            jobs.type("-1")


def test_fuzz_jobs_zero_is_accepted(tmp_path: Path) -> None:
    """fuzz --jobs 0 used to be refused (must be >= 1); it now runs one worker per CPU."""
    code, out, err = _run("fuzz", "--impl", "loopspec.protocol.executor:ReferenceExecutor", "--jobs", "0",
                          "--max-examples", "4", "--seed", "1", "--out", str(tmp_path / "f"), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["parameters"]["jobs"] == resolve_jobs(0)


def test_fuzz_help_names_every_framework_of_the_registry() -> None:
    from loopspec.frameworks import FRAMEWORKS

    impl = _option(_subparsers()["fuzz"], "--impl")
    assert impl is not None and impl.help
    text = " ".join(impl.help.split())
    for name in FRAMEWORKS:
        assert name in text, name
    assert "python -m loopspec.examples.executor" in text


def test_diagram_format_json_prints_the_files_written(tmp_path: Path) -> None:
    code, out, err = _run("diagram", "--format", "json", "--render", "dot", "--render", "md", "--out", str(tmp_path))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["format"] == "loopspec-diagram/1" and doc["ok"] is True
    assert sorted(Path(f).name for f in doc["files"]) == sorted(
        f"{stem}.{ext}" for stem in ("machine", "check-order", "writes") for ext in ("dot", "md"))
    assert all(Path(f).is_file() for f in doc["files"])


def test_diagram_older_format_spelling_still_renders(tmp_path: Path) -> None:
    code, out, _ = _run("diagram", "--format", "mermaid", "--out", str(tmp_path))
    assert code == 0 and (tmp_path / "machine.mmd").is_file() and not (tmp_path / "machine.dot").exists()
    assert str(tmp_path / "machine.mmd") in out


def test_diagram_quiet_prints_nothing_when_all_is_well(tmp_path: Path) -> None:
    code, out, _ = _run("diagram", "--render", "dot", "--out", str(tmp_path), "--quiet")
    assert code == 0 and out == "" and (tmp_path / "machine.dot").is_file()


def test_diagram_writes_into_the_one_default_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, _ = _run("diagram", "--render", "dot", "--quiet")
    assert code == 0 and (tmp_path / "loopspec-out" / "diagram" / "machine.dot").is_file()


def test_check_out_draws_like_the_older_diagram(tmp_path: Path) -> None:
    from loopspec.cli.demo import loop_section, tamper_replay

    with contextlib.redirect_stdout(io.StringIO()):
        _, run = loop_section(False, False)
    bad = tmp_path / "bad.ndjson"
    bad.write_text(tamper_replay(run.ledger.to_ndjson()), encoding="utf-8")
    for flag, d in (("--out", tmp_path / "new"), ("--diagram", tmp_path / "old")):
        code, out, _ = _run("check", str(bad), flag, str(d), "--quiet")
        assert code == 1 and len(list(d.glob("demo-merchants-*/path.json"))) == 1, flag
        assert "ok   " not in out


@pytest.mark.parametrize("argv", [["spec"], ["vectors"], ["vectors", "--loop"]])
def test_quiet_prints_only_the_verdict(argv: list[str]) -> None:
    code, loud, _ = _run(*argv)
    qcode, quiet, _ = _run(*argv, "--quiet")
    assert code == qcode == 0
    assert len(quiet.splitlines()) == 1 < len(loud.splitlines())
    assert quiet.strip().splitlines()[-1] == loud.strip().splitlines()[-1].strip() or argv == ["spec"]


def test_verify_quiet_prints_the_verdict_line() -> None:
    code, out, _ = _run("verify", "--scope", "batch", "--bound", "batch.calls=2", "--quiet")
    assert code == 0 and out.splitlines()[-1].startswith("PASS: ") and "scope" not in out


def test_monitor_format_text_prints_one_line_per_verdict() -> None:
    from loopspec.monitor._service import Output

    out = io.StringIO()
    o = Output(out, io.StringIO(), fmt="text", quiet=True)
    o.line({"run": "r1", "verdict": "conforms", "events": 3, "monitor": {"trace": "t1", "closedBy": "root"}})
    o.line({"run": "r2", "verdict": "violates", "events": 3, "monitor": {"trace": "t2", "closedBy": "idle"},
            "violation": {"rule": "R6", "kind": "replay-reexecuted", "explanation": "Let x.\nThen y."}})
    assert out.getvalue() == "FAIL r2 (trace t2, closed by idle): R6 replay-reexecuted: Then y.\n"


def test_the_example_executor_says_which_protocol_versions_it_speaks() -> None:
    r = subprocess.run([sys.executable, "-m", "loopspec.examples.executor", "--help"], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, cwd=ROOT.parent)
    text = " ".join(r.stdout.split())
    assert r.returncode == 0, r.stderr
    assert "versions 1.0 to 1.2" in text and "python -m loopspec.examples.executor" in text
    assert "protocol v1.1 (" not in text


def test_the_protocol_doc_names_no_flag_that_does_not_exist() -> None:
    """PROTOCOL.md once sent readers to `loopspec fuzz --concurrency`, which never existed."""
    fuzz = _subparsers()["fuzz"]
    known = {s for a in fuzz._actions for s in a.option_strings}
    text = (ROOT / "spec" / "PROTOCOL.md").read_text(encoding="utf-8")
    for m in re.finditer(r"`loopspec fuzz ([^`]*)`", text):
        for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", m.group(1)):
            assert flag in known, (flag, m.group(0))


def _last(out: str) -> str:
    return out.rstrip("\n").splitlines()[-1]


def test_a_failing_fuzz_ends_with_the_command_that_replays_its_case(tmp_path: Path) -> None:
    import shlex

    impl = f"{shlex.quote(sys.executable)} -m loopspec.examples.executor --bug replay-reexecutes"
    code, out, err = _run("fuzz", "--impl", impl, "-x", "--seed", "1", "--quiet", "--out", str(tmp_path / "f"))
    assert code == 1, err
    last = _last(out)
    assert last.startswith("next: loopspec replay ") and "R6" in last, last
    argv = shlex.split(last.removeprefix("next: ").split("   #")[0])
    rcode, rout, _ = _run(*argv[1:])
    assert rcode == 1 and "DIVERGES: R6" in rout and _last(rout).startswith("next: loopspec replay ")
    diagram = next(ln for ln in out.splitlines() if ln.startswith("also: loopspec diagram --trace "))
    dargv = shlex.split(diagram.removeprefix("also: ").split("   #")[0])
    dargv[dargv.index("--out") + 1] = str(tmp_path / "d")
    dargv[dargv.index("--render") + 1] = "dot"
    assert _run(*dargv[1:])[0] == 0 and (tmp_path / "d" / "machine-trace.dot").is_file()


def test_a_failing_verify_ends_with_the_command_to_run_next(tmp_path: Path) -> None:
    argv = ("verify", "--scope", "batch", "--bound", "batch.calls=3", "--variant", "replay-re-executes", "--quiet")
    code, out, _ = _run(*argv)
    assert code == 1 and _last(out).startswith("next: loopspec verify ") and "--out loopspec-out/verify" in _last(out)
    code, out, _ = _run(*argv, "--out", str(tmp_path))
    assert code == 1 and _last(out).startswith(f"next: loopspec diagram --trace {tmp_path / 'trace.json'}")
    assert (tmp_path / "trace.json").is_file()


def test_a_failing_check_ends_with_the_command_to_run_next(tmp_path: Path) -> None:
    from loopspec.cli.demo import loop_section, tamper_replay

    with contextlib.redirect_stdout(io.StringIO()):
        _, run = loop_section(False, False)
    bad = tmp_path / "bad.ndjson"
    bad.write_text(tamper_replay(run.ledger.to_ndjson()), encoding="utf-8")
    code, out, _ = _run("check", str(bad))
    assert code == 1 and _last(out).startswith(f"next: loopspec check {bad} --quiet --out loopspec-out/check")
    code, out, _ = _run("check", str(bad), "--out", str(tmp_path / "o"))
    assert code == 1 and _last(out).startswith("next: loopspec diagram --trace ")


# --- the same next step in JSON (issue 30): `"next"` is the command the text's `next:` line names ---------------


def _next_command(text: str) -> str:
    last = _last(text)
    assert last.startswith("next: "), last
    return last.removeprefix("next: ").split("   #")[0]


def _json_next(*argv: str) -> tuple[int, object]:
    code, out, err = _run(*argv, "--format", "json")
    doc = json.loads(out)
    assert isinstance(doc, dict) and "next" in doc, (err, out[:300])
    return code, doc["next"]


def test_a_failing_fuzz_gives_its_next_step_in_json_too(tmp_path: Path) -> None:
    import shlex

    impl = f"{shlex.quote(sys.executable)} -m loopspec.examples.executor --bug replay-reexecutes"
    out = str(tmp_path / "f")
    code, text, err = _run("fuzz", "--impl", impl, "-x", "--seed", "1", "--quiet", "--out", out)
    assert code == 1, err
    assert _json_next("fuzz", "--impl", impl, "-x", "--seed", "1", "--out", out) == (1, _next_command(text))
    ok = f"{shlex.quote(sys.executable)} -m loopspec.examples.minimal_adapter"
    assert _json_next("fuzz", "--impl", ok, "--max-examples", "20", "--seed", "1", "--out", str(tmp_path / "g")) \
        == (0, None)


def test_a_failing_replay_gives_its_next_step_in_json_too(tmp_path: Path) -> None:
    import shlex

    impl = f"{shlex.quote(sys.executable)} -m loopspec.examples.executor --bug replay-reexecutes"
    out = tmp_path / "f"
    assert _run("fuzz", "--impl", impl, "-x", "--seed", "1", "--quiet", "--out", str(out))[0] == 1
    case = str(next(p for p in sorted(out.glob("R6*.json")) if not p.name.endswith(".path.json")))
    code, text, _ = _run("replay", case, "--impl", impl)
    assert code == 1 and _json_next("replay", case, "--impl", impl) == (1, _next_command(text))
    code, text, _ = _run("replay", str(out), "--impl", impl)
    assert code == 1 and _json_next("replay", str(out), "--impl", impl) == (1, _next_command(text))
    fixed = f"{shlex.quote(sys.executable)} -m loopspec.examples.minimal_adapter"
    assert _json_next("replay", case, "--impl", fixed) == (0, None)
    assert _json_next("replay", str(out), "--impl", fixed) == (0, None)


def test_a_failing_verify_gives_its_next_step_in_json_too(tmp_path: Path) -> None:
    argv = ("verify", "--scope", "batch", "--bound", "batch.calls=3", "--variant", "replay-re-executes")
    code, text, _ = _run(*argv, "--quiet")
    assert code == 1 and _json_next(*argv, "--quiet") == (1, _next_command(text))
    assert "--format" not in _next_command(text)  # the same check, whatever the report's format
    code, text, _ = _run(*argv, "--out", str(tmp_path))
    assert code == 1 and _json_next(*argv, "--out", str(tmp_path)) == (1, _next_command(text))
    assert _json_next("verify", "--scope", "batch", "--bound", "batch.calls=2") == (0, None)


def test_a_failing_check_gives_its_next_step_in_json_too(tmp_path: Path) -> None:
    from loopspec.cli.demo import loop_section, tamper_replay

    with contextlib.redirect_stdout(io.StringIO()):
        _, run = loop_section(False, False)
    bad, good = tmp_path / "bad.ndjson", tmp_path / "good.ndjson"
    bad.write_text(tamper_replay(run.ledger.to_ndjson()), encoding="utf-8")
    good.write_text(run.ledger.to_ndjson(), encoding="utf-8")
    code, text, _ = _run("check", str(bad))
    assert code == 1 and _json_next("check", str(bad)) == (1, _next_command(text))
    code, text, _ = _run("check", str(bad), "--out", str(tmp_path / "o"))
    assert code == 1 and _json_next("check", str(bad), "--out", str(tmp_path / "o")) == (1, _next_command(text))
    assert _json_next("check", str(good)) == (0, None)


def test_failing_vectors_give_their_next_step_in_json_too(tmp_path: Path) -> None:
    doc = json.loads((ROOT / "spec" / "conformance" / "batch.json").read_text(encoding="utf-8"))
    doc["cases"][0]["expect"]["executed"] += 1  # a wrong expectation: the engine does not meet it
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(doc), encoding="utf-8")
    code, text, _ = _run("vectors", "--file", str(wrong))
    assert code == 1 and _json_next("vectors", "--file", str(wrong)) == (1, _next_command(text))
    assert f"--file {wrong}" in _next_command(text)  # the same vectors, not the shipped ones
    assert _run(*_next_command(text).split()[1:])[0] == 1
    assert _json_next("vectors") == (0, None)


def _html_next(path: Path) -> str | None:
    import html
    import re

    m = re.search(r'<p class="next">Next: <code>(.*?)</code></p>', path.read_text(encoding="utf-8"), re.S)
    return html.unescape(m.group(1)) if m else None


def test_the_html_report_names_the_same_next_step(tmp_path: Path) -> None:
    """--html's "Next:" line is the command the text's `next:` line names (one NextStep per command), for fuzz,
    verify and check; none when nothing was found."""
    import shlex

    from loopspec.cli.demo import loop_section, tamper_replay

    impl = f"{shlex.quote(sys.executable)} -m loopspec.examples.executor --bug replay-reexecutes"
    page = tmp_path / "fuzz.html"
    code, text, err = _run("fuzz", "--impl", impl, "-x", "--seed", "1", "--out", str(tmp_path / "f"), "--html",
                           str(page))
    assert code == 1, err
    assert _html_next(page) == _next_command(text)
    argv = ("verify", "--scope", "batch", "--bound", "batch.calls=3", "--variant", "replay-re-executes")
    page = tmp_path / "verify.html"
    code, text, _ = _run(*argv, "--out", str(tmp_path / "v"), "--html", str(page))
    assert code == 1 and _html_next(page) == _next_command(text)
    with contextlib.redirect_stdout(io.StringIO()):
        _, run = loop_section(False, False)
    bad, good = tmp_path / "bad.ndjson", tmp_path / "good.ndjson"
    bad.write_text(tamper_replay(run.ledger.to_ndjson()), encoding="utf-8")
    good.write_text(run.ledger.to_ndjson(), encoding="utf-8")
    page = tmp_path / "check.html"
    code, text, _ = _run("check", str(bad), "--html", str(page))
    assert code == 1 and _html_next(page) == _next_command(text)
    code, _, _ = _run("check", str(good), "--html", str(page))
    assert code == 0 and _html_next(page) is None
