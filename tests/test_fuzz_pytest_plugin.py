"""The pytest plugin: a project fuzzes its own executor from its own test suite (fixture loopspec_fuzz)."""

from __future__ import annotations

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
