"""The README's quickstart runs as it is written (issue 30): every command of its block, in order, in an empty
directory, each with the exit code the README gives it (`# exit N`, else 0). Here from the source tree (a
`loopspec` on PATH that runs this checkout); tests/test_wheel.py runs the same block from the installed wheel."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- quickstart: tests/test_readme_quickstart.py runs every command of this block in order -->"


def quickstart() -> str:
    """The README's quickstart block (the shell text between its fences)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text[text.index(MARK) + len(MARK):]
    m = re.match(r"\s*```sh\n(.*?)\n```", block, re.S)
    assert m, "the quickstart block follows its marker"
    return m.group(1)


def comment_start(line: str) -> int:
    """Where a shell comment starts in ``line`` (a ``#`` after a blank, outside quotes); len(line) if none."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return i
    return len(line)


def script(block: str) -> tuple[str, list[tuple[int, str, int]]]:
    """A bash script that runs ``block`` and reports each command's exit code (``@@rc N LINE``), and the
    commands with the exit code the README expects: (line, command, code)."""
    out, expected = [], []
    heredoc: str | None = None
    start = 0
    for n, line in enumerate(block.splitlines(), 1):
        if heredoc is not None:
            out.append(line)
            if line == heredoc:
                heredoc = None
                out.append(f'echo "@@rc $? {start}"')
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            out.append(line)
            continue
        cut = comment_start(line)
        cmd, comment = line[:cut].rstrip(), line[cut:]
        m = re.match(r"#\s*exit (\d+)", comment)
        code = int(m.group(1)) if m else 0
        here = re.search(r"<<'(\w+)'", cmd)
        expected.append((n, cmd, code))
        if here:
            heredoc, start = here.group(1), n
            out.append(cmd)
        else:
            out.append(f'{cmd}; echo "@@rc $? {n}"')
    return "\n".join(out) + "\n", expected


def run_quickstart(work: Path, env: dict[str, str], timeout: float = 600) -> None:
    """Run the quickstart in ``work`` with ``env`` (PATH finds `loopspec` and `python`); assert every exit code."""
    text, expected = script(quickstart())
    (work / "quickstart.sh").write_text(text, encoding="utf-8")
    r = subprocess.run(["bash", "quickstart.sh"], cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    got = {int(n): int(c) for c, n in re.findall(r"^@@rc (\d+) (\d+)$", r.stdout, re.M)}
    for n, cmd, code in expected:
        assert got.get(n) == code, (cmd, got.get(n), code, r.stdout[-4000:], r.stderr[-3000:])
    # what the README says each step shows
    assert "Let " in r.stdout and "Then " in r.stdout  # step 2: the case, explained
    assert (work / "loopspec-out" / "diagram" / "machine-trace.mmd").is_file()  # step 3
    assert "no divergence" in r.stdout  # steps 4 and 5
    page = (work / "report.html").read_text(encoding="utf-8")  # step 6
    assert "<script" in page and not re.search(r"""(?:src|href)=["']https?:""", page)  # nothing from the network
    assert "<testsuite" in (work / "junit.xml").read_text(encoding="utf-8")
    assert "R7 conflict-reused" in r.stdout  # step 7
    assert "1 passed" in r.stdout  # step 8


def test_the_script_expects_what_the_readme_says() -> None:
    _, expected = script(quickstart())
    codes = {cmd.split()[1] if cmd.startswith("loopspec") else cmd.split()[0]: code for _, cmd, code in expected}
    assert codes["check"] == 1 and codes["diagram"] == 0
    assert [c for _, cmd, c in expected if cmd.startswith("loopspec replay")] == [1, 0]
    assert len(quickstart().splitlines()) <= 60


@pytest.mark.skipif(shutil.which("bash") is None, reason="the quickstart is a shell script")
def test_the_readme_quickstart_runs_from_the_source_tree(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "loopspec").write_text(f'#!/bin/sh\nexec {sys.executable} -m loopspec "$@"\n', encoding="utf-8")
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n', encoding="utf-8")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(ROOT / "src"), "PYTEST_ADDOPTS": "-p no:cacheprovider"}
    env.pop("PYTEST_XDIST_WORKER", None)
    run_quickstart(work, env)
