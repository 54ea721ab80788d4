"""Real engine ledgers and the mutations that turn them into must-fail cases for the oracle.

Scenario ledgers come from the reference engine (deterministic: fixed run ids, an injected clock,
durations zeroed). A mutation rewrites one run's events the way a buggy implementation would have
recorded them (seq renumbered, so the ledger stays well formed) and names the rule the oracle must
report. Used by the golden corpus generator and by the mutation-sensitivity tests.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loopspec import Ledger, Limits, Tool, ToolFailure, run_batch, run_loop
from loopspec.examples.merchants import MerchantDirectory

Event = dict[str, Any]
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": False}


def call(cid: Any, q: Any = "x", tool: str = "lookup") -> dict[str, Any]:
    return {"id": cid, "name": tool, "arguments": {"q": q}}


def _tools(fail: dict[int, str] | None = None) -> list[Tool]:
    fail = fail or {}
    n = [0]

    def lookup(args: dict[str, Any], ctx: Any) -> Any:
        n[0] += 1
        if n[0] in fail:
            raise ToolFailure(fail[n[0]])
        return {"q": args["q"], "n": n[0]}

    return [Tool.define("lookup", lookup, SCHEMA), Tool.define("echo", lambda a, c: a, SCHEMA)]


def _clock(step: float = 0.5) -> Callable[[], float]:
    t = [0.0]

    def clock() -> float:
        t[0] += step
        return t[0]

    return clock


def engine_events(led: Ledger) -> list[Event]:
    """A copy of an engine run's ledger events with the durations zeroed (the rest is deterministic)."""
    out = copy.deepcopy(led.events)
    for e in out:
        if "durationMs" in e:
            e["durationMs"] = 0.0
    return out


def ndjson(evs: list[Event]) -> str:
    """Events as an NDJSON ledger file's text."""
    return "".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n" for e in evs)


def interleave(runs: list[list[Event]]) -> list[Event]:
    """The events of several runs in one ledger, one event of each run in turn."""
    out: list[Event] = []
    queues = [list(r) for r in runs]
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def loop(run_id: str, script: list[Any], *, fail: dict[int, str] | None = None, record: bool = False,
         **kw: Any) -> list[Event]:
    led = Ledger()
    kw.setdefault("limits", Limits(max_rounds=6, max_executions=8, max_requests=20, max_retries=1))
    kw.setdefault("mode", "continue")
    run_loop(lambda turn: script[turn.round - 1], tools=_tools(fail), principal="alice", clock=_clock(), ledger=led,
             run_id=run_id, record_arguments=record, **kw)
    return engine_events(led)


def batch(run_id: str, calls: list[Any], *, budget: int = 4, mode: str = "continue", fail: dict[int, str] | None = None,
          record: bool = False) -> list[Event]:
    led = Ledger()
    run_batch(calls, tools=_tools(fail), budget=budget, mode=mode, principal="alice", ledger=led, run_id=run_id,
              record_arguments=record)
    return engine_events(led)


def merchants(run_id: str) -> list[Event]:
    """The demo's run: the example merchant directory, with authorization, a replay and a retry."""
    d = MerchantDirectory()
    script: list[Any] = [
        [{"id": "c1", "name": "get_merchant", "arguments": {"merchantId": "1001"}},
         {"id": "c2", "name": "get_merchant", "arguments": {"merchantId": "1002"}},
         {"id": "c3", "name": "get_merchant", "arguments": {"merchantId": "9999"}},
         {"id": "c4", "name": "get_merchant", "arguments": {"merchantId": 1001}}],
        [{"id": "c1", "name": "get_merchant", "arguments": {"merchantId": "1001"}},
         {"id": "c5", "name": "list_merchants", "arguments": {}}],
        {"final": "Harbour Tea House is open 09:00-18:00."},
    ]

    def model(turn: Any) -> Any:
        if turn.round == 2:
            d.unavailable = 1
        return script[turn.round - 1]

    led = Ledger()
    run_loop(model, tools=d.tools(), authorize=d.authorize, principal="tenant-a", clock=_clock(),
             limits=Limits(max_rounds=4, max_executions=6, max_requests=12, max_retries=1), mode="continue",
             ledger=led, run_id=run_id)
    return engine_events(led)


# --------------------------------------------------------------------------------------------
# Scenarios (genuine engine ledgers)
# --------------------------------------------------------------------------------------------


