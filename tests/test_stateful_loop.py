"""Hypothesis stateful test of whole runs: a scripted model and tools with random failures are
grown step by step; after every step the run is re-executed and checked (R19–R26):
terminates within its budgets, exactly one terminal state, executions within every budget,
PARTIAL coverage whenever a limit stopped the run, no canary leaks, late results never apply."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from loopspec import Ledger, Limits, RunOutcome, Tool, ToolContext, ToolFailure, run_loop
from loopspec.core.rules import CODE_TABLE, FAILURE_CATEGORIES, violated_invariants
from tests.strategies import KNOWN_TOOLS, TEXT_SCHEMA, calls

CANARY = "CANARY-b41d"
small = st.integers(0, 4)


class LoopMachine(RuleBasedStateMachine):
    @initialize(rounds=st.integers(1, 5), execs=st.one_of(st.none(), small), tool=st.one_of(st.none(), small),
                requests=st.one_of(st.none(), st.integers(0, 8)), retries=st.integers(0, 2),
                mode=st.sampled_from(["abort", "continue"]), policy=st.sampled_from(["throw", "error-result"]))
    def setup(self, rounds: int, execs: int | None, tool: int | None, requests: int | None, retries: int,
              mode: str, policy: str) -> None:
        self.limits = Limits(max_rounds=rounds, max_executions=execs, max_tool_executions=tool,
                             max_requests=requests, max_retries=retries)
        self.mode, self.policy = mode, policy
        self.script: list[Any] = []
        self.failures: dict[int, str] = {}
        self.run()

    @rule(batch=st.lists(calls(), max_size=4))
    def model_proposes(self, batch: list[Any]) -> None:
        self.script.append(batch)
        self.run()

    @rule()
    def model_answers(self) -> None:
        self.script.append({"final": "done"})
        self.run()

    @rule()
    def model_fails(self) -> None:
        self.script.append(RuntimeError(CANARY))
        self.run()

    @rule(n=st.integers(1, 6), category=st.sampled_from(FAILURE_CATEGORIES))
    def tool_fails(self, n: int, category: str) -> None:
        self.failures[n] = category
        self.run()

    def run(self) -> None:
        attempts = {"n": 0}
        self.executions: list[str] = []

        def fn(args: dict[str, Any], ctx: ToolContext) -> Any:
            attempts["n"] += 1
            self.executions.append(ctx.principal)
            if attempts["n"] in self.failures:
                raise ToolFailure(self.failures[attempts["n"]], f"{CANARY} detail")
            if attempts["n"] % 3 == 0:
                raise RuntimeError(f"unexpected {CANARY}")  # an unclassified crash: INTERNAL_ERROR
            return {"len": len(args["text"]), "secret": CANARY}

        tools = [Tool.define(n, fn, TEXT_SCHEMA, fields=("len",)) for n in KNOWN_TOOLS]
        asked = {"n": 0}

        def model(turn: Any) -> Any:
            i = asked["n"]
            asked["n"] += 1
            r = self.script[i] if i < len(self.script) else {"final": "out of script"}
            if isinstance(r, BaseException):
                raise r
            return r

        self.ledger = Ledger()
        broken: list[Any] = []
        self.outcome: RunOutcome = run_loop(
            model, tools=tools, limits=self.limits, mode=self.mode, on_limit=self.policy, principal="p-1",
            ledger=self.ledger, observer=lambda s, t: broken.extend((t.id, v) for v in violated_invariants(s)),
        )
        self.asked = asked["n"]
        assert broken == [], broken

    @invariant()
    def terminates_once_within_budgets(self) -> None:
        o, lim = self.outcome, self.limits
        assert [e["type"] for e in self.ledger.events].count("run_terminal") == 1
        assert o.status and o.stop_reason
        assert self.asked == o.counters["modelRequests"] <= lim.max_rounds  # type: ignore[operator]
        assert len(self.executions) == o.counters["attempts"] == o.executed + o.counters["retries"]
        if lim.max_executions is not None:
            assert o.executed <= lim.max_executions
        if lim.max_tool_executions is not None:
            assert all(n <= lim.max_tool_executions for n in o.counters["perTool"].values())
        assert o.counters["retries"] <= o.executed * lim.max_retries

    @invariant()
    def coverage_is_honest(self) -> None:
        o = self.outcome
        limited = o.status == "TRUNCATED" or any(r.get("code") and CODE_TABLE[r["code"]][0] == "limit"
                                                 for r in o.results)
        if limited or o.status != "COMPLETED":
            assert o.coverage == "PARTIAL"
        else:
            assert o.coverage == "COMPLETE"

    @invariant()
    def no_canary_and_trusted_identity(self) -> None:
        assert CANARY not in json.dumps(self.outcome.to_json()) + self.ledger.to_ndjson()
        assert all(p == "p-1" for p in self.executions)

    @invariant()
    def no_late_results(self) -> None:
        assert not any(e["type"] == "late_result_discarded" for e in self.ledger.events)
        assert self.ledger.events[-1]["type"] == "run_terminal"


TestLoopMachine = LoopMachine.TestCase
TestLoopMachine.settings = settings(max_examples=120, stateful_step_count=15, deadline=None)
