"""The pytest plugin: a project fuzzes its own executor from its own test suite (fixture loopspec_fuzz)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]

#: The inner runs happen in this process (pytester.runpytest): pytest-playwright (a test dependency, for
#: tests/test_reports_browser.py) opens a soft-assertion scope around every test call and refuses a nested one,
#: which failed the inner test before it ran. The inner runs do not need it.
INNER = ("-p", "no:cacheprovider", "-p", "no:playwright")

CORRECT = """
from loopspec.fuzz import ReferenceExecutor

def test_my_executor(loopspec_fuzz):
    result = loopspec_fuzz(ReferenceExecutor, max_examples=15, seed=1)
    assert result.ok and result.stats["steps"] > 0
"""

BUGGY = """
from loopspec import ToolFailure
from loopspec.fuzz import Executor

class Unbudgeted(Executor):
    '''Executes every call, budget or not (R9).'''
    def batch_run(self, params, execute):
        results, executed = [], 0
        for c in params["calls"]:
            if not (isinstance(c, dict) and isinstance(c.get("id"), str) and c["id"].strip()
                    and isinstance(c.get("name"), str) and isinstance(c.get("arguments"), dict)):
                results.append({"id": None, "status": "error", "code": "INVALID_CALL"})
                continue
            try:
                executed += 1
                results.append({"id": c["id"], "status": "ok",
                                "output": execute(c["id"], c["name"], c["arguments"], params["principal"])})
            except ToolFailure as f:
                results.append({"id": c["id"], "status": "error", "code": f.category})
        return {"results": results, "executed": executed, "aborted": None}

def test_my_executor(loopspec_fuzz):
    loopspec_fuzz(Unbudgeted, max_examples=50, seed=1, shrink_seconds=5.0)
"""


def test_plugin_passes_a_correct_executor(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(CORRECT)
    pytester.runpytest(*INNER).assert_outcomes(passed=1)


def test_plugin_fails_a_buggy_executor_with_the_explanation(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(BUGGY)
    res = pytester.runpytest(*INNER)
    res.assert_outcomes(failed=1)
    text = res.stdout.str()
    assert "divergence(s) from the spec" in text
    assert "Let a batch with" in text and "Then request #" in text
    assert "Traceback" not in text.split("divergence(s) from the spec")[1]


def test_the_failure_prints_a_replay_command_that_runs(pytester: pytest.Pytester) -> None:
    """Issue 27: the failure's replay line must run as printed, from where pytest was run. A test module under
    tests/ is imported by pytest from tests/ (rootdir-based sys.path insertion): `--impl test_x:Class` from the
    project's root could not import it (exit 2). The line now says where to run it from."""
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_buggy_executor.py").write_text(BUGGY)
    # in a child, as a user runs it: its own basetemp (the in-process runs share one, so this run's --out would
    # hold the other test's cases) and its own modules (in process, pytester restores sys.modules between runs)
    res = pytester.runpytest_subprocess(*INNER)
    res.assert_outcomes(failed=1)
    line = next(x for x in res.stdout.lines if x.startswith("replay:         ")).removeprefix("replay:" ).strip()
    assert "--impl test_buggy_executor:Unbudgeted" in line and "<class" not in line, line
    # run it as printed (loopspec as this interpreter's module, with this process's import path)
    cmd = line.replace("loopspec replay", f"{shlex.quote(sys.executable)} -m loopspec replay", 1)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(cmd, shell=True, cwd=pytester.path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, (cmd, done.stdout[-2000:], done.stderr[-2000:])  # it replays: still diverges
    assert "cannot import" not in done.stderr
