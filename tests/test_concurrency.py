"""Section 5 of SPEC.md (concurrent execution) through the engine: run_batch / run_loop with
``max_concurrency``, the threads' own completion order or a chosen one (``schedule``), and the async
API on asyncio.TaskGroup. Every test checks every spec invariant after every transition."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from loopspec import CancelToken, Limits, Tool, ToolFailure, arun_batch, arun_loop, run_batch, run_loop
from loopspec.core.rules import ToolDefinitionError, overlaps, tool_overlaps, violated_invariants

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
READ_ONLY = {"readOnlyHint": True}


LEDGER_SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "spec" / "schema" / "ledger-event.schema.json").read_text())


def valid_ledger(out: Any) -> bool:
    """R27: every event of a concurrent run's ledger is in the ledger format."""
    for ev in out.ledger.events:
        jsonschema.validate(ev, LEDGER_SCHEMA)
    return True


class Watch:
    """Observer: every invariant after every transition."""

    def __init__(self) -> None:
        self.broken: list[tuple[str, list[str]]] = []

    def __call__(self, s: Any, t: Any) -> None:
        bad = violated_invariants(s)
        if bad:
            self.broken.append((t.id, bad))


def tool(name: str = "look", *, read_only: bool = True, fail: set[str] = frozenset(), delay: float = 0.0,  # type: ignore[assignment]
         log: list[str] | None = None) -> Tool:
    def fn(args: dict[str, Any], ctx: Any) -> Any:
        if log is not None:
            log.append(args["q"])
        if delay:
            time.sleep(delay)
        if args["q"] in fail:
            raise ToolFailure("INTERNAL_ERROR")
        return {"q": args["q"]}

    return Tool.define(name, fn, SCHEMA, annotations=READ_ONLY if read_only else None)


def call(i: int, q: str | None = None, name: str = "look", cid: str | None = None) -> dict[str, Any]:
    return {"id": cid or f"c{i}", "name": name, "arguments": {"q": q if q is not None else str(i)}}


def order(perm: tuple[int, ...]) -> Any:
    """A schedule completing the executions in the order of ``perm`` (request indices): a result
    arrives only when the run waits, and then the first of ``perm`` still pending."""
    def schedule(pending: tuple[int, ...], must: bool) -> int | None:
        if not must:
            return None
        return next(i for i in perm if i in pending)

    return schedule


# -- R29: sequential unless configured ----------------------------------------------------------

def test_R29_max_concurrency_1_is_the_sequential_machine() -> None:
    w = Watch()
    out = run_batch([call(0), call(1)], tools=[tool()], budget=2, observer=w)
    assert out.transitions == ("T04", "T14", "T20", "T21", "T27", "T14", "T20", "T21", "T27", "T07", "T03")
    assert not {"T29", "T30", "T31", "T32", "T33"} & set(out.transitions) and w.broken == []
    assert all(e["type"] not in ("execution_running", "run_waiting", "execution_abandoned") for e in out.ledger.events)


def test_R29_max_concurrency_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        run_batch([], tools=[tool()], budget=1, max_concurrency=0)
    with pytest.raises(ValueError, match="overlap"):
        run_batch([], tools=[tool()], budget=1, max_concurrency=2, overlap="sometimes")


# -- R30: hints and barriers ---------------------------------------------------------------

def test_R30_overlap_policies_follow_the_mcp_hints() -> None:
    assert tool_overlaps({"readOnlyHint": True}, "read-only")
    assert not tool_overlaps({}, "read-only")  # MCP defaults: not read-only, destructive
    assert not tool_overlaps({"idempotentHint": True}, "idempotent")  # still destructive by default
    assert tool_overlaps({"idempotentHint": True, "destructiveHint": False}, "idempotent")
    assert tool_overlaps({}, "all")
    assert all(overlaps(ro, i, d, "all") for ro, i, d in itertools.product([False, True], repeat=3))


def test_R30_annotations_outside_the_mcp_vocabulary_are_a_definition_error() -> None:
    with pytest.raises(ToolDefinitionError, match=r"annotations\.readOnly"):
        Tool.define("t", lambda a, c: 1, annotations={"readOnly": True})
    with pytest.raises(ToolDefinitionError, match="true or false"):
        Tool.define("t", lambda a, c: 1, annotations={"readOnlyHint": "yes"})  # type: ignore[dict-item]