def scenarios() -> dict[str, list[Event]]:
    return {
        "merchants": merchants("merchants"),
        "replay-conflict": loop("replay-conflict", [[call("a"), call("a"), call("a", "y"), call("b")],
                                                    [call("a"), call("c", "x")], {"final": "done"}]),
        "failure-retry": loop("failure-retry", [[call("a"), call("b", "y")], [call("a")], {"final": "ok"}],
                              fail={1: "INTERNAL_ERROR", 2: "DEPENDENCY_TEMPORARY", 3: "DEPENDENCY_TEMPORARY"}),
        "budget": loop("budget", [[call("a"), call("b", "y"), call("c", "z")], {"final": "x"}],
                       limits=Limits(max_rounds=4, max_executions=2), on_limit="error-result"),
        "budget-throw": loop("budget-throw", [[call("a"), call("b", "y"), call("c", "z")], {"final": "x"}],
                             limits=Limits(max_rounds=4, max_executions=2)),
        "abort": loop("abort", [[call("a"), {"id": "b", "name": "shell", "arguments": {}}, call("c")], {"final": "x"}],
                      mode="abort"),
        "rounds": loop("rounds", [[call("a")], [call("b")], [call("c")], [call("d")], {"final": "x"}],
                       limits=Limits(max_rounds=4)),
        "malformed": loop("malformed", [[{"id": "", "name": "lookup", "arguments": {"q": "x"}},
                                         {"id": "m", "name": "lookup", "arguments": "q=x"}, call("v", 1)],
                                        {"final": "x"}], record=True),
        "recorded": loop("recorded", [[call("a"), call("b", 5)], {"final": "x"}], record=True),
        "batch": batch("batch", [call("a"), call("a"), call("b"), call("b", "y"), call("c", "z")], budget=2),
        "batch-abort": batch("batch-abort", [call("a"), call("b", 3), call("c")], mode="abort"),
        "dedup": loop("dedup", [[call("a"), call("b")], {"final": "x"}]),
        "deadline": loop("deadline", [[call("a"), call("b", "y")], [call("c")], {"final": "x"}],
                         limits=Limits(max_rounds=6, deadline=100.0)),
    }


# --------------------------------------------------------------------------------------------
# Mutations
# --------------------------------------------------------------------------------------------


def renumber(evs: list[Event]) -> list[Event]:
    for k, e in enumerate(evs, start=1):
        e["seq"] = k
    return evs


def _find(evs: list[Event], pred: Callable[[Event], bool], nth: int = 0) -> int:
    hits = [i for i, e in enumerate(evs) if pred(e)]
    return hits[nth]


def drop_result(evs: list[Event]) -> list[Event]:
    i = _find(evs, lambda e: e["type"] == "result_returned" and e["via"] == "T21")
    del evs[i]
    return renumber(evs)


def reorder_results(evs: list[Event]) -> list[Event]:
    """The answers of requests #0 and #1 swap places (the second request's answer comes first)."""
    i = _find(evs, lambda e: e["type"] == "result_returned" and e["index"] == 0)
    j = _find(evs, lambda e: e["type"] == "result_returned" and e["index"] == 1)
    keys = ("index", "callId", "status", "code", "replayed", "outputDigest")
    a = {k: evs[i][k] for k in keys}
    evs[i].update({k: evs[j][k] for k in keys})
    evs[j].update(a)
    return evs


def reexecute_replay(evs: list[Event]) -> list[Event]:
    i = _find(evs, lambda e: e["type"] == "call_replayed")
    e = evs[i]
    v = {k: e[k] for k in ("v", "run", "t", "index", "round", "callId", "tool", "argsDigest")}
    evs[i:i + 2] = [
        {**v, "seq": 0, "type": "call_validated", "via": "T15", "step": e["step"], "binding": "unresolved"},
        {**v, "seq": 0, "type": "execution_started", "via": "T20", "step": e["step"] + 1, "ordinal": 99,
         "attempt": 1, "principal": "alice"},
    ]
    return renumber(evs)


