"""Section 6 in the loop engine: run_loop's write tools go through the durable operation ledger, the answer
code OUTCOME_UNKNOWN reaches the model (R42), resume(run_id) continues a crashed run after reconciling
(R46), and a run_loop process killed (SIGKILL) at every crash point and resumed applies each write once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loopspec import (
    Ledger,
    MemoryOperationLedger,
    SQLiteOperationLedger,
    Tool,
    ToolDefinitionError,
    ToolFailure,
    WriteTool,
    resume,
    run_loop,
)
from loopspec.engine.base import EngineError
from loopspec.engine.oplog import CRASH_ENV
from loopspec.oracle import read_text_input
from loopspec.oracle._schema import _ledger_schema, problem
from loopspec.spec.writes import load_write_spec

from .writes.merchant import SCHEMA, Remote, kills

CHILD = Path(__file__).resolve().parent / "writes" / "loop_child.py"
POINTS = [c.id for c in load_write_spec().crash_points]


class World:
    """An external system in memory: effects per order, answers that can be lost, a lookup that can fail."""

    def __init__(self, lose: int = 0, lookup_down: bool = False, reject: str | None = None) -> None:
        self.applied: dict[str, Any] = {}
        self.effects: dict[str, int] = {}
        self.lose, self.lookup_down, self.reject = lose, lookup_down, reject

    def send(self, args: dict[str, Any], ctx: Any) -> Any:
        if self.reject:
            raise ToolFailure(self.reject)
        key = ctx.idempotency_key
        assert key and key != ctx.call_id
        self.applied[key] = {"order": args["order_ref"]}
        self.effects[args["order_ref"]] = self.effects.get(args["order_ref"], 0) + 1
        if self.lose:
            self.lose -= 1
            raise TimeoutError
        return self.applied[key]

    def lookup(self, key: str, arguments: Any) -> tuple[bool, Any]:
        if self.lookup_down:
            raise ConnectionError
        return key in self.applied, self.applied.get(key)

    def tool(self, reconcile: str = "lookup") -> Tool:
        return Tool.define("create_order", self.send, SCHEMA, lookup=self.lookup,
                           write=WriteTool("create_order", ("order_ref",), reconcile=reconcile))  # type: ignore[arg-type]


def scripted(*rounds: list[tuple[str, str]]) -> Any:
    def model(turn: Any) -> Any:
        if turn.round > len(rounds):
            return {"final": "done"}
        return [{"id": cid, "name": "create_order", "arguments": {"order_ref": ref, "amount": 1}}
                for cid, ref in rounds[turn.round - 1]]
    return model


def test_R44_a_write_proposed_again_under_a_new_call_id_is_answered_from_the_ledger(tmp_path: Path) -> None:
    world = World()
    out = run_loop(scripted([("c1", "A")], [("c2", "A")]), tools=[world.tool()], operation_ledger=tmp_path / "ops.sqlite")
    assert [r["status"] for r in out.results] == ["ok", "ok"] and out.results[0]["output"] == out.results[1]["output"]
    assert world.effects == {"A": 1} and out.status == "COMPLETED" and out.unreconciled == ()
    # the key's scope is the principal (R37): a later run of the same principal does not send it either
    again = run_loop(scripted([("x9", "A")]), tools=[world.tool()], operation_ledger=tmp_path / "ops.sqlite")
    assert again.results[0]["output"] == {"order": "A"} and world.effects == {"A": 1}


def test_R42_OUTCOME_UNKNOWN_reaches_the_model_with_its_next_action_and_is_never_retried() -> None:
    world = World(lose=1, lookup_down=True)
    ops = MemoryOperationLedger()
    out = run_loop(scripted([("c1", "A")], [("c2", "A")]), tools=[world.tool()], operation_ledger=ops, mode="continue")
    first, second = out.results
    assert first["code"] == second["code"] == "OUTCOME_UNKNOWN"
    assert first["next_action"] == "WAIT_FOR_RECONCILIATION" and "outcome is not known" in first["message"]
    assert world.effects == {"A": 1}, "an unknown outcome is never re-sent while its lookup cannot answer (R43)"
    assert out.counters["retries"] == 0
    assert len(out.unreconciled) == 1 and [o.state for o in ops.operations()] == ["unknown"]  # R46: listed


def test_R42_in_abort_mode_OUTCOME_UNKNOWN_ends_the_run_TRUNCATED_UNRECONCILED() -> None:
    """T34 abort_on_unknown: the unknown answer ends the run at its index, as a failure would (R13)."""
    world = World(lose=1, lookup_down=True)
    asked: list[int] = []

    def model(turn: Any) -> Any:
        asked.append(turn.round)
        return scripted([("c1", "A")], [("c2", "A")])(turn)

    out = run_loop(model, tools=[world.tool()], operation_ledger=MemoryOperationLedger(), mode="abort")
    assert (out.status, out.stop_reason, out.aborted) == ("TRUNCATED", "UNRECONCILED", (0, "OUTCOME_UNKNOWN"))
    assert out.results == () or list(out.results) == [], "the aborting request gets no entry (R13)"
    assert "T34" in out.transitions and asked == [1] and world.effects == {"A": 1}
    assert out.coverage == "PARTIAL" and len(out.unreconciled) == 1


def test_R46_a_run_whose_write_is_still_unknown_at_its_end_is_TRUNCATED_not_COMPLETED() -> None:
    """T35 final_answer_unreconciled: the final answer does not make the run COMPLETED while a write is unknown."""
    world = World(lose=1, lookup_down=True)
    out = run_loop(scripted([("c1", "A")]), tools=[world.tool()], operation_ledger=MemoryOperationLedger(), mode="continue")
    assert (out.status, out.stop_reason, out.coverage) == ("TRUNCATED", "UNRECONCILED", "PARTIAL")
    assert out.transitions[-1] == "T35" and out.final is None and len(out.unreconciled) == 1
    # the end-of-run reconciliation settles it when the lookup answers: then the final answer completes the run
    world = World(lose=1)
    out = run_loop(scripted([("c1", "A")]), tools=[world.tool()], operation_ledger=MemoryOperationLedger(), mode="continue")
    assert out.results[0]["code"] == "OUTCOME_UNKNOWN" and out.unreconciled == ()
    assert (out.status, out.stop_reason, out.transitions[-1]) == ("COMPLETED", "FINAL_ANSWER", "T06")


def _ledger_of(mode: str, lookup_down: bool) -> tuple[Any, list[dict[str, Any]]]:
    led = Ledger()
    out = run_loop(scripted([("c1", "A")], [("c2", "B")]), tools=[World(lose=1, lookup_down=lookup_down).tool()],
                   ledger=led, operation_ledger=MemoryOperationLedger(), mode=mode)
    return out, [dict(e) for e in led.events]


def _check(evs: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    res = read_text_input("".join(json.dumps(e) + "\n" for e in evs).encode())
    return [(r.verdict, r.violation.rule if r.violation else None) for r in res.records]


@pytest.mark.parametrize(("mode", "lookup_down", "ending"), [
    ("abort", True, ("TRUNCATED", "UNRECONCILED", "T34")),
    ("continue", True, ("TRUNCATED", "UNRECONCILED", "T35")),
    ("continue", False, ("COMPLETED", "FINAL_ANSWER", "T06")),
])
def test_R42_R46_the_oracle_reads_and_checks_a_ledger_with_unknown_outcomes(
        mode: str, lookup_down: bool, ending: tuple[str, str, str]) -> None:
    out, evs = _ledger_of(mode, lookup_down)
    assert (out.status, out.stop_reason, out.transitions[-1]) == ending
    schema = _ledger_schema()
    assert [p for e in evs if (p := problem(e, schema[e["type"]], e["type"]))] == []  # OUTCOME_UNKNOWN, UNRECONCILED
    assert _check(evs) == [("conforms", None)]


def test_R42_the_oracle_catches_a_run_in_abort_mode_that_goes_on_after_OUTCOME_UNKNOWN() -> None:
    """The behaviour before T34: the unknown answer returned and the run went on. In abort mode that violates R13."""
    _, evs = _ledger_of("continue", True)
    evs[0]["config"]["mode"] = "abort"
    (verdict, rule), = _check(evs)
    assert verdict == "violates" and rule in ("R13", "R42"), (verdict, rule)


def test_R43_an_unknown_outcome_is_reconciled_by_lookup_before_the_key_is_sent_again() -> None:
    world = World(lose=1)
    out = run_loop(scripted([("c1", "A")], [("c2", "A")]), tools=[world.tool()], operation_ledger=MemoryOperationLedger())
    assert [r.get("code") for r in out.results] == ["OUTCOME_UNKNOWN", None]
    assert out.results[1]["output"] == {"order": "A"} and world.effects == {"A": 1} and out.unreconciled == ()


def test_R41_a_definite_rejection_is_a_failure_and_R45_budgets_count_dispatch_marks() -> None:
    world = World(reject="NOT_FOUND_OR_NOT_ACCESSIBLE")
    out = run_loop(scripted([("c1", "A")]), tools=[world.tool()], operation_ledger=MemoryOperationLedger(), mode="continue")
    assert out.results[0]["code"] == "NOT_FOUND_OR_NOT_ACCESSIBLE" and world.effects == {}
    ops = MemoryOperationLedger()
    run_loop(scripted([("c1", "A")]), tools=[World(reject="INTERNAL_ERROR").tool()], operation_ledger=ops, run_id="r-1",
             mode="continue")
    assert ops.dispatches("r-1") == 1


def test_R36_R37_a_write_declaration_is_checked_when_the_tool_is_defined() -> None:
    with pytest.raises(ToolDefinitionError, match="key argument 'amount2'"):
        Tool.define("create_order", World().send, SCHEMA, write=WriteTool("create_order", ("amount2",)))
    with pytest.raises(ToolDefinitionError, match="readOnlyHint"):
        Tool.define("create_order", World().send, SCHEMA, write=WriteTool("create_order", ("order_ref",)),
                    annotations={"readOnlyHint": True})


def test_R46_resume_needs_the_operation_ledger_and_write_tools(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="operation ledger"):
        resume("r", scripted(), tools=[World().tool()], operation_ledger=None)
    with pytest.raises(EngineError, match="no write tools"):
        resume("r", scripted(), tools=[Tool.define("t", lambda a, c: 1)], operation_ledger=tmp_path / "ops.sqlite")


def test_R46_resume_reconciles_every_unknown_outcome_before_anything_else(tmp_path: Path) -> None:
    """A run whose write's answer was lost and whose lookup was down ends listing it; resume asks first."""
    world = World(lose=1, lookup_down=True)
    ops = tmp_path / "ops.sqlite"
    out = run_loop(scripted([("c1", "A")]), tools=[world.tool()], operation_ledger=ops, run_id="r-7")
    assert len(out.unreconciled) == 1
    world.lookup_down = False
    calls: list[int] = []

    def model(turn: Any) -> Any:
        led = SQLiteOperationLedger(ops)
        calls.append(turn.round)
        assert [o.state for o in led.operations("r-7")] == ["confirmed"], "reconciled before the model is asked"
        led.close()
        return scripted([("c1", "A")])(turn)

    again = resume("r-7", model, tools=[world.tool()], operation_ledger=ops)
    assert again.results[0]["code"] == "OUTCOME_UNKNOWN"  # request 0's recorded answer (R40), nothing sent
    assert world.effects == {"A": 1} and again.unreconciled == () and calls


