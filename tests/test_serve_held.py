"""Held answers over stdin/stdout (spec/PROTOCOL.md section 6, section 7): an executor served by
``serve_stdio`` that holds answers gets ``execute.held`` in a concurrent step, bridged to the wire.

The executor is tests/stdio_held.py, a process driven by the real harness (``ImplFactory``,
``run_step``): its ``tool.execute`` requests of a step are all outstanding at once (C2), each answer is
released at a ``tool.waiting`` in the order the schedule picks, out of start order too (C3, C4), and in
abort mode the executions after the abort point are cancelled with their ids on the wire (C5); the
``-32800`` answers to cancelled requests are ignored and the next step on the same process runs in step.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from loopspec.fuzz._adapter import Impl, ImplFactory
from loopspec.fuzz._generate import all_orders
from loopspec.fuzz._harness import run_step
from loopspec.judge.trace import judge
from tests.fuzz_helpers import ROOT

Json = Any
OPEN = {"type": "object", "properties": {}}
FAIL = {"fail": "INTERNAL_ERROR"}


def step3(mode: str = "continue", script: list[Json] | None = None, schedule: Json = None,
          concurrent: bool = True) -> dict[str, Json]:
    config: dict[str, Json] = {"tools": [{"name": "lookup", "inputSchema": OPEN, "annotations": {"readOnlyHint": True}}],
                               "budget": 5, "mode": mode, "principal": "alice"}
    if concurrent:
        config["concurrency"] = {"maxConcurrency": 3, "overlap": "all"}
    return {"kind": "batch", "config": config,
            "calls": [{"id": f"c{i}", "name": "lookup", "arguments": {}} for i in (1, 2, 3)],
            "script": script if script is not None else [{"value": 1}, {"value": 2}, {"value": 3}],
            "schedule": schedule if schedule is not None else []}


def kinds(trace: dict[str, Json]) -> list[str]:
    return [e["type"] for e in trace["events"]]


def released(trace: dict[str, Json]) -> list[int]:
    return [e["execution"] for e in trace["events"] if e["type"] == "release"]


@pytest.fixture(scope="module")
def served() -> Iterator[Impl]:
    """One adapter process for the module: each step must leave the exchange in step for the next."""
    factory = ImplFactory([sys.executable, "-m", "tests.stdio_held"], timeout=10.0, warm=False, cwd=str(ROOT))
    impl = factory.open("batch")
    assert impl.info["capabilities"]["concurrency"] is True
    yield impl
    factory.release(impl)
    factory.close()


def test_every_completion_order_is_the_schedules(served: Impl) -> None:
    """C2, C3, C4: the three tool.execute requests are outstanding before the first release, and each
    release is the one the schedule picks (five of the six orders are out of start order); the answers
    stay in request order and the judge finds nothing."""
    step = step3(script=[{"value": 1}, FAIL, {"value": 3}])
    orders = all_orders(step)
    assert len(orders) == 6
    for schedule, p in orders:
        trace = run_step(served, {**step, "schedule": schedule})
        assert kinds(trace)[:4] == ["execute", "execute", "execute", "release"], (schedule, kinds(trace))
        assert released(trace) == [k for k, _, _ in p.releases or []], schedule
        assert [r["id"] for r in trace["events"][-1]["result"]["results"]] == ["c1", "c2", "c3"]
        assert judge(trace).ok, (schedule, judge(trace).violation)
    assert {tuple(released(run_step(served, {**step, "schedule": s}))) for s, _ in orders} == {
        (1, 2, 3), (1, 3, 2), (2, 1, 3), (2, 3, 1), (3, 1, 2), (3, 2, 1)}


def test_abort_cancels_the_executions_after_the_abort_point(served: Impl) -> None:
    """C5: the first call fails in abort mode; the two later executions, still held, are cancelled
    (``$/cancelRequest`` with their ids on the wire), count as executed, and the harness's -32800
    answers to them are ignored: the next step on the same process is judged correct."""
    trace = run_step(served, step3("abort", [FAIL, {"value": 2}, {"value": 3}]))
    assert kinds(trace) == ["execute", "execute", "execute", "release", "cancel", "cancel", "response"]
    assert sorted(e["execution"] for e in trace["events"] if e["type"] == "cancel") == [2, 3]
    assert trace["events"][-1]["result"] == {"results": [], "executed": 3,
                                             "aborted": {"index": 0, "code": "INTERNAL_ERROR"}}
    assert judge(trace).ok, judge(trace).violation
    # out of start order: the third fails first, the first two are owed (R34) and released after it
    trace = run_step(served, step3("abort", [{"value": 1}, {"value": 2}, FAIL], schedule=[2]))
    assert released(trace) == [3, 1, 2]
    assert judge(trace).ok, judge(trace).violation
    # the second fails after the first landed: the third is cancelled
    trace = run_step(served, step3("abort", [{"value": 1}, FAIL, {"value": 3}]))
    assert released(trace) == [1, 2] and [e["execution"] for e in trace["events"] if e["type"] == "cancel"] == [3]
    assert judge(trace).ok, judge(trace).violation
    after = run_step(served, step3(schedule=[1, 1]))
    assert released(after) == [2, 3, 1] and judge(after).ok, after["events"][-1]


def test_a_sequential_step_gets_no_held_answers(served: Impl) -> None:
    """C1: without ``concurrency`` in its params a step is v1's: every tool.execute answered at once."""
    trace = run_step(served, step3(concurrent=False, script=[{"value": 1}, FAIL, {"value": 3}]))
    assert "release" not in kinds(trace)
    assert judge(trace).ok, judge(trace).violation
