"""The judge (loopspec.judge.batch): one comparison core for the fuzzer and the oracle.

Correct traces come from the reference engine; each divergence is made by editing a trace the way
a buggy implementation would behave, and the judge must name the rule, the invariant, the request
index and the spec transition, and explain it ("Let … Then …").
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from loopspec.judge.trace import judge
from loopspec.judge.verdict import TraceError, Verdict
from loopspec.spec.loader import load_rules
from tests.fuzz_helpers import (
    call,
    clone,
    executions,
    reference_trace,
    response,
    schema_validator,
    step,
)
from tests.strategies import fuzz_batch_steps as batch_steps


def verdict_of(trace: dict) -> Verdict:
    v = judge(trace)
    assert v.violation is not None, "expected a divergence"
    assert v.violation.explanation.startswith("Let ")
    assert "\nThen " in v.violation.explanation
    return v


def exec_event(cid: str, name: str = "lookup", principal: str = "alice", output: object = 99, **args: object) -> dict:
    return {"type": "execute", "callId": cid, "name": name, "arguments": args, "principal": principal,
            "outcome": {"status": "ok", "output": output}}


# --------------------------------------------------------------------------------------------
# The reference engine is judged correct (one judge, checked against the engine)
# --------------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(batch_steps())
def test_reference_engine_traces_have_no_divergence(st: dict) -> None:
    """The engine (transitions machine) and the judge's reference (core.drive) agree on every batch."""
    trace = reference_trace(st)
    v = judge(trace)
    assert v.ok, v.violation and v.violation.explanation
    assert v.expected["executed"] == len(executions(trace)) == response(trace)["executed"]


def test_trace_schema_accepts_recorded_traces() -> None:
    validator = schema_validator("trace.schema.json")
    for calls in ([call("c1", q="a"), call("c1", q="a"), call("c1", q="b")], [], [{"id": 7}]):
        validator.validate(reference_trace(step(calls, script=[{"fail": "INTERNAL_ERROR"}])))


# --------------------------------------------------------------------------------------------
# One divergence per rule
# --------------------------------------------------------------------------------------------


def test_R6_replay_reexecuted() -> None:
    t = reference_trace(step([call("c1", q="a"), call("c1", q="a")]))
    bad = clone(t)
    bad["events"].insert(1, exec_event("c1", q="a"))
    v = verdict_of(bad).violation
    assert (v.rule, v.kind, v.index, v.transition) == ("R6", "replay-reexecuted", 1, "T13")
    assert v.invariant == "INV-REPLAY-NO-EXEC"


def test_R6_replay_with_reordered_keys_refused() -> None:
    """Content is canonical: {"q","n"} in another key order, 1 written 1.0, is the same content."""
    t = reference_trace(step([call("c1", q="a", n=1), {"id": "c1", "name": "lookup", "arguments": {"n": 1.0, "q": "a"}}]))
    bad = clone(t)
    response(bad)["results"][1] = {"id": "c1", "status": "error", "code": "ID_CONFLICT"}
    v = verdict_of(bad).violation
    assert (v.rule, v.kind, v.index) == ("R6", "replay-refused", 1)


def test_R7_conflict_reused() -> None:
    t = reference_trace(step([call("c1", q="a"), call("c1", q="b")]))
    bad = clone(t)
    res = response(bad)["results"]
    res[1] = {"id": "c1", "status": "ok", "output": res[0]["output"]}
    v = verdict_of(bad).violation
    assert (v.rule, v.kind, v.index, v.transition) == ("R7", "conflict-reused", 1, "T12")
    assert v.invariant == "INV-CONFLICT-NO-REUSE"


def test_R8_deduplicated_by_content() -> None:
    t = reference_trace(step([call("c1", q="a"), call("c2", q="a")], budget=2))
    bad = clone(t)
    bad["events"].pop(1)  # the second execution never happened
    response(bad)["results"][1]["output"] = response(bad)["results"][0]["output"]
    response(bad)["executed"] = 1
    v = verdict_of(bad).violation
    assert (v.rule, v.kind, v.index) == ("R8", "deduplicated-by-content", 1)


def test_R9_budget_checked_after_execution() -> None:
    t = reference_trace(step([call("c1", q="a"), call("c2", q="b")], budget=1))
    bad = clone(t)
    bad["events"].insert(1, exec_event("c2", q="b"))
    v = verdict_of(bad).violation
    assert (v.rule, v.kind, v.index, v.transition) == ("R9", "executed-despite-budget-exhausted", 1, "T18")
    assert v.invariant == "INV-EXEC-BUDGET"


