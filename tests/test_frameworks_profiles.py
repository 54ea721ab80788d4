"""Profile parameters (SPEC.md section 4): the loader's validation, and the profiled reference.

The strict default must be exactly the core's reference (R0-R28 unchanged); each documented choice
changes only what its parameter names.
"""

from __future__ import annotations

import pytest

from loopspec._judge import TRACE_FORMAT, judge
from loopspec._profiles import params_for
from loopspec._spec import SpecError, load_spec, parse_spec

SPEC_TEXT = load_spec().path


def _text() -> str:
    from pathlib import Path

    return Path(SPEC_TEXT).read_text(encoding="utf-8")


def test_shipped_profiles_load() -> None:
    spec = load_spec()
    assert {p.id for p in spec.profiles} >= {"pydantic-ai", "openai-agents", "langgraph"}
    for prof in spec.profiles:
        for c in prof.choices:
            assert c.value != spec.parameter(c.parameter).default
            assert c.source.startswith("https://")
    assert params_for(spec, "strict").strict(spec)
    assert not params_for(spec, "langgraph").strict(spec)


@pytest.mark.parametrize(("old", "new", "field"), [
    ('parameter = "budget"\nvalue = "per-proposal"', 'parameter = "budget"\nvalue = "sometimes"', "value"),
    ('parameter = "budget"\nvalue = "per-proposal"', 'parameter = "nope"\nvalue = "per-proposal"', "parameter"),
    ('parameter = "budget"\nvalue = "per-proposal"', 'parameter = "budget"\nvalue = "per-call"', "value"),
    ('source = "https://ai.pydantic.dev/agents/#usage-limits"', 'source = "the docs"', "source"),
])
def test_loader_rejects_bad_profiles(old: str, new: str, field: str) -> None:
    text = _text()
    assert old in text
    with pytest.raises(SpecError) as err:
        parse_spec(text.replace(old, new, 1))
    assert field in str(err.value) and "pydantic-ai" in str(err.value)


def test_loader_rejects_a_parameter_without_meaning() -> None:
    text = _text().replace('meaning = { "run" = ', 'meanin = { "run" = ', 1)
    with pytest.raises(SpecError, match="meaning"):
        parse_spec(text)


def _batch(calls: list, execs: list, result: dict, budget: int = 5, mode: str = "continue") -> dict:
    events = [{"type": "execute", "callId": c["id"], "name": c["name"], "arguments": c["arguments"],
               "principal": "alice", "outcome": {"status": "ok", "output": k}} for k, c in enumerate(execs)]
    events.append({"type": "response", "result": result})
    return {"format": TRACE_FORMAT, "kind": "batch",
            "config": {"tools": [{"name": "lookup", "inputSchema": {"type": "object", "properties": {}}}],
                       "budget": budget, "mode": mode, "principal": "alice"},
            "calls": calls, "events": events}


C1 = {"id": "c1", "name": "lookup", "arguments": {}}


def test_R6_replay_under_strict_is_reexecution_under_id_binding_none() -> None:
    """R6: executing a repeated id is a deviation from the strict spec and a design choice under
    id_binding = none (LangGraph's profile)."""
    trace = _batch([C1, C1], [C1, C1], {"results": [{"id": "c1", "status": "ok", "output": 0},
                                                    {"id": "c1", "status": "ok", "output": 1}],
                                        "executed": 2, "aborted": None})
    strict = judge(trace)
    assert not strict.ok and strict.violation is not None and strict.violation.rule == "R6"
    assert judge(trace, profile="langgraph").ok


def test_R9_per_proposal_budget_refuses_the_whole_proposal() -> None:
    """R9 under budget = per-proposal: two calls over a budget of 1 run nothing (pydantic-ai)."""
    c2 = {"id": "c2", "name": "lookup", "arguments": {}}
    trace = _batch([C1, c2], [], {"results": [], "executed": 0,
                                  "aborted": {"index": 0, "code": "BUDGET_EXHAUSTED"}}, budget=1)
    assert not judge(trace).ok
    assert judge(trace, profile="pydantic-ai").ok
    # and the strict behaviour deviates from that profile
    strict_like = _batch([C1, c2], [C1], {"results": [{"id": "c1", "status": "ok", "output": 0},
                                                      {"id": "c2", "status": "error", "code": "BUDGET_EXHAUSTED"}],
                                          "executed": 1, "aborted": None}, budget=1)
    assert judge(strict_like).ok
    assert not judge(strict_like, profile="pydantic-ai").ok


def test_strict_profile_is_the_core_reference() -> None:
    trace = _batch([C1, C1], [C1], {"results": [{"id": "c1", "status": "ok", "output": 0},
                                                {"id": "c1", "status": "ok", "output": 0}],
                                    "executed": 1, "aborted": None})
    assert judge(trace).ok and judge(trace, profile="strict").ok
    assert judge(trace).to_json() == judge(trace, profile="strict").to_json()
