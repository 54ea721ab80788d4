"""The code base is ruff clean (part of the test suite, so CI fails on lint errors)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean() -> None:
    if shutil.which("ruff") is None and subprocess.run([sys.executable, "-m", "ruff", "--version"],
                                                        capture_output=True).returncode != 0:
        pytest.fail("ruff is a test dependency: pip install -e '.[test]'")
    paths = [p for p in ("src", "tests", "benchmarks", "examples") if (ROOT / p).is_dir()]
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", *paths],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