def test_R30_a_barrier_runs_alone() -> None:
    w = Watch()
    calls = [call(0), call(1, name="write"), call(2)]
    out = run_batch(calls, tools=[tool(), tool("write", read_only=False)], budget=3, max_concurrency=3, observer=w)
    assert w.broken == [] and [a.status for a in out.answers] == ["ok"] * 3
    events = [(e["type"], e.get("index")) for e in out.ledger.events
              if e["type"] in ("execution_started", "execution_finished")]
    # each execution finishes before the next starts: the barrier waits for #0, #2 waits for it
    assert events == [("execution_started", 0), ("execution_finished", 0), ("execution_started", 1),
                      ("execution_finished", 1), ("execution_started", 2), ("execution_finished", 2)]
    out = run_batch(calls, tools=[tool(), tool("write", read_only=False)], budget=3, max_concurrency=3,
                    overlap="all", schedule=order((2, 1, 0)), observer=w)
    starts = [e["index"] for e in out.ledger.events if e["type"] == "execution_started"]
    finishes = [e["index"] for e in out.ledger.events if e["type"] == "execution_finished"]
    assert starts == [0, 1, 2] and finishes == [2, 1, 0] and w.broken == []


# -- R31: every check at take-up, reservations atomic ---------------------------------------------

@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))))
def test_R31_concurrent_take_ups_never_exceed_the_budget(perm: tuple[int, ...]) -> None:
    w = Watch()
    log: list[str] = []
    out = run_batch([call(0), call(1), call(2)], tools=[tool(log=log)], budget=2, mode="continue",
                    max_concurrency=3, schedule=order(perm), observer=w)
    assert out.executed == 2 == len(log) and w.broken == []
    assert [a.code for a in out.answers] == [None, None, "BUDGET_EXHAUSTED"]


def test_R31_per_tool_limits_are_reserved_too() -> None:
    w = Watch()
    t = Tool.define("look", lambda a, c: {"q": a["q"]}, SCHEMA, max_executions=1, annotations=READ_ONLY)
    rounds = iter([[call(0), call(1)], {"final": "done"}])
    out = run_loop(lambda turn: next(rounds), tools=[t], on_limit="error-result", max_concurrency=2, observer=w)
    assert out.executed == 1 and [a.code for a in out.answers] == [None, "TOOL_BUDGET_EXHAUSTED"] and w.broken == []


# -- R32: answers in request order, none lost -------------------------------------------------------

@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))))
def test_R32_answers_are_in_request_order_whatever_the_completion_order(perm: tuple[int, ...]) -> None:
    w = Watch()
    out = run_batch([call(0), call(1, "boom"), call(2)], tools=[tool(fail={"boom"})], budget=3, mode="continue",
                    max_concurrency=3, schedule=order(perm), observer=w)
    assert [(a.index, a.call_id, a.status) for a in out.answers] == [(0, "c0", "ok"), (1, "c1", "error"), (2, "c2", "ok")]
    finished = [e["index"] for e in out.ledger.events if e["type"] == "execution_finished"]
    returned = [e["index"] for e in out.ledger.events if e["type"] == "result_returned"]
    assert finished == list(perm) and returned == [0, 1, 2] and w.broken == [] and valid_ledger(out)


def test_R32_a_siblings_failure_loses_no_answer_with_real_threads() -> None:
    w = Watch()
    calls = [call(0), call(1, "boom"), call(2)]
    t = tool(fail={"boom"}, delay=0.02)
    for _ in range(5):
        out = run_batch(calls, tools=[t], budget=3, mode="continue", max_concurrency=3, observer=w)
        assert [a.status for a in out.answers] == ["ok", "error", "ok"] and w.broken == []


def test_R32_executions_really_overlap_with_threads() -> None:
    t0 = time.perf_counter()
    out = run_batch([call(i) for i in range(4)], tools=[tool(delay=0.2)], budget=4, max_concurrency=4)
    assert out.status == "COMPLETED" and time.perf_counter() - t0 < 0.6


# -- R33: the same id while its execution runs --------------------------------------------------------

