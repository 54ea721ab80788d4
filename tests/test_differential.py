"""Differential test: the engine (a transitions machine built from loop.toml) and the pure
reference driver (core.drive, sequenced by core.decide) agree on random multi-round runs with
failures, retries, authorization, every limit and both policies (R0, R1, R18–R23)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopspec import Limits, Tool, ToolContext, ToolFailure, run_loop
from loopspec.core.rules import Outcome, RunConfig, RunState, drive, violated_invariants
from tests.strategies import KNOWN_TOOLS, TEXT_SCHEMA, calls

responses = st.one_of(
    st.lists(calls(), max_size=4).map(lambda cs: {"calls": cs}),
    st.just({"final": "done"}),
    st.just({"error": True}),
)
limit = st.one_of(st.none(), st.integers(0, 4))


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "model": draw(st.lists(responses, min_size=1, max_size=5)),
        "limits": Limits(max_rounds=draw(st.integers(0, 6)),  # bounded: the script repeats its last response
                         max_executions=draw(limit), max_tool_executions=draw(limit),
                         max_requests=draw(st.one_of(st.none(), st.integers(0, 10))),
                         max_retries=draw(st.integers(0, 2)),
                         deadline=draw(st.one_of(st.none(), st.floats(0, 12)))),
        "mode": draw(st.sampled_from(["abort", "continue"])),
        "on_limit": draw(st.sampled_from(["throw", "error-result"])),
        "failures": draw(st.dictionaries(st.integers(1, 8), st.sampled_from(
            ["DEPENDENCY_TEMPORARY", "DEPENDENCY_TEMPORARY", "NOT_FOUND_OR_NOT_ACCESSIBLE", "INTERNAL_ERROR"]), max_size=4)),
        "deny": draw(st.sampled_from([None, "x", "yy"])),
        "tick_model": draw(st.sampled_from([0.0, 1.0, 2.5])),
        "tick_attempt": draw(st.sampled_from([0.0, 1.0])),
    }


def outcome_of(n: int, args: dict[str, Any], sc: dict[str, Any]) -> Outcome:
    if n in sc["failures"]:
        return Outcome.failure(sc["failures"][n])
    return Outcome.success({"n": n, "len": len(args["text"])})


def via_engine(sc: dict[str, Any]) -> tuple[Any, ...]:
    clock = {"t": 0.0, "attempts": 0, "asked": 0}

    def model(turn: Any) -> Any:
        r = sc["model"][min(clock["asked"], len(sc["model"]) - 1)]
        clock["asked"] += 1
        clock["t"] += sc["tick_model"]
        if r.get("error"):
            raise RuntimeError("scripted")
        return r

    def fn(args: dict[str, Any], ctx: ToolContext) -> Any:
        clock["attempts"] += 1
        o = outcome_of(clock["attempts"], args, sc)
        clock["t"] += sc["tick_attempt"]
        if not o.ok:
            raise ToolFailure(o.category or "INTERNAL_ERROR")
        return o.output

    deny = sc["deny"]
    out = run_loop(model, tools=[Tool.define(n, fn, TEXT_SCHEMA) for n in KNOWN_TOOLS], limits=sc["limits"],
                   mode=sc["mode"], on_limit=sc["on_limit"], clock=lambda: clock["t"],
                   authorize=(lambda p, n, a: a.get("text") != deny) if deny else None)
    return (out.status, out.stop_reason, out.coverage, [(a.index, a.call_id, a.status, a.output, a.code, a.replayed)
            for a in out.answers], list(out.executions), out.aborted, out.counters["attempts"],
            out.counters["modelRequests"], out.counters["requests"])


def via_reference(sc: dict[str, Any]) -> tuple[Any, ...]:
    from loopspec.core.rules import parse_schema

    cfg = RunConfig(schemas={n: parse_schema(TEXT_SCHEMA) for n in KNOWN_TOOLS}, limits=sc["limits"],
                    mode=sc["mode"], on_limit=sc["on_limit"])
    clock = {"t": 0.0, "attempts": 0, "asked": 0}

    def model(s: RunState) -> Any:
        r = sc["model"][min(clock["asked"], len(sc["model"]) - 1)]
        clock["asked"] += 1
        clock["t"] += sc["tick_model"]
        return None if r.get("error") else r

    def outcome_for(s: RunState, ex: Any) -> Outcome:
        clock["attempts"] += 1
        o = outcome_of(clock["attempts"], s.current.arguments, sc)  # type: ignore[arg-type]
        clock["t"] += sc["tick_attempt"]
        return o

    deny = sc["deny"]
    broken: list[str] = []
    s = drive(RunState(cfg), model, outcome_for, tick=lambda s: clock["t"],
              authorize=(lambda s, r: r.arguments.get("text") != deny) if deny else (lambda s, r: True),  # type: ignore[union-attr]
              on_step=lambda s, label: broken.extend(violated_invariants(s)))
    assert broken == []
    return (s.status, s.stop_reason, s.coverage, [(a.index, a.call_id, a.status, a.output, a.code, a.replayed)
            for a in s.answers], [e.request for e in s.executions], s.aborted, s.executed + s.retries,
            s.model_requests, len(s.requests))


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_engine_and_reference_driver_agree(sc: dict[str, Any]) -> None:
    assert via_engine(sc) == via_reference(sc)
