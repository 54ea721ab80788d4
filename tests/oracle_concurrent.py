"""Concurrent runs (SPEC.md section 5) for the oracle's golden corpus and tests.

Must-pass ledgers are reference-engine runs with ``max_concurrency`` > 1 whose completion order is
chosen by a schedule (deterministic: fixed run ids, an injected clock, durations zeroed). Must-fail
ledgers are runs of the same engine with one of the model checker's race mutants installed
(``loopspec.checker.mutants``: the buggy core records what a buggy implementation does), and two
configuration rewrites (a smaller ``max_concurrency``, a tool that loses its read-only hint) that
turn a conforming interleaving into one the recorded configuration forbids.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from loopspec import CancelToken, Ledger, Limits, Tool, ToolFailure, run_batch, run_loop
from tests.oracle_mutations import engine_events, interleave, ndjson

Event = dict[str, Any]
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
READ_ONLY = {"readOnlyHint": True}


def call(i: int, q: str | None = None, name: str = "look", cid: str | None = None) -> dict[str, Any]:
    return {"id": cid or f"c{i}", "name": name, "arguments": {"q": q if q is not None else str(i)}}


def tools(*, fail: set[str] = frozenset(), temporary: set[str] = frozenset(),  # type: ignore[assignment]
          on_call: Callable[[str], None] | None = None) -> list[Tool]:
    seen: dict[str, int] = {}

    def look(args: dict[str, Any], ctx: Any) -> Any:
        q = args["q"]
        seen[q] = seen.get(q, 0) + 1
        if on_call is not None:
            on_call(q)
        if q in fail:
            raise ToolFailure("INTERNAL_ERROR")
        if q in temporary and seen[q] == 1:
            raise ToolFailure("DEPENDENCY_TEMPORARY")
        return {"q": q}

    return [Tool.define("look", look, SCHEMA, annotations=READ_ONLY),
            Tool.define("write", lambda a, c: {"written": a["q"]}, SCHEMA)]


def order(perm: tuple[int, ...], before: Callable[[tuple[int, ...]], None] | None = None) -> Any:
    """Complete the executions in the order of ``perm`` (request indices), a result arriving only
    when the run waits; ``before`` sees the pending requests first (to cancel, to move the clock)."""
    def schedule(pending: tuple[int, ...], must: bool) -> int | None:
        if before is not None:
            before(pending)
        if not must:
            return None
        return next(i for i in perm if i in pending)

    return schedule


def _clock(now: dict[str, float]) -> Callable[[], float]:
    def clock() -> float:
        now["t"] += 0.25
        return now["t"]

    return clock


def batch(run_id: str, calls: list[Any], perm: tuple[int, ...], *, budget: int = 3, mode: str = "continue",
          max_concurrency: int = 3, fail: set[str] = frozenset(), overlap: str | None = None) -> list[Event]:  # type: ignore[assignment]
    led = Ledger()
    run_batch(calls, tools=tools(fail=fail), budget=budget, mode=mode, principal="alice", ledger=led, run_id=run_id,
              max_concurrency=max_concurrency, schedule=order(perm), overlap=overlap)
    return engine_events(led)


def loop(run_id: str, script: list[Any], perm: tuple[int, ...], *, max_concurrency: int = 3,
         temporary: set[str] = frozenset(), limits: Limits | None = None,  # type: ignore[assignment]
         before: Callable[[tuple[int, ...]], None] | None = None, cancel: CancelToken | None = None,
         on_call: Callable[[str], None] | None = None, now: dict[str, float] | None = None) -> list[Event]:
    led = Ledger()
    now = now if now is not None else {"t": 0.0}
    run_loop(lambda turn: script[turn.round - 1], tools=tools(temporary=temporary, on_call=on_call),
             limits=limits or Limits(max_rounds=4, max_executions=8, max_requests=16, max_retries=1, deadline=60.0),
             mode="continue", principal="alice", clock=_clock(now), ledger=led, run_id=run_id,
             max_concurrency=max_concurrency, schedule=order(perm, before), cancel=cancel)
    return engine_events(led)


def _cancelled(run_id: str) -> list[Event]:
    token = CancelToken()

    def before(pending: tuple[int, ...]) -> None:
        if len(pending) == 3:
            token.cancel()

    return loop(run_id, [[call(0), call(1), call(2)], {"final": "done"}], (0, 1, 2), before=before, cancel=token)


def _deadline(run_id: str) -> list[Event]:
    now = {"t": 0.0}

    def on_call(q: str) -> None:
        if q == "1":
            now["t"] = 100.0  # the clock passes the deadline while both calls are in flight

    return loop(run_id, [[call(0), call(1)], {"final": "done"}], (0, 1), on_call=on_call, now=now,
                limits=Limits(max_rounds=4, max_executions=8, max_requests=16, max_retries=1, deadline=50.0))


def scenarios() -> dict[str, list[Event]]:
    """Conforming concurrent runs, one per point of section 5."""
    three = [call(0), call(1), call(2)]
    return {
        # R32: answers in request order whatever the completion order
        "reverse": batch("conc-reverse", three, (2, 1, 0)),
        # R32: a sibling's failure loses no answer (continue mode)
        "sibling-fails": batch("conc-sibling-fails", three, (1, 2, 0), fail={"1"}),
        # R34: abort at the lowest failing index; the later failure arrived first
        "abort-lowest": batch("conc-abort-lowest", three, (2, 0, 1), mode="abort", fail={"0", "2"}),
        # R34: the abort point known, the run ends; a later execution still in flight is abandoned
        "abort-abandons": batch("conc-abort-abandons", three, (0, 1, 2), mode="abort", fail={"0"}),
        # R33: the same id again while its execution runs waits, then replays
        "same-id-waits": batch("conc-same-id-waits", [call(0, "a", cid="x"), call(1), call(2, "a", cid="x")],
                               (1, 0, 2)),
        # R30: a non-read-only call is a barrier
        "barrier": batch("conc-barrier", [call(0), call(1, name="write"), call(2)], (0, 1, 2)),
        # R29, R31: two slots; the budget reserved at take-up
        "slots-and-budget": batch("conc-slots-and-budget", [call(0), call(1), call(2), call(3)], (1, 0, 2, 3),
                                  budget=3, max_concurrency=2),
        # R23 within R32: a temporary failure is retried within its execution, in flight again
        "retry-in-flight": loop("conc-retry-in-flight", [[call(0), call(1), call(2)], [call(3, "1", cid="c1")],
                                                         {"final": "done"}], (0, 2, 1), temporary={"0", "2"}),
        # R35: cancellation reaches every running call
        "cancelled": _cancelled("conc-cancelled"),
        # R35: the deadline passes while the run waits: it stops waiting
        "deadline-waiting": _deadline("conc-deadline-waiting"),
    }


# -- must-fail ---------------------------------------------------------------------------------------


def _with_mutant(name: str, make: Callable[[], list[Event]]) -> list[Event]:
    from loopspec.checker.mutants import by_name
    from loopspec.checker.semantics import installed

    with installed(by_name(name).semantics):
        return make()


def _config(evs: list[Event], edit: Callable[[dict[str, Any]], None]) -> list[Event]:
    out = copy.deepcopy(evs)
    edit(out[0]["config"])
    return out


def _lose_read_only(cfg: dict[str, Any]) -> None:
    for t in cfg["tools"]:
        if t["name"] == "look":
            t.pop("annotations", None)
    cfg["concurrency"]["barriers"] = ["look", "write"]


#: name -> (rule, doc, ledger maker). The race mutants are the model checker's (same names).
FAILURES: dict[str, tuple[str, str, Callable[[], list[Event]]]] = {
    "budget-check-then-act": (
        "R31", "the budget counts executions that have returned: a take-up while one runs passes a budget of one",
        lambda: _with_mutant("budget-check-then-act", lambda: batch(
            "conc-budget-check-then-act", [call(0), call(1), call(2)], (0, 1, 2), budget=1))),
    "answers-in-completion-order": (
        "R32", "answers committed as results arrive, in completion order",
        lambda: _with_mutant("answers-in-completion-order", lambda: batch(
            "conc-answers-in-completion-order", [call(0), call(1), call(2)], (2, 1, 0)))),
    "sibling-failure-drops-answers": (
        "R32", "a failure cancels the siblings still running: their answers are lost",
        lambda: _with_mutant("sibling-failure-drops-answers", lambda: batch(
            "conc-sibling-failure-drops-answers", [call(0), call(1), call(2)], (1, 0, 2), fail={"1"}))),
    "in-flight-replay-executes-twice": (
        "R33", "the same id taken up while its execution runs: executed twice",
        lambda: _with_mutant("in-flight-replay-executes-twice", lambda: batch(
            "conc-in-flight-replay-executes-twice", [call(0, "a", cid="x"), call(1, "a", cid="x")], (0, 1)))),
    "abort-at-first-failure-in-time": (
        "R34", "abort mode ends the run at the first failure to arrive, an earlier request still running",
        lambda: _with_mutant("abort-at-first-failure-in-time", lambda: batch(
            "conc-abort-at-first-failure-in-time", [call(0), call(1), call(2)], (1, 0, 2), mode="abort",
            fail={"1"}))),
    "cancellation-not-propagated": (
        "R35", "cancellation abandons only the execution started last",
        lambda: _with_mutant("cancellation-not-propagated", lambda: _cancelled("conc-cancellation-not-propagated"))),
    "concurrency-bound-exceeded": (
        "R29", "a run of three executions in flight, recorded with maxConcurrency 2",
        lambda: _config(batch("conc-concurrency-bound-exceeded", [call(0), call(1), call(2)], (0, 1, 2)),
                        lambda c: c["concurrency"].update(maxConcurrency=2))),
    "barrier-overlapped": (
        "R30", "overlapping calls to a tool recorded without its read-only hint (so a barrier)",
        lambda: _config(batch("conc-barrier-overlapped", [call(0), call(1)], (1, 0)), _lose_read_only)),
}


def cases() -> dict[str, tuple[str, int, list[str], str]]:
    """The corpus files: name -> (text, exit code, rules, doc)."""
    out = {"ledger-concurrent-pass.ndjson": (
        ndjson(interleave(list(scenarios().values()))), 0, [],
        "concurrent reference-engine runs (max_concurrency > 1, completion order chosen by a schedule), one per "
        "point of SPEC.md section 5, interleaved")}
    for name, (rule, doc, make) in FAILURES.items():
        out[f"ledger-concurrent-fail-{name}.ndjson"] = (ndjson(make()), 1, [rule], doc)
    return out


# -- telemetry: executions that overlap and complete out of order -------------------------------------


def _edit_spans(text: str, edit: Callable[[dict[str, Any]], None]) -> str:
    out = []
    for line in text.splitlines():
        d = json.loads(line)
        for rs in d["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for sp in ss["spans"]:
                    edit(sp)
        out.append(json.dumps(d, separators=(",", ":")))
    return "\n".join(out) + "\n"


def _attr(sp: dict[str, Any], key: str) -> Any:
    return next((a["value"] for a in sp.get("attributes", []) if a["key"] == key), None)


def _tool_span(sp: dict[str, Any], cid: str | None = None) -> bool:
    op = _attr(sp, "gen_ai.operation.name")
    if op is None or op.get("stringValue") != "execute_tool":
        return False
    got = _attr(sp, "gen_ai.tool.call.id")
    return cid is None or (got is not None and got.get("stringValue") == cid)


def telemetry_cases(golden: Any) -> dict[str, tuple[str, int, list[str], str]]:
    """Real recordings (tests/telemetry_recordings.py) with their span times edited: pydantic-ai's two
    overlapping execute_tool spans made to complete in reverse order (conforming: the answers are still
    in request order), then its next model call given the answers in completion order (R32); LangGraph's
    two executions of one call id made to overlap (R33)."""
    pyd = (golden / "rec-pydantic-ai-pass.otlp.jsonl").read_text(encoding="utf-8")
    ends: dict[str, str] = {}

    def collect(sp: dict[str, Any]) -> None:
        if _tool_span(sp):
            ends[_attr(sp, "gen_ai.tool.call.id")["stringValue"]] = sp["endTimeUnixNano"]

    _edit_spans(pyd, collect)

    def reverse_ends(sp: dict[str, Any]) -> None:
        if _tool_span(sp, "call_1"):
            sp["endTimeUnixNano"] = ends["call_2"]
        elif _tool_span(sp, "call_2"):
            sp["endTimeUnixNano"] = str(int(ends["call_1"]) - 1)

    reversed_ = _edit_spans(pyd, reverse_ends)

    def answers_as_completed(sp: dict[str, Any]) -> None:
        v = _attr(sp, "gen_ai.input.messages")
        if v is None:
            return
        msgs = json.loads(v["stringValue"])
        for m in msgs:
            parts = m.get("parts", [])
            if len(parts) == 2 and all(p.get("type") == "tool_call_response" for p in parts):
                m["parts"] = parts[::-1]
        v["stringValue"] = json.dumps(msgs, separators=(",", ":"))

    lg = (golden / "rec-langgraph-fail-same-id-twice.otlp.jsonl").read_text(encoding="utf-8")
    first: list[dict[str, Any]] = []

    def overlap(sp: dict[str, Any]) -> None:
        if _attr(sp, "gen_ai.operation.name") is not None and \
                _attr(sp, "gen_ai.operation.name").get("stringValue") == "execute_tool":
            if first:
                sp["startTimeUnixNano"] = str(int(first[0]["endTimeUnixNano"]) - 1000)
            else:
                first.append(sp)

    return {
        "otlp-concurrent-pass-completion-order.otlp.jsonl": (
            reversed_, 0, [], "pydantic-ai's two overlapping tool executions completing in reverse order; the next "
                              "model call gets the answers in request order (span times edited)"),
        "otlp-concurrent-fail-answers-in-completion-order.otlp.jsonl": (
            _edit_spans(reversed_, answers_as_completed), 1, ["R32"],
            "the same run whose next model call gets the answers in completion order"),
        "otlp-concurrent-fail-in-flight-id.otlp.jsonl": (
            _edit_spans(lg, overlap), 1, ["R33"],
            "LangGraph's two executions of one call id, made to overlap: the second starts while the first runs"),
    }
