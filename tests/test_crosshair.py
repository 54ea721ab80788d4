"""CrossHair checks the contracts of the pure core symbolically (R1, R4–R10, R13, R14, R20).

`crosshair check` is run as a subprocess with a bounded time per condition; the test fails when
CrossHair reports a counterexample (exit 1, `file:line: error:` lines) or cannot run (exit 2).
A second test proves the harness can fail: a deliberately broken copy of the decision function
yields a counterexample.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CROSSHAIR = [sys.executable, "-m", "crosshair", "check"]


def crosshair(*targets: str, timeout: float, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if cwd is not None:
        env["PYTHONPATH"] = f"{cwd}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return subprocess.run(
        [*CROSSHAIR, "--per_condition_timeout", str(timeout), *targets],
        capture_output=True, text=True, timeout=900, cwd=cwd, env=env,
    )


#: The core's contract-bearing functions. `well_formed` takes `object` parameters, which CrossHair
#: explores by instantiating arbitrary classes (and can crash inside them); it is checked through
#: the typed wrapper `loopspec.core.contracts.well_formed_call` instead.
CORE_TARGETS = [f"loopspec.core.rules.{f}" for f in (
    "blank", "arguments_valid", "classify_binding", "decide", "escalates", "within", "overlaps")]


def test_core_contracts_hold() -> None:
    r = crosshair(*CORE_TARGETS, timeout=4)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "error:" not in r.stdout


def test_whole_batch_contracts_hold() -> None:
    r = crosshair("loopspec.core.contracts", timeout=12)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "error:" not in r.stdout


def test_crosshair_finds_a_broken_budget_check(tmp_path: Path) -> None:
    """Budget checked with <= instead of < (an off-by-one): CrossHair must refute the contract."""
    (tmp_path / "broken_core.py").write_text(textwrap.dedent('''
        def decide(executed: int, budget: int, valid: bool) -> bool:
            """Does the call execute?

            pre: 0 <= executed <= budget
            post: implies(__return__, executed < budget)
            """
            return valid and executed <= budget


        def implies(a: bool, b: bool) -> bool:
            return (not a) or b
    '''))
    r = crosshair("broken_core", timeout=10, cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "broken_core.py:" in r.stdout and "error:" in r.stdout