def reuse_for_conflict(evs: list[Event]) -> list[Event]:
    i = _find(evs, lambda e: e["type"] == "call_rejected" and e["code"] == "ID_CONFLICT")
    e = evs[i]
    first = next(x for x in evs if x["type"] == "result_returned" and x["callId"] == e["callId"] and x["status"] == "ok")
    evs[i] = {**{k: e[k] for k in ("v", "run", "seq", "t", "via", "step", "index", "round", "callId", "tool",
                                   "argsDigest")}, "type": "call_replayed", "via": "T13", "of": first["index"]}
    evs[i + 1].update(status="ok", code=None, replayed=True, outputDigest=first["outputDigest"], via="T13")
    return evs


def execute_after_budget(evs: list[Event]) -> list[Event]:
    i = _find(evs, lambda e: e["type"] == "call_rejected" and e["code"] == "BUDGET_EXHAUSTED")
    e = evs[i]
    base = {k: e[k] for k in ("v", "run", "t", "index", "round", "callId", "tool", "argsDigest")}
    evs[i:i + 2] = [
        {**base, "seq": 0, "type": "execution_started", "via": "T20", "step": e["step"], "ordinal": 3, "attempt": 1,
         "principal": "alice"},
        {"v": 1, "run": e["run"], "seq": 0, "t": e["t"], "type": "execution_finished", "via": "T20", "step": e["step"],
         "index": e["index"], "callId": e["callId"], "tool": e["tool"], "ordinal": 3, "attempt": 1, "outcome": "ok",
         "durationMs": 0.0, "outputDigest": "sha256:0000000000000000"},
    ]
    return renumber(evs)


def principal_mismatch(evs: list[Event]) -> list[Event]:
    evs[_find(evs, lambda e: e["type"] == "execution_started")]["principal"] = "mallory"
    return evs


def event_after_terminal(evs: list[Event]) -> list[Event]:
    last = next(e for e in reversed(evs) if e["type"] == "result_returned")
    evs.append({**copy.deepcopy(last), "step": evs[-1]["step"] + 1})
    return renumber(evs)


def executed_miscount(evs: list[Event]) -> list[Event]:
    evs[-1]["counters"]["executed"] += 1
    return evs


def relabel(path: tuple[str, ...], value: Any) -> Callable[[list[Event]], list[Event]]:
    """The configuration says one thing, the behaviour shows another."""
    def mutate(evs: list[Event]) -> list[Event]:
        node = evs[0]["config"]
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value(node[path[-1]]) if callable(value) else value
        return evs

    return mutate


def drop_tool(name: str) -> Callable[[list[Event]], list[Event]]:
    def mutate(evs: list[Event]) -> list[Event]:
        evs[0]["config"]["tools"] = [t for t in evs[0]["config"]["tools"] if t["name"] != name]
        return evs

    return mutate


def accept_blank_id(evs: list[Event]) -> list[Event]:
    """A call with a blank id is validated and executed instead of answered INVALID_CALL."""
    i = _find(evs, lambda e: e["type"] == "call_rejected" and e["code"] == "INVALID_CALL")
    e = evs[i]
    evs[i:i + 2] = [{**{k: e[k] for k in ("v", "run", "seq", "t", "step", "index", "round", "callId", "tool",
                                          "argsDigest", "arguments") if k in e},
                     "type": "call_validated", "via": "T14", "binding": "fresh"}]
    return renumber(evs)


def failure_cached(evs: list[Event]) -> list[Event]:
    """The second request of an id whose execution failed is answered from the failure, as a replay."""
    i = _find(evs, lambda e: e["type"] == "call_validated" and e["binding"] == "unresolved")
    e = evs[i]
    evs[i:i + 1] = [
        {**{k: e[k] for k in ("v", "run", "seq", "t", "step", "index", "round", "callId", "tool", "argsDigest")},
         "type": "call_replayed", "via": "T13", "of": 0},
        {"v": 1, "run": e["run"], "seq": 0, "t": e["t"], "type": "result_returned", "via": "T13", "step": e["step"],
         "index": e["index"], "callId": e["callId"], "status": "error", "code": "INTERNAL_ERROR", "replayed": True,
         "outputDigest": None},
    ]
    return renumber(evs)