@pytest.mark.parametrize(("fail", "executed", "second"), [(set(), 1, "ok (replay)"), ({"0"}, 2, "ok")])
def test_R33_the_same_id_waits_for_the_first_execution(fail: set[str], executed: int, second: str) -> None:
    w = Watch()
    n = {"calls": 0}

    def fn(args: dict[str, Any], ctx: Any) -> Any:
        n["calls"] += 1
        if args["q"] in fail and n["calls"] == 1:
            raise ToolFailure("INTERNAL_ERROR")
        return {"n": n["calls"]}

    t = Tool.define("look", fn, SCHEMA, annotations=READ_ONLY)
    out = run_batch([call(0, cid="x"), call(1, "0", cid="x")], tools=[t], budget=3, mode="continue",
                    max_concurrency=3, observer=w)
    assert out.executed == executed and w.broken == []
    a = out.answers[1]
    assert ("ok (replay)" if a.replayed else a.status) == second
    assert "T30" in out.transitions  # it waited


# -- R34: abort at the lowest request index ---------------------------------------------------------

def test_R34_the_abort_point_is_the_lowest_failing_index_not_the_first_in_time() -> None:
    w = Watch()
    calls = [call(0), call(1, "boom"), call(2)]
    out = run_batch(calls, tools=[tool(fail={"boom"})], budget=3, mode="abort", max_concurrency=3,
                    schedule=order((1, 0, 2)), observer=w)
    assert out.status == "FAILED" and out.aborted == (1, "INTERNAL_ERROR") and w.broken == [] and valid_ledger(out)
    assert [a.index for a in out.answers] == [0]  # #0 was still running when #1 failed: its answer is kept
    assert out.executed == 3  # #2 had started: it counts, and is abandoned
    types = [(e["type"], e.get("index")) for e in out.ledger.events]
    assert ("execution_abandoned", 2) in types and ("late_result_discarded", 2) in types
    # the earlier failure wins when it comes later in time
    out = run_batch([call(0, "boom"), call(1, "boom"), call(2)], tools=[tool(fail={"boom"})], budget=3,
                    max_concurrency=3, schedule=order((1, 0, 2)), observer=w)
    assert out.aborted == (0, "INTERNAL_ERROR") and out.answers == () and w.broken == []


def test_R34_no_take_up_once_an_ending_answer_is_known() -> None:
    w = Watch()
    # #1 is a violation in abort mode while #0 runs: nothing after it is taken up
    calls = [call(0), {"id": "c1", "name": "shell", "arguments": {}}, call(2)]
    out = run_batch(calls, tools=[tool()], budget=3, max_concurrency=3, observer=w)
    assert out.status == "REJECTED" and out.aborted == (1, "UNKNOWN_TOOL") and out.executed == 1
    assert [a.index for a in out.answers] == [0] and w.broken == []


# -- R35: cancellation and the deadline reach every running call -------------------------------------

def test_R35_cancellation_reaches_every_running_call() -> None:
    w = Watch()
    token = CancelToken()
    seen: list[threading.Event] = []
    started = threading.Barrier(4)

    def fn(args: dict[str, Any], ctx: Any) -> Any:
        seen.append(ctx.cancelled)
        started.wait(timeout=2)
        ctx.cancelled.wait(timeout=2)
        return {"q": args["q"]}

    t = Tool.define("look", fn, SCHEMA, annotations=READ_ONLY)

    def cancel_soon() -> None:
        started.wait(timeout=2)
        token.cancel()

    threading.Thread(target=cancel_soon, daemon=True).start()
    rounds = iter([[call(0), call(1), call(2)], {"final": "done"}])
    out = run_loop(lambda turn: next(rounds), tools=[t], cancel=token, max_concurrency=3, observer=w)
    assert out.status == "CANCELLED" and out.answers == () and out.executed == 3 and w.broken == []
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and sum(e["type"] == "late_result_discarded" for e in out.ledger.events) < 3:
        time.sleep(0.01)
    types = [e["type"] for e in out.ledger.events]
    assert types.count("execution_abandoned") == 3 and types.count("late_result_discarded") == 3
    assert len(seen) == 3 and all(ev.is_set() for ev in seen) and valid_ledger(out)