def _child(tmp: Path, mode: str, how: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHILD), str(tmp / "ops.sqlite"), str(tmp / "remote.sqlite"), mode, how,
                           str(tmp / "events.ndjson")],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("mode", ["record", pytest.param("lookup", marks=pytest.mark.slow)])
@pytest.mark.parametrize("point", POINTS)
def test_R40_R46_a_run_loop_killed_at_each_crash_point_and_resumed_applies_each_write_once(
        tmp_path: Path, point: str, mode: str) -> None:
    for n, at in enumerate(kills(point)):  # after-lookup: killed after the send, then at the recovery's lookup
        killed = _child(tmp_path, mode, "resume" if n else "run", {CRASH_ENV: at})
        assert killed.returncode == -9, (at, killed.returncode, killed.stderr)  # SIGKILL, not an exit
    done = _child(tmp_path, mode, "resume", {})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert Remote(tmp_path / "remote.sqlite", mode).effects() == {"A-1": 1, "B-2": 1}, "one effect per key"
    assert out["status"] == "COMPLETED" and out["unreconciled"] == []
    a1, a1_again, b2 = out["results"]
    assert a1["status"] == a1_again["status"] == b2["status"] == "ok"
    assert a1["output"] == a1_again["output"], "the replay under a new call id answers the recorded result"
    ops = SQLiteOperationLedger(tmp_path / "ops.sqlite")
    assert {r.state for r in ops.operations()} == {"confirmed"}
    ops.close()
    # R46 "In the run ledger": both processes appended to one run ledger; the restart is in it, and the oracle
    # checks the run across it (each key's state carried over, recovery first, no re-send, the budget)
    text = (tmp_path / "events.ndjson").read_bytes()
    types = [json.loads(line)["type"] for line in text.splitlines()]
    assert types.count("run_started") == types.count("run_terminal") == 1
    assert types.count("run_resumed") == len(kills(point))
    res = read_text_input(text)
    assert [(r.verdict, r.violation) for r in res.records] == [("conforms", None)], res.records
    assert "R46" in res.records[0].checks["verified"]


