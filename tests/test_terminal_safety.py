"""No control character from an input or an implementation reaches the terminal raw (issue 14): every
command's stdout and stderr go through ``loopspec.support.text.SafeStream``, and the fuzzer's explanation
files are escaped too."""

from __future__ import annotations

import io
import json
import re
import sys
import textwrap
from pathlib import Path

import pytest

from loopspec.cli import main
from loopspec.support.text import SafeStream, paint

#: what must never appear raw: C0/C1 controls but newline and tab, DEL, bidi controls, line separators
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
EVIL = "\x1b]0;owned\x07\x1b[2J\u202e\x85"


def test_safe_stream_escapes_terminal_controls_and_keeps_colour_and_json() -> None:
    buf = io.StringIO()
    SafeStream(buf).write(f"a{EVIL}b\n" + paint("ok", "32", True) + "\t")
    assert buf.getvalue() == "a\\u001b]0;owned\\u0007\\u001b[2J\\u202e\\u0085b\n\x1b[32mok\x1b[0m\t"
    buf = io.StringIO()
    SafeStream(buf).write(json.dumps({"x": EVIL}, ensure_ascii=False))
    assert json.loads(buf.getvalue()) == {"x": EVIL} and not RAW.search(buf.getvalue())
    buf = io.StringIO()
    SafeStream(buf, progress=True).write("\r\x1b[K12 examples\r")
    assert buf.getvalue() == "\r\x1b[K12 examples\\u000d"


EVIL_EXECUTOR = textwrap.dedent('''
    from loopspec.fuzz import Executor

    EVIL = EVIL_REPR

    class EvilIds(Executor):
        """Answers every call under an id of its own making, full of terminal controls."""

        def batch_run(self, params, execute):
            results = [{"id": EVIL + str(i), "status": "ok", "output": EVIL}
                       for i, _ in enumerate(params["calls"])]
            return {"results": results, "executed": 0, "aborted": None}
'''.replace("EVIL_REPR", repr(EVIL)))


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_fuzz_reports_quote_a_hostile_implementation_escaped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    (tmp_path / "evil_executor.py").write_text(EVIL_EXECUTOR)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    code = main(["fuzz", "--impl", "evil_executor:EvilIds", "--max-examples", "20", "--seed", "1",
                 "--out", str(out), "--format", fmt])
    captured = capsys.readouterr()
    assert code == 1
    assert not RAW.search(captured.out) and not RAW.search(captured.err), (captured.out[-800:], captured.err[-800:])
    if fmt == "json":
        json.loads(captured.out)
    txt = sorted(out.glob("*.txt"))
    assert txt and all(not RAW.search(p.read_text(encoding="utf-8")) for p in txt)
    # the escape is visible: the reader sees that the implementation sent control characters
    assert any("\\x1b" in p.read_text(encoding="utf-8") or "\\u001b" in p.read_text(encoding="utf-8") for p in txt)
    sys.modules.pop("evil_executor", None)


def test_spec_command_on_a_spec_whose_name_carries_controls(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`loopspec spec` prints the spec's meta.name in its first line: a hostile --spec gets it escaped."""
    import shutil

    from loopspec.spec.base import shipped_spec_path

    dest = tmp_path / "s"
    shutil.copytree(shipped_spec_path().parent, dest)
    toml = dest / "loop.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace(
        'name = "loopspec"', 'name = "loop\\u001b[2J\\u202espec"', 1), encoding="utf-8")
    assert main(["spec", "--spec", str(toml)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("loop\\u001b[2J\\u202espec ")
    assert not RAW.search(captured.out) and not RAW.search(captured.err)
