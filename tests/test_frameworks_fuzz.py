"""Bounded fuzz campaigns against the real frameworks, in process, under their profiles.

Skipped cleanly when a framework's extra is not installed (CI installs them: `.[frameworks]`). The
campaigns are small; docs/frameworks.py runs the larger ones behind docs/frameworks.md.
"""

from __future__ import annotations

import importlib.util

import pytest

from loopspec.frameworks import FRAMEWORKS, resolve
from loopspec.fuzz import fuzz

MODULES = {"pydantic-ai": "pydantic_ai", "openai-agents": "agents", "langgraph": "langgraph"}


def _need(name: str) -> None:
    if importlib.util.find_spec(MODULES[name]) is None:
        pytest.skip(f"{name} is not installed (pip install 'loopspec[{name}]')")


@pytest.mark.frameworks
@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
@pytest.mark.parametrize("mode", ["batch", "loop"])
def test_campaign_runs_the_real_tool_path(name: str, mode: str, tmp_path) -> None:
    """The adapter drives the framework's tool-calling path: executions are observed in the tool bodies
    and every step is judged; findings (if any) are shrunk cases on disk."""
    _need(name)
    target = resolve(name)
    res = fuzz(target, mode=mode, max_examples=15, seed=7, out=tmp_path, shrink_seconds=5.0, profile=name)
    assert res.stats["steps"] > 0
    if mode == "loop" or name != "pydantic-ai":  # pydantic-ai refuses most small-budget batches outright
        assert res.stats["executionsObserved"] > 0
    for f in res.findings:
        assert (tmp_path / f"{f.rule}.json").is_file()
        assert not f.rule.startswith("P"), f.verdict.violation


@pytest.mark.frameworks
def test_R6_langgraph_reexecutes_a_repeated_id() -> None:
    """R6/R5: measured behaviour: LangGraph's ToolNode runs a repeated call id again (id_binding = none)."""
    _need("langgraph")
    from loopspec._adapter import InProcessImpl
    from loopspec._harness import run_batch_step
    from loopspec._judge import judge

    impl = InProcessImpl(resolve("langgraph")())
    call = {"id": "c1", "name": "lookup", "arguments": {}}
    step = {"kind": "batch", "config": {"tools": [{"name": "lookup", "inputSchema": {"type": "object"}}],
                                        "budget": 64, "mode": "continue", "principal": "alice"},
            "calls": [call, call], "script": []}
    trace = run_batch_step(impl, step)
    assert sum(e["type"] == "execute" for e in trace["events"]) == 2
    v = judge(trace)
    assert v.violation is not None and v.violation.rule == "R6"
    assert judge(trace, profile="langgraph").ok


def test_impl_names_resolve_or_explain() -> None:
    assert resolve("python3 examples/python/executor.py") is None
    assert resolve("loopspec._adapter:ReferenceExecutor") is not None
