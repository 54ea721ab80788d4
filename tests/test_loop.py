"""The multi-round loop (R18–R28) with the example merchant tool set, the ledger, and cancellation."""

from __future__ import annotations

import json
import threading
from typing import Any

import jsonschema
import pytest

from loopspec import CancelToken, Ledger, Limits, Tool, ToolContext, Turn, run_loop
from loopspec.core.rules import CODE_TABLE, violated_invariants
from loopspec.engine.vectors import conformance_dir
from loopspec.examples.merchants import CANARY, MerchantDirectory

LEDGER_SCHEMA = json.loads((conformance_dir().parent / "schema" / "ledger-event.schema.json").read_text())


def call(cid: str, merchant: Any, tool: str = "get_merchant") -> dict[str, Any]:
    return {"id": cid, "name": tool, "arguments": {"merchantId": merchant}}


class Script:
    """A scripted fake model: one response per request; records what it was shown."""

    def __init__(self, *responses: Any) -> None:
        self.responses = list(responses)
        self.seen: list[Turn] = []

    def __call__(self, turn: Turn) -> Any:
        self.seen.append(turn)
        r = self.responses[len(self.seen) - 1]
        if isinstance(r, BaseException):
            raise r
        return r


def run(script: Script, directory: MerchantDirectory | None = None, **kw: Any):  # type: ignore[no-untyped-def]
    d = directory or MerchantDirectory()
    broken: list[Any] = []
    kw.setdefault("limits", Limits(max_rounds=6, max_executions=8, max_requests=20, max_retries=1))
    out = run_loop(script, tools=d.tools(), authorize=d.authorize, principal=kw.pop("principal", "tenant-a"),
                   observer=lambda s, t: broken.extend((t.id, v) for v in violated_invariants(s)), **kw)
    assert broken == [], broken
    return out, d


def everything_visible(out: Any, script: Script) -> str:
    """Everything the model or the caller can see: answers, outcome, ledger, the model's turns."""
    turns = [json.dumps(t.results) for t in script.seen]
    return json.dumps(out.to_json()) + out.ledger.to_ndjson() + "".join(turns)


class TestMerchantLookups:
    """R16, R24, R25 and the error classes on the example tool set."""

    def test_allowed_lookup_returns_only_public_fields(self) -> None:  # R25
        out, _ = run(Script([call("c1", "1001")], {"final": "It opens at 09:00."}))
        assert out.status == "COMPLETED" and out.stop_reason == "FINAL_ANSWER" and out.coverage == "COMPLETE"
        assert out.results == [{"id": "c1", "status": "ok", "output": {
            "merchantId": "1001", "name": "Harbour Tea House", "city": "Lisbon", "hours": "09:00-18:00"}}]
        assert out.final == "It opens at 09:00."

    def test_unknown_fields_of_the_other_tenant_stay_null(self) -> None:
        out, _ = run(Script([call("c1", "1002")], {"final": "?"}), principal="tenant-b")
        assert out.results[0]["output"] == {"merchantId": "1002", "name": None, "city": None, "hours": None}

    def test_cross_tenant_and_missing_look_the_same(self) -> None:  # R24
        out, d = run(Script([call("c1", "1002"), call("c2", "9999")], {"final": "no"}), mode="continue")
        cross, missing = out.results
        assert cross["code"] == missing["code"] == "NOT_FOUND_OR_NOT_ACCESSIBLE"
        assert {k: v for k, v in cross.items() if k not in ("id", "request_id")} == \
            {k: v for k, v in missing.items() if k not in ("id", "request_id")}
        # the denial never reached the store and charged no budget; the missing id did one lookup
        assert out.executed == 1 and d.attempts == 1

    def test_invalid_argument_is_fix_input_and_never_executes(self) -> None:  # R4, R15
        out, d = run(Script([call("c1", 1001)], {"final": "x"}), mode="continue")
        assert out.results[0]["code"] == "INVALID_ARGUMENT" and out.results[0]["next_action"] == "FIX_INPUT"
        assert d.attempts == 0

    def test_identity_comes_from_the_run_not_the_arguments(self) -> None:  # R16
        smuggled = {"id": "c1", "name": "get_merchant", "arguments": {"merchantId": "1002", "principal": "tenant-b"}}
        out, _ = run(Script([smuggled, {"id": "c2", "name": "list_merchants", "arguments": {}}], {"final": "x"}),
                     mode="continue")
        assert out.results[0]["code"] == "INVALID_ARGUMENT"
        assert [m["merchantId"] for m in out.results[1]["output"]] == ["1001"]

    def test_temporary_failure_is_retried_within_budget_and_counted_apart(self) -> None:  # R23
        d = MerchantDirectory(unavailable=1)
        out, _ = run(Script([call("c1", "1001")], {"final": "x"}), d)
        assert out.results[0]["status"] == "ok"
        c = out.counters
        assert (c["modelRequests"], c["executed"], c["retries"], c["attempts"]) == (2, 1, 1, 2)
        assert d.attempts == c["attempts"]

    def test_temporary_failure_beyond_retries_is_retry_with_budget(self) -> None:  # R17, R23
        d = MerchantDirectory(unavailable=5)
        out, _ = run(Script([call("c1", "1001")], {"final": "x"}), d, mode="continue")
        r = out.results[0]
        assert r["code"] == "DEPENDENCY_TEMPORARY" and r["next_action"] == "RETRY_WITH_BUDGET"
        assert d.attempts == 2  # one execution, one retry: never multiplied

    def test_temporary_failure_is_never_disguised_as_not_found(self) -> None:  # R24
        d = MerchantDirectory(unavailable=5)
        out, _ = run(Script([call("c1", "1001")], {"final": "x"}), d, mode="continue")
        assert out.results[0]["code"] != "NOT_FOUND_OR_NOT_ACCESSIBLE"

    def test_crash_is_internal_error_and_the_canary_never_leaks(self) -> None:  # R15, R17, R25
        script = Script([call("c1", "5000"), call("c2", "1001")], [call("c3", "1001")], {"final": "done"})
        out, _ = run(script, mode="continue", record_arguments=True)
        assert out.results[0]["code"] == "INTERNAL_ERROR" and out.results[0]["next_action"] == "STOP"
        visible = everything_visible(out, script)
        assert CANARY not in visible
        assert "SELECT" not in visible and "Traceback" not in visible and "syntax error" not in visible

    def test_error_answers_are_exactly_the_stable_structure(self) -> None:  # R15
        out, _ = run(Script([call("c1", "9999")], {"final": "x"}), mode="continue")
        r = out.results[0]
        assert set(r) == {"id", "status", "code", "message", "next_action", "request_id"}
        assert r["message"] == CODE_TABLE["NOT_FOUND_OR_NOT_ACCESSIBLE"][3]
        assert r["request_id"] == f"{out.run_id}:0"