def test_a_write_is_refused_where_it_would_run_without_its_ledger() -> None:
    import asyncio

    from loopspec import arun_batch, arun_loop, run_batch

    tool = World().tool()
    calls = [{"id": "c1", "name": "create_order", "arguments": {"order_ref": "A", "amount": 1}}]
    with pytest.raises(EngineError, match="only in run_loop"):
        run_batch(calls, tools=[tool], budget=2)
    with pytest.raises(EngineError, match="only in run_loop"):
        asyncio.run(arun_loop(scripted(), tools=[tool]))
    with pytest.raises(EngineError, match="only in run_loop"):
        asyncio.run(arun_batch(calls, tools=[tool], budget=2))


def test_the_operation_ledger_has_its_own_parameter_and_the_old_spellings_warn(tmp_path: Path) -> None:
    """run_loop's ``ledger=`` is the run ledger (R27); the operation ledger (section 6) is ``operation_ledger=``.
    Until 0.2 an operation ledger given as ``ledger=`` or ``operations=`` still works, with a DeprecationWarning."""
    import warnings

    world, ops, led = World(), MemoryOperationLedger(), Ledger()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spelling warns about nothing
        out = run_loop(scripted([("c1", "A")]), tools=[world.tool()], ledger=led, operation_ledger=ops, run_id="r-1")
    assert out.status == "COMPLETED" and [o.state for o in ops.operations("r-1")] == ["confirmed"] and led.events
    for ref, old in (("B", {"ledger": tmp_path / "old.sqlite"}),
                     ("C", {"ledger": Ledger(), "operations": MemoryOperationLedger()})):
        with pytest.warns(DeprecationWarning, match="operation_ledger="):
            out = run_loop(scripted([("c1", ref)]), tools=[world.tool()], run_id="r-2", **old)  # type: ignore[arg-type]
        assert out.status == "COMPLETED"
    with pytest.warns(DeprecationWarning, match="operation_ledger="):
        again = resume("r-2", scripted([("c1", "B")]), tools=[world.tool()], ledger=tmp_path / "old.sqlite")
    assert again.results[0]["status"] == "ok" and world.effects == {"A": 1, "B": 1, "C": 1}
    with pytest.raises(EngineError, match="given twice"):
        run_loop(scripted(), tools=[world.tool()], ledger=ops, operation_ledger=ops)