def dedup_by_content(evs: list[Event]) -> list[Event]:
    """The second id with the same content is answered with the first one's result, not executed."""
    firsts = [e for e in evs if e["type"] == "call_validated" and e["binding"] == "fresh"]
    second = firsts[1]
    i = evs.index(second)
    ok = next(x for x in evs if x["type"] == "result_returned" and x["index"] == firsts[0]["index"])
    evs[i:i + 1] = [
        {**{k: second[k] for k in ("v", "run", "seq", "t", "step", "index", "round", "callId", "tool", "argsDigest")},
         "type": "call_replayed", "via": "T13", "of": firsts[0]["index"]},
        {"v": 1, "run": second["run"], "seq": 0, "t": second["t"], "type": "result_returned", "via": "T13",
         "step": second["step"], "index": second["index"], "callId": second["callId"], "status": "ok", "code": None,
         "replayed": True, "outputDigest": ok["outputDigest"]},
    ]
    return renumber(evs)


def binding_lost(evs: list[Event]) -> list[Event]:
    i = _find(evs, lambda e: e["type"] == "call_validated" and e["binding"] == "fresh")
    evs[i]["binding"] = "unresolved"
    evs[i]["via"] = "T15"
    return evs


def failure_hidden(evs: list[Event]) -> list[Event]:
    i = _find(evs, lambda e: e["type"] == "result_returned" and e["via"] == "T23")
    evs[i].update(status="ok", code=None, outputDigest="sha256:0000000000000000", via="T21")
    return evs


def wrong_round(evs: list[Event]) -> list[Event]:
    evs[_find(evs, lambda e: e["type"] == "model_requested", 1)]["round"] += 1
    return evs


def dishonest_coverage(evs: list[Event]) -> list[Event]:
    evs[-1]["coverage"] = "COMPLETE"
    return evs


def late_result_unexplained(evs: list[Event]) -> list[Event]:
    evs.append({"v": 1, "run": evs[0]["run"], "seq": 0, "t": evs[-1]["t"], "type": "late_result_discarded",
                "index": 0, "ordinal": 1, "tool": "lookup", "outcome": "ok", "reason": "run already terminal"})
    return renumber(evs)


def call_after_final(evs: list[Event]) -> list[Event]:
    i = _find(evs, lambda e: e["type"] == "model_final")
    e = evs[i]
    evs.insert(i + 1, {"v": 1, "run": e["run"], "seq": 0, "t": e["t"], "type": "call_validated", "via": "T14",
                       "step": e["step"] + 1, "index": 99, "round": e["round"], "callId": "late", "tool": "lookup",
                       "argsDigest": "sha256:0000000000000000", "binding": "fresh"})
    return renumber(evs)


def via_mismatch(evs: list[Event]) -> list[Event]:
    evs[_find(evs, lambda e: e["type"] == "call_advanced")]["via"] = "T07"
    return evs


def digest_mismatch(evs: list[Event]) -> list[Event]:
    i = _find(evs, lambda e: e["type"] == "model_proposed")
    evs[i]["proposal"][0]["argsDigest"] = "sha256:0123456789abcdef"
    return evs


def no_terminal(evs: list[Event]) -> list[Event]:
    evs.pop()
    return evs


def retry_missing(evs: list[Event]) -> list[Event]:
    """max_retries says 2; the run gave up after one retry."""
    return relabel(("limits", "maxRetries"), 2)(evs)


@dataclass(frozen=True)
class Mutation:
    name: str
    scenario: str
    mutate: Callable[[list[Event]], list[Event]]
    rule: str
    kind: str
    doc: str