def test_R3_unknown_tool_executed() -> None:
    t = reference_trace(step([call("c1", "shell", cmd="rm")], budget=1))
    bad = clone(t)
    bad["events"].insert(0, {**exec_event("c1", "shell", cmd="rm"),
                             "outcome": {"status": "error", "category": "INTERNAL_ERROR"}})
    v = verdict_of(bad).violation
    assert (v.rule, v.index, v.transition) == ("R3", 0, "T10")
    assert v.invariant == "INV-CHECKED-BEFORE-EXEC"


def test_R11_results_reordered_missing_and_extra() -> None:
    t = reference_trace(step([call("c1", q="a"), call("c2", q="b")]))
    swapped = clone(t)
    r = response(swapped)["results"]
    r[0], r[1] = r[1], r[0]
    v = verdict_of(swapped).violation
    assert (v.rule, v.kind, v.index) == ("R11", "answers-out-of-order", 0)
    assert v.invariant == "INV-ONE-ANSWER-IN-ORDER"

    missing = clone(t)
    response(missing)["results"].pop()
    v = verdict_of(missing).violation
    assert (v.rule, v.kind, v.index) == ("R11", "answer-missing", 1)

    extra = clone(t)
    response(extra)["results"].append({"id": "c9", "status": "ok", "output": 1})
    v = verdict_of(extra).violation
    assert (v.rule, v.kind, v.index) == ("R11", "extra-answer", 2)


def test_R12_executed_miscounted() -> None:
    t = reference_trace(step([call("c1", q="a"), call("c1", q="a")]))
    bad = clone(t)
    response(bad)["executed"] = 2
    v = verdict_of(bad).violation
    assert (v.rule, v.kind, v.invariant) == ("R12", "executed-miscounted", "INV-EXEC-ACCOUNTING")
    assert v.observed == {"executed": 2, "observedExecutions": 1}


def test_R13_answers_before_abort_lost_and_aborting_request_answered() -> None:
    t = reference_trace(step([call("c1", q="a"), call("c2", "shell")], mode="abort"))
    assert response(t)["aborted"] == {"index": 1, "code": "UNKNOWN_TOOL"}
    lost = clone(t)
    response(lost)["results"] = []
    v = verdict_of(lost).violation
    assert (v.rule, v.kind, v.index, v.invariant) == ("R13", "answers-lost-on-abort", 0, "INV-ABORT-PREFIX")

    answered = clone(t)
    response(answered)["results"].append({"id": "c2", "status": "error", "code": "UNKNOWN_TOOL"})
    v = verdict_of(answered).violation
    assert (v.rule, v.kind, v.index) == ("R13", "aborting-request-answered", 1)


def test_R14_continue_mode_does_not_abort() -> None:
    t = reference_trace(step([call("c1", q="a"), call("c2", q="b")], script=[{"fail": "INTERNAL_ERROR"}]))
    bad = clone(t)
    bad["events"].pop(1)
    res = response(bad)
    res["results"], res["executed"], res["aborted"] = [], 1, {"index": 0, "code": "INTERNAL_ERROR"}
    v = verdict_of(bad).violation
    assert (v.rule, v.kind, v.index) == ("R14", "aborted-wrongly", 0)


def test_R15_unsafe_error_answers() -> None:
    t = reference_trace(step([call("c1", "shell")]))
    leaky = clone(t)
    response(leaky)["results"][0]["message"] = "KeyError: 'shell' at executor.py:12"
    v = verdict_of(leaky).violation
    assert (v.rule, v.kind, v.invariant) == ("R15", "unsafe-error-message", "INV-SAFE-ERRORS")

    extra = clone(t)
    response(extra)["results"][0]["stack"] = "Traceback ..."
    assert verdict_of(extra).violation.kind == "unsafe-error"

    unknown = clone(t)
    response(unknown)["results"][0]["code"] = "ENOENT"
    assert verdict_of(unknown).violation.rule == "R15"


def test_R16_principal_taken_from_arguments() -> None:
    tools = [{"name": "write", "inputSchema": {"type": "object", "properties": {"principal": {"type": "string"}}}}]
    t = reference_trace(step([call("c1", "write", principal="mallory")], tools=tools))
    bad = clone(t)
    bad["events"][0]["principal"] = "mallory"
    v = verdict_of(bad).violation
    assert (v.rule, v.index, v.invariant) == ("R16", 0, "INV-TRUSTED-PRINCIPAL")
    assert "'alice'" in v.explanation and "mallory" in v.explanation


def test_R10_failure_cached() -> None:
    t = reference_trace(step([call("c1", q="a"), call("c1", q="a")], script=[{"fail": "DEPENDENCY_TEMPORARY"}]))
    assert [e["callId"] for e in executions(t)] == ["c1", "c1"]  # R10: the second request executes again
    bad = clone(t)
    bad["events"].pop(1)
    res = response(bad)
    res["results"][1] = {"id": "c1", "status": "error", "code": "DEPENDENCY_TEMPORARY"}
    res["executed"] = 1
    v = verdict_of(bad).violation
    assert (v.rule, v.kind, v.index) == ("R10", "failure-cached", 1)


