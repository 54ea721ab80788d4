"""docs/python.md is one complete example in three files: extracted here, run, and its output compared
with what the page shows; the pytest fixture section runs under pytest. tests/test_wheel.py runs the
same extraction against an installed wheel."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "python.md"
BLOCK = re.compile(r"<!-- (file|output): (\S+) -->\n```(?:python|text)\n(.*?)```", re.S)
#: output lines that depend on the shrunk case the fuzzer found: compared by this beginning only
VARIABLE = ("Then request #",)


def extract(text: str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(file name -> its code, file name -> the output the page shows for it), blocks in page order."""
    files: dict[str, str] = {}
    outputs: dict[str, str] = {}
    for kind, name, body in BLOCK.findall(text if text is not None else DOC.read_text(encoding="utf-8")):
        target = files if kind == "file" else outputs
        target[name] = target.get(name, "") + (("\n\n" if name in target and kind == "file" else "") + body)
    return files, outputs


def write_example(directory: Path) -> dict[str, str]:
    files, outputs = extract()
    for name, code in files.items():
        (directory / name).write_text(code, encoding="utf-8")
    return outputs


def same_output(shown: str, printed: str) -> list[str]:
    """Differences between the output the page shows and the printed one (empty: the same)."""
    a, b = shown.splitlines(), printed.splitlines()
    if len(a) != len(b):
        return [f"{len(a)} lines shown, {len(b)} printed:\n{printed}"]
    diffs = []
    for x, y in zip(a, b, strict=True):
        prefix = next((p for p in VARIABLE if x.startswith(p)), None)
        if (y.startswith(prefix) if prefix else x == y):
            continue
        diffs.append(f"shown:   {x}\nprinted: {y}")
    return diffs


def test_the_page_has_the_three_files_and_an_output_for_the_example() -> None:
    files, outputs = extract()
    assert set(files) == {"example.py", "my_adapter.py", "test_my_adapter.py"}
    assert set(outputs) == {"example.py"}
    text = DOC.read_text(encoding="utf-8")
    for topic in ("run_batch", "run_loop", "ToolFailure", "DEPENDENCY_TEMPORARY", "NOT_FOUND_OR_NOT_ACCESSIBLE",
                  "INTERNAL_ERROR", "Ledger", "loopspec.fuzz.fuzz", "execute(call_id, name, arguments, principal)",
                  "loopspec_fuzz", "inputSchema"):
        assert topic in text, topic


def test_same_output_allows_only_the_marked_lines_to_vary() -> None:
    assert same_output("a\nThen request #0 x\n", "a\nThen request #3 y\n") == []
    assert same_output("a\nb\n", "a\nc\n") and same_output("a\n", "a\nb\n")


@pytest.mark.slow
def test_the_example_prints_what_the_page_shows(tmp_path: Path) -> None:
    outputs = write_example(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    r = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert same_output(outputs["example.py"], r.stdout) == []
    # the shrunk case, for loopspec replay, named by its cause (issue 27)
    assert [p.name for p in (tmp_path / "fuzz-off-by-one").glob("R9-*.json") if not p.name.endswith(".path.json")]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_my_adapter.py"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-3000:]
    r = subprocess.run([sys.executable, "-m", "loopspec", "fuzz", "--impl", "my_adapter:MyExecutor",
                        "--max-examples", "10", "--seed", "1", "--out", "cli-fuzz"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0 and "no divergence" in r.stdout, r.stdout + r.stderr
