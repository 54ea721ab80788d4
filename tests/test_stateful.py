"""Hypothesis stateful test: random batches grown step by step; after every step the engine's
answer is checked against observable properties (computed here from the calls and the tools'
own execution log, not from the engine's bookkeeping), and every spec invariant is checked after
every machine transition.

Rules checked: R3, R4, R6, R7, R9, R10, R11, R12, R13, R14, R15, R16.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from loopspec import RunOutcome, run_batch
from loopspec.core.rules import FAILURE_CATEGORIES, canonical_json, violated_invariants
from tests.strategies import KNOWN_TOOLS, Recorder, budgets, calls, modes


def structurally_valid(call: Any) -> bool:
    """Checks 2–4 for the strategies' tools, written independently of the core."""
    if not isinstance(call, dict):
        return False
    cid, name, args = call.get("id"), call.get("name"), call.get("arguments")
    return (
        isinstance(cid, str) and cid.strip() != "" and name in KNOWN_TOOLS and isinstance(args, dict)
        and set(args) == {"text"} and isinstance(args["text"], str)
    )


def content(call: dict[str, Any]) -> tuple[str, str | None]:
    return call["name"], canonical_json(call["arguments"])


class BatchMachine(RuleBasedStateMachine):
    #: Check every spec invariant after every transition (switched off by the mutation test to
    #: prove the observational checks below catch broken engines on their own).
    CHECK_CORE_INVARIANTS = True

    @initialize(budget=budgets, mode=modes)
    def setup(self, budget: int, mode: str) -> None:
        self.calls: list[Any] = []
        self.budget = budget
        self.mode = mode
        self.fail_at: dict[int, str] = {}
        self.run()

    @rule(call=calls())
    def propose(self, call: dict[str, Any]) -> None:
        self.calls.append(call)
        self.run()

    @rule(data=st.data())
    def repeat_earlier_call(self, data: st.DataObject) -> None:
        """Replays and conflicts: repeat an earlier call verbatim or with other arguments."""
        if not self.calls:
            return
        earlier = data.draw(st.sampled_from(self.calls))
        if isinstance(earlier, dict) and data.draw(st.booleans()):
            earlier = dict(earlier, arguments={"text": data.draw(st.sampled_from(["x", "yy", "zzz"]))})
        self.calls.append(earlier)
        self.run()

    @rule(budget=budgets)
    def set_budget(self, budget: int) -> None:
        self.budget = budget
        self.run()

    @rule(mode=modes)
    def set_mode(self, mode: str) -> None:
        self.mode = mode
        self.run()

    @rule(n=st.integers(1, 5), category=st.sampled_from(FAILURE_CATEGORIES))
    def fail_execution(self, n: int, category: str) -> None:
        self.fail_at[n] = category
        self.run()

    # ----------------------------------------------------------------------------------
    def run(self) -> None:
        self.recorder = Recorder(self.fail_at)
        broken: list[tuple[str, list[str]]] = []

        def observe(state: Any, transition: Any) -> None:
            bad = violated_invariants(state) if self.CHECK_CORE_INVARIANTS else []
            if bad:
                broken.append((transition.id, bad))

        self.outcome: RunOutcome = run_batch(
            self.calls, tools=self.recorder.tools(), budget=self.budget, mode=self.mode,
            principal="tenant-a", observer=observe,
        )
        assert broken == [], f"spec invariants broken after transitions: {broken}"

    @invariant()
    def executed_within_budget_and_matches_reality(self) -> None:  # R9, R12
        o, log = self.outcome, self.recorder.log
        assert o.executed == len(log) <= self.budget
        assert len(o.executions) == len(log)
        for idx, entry in zip(o.executions, log, strict=True):
            call = self.calls[idx]
            assert entry["callId"] == call["id"] and entry["tool"] == call["name"]
            assert entry["arguments"] == call["arguments"]

    @invariant()
    def one_answer_per_request_in_order(self) -> None:  # R11, R13, R14
        o = self.outcome
        expected_len = o.aborted[0] if o.aborted else len(self.calls)
        assert len(o.results) == expected_len
        if self.mode == "continue":
            assert o.aborted is None
        for call, r in zip(self.calls, o.results, strict=False):
            cid = call.get("id") if isinstance(call, dict) else None
            assert r["id"] == (cid if isinstance(cid, str) else None)

    @invariant()
    def only_valid_calls_execute(self) -> None:  # R3, R4
        for idx in self.outcome.executions:
            assert structurally_valid(self.calls[idx])

    @invariant()
    def conflicts_never_reuse_and_replays_never_reexecute(self) -> None:  # R6, R7, R10
        o = self.outcome
        executed = set(o.executions)
        bound: dict[str, tuple[str, str | None]] = {}
        first_success: dict[str, Any] = {}
        log_by_index = dict(zip(o.executions, self.recorder.log, strict=True))
        for i, call in enumerate(self.calls):
            if o.aborted is not None and i > o.aborted[0]:
                break
            result = o.results[i] if i < len(o.results) else None
            if not structurally_valid(call):
                continue
            cid = call["id"]
            if cid in bound and bound[cid] != content(call):
                assert i not in executed, f"request {i}: conflicting id executed"
                assert result is None or result["status"] == "error", f"request {i}: conflict answered ok"
                continue
            bound.setdefault(cid, content(call))
            if cid in first_success:
                assert i not in executed, f"request {i}: replay re-executed"
                assert result is None or result == {"id": cid, "status": "ok", "output": first_success[cid]}
            elif i in executed and "output" in log_by_index[i]:
                first_success[cid] = log_by_index[i]["output"]
            elif result is not None and result["status"] == "ok":
                raise AssertionError(f"request {i}: ok without an execution or an earlier success (cached failure?)")

    @invariant()
    def errors_are_safe_and_identity_trusted(self) -> None:  # R15, R16
        text = json.dumps(self.outcome.to_json())
        assert "secret detail" not in text
        assert all(e["principal"] == "tenant-a" for e in self.recorder.log)


TestBatchMachine = BatchMachine.TestCase
TestBatchMachine.settings = settings(max_examples=150, stateful_step_count=25, deadline=None)