def test_R45_a_write_answered_from_the_operation_ledger_is_not_charged_against_the_execution_budget() -> None:
    """Budgets count dispatches (R45): with max_executions=2, order A, A again under a new call id (a replay from
    the operation ledger, W09: nothing sent) and B are all executed — the replay recorded no dispatch mark, so it
    is not charged, and B is the second charged execution. Before R45's loop clause the replay used the budget up
    and B was refused BUDGET_EXHAUSTED."""
    from loopspec import Limits

    world, led = World(), Ledger()
    out = run_loop(scripted([("c1", "A")], [("c2", "A"), ("c3", "B")]), tools=[world.tool()], ledger=led,
                   operation_ledger=MemoryOperationLedger(), limits=Limits(max_executions=2), mode="continue")
    assert [r["status"] for r in out.results] == ["ok", "ok", "ok"], out.results
    assert world.effects == {"A": 1, "B": 1} and out.executed == 3 and out.status == "COMPLETED"
    evs = [dict(e) for e in led.events]
    finished = [e for e in evs if e["type"] == "execution_finished"]
    assert [e.get("charged", True) for e in finished] == [True, False, True]
    schema = _ledger_schema()
    assert [p for e in evs if (p := problem(e, schema[e["type"]], e["type"]))] == []
    assert _check(evs) == [("conforms", None)]
    # the oracle sees from the write events that the replay recorded no dispatch mark: marked charged, it is R45's
    finished[1].pop("charged")
    (verdict, rule), = _check(evs)
    assert (verdict, rule) == ("violates", "R45")
    # without the write events, the budget recomputed from the charged executions: one too many (R9)
    loop_only = [dict(e) for e in evs if e["type"] != "write_recorded"]
    for seq, e in enumerate(loop_only, start=1):
        e["seq"] = seq
    (verdict, rule), = _check(loop_only)
    assert (verdict, rule) == ("violates", "R9")
    # and a third charged write would have been refused: the budget is still the application's (R9)
    world = World()
    out = run_loop(scripted([("c1", "A")], [("c2", "B"), ("c3", "C")]), tools=[world.tool()],
                   operation_ledger=MemoryOperationLedger(), limits=Limits(max_executions=2), mode="continue",
                   on_limit="error-result")
    assert [r.get("code") for r in out.results] == [None, None, "BUDGET_EXHAUSTED"] and world.effects == {"A": 1, "B": 1}