class TestBudgets:
    """R19, R20, R22: every limit is the application's and is enforced before the side effect."""

    def test_endless_replay_loop_is_stopped_by_max_requests(self) -> None:
        model = lambda turn: [call("same", "1001")]  # noqa: E731 - the model never gives up
        out = run_loop(model, tools=MerchantDirectory().tools(), principal="tenant-a",
                       limits=Limits(max_rounds=None, max_requests=5))
        assert (out.status, out.stop_reason, out.coverage) == ("TRUNCATED", "MAX_REQUESTS", "PARTIAL")
        assert out.executed == 1 and out.counters["replays"] == 4 and out.aborted == (5, "REQUEST_LIMIT")

    def test_endless_proposals_are_stopped_by_max_rounds(self) -> None:
        n = iter(range(1000))
        out = run_loop(lambda t: [call(f"c{next(n)}", "1001")], tools=MerchantDirectory().tools(),
                       principal="tenant-a", limits=Limits(max_rounds=3))
        assert (out.status, out.stop_reason, out.counters["modelRequests"], out.executed) == ("TRUNCATED", "MAX_ROUNDS", 3, 3)

    @pytest.mark.parametrize(("policy", "status", "coverage"), [("throw", "TRUNCATED", "PARTIAL"),
                                                                ("error-result", "COMPLETED", "PARTIAL")])
    def test_execution_budget_policies(self, policy: str, status: str, coverage: str) -> None:
        script = Script([call("c1", "1001"), call("c2", "1001")], {"final": "x"})
        out, d = run(script, limits=Limits(max_executions=1), on_limit=policy)
        assert (out.status, out.coverage, out.executed, d.attempts) == (status, coverage, 1, 1)
        if policy == "throw":
            assert out.aborted == (1, "BUDGET_EXHAUSTED") and out.stop_reason == "MAX_EXECUTIONS"
            assert len(out.results) == 1  # results already obtained are kept
        else:
            assert out.results[1]["code"] == "BUDGET_EXHAUSTED"
            assert script.seen[1].results[1]["code"] == "BUDGET_EXHAUSTED"  # the model sees it

    def test_per_tool_budget(self) -> None:
        d = MerchantDirectory()
        tools = [Tool.define(t.name, t.fn, t.schema.to_json(), fields=t.fields, max_executions=1) for t in d.tools()]
        out = run_loop(Script([call("c1", "1001"), call("c2", "1001"), {"id": "c3", "name": "list_merchants",
                                                                          "arguments": {}}], {"final": "x"}),
                       tools=tools, principal="tenant-a", on_limit="error-result")
        assert [r.get("code") for r in out.results] == [None, "TOOL_BUDGET_EXHAUSTED", None]
        assert out.counters["perTool"] == {"get_merchant": 1, "list_merchants": 1}

    def test_deadline_on_an_injected_clock(self) -> None:
        now = {"t": 0.0}

        def model(turn: Turn) -> Any:
            now["t"] += 10
            return [call(f"c{turn.round}", "1001")]

        out = run_loop(model, tools=MerchantDirectory().tools(), principal="tenant-a", clock=lambda: now["t"],
                       limits=Limits(deadline=25))
        assert (out.status, out.stop_reason) == ("TRUNCATED", "DEADLINE")
        assert out.counters["modelRequests"] == 3 and out.aborted == (2, "DEADLINE_EXCEEDED")

    def test_defaults_come_from_the_spec(self) -> None:
        from loopspec.engine.reference import default_limits
        from loopspec.spec.loader import load_spec

        limits, mode, policy = default_limits()
        d = load_spec().defaults["loop"]
        assert (limits.max_rounds, limits.max_executions, limits.max_requests, mode, policy) == (
            d["max_rounds"], d["max_executions"], d["max_requests"], d["mode"], d["on_limit"])

    def test_model_failure_ends_failed(self) -> None:  # R18
        out, _ = run(Script(RuntimeError("model down")))
        assert (out.status, out.stop_reason, out.coverage) == ("FAILED", "MODEL_ERROR", "PARTIAL")

    @pytest.mark.parametrize("bad", [42, {"calls": "x"}, {"final": 3}, {"final": "a", "calls": []}, None])
    def test_a_response_that_is_neither_calls_nor_final_is_a_model_error(self, bad: Any) -> None:
        out, _ = run(Script(bad))
        assert out.stop_reason == "MODEL_ERROR"