def test_R35_the_run_stops_waiting_at_its_deadline() -> None:
    w = Watch()
    now = {"t": 0.0}
    release = threading.Event()
    both = threading.Barrier(2)

    def fn(args: dict[str, Any], ctx: Any) -> Any:
        assert ctx.deadline == 5.0
        both.wait(timeout=2)
        now["t"] = 10.0  # the clock passes the deadline while both calls run
        release.wait(timeout=1)
        return {"q": args["q"]}

    t = Tool.define("look", fn, SCHEMA, annotations=READ_ONLY)
    rounds = iter([[call(0), call(1)], {"final": "done"}])
    out = run_loop(lambda turn: next(rounds), tools=[t], limits=Limits(max_rounds=4, deadline=5.0),
                   clock=lambda: now["t"], max_concurrency=2, observer=w)
    release.set()
    assert out.status == "TRUNCATED" and out.stop_reason == "DEADLINE" and "T32" in out.transitions
    assert out.executed == 2 and out.answers == () and w.broken == []


# -- the async API ---------------------------------------------------------------------------

def atool(*, fail: set[str] = frozenset(), delay: float = 0.0, cancelled: list[str] | None = None) -> Tool:  # type: ignore[assignment]
    async def fn(args: dict[str, Any], ctx: Any) -> Any:
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            if cancelled is not None:
                cancelled.append(args["q"])
            raise
        if args["q"] in fail:
            raise ToolFailure("DEPENDENCY_TEMPORARY")
        return {"q": args["q"]}

    return Tool.define("look", fn, SCHEMA, annotations=READ_ONLY)


def test_async_tools_need_the_async_api() -> None:
    with pytest.raises(TypeError, match="arun_loop"):
        run_batch([call(0)], tools=[atool()], budget=1)


@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))))
def test_async_batch_answers_in_request_order_for_every_schedule(perm: tuple[int, ...]) -> None:
    w = Watch()
    out = asyncio.run(arun_batch([call(0), call(1, "boom"), call(2)], tools=[atool(fail={"boom"})], budget=3,
                                 mode="continue", max_concurrency=3, schedule=order(perm), observer=w))
    assert [(a.index, a.code) for a in out.answers] == [(0, None), (1, "DEPENDENCY_TEMPORARY"), (2, None)]
    assert [e["index"] for e in out.ledger.events if e["type"] == "execution_finished"] == list(perm)
    assert w.broken == []


def test_async_loop_overlaps_on_a_task_group_and_matches_the_sync_engine() -> None:
    w = Watch()
    rounds = [[call(0), call(1), call(2)], [call(3, "0", cid="c0")], {"final": "done"}]
    t0 = time.perf_counter()
    it = iter(rounds)

    async def model(turn: Any) -> Any:
        return next(it)

    out = asyncio.run(arun_loop(model, tools=[atool(delay=0.2)], max_concurrency=3, observer=w))
    assert time.perf_counter() - t0 < 0.55 and w.broken == []
    it2 = iter(rounds)
    sync = run_loop(lambda turn: next(it2), tools=[tool()], max_concurrency=1)
    assert [(a.index, a.status, a.replayed) for a in out.answers] == [(a.index, a.status, a.replayed) for a in sync.answers]
    assert out.status == sync.status == "COMPLETED"


def test_async_cancellation_cancels_every_running_task() -> None:
    w = Watch()
    token = CancelToken()
    cancelled: list[str] = []
    it = iter([[call(0), call(1), call(2)], {"final": "done"}])

    async def main() -> Any:
        async def cancel_later() -> None:
            await asyncio.sleep(0.1)
            token.cancel()

        asyncio.get_running_loop().create_task(cancel_later())
        return await arun_loop(lambda turn: next(it), tools=[atool(delay=5, cancelled=cancelled)], cancel=token,
                               max_concurrency=3, observer=w)

    t0 = time.perf_counter()
    out = asyncio.run(main())
    assert time.perf_counter() - t0 < 2 and out.status == "CANCELLED" and out.executed == 3
    assert sorted(cancelled) == ["0", "1", "2"] and w.broken == []


def test_async_sequential_run_is_the_sync_one() -> None:
    w = Watch()
    calls = [call(0), call(1, "boom"), call(0, cid="c0"), {"id": "c9", "name": "shell", "arguments": {}}]
    out = asyncio.run(arun_batch(calls, tools=[atool(fail={"boom"})], budget=3, mode="continue", observer=w))
    sync = run_batch(calls, tools=[tool(fail={"boom"})], budget=3, mode="continue")
    assert out.transitions == sync.transitions and w.broken == []
    assert [a.code for a in out.answers] == [None, "DEPENDENCY_TEMPORARY", None, "UNKNOWN_TOOL"]