# -- issue 32: the operation ledger fails while the process lives on (R40), resume creates nothing (R46) ----------

def _locked_after_send(world: World, led: SQLiteOperationLedger, hold: list[Any]) -> Tool:
    """The merchant's tool whose send of order A, once applied, leaves the ledger's file locked by another
    connection."""
    import sqlite3

    def send(args: dict[str, Any], ctx: Any) -> Any:
        out = world.send(args, ctx)
        if args["order_ref"] == "A":
            other = sqlite3.connect(led.path, isolation_level=None)
            other.execute("BEGIN IMMEDIATE")  # what a backup or another process holding the write lock does
            hold.append(other)
        return out
    return Tool.define("create_order", send, SCHEMA, lookup=world.lookup,
                       write=WriteTool("create_order", ("order_ref",), reconcile="lookup"))


def test_R40_an_applied_write_whose_result_cannot_be_recorded_is_unknown_never_a_failure(tmp_path: Path) -> None:
    """Issue 32: the external system applied the write and the ledger stayed locked past its timeout, so the result
    could not be recorded. It was answered INTERNAL_ERROR (a failure the model may retry) and the run ended
    COMPLETED with unreconciled () over a key left `dispatched`, which `loopspec check` then failed (R46). Now:
    OUTCOME_UNKNOWN, and the run is TRUNCATED/UNRECONCILED with the key listed; its run ledger conforms."""
    world, hold, events = World(), [], Ledger()
    led = SQLiteOperationLedger(tmp_path / "ops.sqlite", timeout=0.05)
    out = run_loop(scripted([("c1", "A")]), tools=[_locked_after_send(world, led, hold)], operation_ledger=led,
                   ledger=events, run_id="r-1", mode="continue")
    assert out.results[0]["code"] == "OUTCOME_UNKNOWN" and world.effects == {"A": 1}
    assert (out.status, out.stop_reason, out.transitions[-1]) == ("TRUNCATED", "UNRECONCILED", "T35")
    hold[0].rollback()
    assert [(o.key, o.state) for o in led.operations("r-1")] == [(out.unreconciled[0], "dispatched")]
    evs = [dict(e) for e in events.events]
    assert _check(evs) == [("conforms", None)]
    failed = [e for e in evs if e["type"] == "write_failed"]
    assert failed and {(e["op"], e["from"]) for e in failed} >= {("W03", "dispatched")}
    # without the write_failed evidence, a key left dispatched at the end is R46 (the run did not try)
    kept = [e for e in evs if e["type"] != "write_failed"]
    for seq, e in enumerate(kept, start=1):
        e["seq"] = seq
    (verdict, rule), = _check(kept)
    assert (verdict, rule) == ("violates", "R46")
    # the lock gone, resume reconciles it by lookup: applied, nothing sent again
    again = resume("r-1", scripted([("c1", "A")]), tools=[world.tool()], operation_ledger=led)
    assert again.status == "COMPLETED" and again.unreconciled == () and world.effects == {"A": 1}
    assert [o.state for o in led.operations("r-1")] == ["confirmed"]
    led.close()


def test_R40_R46_when_the_ledger_comes_back_the_end_of_run_reconciliation_settles_the_write(tmp_path: Path) -> None:
    """The lock is released before the final answer: the end of the run records W05 for the dispatch mark left
    without a result, asks the external system (applied) and the run is COMPLETED — the model was told
    OUTCOME_UNKNOWN, nothing was sent twice, and the run ledger conforms."""
    world, hold, events = World(), [], Ledger()
    led = SQLiteOperationLedger(tmp_path / "ops.sqlite", timeout=0.05)

    def model(turn: Any) -> Any:
        if hold:
            hold.pop().rollback()  # the other connection lets go
        return scripted([("c1", "A")], [("c2", "B")])(turn)

    out = run_loop(model, tools=[_locked_after_send(world, led, hold)], operation_ledger=led, ledger=events,
                   run_id="r-2", mode="continue")
    assert [r.get("code", r["status"]) for r in out.results] == ["OUTCOME_UNKNOWN", "ok"]
    assert (out.status, out.unreconciled) == ("COMPLETED", ()) and world.effects == {"A": 1, "B": 1}
    assert {o.state for o in led.operations("r-2")} == {"confirmed"}
    names = [e["op"] for e in events.events if e["type"] == "write_recorded" and e["index"] is None]
    assert names == ["W05", "W06"], names  # at the end: dispatched -> unknown -> confirmed by lookup
    assert _check([dict(e) for e in events.events]) == [("conforms", None)]
    led.close()