class TestRounds:
    """R5–R7 across rounds, R18, R28."""

    def test_bindings_span_the_run(self) -> None:
        script = Script([call("c1", "1001")], [call("c1", "1001"), call("c1", "1002")], {"final": "x"})
        out, d = run(script, mode="continue")
        assert [r["status"] for r in out.results] == ["ok", "ok", "error"]
        assert out.results[2]["code"] == "ID_CONFLICT" and d.attempts == 1

    def test_the_model_sees_the_previous_round_in_order(self) -> None:
        script = Script([call("a", "1001"), call("b", "9999")], {"final": "x"})
        out, _ = run(script, mode="continue")
        assert [r["id"] for r in script.seen[1].results] == ["a", "b"]
        assert list(script.seen[1].results) == out.results

    def test_nothing_after_the_final_answer(self) -> None:  # R28
        script = Script({"final": "done"}, [call("c1", "1001")])
        out, d = run(script)
        assert out.counters["requests"] == 0 and len(script.seen) == 1 and d.attempts == 0


class TestCancellation:
    """R21, R26: exactly one terminal state; late results are recorded and never applied."""

    def test_cancel_while_a_tool_runs_discards_its_late_result(self) -> None:
        token = CancelToken()
        entered, release = threading.Event(), threading.Event()

        def slow(args: dict[str, Any], ctx: ToolContext) -> Any:
            entered.set()
            release.wait(10)
            return {"late": "value"}

        tool = Tool.define("slow", slow, {"type": "object", "properties": {}})
        ledger = Ledger()
        done = threading.Event()
        ledger.subscribe(lambda ev: done.set() if ev["type"] == "late_result_discarded" else None)
        model = Script([{"id": "c1", "name": "slow", "arguments": {}}], {"final": "never"})
        t = threading.Thread(target=lambda: (entered.wait(10), token.cancel()))
        t.start()
        out = run_loop(model, tools=[tool], cancel=token, ledger=ledger)
        t.join()
        assert (out.status, out.stop_reason, out.results) == ("CANCELLED", "CANCELLED", [])
        release.set()
        assert done.wait(10)
        types = [e["type"] for e in ledger.events]
        assert types.count("run_terminal") == 1 and types[-1] == "late_result_discarded"
        assert len(model.seen) == 1  # the late result never reached the model

    @pytest.mark.parametrize("attempt", range(30))
    def test_completion_and_cancellation_race_to_exactly_one_terminal(self, attempt: int) -> None:
        token = CancelToken()
        barrier = threading.Barrier(2)

        def model(turn: Turn) -> Any:
            barrier.wait(10)  # the final answer and the cancel are released together
            return {"final": "done"}

        ledger = Ledger()
        canceller = threading.Thread(target=lambda: (barrier.wait(10), token.cancel()))
        canceller.start()
        out = run_loop(model, tools=[], cancel=token, ledger=ledger)
        canceller.join()
        terminals = [e for e in ledger.events if e["type"] == "run_terminal"]
        assert len(terminals) == 1
        assert out.status in ("COMPLETED", "CANCELLED")
        assert terminals[0]["status"] == out.status
        token.cancel()  # cancelling a finished run changes nothing
        assert [e for e in ledger.events if e["type"] == "run_terminal"] == terminals

    @pytest.mark.parametrize("attempt", range(20))
    def test_tool_result_and_cancel_race_never_both_apply(self, attempt: int) -> None:
        token = CancelToken()
        barrier = threading.Barrier(2)

        def tool_fn(args: dict[str, Any], ctx: ToolContext) -> Any:
            barrier.wait(10)
            return 1

        ledger = Ledger()
        late = threading.Event()
        ledger.subscribe(lambda ev: late.set() if ev["type"] == "late_result_discarded" else None)
        canceller = threading.Thread(target=lambda: (barrier.wait(10), token.cancel()))
        canceller.start()
        out = run_loop(Script([{"id": "c1", "name": "t", "arguments": {}}], {"final": "x"}),
                       tools=[Tool.define("t", tool_fn)], cancel=token, ledger=ledger)
        canceller.join()
        if out.results:  # completion won: the result applied and nothing is discarded
            assert out.results[0]["status"] == "ok"
            assert not any(e["type"] == "late_result_discarded" for e in ledger.events)
        else:  # cancellation won: no answer, and the result is recorded as discarded
            assert out.status == "CANCELLED" and late.wait(10)