MUTATIONS: tuple[Mutation, ...] = (
    Mutation("drop-result", "replay-conflict", drop_result, "R11", "answer-missing",
             "a request's result is never returned"),
    Mutation("reorder-results", "replay-conflict", reorder_results, "R11", "answers-out-of-order",
             "the second request's answer is delivered first"),
    Mutation("reexecute-replay", "replay-conflict", reexecute_replay, "R6", "replay-reexecuted",
             "a replay (same id, same content, stored success) executes again"),
    Mutation("reuse-for-conflict", "replay-conflict", reuse_for_conflict, "R7", "conflict-reused",
             "an id reused for other content is answered with the stored result"),
    Mutation("execute-after-budget", "budget", execute_after_budget, "R9", "executed-beyond-budget",
             "a call executes although the execution budget is used up"),
    Mutation("principal-mismatch", "replay-conflict", principal_mismatch, "R16", "untrusted-principal",
             "a tool receives another principal than the run's"),
    Mutation("event-after-terminal", "replay-conflict", event_after_terminal, "R26", "late-result-used",
             "a result is returned after the run's terminal event"),
    Mutation("executed-miscount", "failure-retry", executed_miscount, "R12", "executed-miscounted",
             "the terminal counters overstate the executions"),
    Mutation("abort-missed", "malformed", relabel(("mode",), "abort"), "R13", "abort-missed",
             "abort mode, but the run goes on after a violation"),
    Mutation("aborted-wrongly", "abort", relabel(("mode",), "continue"), "R14", "aborted-wrongly",
             "continue mode, but the run ends at a violation"),
    Mutation("limit-not-thrown", "budget", relabel(("onLimit",), "throw"), "R20", "limit-not-thrown",
             "limit policy throw, but a refused request does not end the run"),
    Mutation("asked-beyond-max-rounds", "replay-conflict", relabel(("limits", "maxRounds"), 2), "R19",
             "asked-beyond-max-rounds", "max_rounds is 2, the model is asked a third time"),
    Mutation("budget-relabelled", "replay-conflict", relabel(("limits", "maxExecutions"), 1), "R9",
             "executed-beyond-budget", "max_executions is 1, a second execution starts"),
    Mutation("unknown-tool-accepted", "replay-conflict", drop_tool("lookup"), "R3", "unknown-tool-accepted",
             "a tool outside the allow-list is validated and executed"),
    Mutation("invalid-arguments-accepted", "recorded",
             relabel(("tools",), lambda tools: [{**t, "inputSchema": {"type": "object", "properties": {
                 "q": {"type": "integer"}}, "required": ["q"]}} for t in tools]),
             "R4", "invalid-arguments-accepted", "recorded arguments fail the schema, yet the call is accepted"),
    Mutation("blank-id-accepted", "malformed", accept_blank_id, "R2", "malformed-call-accepted",
             "a call with a blank id is validated instead of answered INVALID_CALL"),
    Mutation("retried-beyond-budget", "failure-retry", relabel(("limits", "maxRetries"), 0), "R23",
             "retried-beyond-budget", "max_retries is 0, the tool is entered again"),
    Mutation("retry-missing", "failure-retry", retry_missing, "R23", "retry-missing",
             "max_retries is 2, the run gives up after one retry"),
    Mutation("failure-cached", "failure-retry", failure_cached, "R10", "failure-cached",
             "a failed execution's outcome is replayed instead of executing again"),
    Mutation("dedup-by-content", "dedup", dedup_by_content, "R8", "deduplicated-by-content",
             "a second id with the same content is answered with the first one's result"),
    Mutation("binding-lost", "replay-conflict", binding_lost, "R5", "unbound-id-treated-as-bound",
             "a fresh id is treated as already bound"),
    Mutation("failure-hidden", "failure-retry", failure_hidden, "R17", "failure-hidden",
             "a failed execution is answered as a success"),
    Mutation("wrong-round", "replay-conflict", wrong_round, "R18", "wrong-round",
             "the second model request is numbered 3"),
    Mutation("dishonest-coverage", "budget-throw", dishonest_coverage, "R22", "dishonest-coverage",
             "a truncated run reports COMPLETE coverage"),
    Mutation("late-result-unexplained", "replay-conflict", late_result_unexplained, "R26", "late-result-unexplained",
             "a late result is discarded although no execution was in flight"),
    Mutation("call-after-final", "replay-conflict", call_after_final, "R28", "call-after-final",
             "a call is validated after the model's final answer"),
    Mutation("via-mismatch", "replay-conflict", via_mismatch, "R27", "via-mismatch",
             "an event names the wrong spec transition"),
    Mutation("digest-mismatch", "recorded", digest_mismatch, "R27", "ledger-inconsistent",
             "recorded arguments do not match their digest"),
    Mutation("no-terminal", "replay-conflict", no_terminal, "R21", "run-not-terminated",
             "the run never reaches a terminal state"),
    Mutation("deadline-ignored", "deadline", relabel(("limits", "deadline"), 1.0), "R19", "executed-after-deadline",
             "the deadline passed, yet a call executes"),
    Mutation("asked-after-deadline", "deadline", relabel(("limits", "deadline"), 5.0), "R19", "asked-after-deadline",
             "the deadline passed, yet the model is asked again"),
)


def mutated(m: Mutation, scen: dict[str, list[Event]] | None = None) -> list[Event]:
    base = (scen or scenarios())[m.scenario]
    return m.mutate(copy.deepcopy(base))
