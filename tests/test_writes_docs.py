"""docs/writes.md: its worked example runs and prints exactly what the page says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "writes.md"


def test_the_worked_example_prints_what_the_page_says(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S)
    shown = re.search(r"It prints:\n\n```text\n(.*?)```", text, re.S)
    assert code and shown
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.group(1), str(DOC), "exec"), {"OPS": str(tmp_path / "ops.sqlite"), "__name__": "doc"})
    assert out.getvalue() == shown.group(1)