def test_R4_check_order_schema_before_id() -> None:
    """R1/R4: the schema check decides before the id check; answering ID_CONFLICT skips it."""
    t = reference_trace(step([call("c1", q="a"), {"id": "c1", "name": "lookup", "arguments": {"q": 5}}]))
    assert response(t)["results"][1]["code"] == "INVALID_ARGUMENT"
    bad = clone(t)
    response(bad)["results"][1]["code"] = "ID_CONFLICT"
    for k in ("message", "next_action", "request_id"):
        response(bad)["results"][1].pop(k, None)
    v = verdict_of(bad).violation
    assert (v.rule, v.kind, v.index) == ("R4", "check-order", 1)
    assert "R1" in v.explanation


def test_R2_malformed_call_executed() -> None:
    t = reference_trace(step([{"id": 7, "name": "lookup", "arguments": {"q": "a"}}]))
    bad = clone(t)
    bad["events"].insert(0, {**exec_event("c1", q="a"), "callId": 7})
    v = verdict_of(bad).violation
    assert (v.rule, v.index, v.transition) == ("R2", 0, "T09")


def test_first_divergence_is_the_lowest_request_index() -> None:
    t = reference_trace(step([call("c1", q="a"), call("c1", q="a"), call("c2", "shell")]))
    bad = clone(t)
    response(bad)["results"][2] = {"id": "c2", "status": "ok", "output": 1}  # wrong at #2
    bad["events"].append(bad["events"].pop())  # keep the response last
    bad["events"].insert(1, exec_event("c1", q="a"))  # replay re-executed at #1
    assert verdict_of(bad).violation.index == 1


# --------------------------------------------------------------------------------------------
# Protocol findings and malformed traces
# --------------------------------------------------------------------------------------------


def test_protocol_error_is_reported_after_wrong_executions_before_it() -> None:
    t = reference_trace(step([call("c1", "shell")]))
    crash = clone(t)
    crash["events"][-1] = {"type": "protocol-error", "code": "P1", "kind": "exited", "detail": "exit status 3"}
    v = verdict_of(crash).violation
    assert (v.rule, v.kind) == ("P1", "exited")
    crash["events"].insert(0, {**exec_event("c1", "shell"), "outcome": {"status": "error", "category": "INTERNAL_ERROR"}})
    assert verdict_of(crash).violation.rule == "R3"


@pytest.mark.parametrize("result", [
    None, {"results": {}, "executed": 0, "aborted": None}, {"results": [], "executed": -1, "aborted": None},
    {"results": [], "executed": 0}, {"results": [{"id": 1, "status": "ok", "output": 1}], "executed": 0, "aborted": None},
    {"results": [{"id": "c1", "status": "maybe"}], "executed": 0, "aborted": None},
])
def test_malformed_response_is_P5(result: object) -> None:
    t = reference_trace(step([call("c1", q="a")]))
    bad = clone(t)
    bad["events"][-1] = {"type": "response", "result": result}
    assert verdict_of(bad).violation.rule == "P5"


@pytest.mark.parametrize(("edit", "where"), [
    (lambda t: t.pop("format"), "trace.format"),
    (lambda t: t["config"].update(budget=-1), "config.budget"),
    (lambda t: t["config"].update(mode="sometimes"), "config.mode"),
    (lambda t: t["config"]["tools"].append({"name": "lookup"}), "config.tools[2].name"),
    (lambda t: t["config"]["tools"][0]["inputSchema"].update(minimum=1), "config.tools[0].inputSchema.minimum"),
    (lambda t: t["events"].pop(), "trace.events"),
    (lambda t: t["events"].insert(0, {"type": "nap"}), "trace.events[0].type"),
    (lambda t: t["events"][0].update(outcome={"status": "error", "category": "OOPS"}), "trace.events[0].outcome"),
])
def test_malformed_trace_raises_trace_error_naming_the_field(edit: object, where: str) -> None:
    t = clone(reference_trace(step([call("c1", q="a")])))
    edit(t)  # type: ignore[operator]
    with pytest.raises(TraceError) as err:
        judge(t)
    assert err.value.where == where


def test_every_rule_the_judge_cites_exists_in_spec_md() -> None:
    rules = {r.id: r for r in load_rules()}
    cited = {"R2", "R3", "R6", "R7", "R8", "R9", "R10", "R11", "R12", "R13", "R14", "R15", "R16", "R17"}
    assert cited <= set(rules)
