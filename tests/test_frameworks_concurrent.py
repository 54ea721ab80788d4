"""Frameworks in their default concurrent mode (issue 16): the adapters' async tool bodies await the
answers the harness holds (``HeldAnswers``), the harness releases them in the order the step's
schedule picks, and the campaign generates concurrent batch steps for them.

The framework tests are marked ``frameworks`` (skipped without the extra); the first test needs no
framework: a plain asyncio executor with held answers.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from loopspec.frameworks import installed, resolve
from loopspec.fuzz import Executor, fuzz
from loopspec.fuzz._adapter import InProcessImpl
from loopspec.fuzz._generate import all_orders
from loopspec.fuzz._harness import run_step
from loopspec.judge.trace import judge

Json = Any

OPEN = {"type": "object", "properties": {}}
#: the default concurrent mode of each framework, as --impl names it
CONCURRENT = {"pydantic-ai": "pydantic-ai[parallel=parallel]",
              "openai-agents": "openai-agents[concurrency=unbounded]",
              "langgraph": "langgraph[completion=harness]",
              "llamaindex": "llamaindex[completion=harness]",
              "autogen": "autogen[completion=harness]",
              "smolagents": "smolagents[completion=harness]"}
#: observed: LlamaIndex's FunctionAgent shows the model a response's tool results in completion order (R32)
IN_COMPLETION_ORDER = {"llamaindex"}
FAIL = {"fail": "INTERNAL_ERROR"}


def step3(mode: str = "continue", script: list[Json] | None = None, schedule: Json = None) -> dict[str, Json]:
    return {"kind": "batch",
            "config": {"tools": [{"name": "lookup", "inputSchema": OPEN, "annotations": {"readOnlyHint": True}}],
                       "budget": 5, "mode": mode, "principal": "alice",
                       "concurrency": {"maxConcurrency": 3, "overlap": "all"}},
            "calls": [{"id": f"c{i}", "name": "lookup", "arguments": {}} for i in (1, 2, 3)],
            "script": script if script is not None else [{"value": 1}, {"value": 2}, {"value": 3}],
            "schedule": schedule if schedule is not None else []}


def released(trace: dict[str, Json]) -> list[int]:
    return [e["execution"] for e in trace["events"] if e["type"] == "release"]


class GatherExecutor(Executor):
    """A correct concurrent batch executor in process: every call starts at once (asyncio.gather),
    answers in request order."""

    holds_answers = True

    def capabilities(self) -> dict[str, bool]:
        return {"batch": True, "loop": False, "concurrency": True}

    def batch_run(self, params: dict[str, Json], execute: Any) -> dict[str, Json]:
        async def one(c: Json) -> Json:
            try:
                return {"id": c["id"], "status": "ok",
                        "output": await execute.held.execute(c["id"], c["name"], c["arguments"], params["principal"])}
            except Exception as exc:
                return {"id": c["id"], "status": "error", "code": exc.category}  # type: ignore[attr-defined]

        async def run() -> list[Json]:
            return list(await asyncio.gather(*(one(c) for c in params["calls"])))

        results = asyncio.run(execute.held.drive(run()))
        return {"results": results, "executed": len(results), "aborted": None}


def test_an_in_process_executor_with_held_answers_runs_every_completion_order() -> None:
    """The watcher says tool.waiting when the event loop is idle; each release is the schedule's pick."""
    step = step3(script=[{"value": 1}, FAIL, {"value": 3}])
    orders = all_orders(step)
    assert len(orders) == 6
    for schedule, p in orders:
        trace = run_step(InProcessImpl(GatherExecutor()), {**step, "schedule": schedule})
        assert released(trace) == [k for k, _, _ in p.releases or []], schedule
        assert judge(trace).ok, (schedule, judge(trace).violation)


def _need(name: str) -> None:
    if not installed(name):
        pytest.skip(f"{name} is not installed (pip install 'loopspec[{name}]')")


@pytest.mark.frameworks
@pytest.mark.parametrize("name", sorted(CONCURRENT))
def test_the_framework_completes_in_the_order_the_schedule_picks(name: str) -> None:
    """Every completion order of three calls: the observed releases are the schedule's, every call was
    started before the first release (the framework runs them concurrently), and the answers come back
    in request order whatever the order of completion (LlamaIndex: in completion order, an R32 divergence)."""
    _need(name)
    target = resolve(CONCURRENT[name])
    assert target().capabilities()["concurrency"] is True
    assert resolve(name)().capabilities()["concurrency"] is False  # the adapter's default stays sequential
    step = target().normalize_step(step3())
    for schedule, p in all_orders(step):
        trace = run_step(InProcessImpl(target()), {**step, "schedule": schedule})
        events = [e["type"] for e in trace["events"]]
        assert events[:4] == ["execute", "execute", "execute", "release"], (schedule, events)
        assert released(trace) == [k for k, _, _ in p.releases or []], schedule
        result = trace["events"][-1]["result"]
        order = [f"c{k}" for k in released(trace)] if name in IN_COMPLETION_ORDER else ["c1", "c2", "c3"]
        assert [r["id"] for r in result["results"]] == order
        assert [r["output"] for r in result["results"]] == [int(c[1]) for c in order]
        assert judge(trace).ok is (name not in IN_COMPLETION_ORDER or order == ["c1", "c2", "c3"])


