"""`loopspec diagram`: files written, exit codes, missing Graphviz, bad overlay input."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from loopspec import Ledger, Tool, run_batch
from loopspec.cli import main

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")
TEXT_FILES = ["machine.dot", "machine.mmd", "machine.md", "check-order.dot", "check-order.mmd", "check-order.md",
              "writes.dot", "writes.mmd", "writes.md"]


@pytest.fixture
def no_dot(monkeypatch, tmp_path):
    """A PATH on which Graphviz cannot be found."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def test_text_formats_only(tmp_path, capsys) -> None:
    out = tmp_path / "d"
    assert main(["diagram", "--out", str(out), "--format", "dot", "--format", "mermaid", "--format", "md"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(TEXT_FILES)
    assert capsys.readouterr().out.count("\n") == len(TEXT_FILES)


@needs_dot
def test_default_writes_every_format(tmp_path) -> None:
    out = tmp_path / "d"
    assert main(["diagram", "--out", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert names == set(TEXT_FILES) | {"machine.svg", "machine.png", "check-order.svg", "check-order.png",
                                       "writes.svg", "writes.png"}
    assert (out / "machine.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "machine.svg").read_text(encoding="utf-8").lstrip().startswith("<?xml")
    assert (out / "machine.svg").stat().st_mode & 0o044, "published files are readable by others (umask)"


def test_missing_dot_still_writes_text_and_exits_0(tmp_path, capsys, no_dot) -> None:
    out = tmp_path / "d"
    assert main(["diagram", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(TEXT_FILES)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "apt-get install -y graphviz" in err[0]
    assert "Traceback" not in err[0]


@pytest.mark.parametrize("fmt", ["svg", "png"])
def test_missing_dot_with_explicit_rendered_format_exits_2(tmp_path, capsys, no_dot, fmt: str) -> None:
    out = tmp_path / "d"
    assert main(["diagram", "--out", str(out), "--format", fmt, "--format", "md"]) == 2
    assert sorted(p.name for p in out.iterdir()) == ["check-order.md", "machine.md", "writes.md"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "install Graphviz" in err[0]


def test_trace_and_coverage_overlays(tmp_path, capsys) -> None:
    trace = tmp_path / "cx.json"
    trace.write_text(json.dumps({"path": ["T04", "T14", "T20", "T21", "T27", "T12", "T24"], "failed": 5}))
    cov = tmp_path / "cov.json"
    cov.write_text(json.dumps({"transitions": {"T04": 3, "T14": 2}}))
    out = tmp_path / "o"
    fmts = ["--format", "dot", "--format", "md", "--format", "mermaid"]
    assert main(["diagram", "--out", str(out), "--trace", str(trace), *fmts]) == 0
    assert main(["diagram", "--out", str(out), "--coverage", str(cov), *fmts]) == 0
    assert main(["diagram", "--out", str(out), "--trace", str(trace), "--coverage", str(cov), *fmts]) == 0
    names = {p.name for p in out.iterdir()}
    for stem in ("machine-trace", "machine-coverage", "machine-trace-coverage"):
        assert {f"{stem}.dot", f"{stem}.md", f"{stem}.mmd"} <= names
    assert "✖ #6" in (out / "machine-trace.dot").read_text(encoding="utf-8")


def test_ledger_overlay_with_run_choice(tmp_path) -> None:
    sink = io.StringIO()
    led = Ledger(sink)
    tool = Tool.define("length", lambda a, c: len(a["text"]), {"type": "object"})
    run_batch([{"id": "a", "name": "length", "arguments": {"text": "x"}}], tools=[tool], budget=1, ledger=led,
              run_id="first")
    run_batch([{"id": "a", "name": "nope", "arguments": {}}], tools=[tool], budget=1, ledger=led, run_id="second")
    ledger = tmp_path / "runs.ndjson"
    ledger.write_text(sink.getvalue())
    out = tmp_path / "o"
    assert main(["diagram", "--out", str(out), "--trace", str(ledger), "--run", "second", "--format", "md"]) == 0
    md = (out / "machine-trace.md").read_text(encoding="utf-8")
    assert "run second" in md and "T10" in md and "✖" in md
    assert main(["diagram", "--out", str(out), "--trace", str(ledger), "--format", "md"]) == 0
    assert "run first" in (out / "machine-trace.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("content", "args", "expect"),
    [
        ('{"path": ["T04",\n "T99"]}', ["--trace"], ":2: path[1]: unknown transition 'T99'"),
        ("not json", ["--coverage"], ":1: not JSON"),
        ("", ["--trace"], "the file is empty"),
        ('{"run": "a", "type": "x", "via": "T04"}\n', ["--run", "b", "--trace"], "no run 'b'"),
    ],
)
def test_bad_overlay_input_is_one_line_exit_2(tmp_path, capsys, content: str, args: list[str], expect: str) -> None:
    f = tmp_path / "in.json"
    f.write_text(content)
    assert main(["diagram", "--out", str(tmp_path / "o"), *args, str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expect in err and str(f) in err
    assert not (tmp_path / "o").exists(), "nothing is written for bad input"


def test_usage_errors(tmp_path, capsys) -> None:
    assert main(["diagram", "--out", str(tmp_path), "--run", "x"]) == 2
    assert "--run" in capsys.readouterr().err
    assert main(["diagram", "--out", str(tmp_path), "--trace", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["diagram", "--format", "gif"])
    assert exc.value.code == 2


def test_custom_spec_file(tmp_path) -> None:
    from loopspec.spec.base import default_spec_path

    spec = tmp_path / "my.toml"
    spec.write_text(default_spec_path().read_text(encoding="utf-8").replace('spec_version = "1.1.0"',
                                                                               'spec_version = "9.9.9"'))
    out = tmp_path / "o"
    assert main(["diagram", "--spec", str(spec), "--out", str(out), "--format", "md"]) == 0
    text = (out / "machine.md").read_text(encoding="utf-8")
    assert "9.9.9" in text
    assert "INV-" not in text.split("## Transitions")[0], "no SPEC.md next to it: no invariants attached"


def test_committed_diagrams_readme_documents_the_overlay_formats() -> None:
    readme = Path(__file__).resolve().parents[1] / "diagrams" / "README.md"
    text = readme.read_text(encoding="utf-8")
    assert "transition-path.schema.json" in text and "transition-coverage.schema.json" in text


def test_graphviz_failure_is_one_line_exit_2(tmp_path, monkeypatch, capsys) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    dot = fake / "dot"
    dot.write_text("#!/bin/sh\necho 'Error: broken renderer' >&2\nexit 3\n")
    dot.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    assert main(["diagram", "--out", str(tmp_path / "o"), "--format", "svg"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all("Graphviz failed: Error: broken renderer" in e for e in err)  # machine, check-order, writes