class TestLedger:
    """R27: every step is an event; the ledger validates against its JSON Schema."""

    def ledger_of_a_busy_run(self) -> tuple[Any, Ledger]:
        d = MerchantDirectory(unavailable=1)
        ledger = Ledger()
        script = Script([call("c1", "1001"), call("c1", "1001"), call("c2", "1002"), call("c3", 7),
                         {"id": "c4", "name": "shell", "arguments": {}}],
                        [call("c1", "9999")], RuntimeError("boom"))
        out, _ = run(script, d, mode="continue", ledger=ledger)
        return out, ledger

    def test_every_event_matches_the_schema(self) -> None:
        _out, ledger = self.ledger_of_a_busy_run()
        for ev in ledger.events:
            jsonschema.validate(ev, LEDGER_SCHEMA)
        assert {e["type"] for e in ledger.events} >= {
            "run_started", "model_requested", "model_proposed", "model_failed", "call_validated", "call_rejected",
            "call_replayed", "execution_started", "execution_finished", "result_returned", "call_advanced",
            "round_decided", "run_terminal"}

    def test_steps_are_the_transition_path(self) -> None:
        out, ledger = self.ledger_of_a_busy_run()
        by_step: dict[int, str] = {}
        for ev in ledger.events:
            if "step" in ev:
                assert by_step.setdefault(ev["step"], ev["via"]) == ev["via"]
        assert [by_step[i] for i in sorted(by_step)] == list(out.transitions)

    def test_ndjson_round_trips_and_holds_no_raw_arguments_by_default(self) -> None:
        _out, ledger = self.ledger_of_a_busy_run()
        lines = ledger.to_ndjson().splitlines()
        assert [json.loads(x) for x in lines] == ledger.events
        assert "1001" not in "".join(x for x in lines if '"arguments"' in x)
        assert all("arguments" not in json.loads(x) for x in lines)

    def test_answers_can_be_recomputed_from_the_ledger(self) -> None:
        out, ledger = self.ledger_of_a_busy_run()
        returned = [e for e in ledger.events if e["type"] == "result_returned"]
        assert [(e["callId"], e["status"], e["code"]) for e in returned] == [
            (r["id"], r["status"], r.get("code")) for r in out.results]
        finished = [e for e in ledger.events if e["type"] == "execution_finished"]
        assert len({e["ordinal"] for e in finished}) == out.executed