@pytest.mark.frameworks
@pytest.mark.parametrize(("name", "always"), [("pydantic-ai", False), ("openai-agents", False), ("langgraph", True)])
def test_a_sibling_failure_loses_a_finished_answer_in_abort_mode(name: str, always: bool) -> None:
    """Observed: the second call fails in abort mode. pydantic-ai and the Agents SDK lose the first
    call's answer exactly when the failure lands before it (R34, the sibling's result lost: the
    schedules [1], [1, 1], [2, 1]); LangGraph's ToolNode loses every answer of the message in every order."""
    _need(name)
    target = resolve(CONCURRENT[name])
    step = target().normalize_step(step3("abort", [{"value": 1}, FAIL, {"value": 3}]))
    for schedule, _p in all_orders(step):
        trace = run_step(InProcessImpl(target()), {**step, "schedule": schedule})
        order = released(trace)
        failure_first = order.index(2) < order.index(1) if 1 in order else True
        v = judge(trace)
        assert v.ok is not (always or failure_first), (schedule, order, v.violation)
        if not v.ok:
            assert (v.violation.rule, v.violation.kind) == ("R34", "answers-lost-on-abort"), v.violation


@pytest.mark.frameworks
@pytest.mark.parametrize("name", sorted(CONCURRENT))
def test_a_campaign_in_the_default_concurrent_mode(name: str, tmp_path: Path) -> None:
    """A batch campaign against the framework's default concurrent mode generates concurrent steps
    (section 5's transitions are reachable), and every finding's case holds its schedule."""
    _need(name)
    res = fuzz(resolve(CONCURRENT[name]), mode="batch", max_examples=8, seed=7, out=tmp_path, shrink_seconds=3.0)
    assert res.stats["steps"] > 0
    assert {"T30", "T31", "T33"} <= set(res.coverage["reachable"])
    for f in res.findings:
        assert not f.rule.startswith("P"), f.verdict.violation
        case = json.loads((tmp_path / f"{f.cause}.json").read_text())
        last = case["steps"][-1]
        if "concurrency" in last["config"]:
            assert isinstance(last["schedule"], list)  # replayable: the completion order is in the case


@pytest.mark.frameworks
@pytest.mark.parametrize("name", ["langgraph", "llamaindex", "autogen"])
def test_the_same_call_twice_in_one_response_runs_twice_at_once(name: str) -> None:
    """Observed: two identical calls under one id in one response both start before either completes
    (R33: the second must wait for the first and reuse its result, never execute again)."""
    _need(name)
    target = resolve(CONCURRENT[name])
    st = step3()
    st["calls"] = [{"id": "c1", "name": "lookup", "arguments": {}}] * 2
    step = target().normalize_step(st)
    trace = run_step(InProcessImpl(target()), step)
    assert [e["type"] for e in trace["events"]][:3] == ["execute", "execute", "release"]
    v = judge(trace)
    assert v.violation is not None and (v.violation.rule, v.violation.kind) == ("R33", "replay-reexecuted")


@pytest.mark.frameworks
def test_google_adk_runs_concurrent_steps_with_held_answers_over_stdio() -> None:
    """Google ADK in its own environment, its adapter a process (``serve_stdio``): in a concurrent step
    its gathered tool bodies await held answers (C2, C3) and the harness releases them in every order
    the schedule picks (C4); the answers come back in request order (R32 holds). In abort mode, after
    the second call fails, ADK cancels the bodies still waiting (``$/cancelRequest``, C5: every execution
    is released or cancelled) and keeps the answers of the calls that finished before the failure (source:
    ``_keep_completed_responses``, yielded before the error is re-raised): the first call's answer is lost
    exactly when the failure lands before it (observed: R34 ``answers-lost-on-abort``, as for pydantic-ai
    and the Agents SDK). One process runs every step: the -32800 answers stay in step."""
    from loopspec.fuzz._adapter import ImplFactory

    _need("google-adk")
    target = resolve("google-adk")
    factory = ImplFactory(target, timeout=30.0, warm=False, label="google-adk")
    impl = factory.open("batch")
    try:
        assert impl.info["capabilities"]["concurrency"] is True
        script = [{"value": 1}, FAIL, {"value": 3}]
        step = target.normalize_step(step3(script=script))
        for schedule, p in all_orders(step):
            trace = run_step(impl, {**step, "schedule": schedule})
            assert [e["type"] for e in trace["events"]][:4] == ["execute", "execute", "execute", "release"], schedule
            assert released(trace) == [k for k, _, _ in p.releases or []], schedule
            result = trace["events"][-1]["result"]
            assert [(r["id"], r["status"]) for r in result["results"]] == [("c1", "ok"), ("c2", "error"), ("c3", "ok")]
        step = target.normalize_step(step3("abort", script))
        for schedule, _p in all_orders(step):
            trace = run_step(impl, {**step, "schedule": schedule})
            order = released(trace)
            cancelled = [e["execution"] for e in trace["events"] if e["type"] == "cancel"]
            assert order[-1] == 2 and sorted(order + cancelled) == [1, 2, 3], (schedule, order, cancelled)
            result = trace["events"][-1]["result"]
            assert result["aborted"] == {"index": 1, "code": "INTERNAL_ERROR"}
            first_done = 1 in order and order.index(1) < order.index(2)
            assert result["results"] == ([{"id": "c1", "status": "ok", "output": 1}] if first_done else []), schedule
            v = judge(trace)
            if first_done:
                assert v.ok, (schedule, v.violation)
            else:
                assert v.violation is not None and (v.violation.rule, v.violation.kind) == ("R34", "answers-lost-on-abort")
    finally:
        factory.release(impl)
        factory.close()