def test_R40_a_ledger_failure_before_the_dispatch_mark_sends_nothing_and_charges_nothing(tmp_path: Path) -> None:
    """The file turns read-only once the run has started (SQLITE_READONLY): no intent can be recorded, so nothing
    is sent; the request is answered DEPENDENCY_TEMPORARY, uncharged (R45), retried once (R23) and answered so
    again. A ledger that cannot record even the run's start stops run_loop before the model is asked."""
    from loopspec.engine.oplog import LedgerFailure

    world, events = World(), Ledger()
    led = SQLiteOperationLedger(tmp_path / "ops.sqlite")

    def model(turn: Any) -> Any:
        led._db.execute("PRAGMA query_only = ON")  # what SQLite does with a file it cannot write: SQLITE_READONLY
        return scripted([("c1", "A")])(turn)

    out = run_loop(model, tools=[world.tool()], operation_ledger=led, ledger=events, mode="continue")
    assert out.results[0]["code"] == "DEPENDENCY_TEMPORARY" and world.effects == {}
    assert (out.status, out.unreconciled) == ("COMPLETED", ())
    finished = [e for e in events.events if e["type"] == "execution_finished"]
    assert finished and all(e.get("charged") is False for e in finished)
    assert _check([dict(e) for e in events.events]) == [("conforms", None)]
    asked: list[int] = []
    with pytest.raises(LedgerFailure, match="cannot record the start of run 'r-3'"):
        run_loop(lambda turn: asked.append(turn.round), tools=[world.tool()], operation_ledger=led, run_id="r-3")
    assert asked == [] and world.effects == {}
    led.close()


def test_R46_a_run_that_crashed_before_its_first_write_is_in_its_ledger_and_resumes(tmp_path: Path) -> None:
    """run_loop records the run's start in the operation ledger first, so a run that crashed before any write is
    resumed (from the first request), while a ledger that never saw the run is refused."""
    world = World()

    class Crash(BaseException):
        pass

    def dies(turn: Any) -> Any:
        raise Crash

    with pytest.raises(Crash):
        run_loop(dies, tools=[world.tool()], operation_ledger=tmp_path / "ops.sqlite", run_id="r-5")
    out = resume("r-5", scripted([("c1", "A")]), tools=[world.tool()], operation_ledger=str(tmp_path / "ops.sqlite"))
    assert out.status == "COMPLETED" and world.effects == {"A": 1}


@pytest.mark.parametrize("where", ["missing", "empty", "not-a-ledger", "garbage", "other-run"])
def test_R46_resume_refuses_a_ledger_that_does_not_hold_the_run_and_creates_nothing(tmp_path: Path,
                                                                                    where: str) -> None:
    """Issue 32: resume() on a path that did not exist made SQLite create an empty ledger, so the run started
    afresh and every write was sent again; ``""`` was accepted too. Now it is refused before anything is sent."""
    from loopspec.engine.oplog import LedgerNotFound

    world = World()
    path = tmp_path / "ops.sqlite"
    if where == "not-a-ledger":
        import sqlite3

        sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    elif where == "garbage":
        path.write_bytes(b"not a database at all" * 100)
    elif where == "other-run":
        run_loop(scripted([("c1", "B")]), tools=[world.tool()], operation_ledger=path, run_id="another")
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(LedgerNotFound, match=r"operation ledger|empty") as err:
        resume("r-9", scripted([("c1", "A")]), tools=[world.tool()],
               operation_ledger="" if where == "empty" else str(path))
    assert isinstance(err.value, EngineError)
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "nothing created"
    assert "A" not in world.effects, "nothing sent"
    if where == "other-run":
        assert "run 'r-9' is not in this operation ledger" in str(err.value)


def test_R46_run_loop_refuses_an_empty_ledger_path() -> None:
    from loopspec.engine.oplog import LedgerNotFound

    with pytest.raises(LedgerNotFound, match="empty"):
        run_loop(scripted([("c1", "A")]), tools=[World().tool()], operation_ledger="")
