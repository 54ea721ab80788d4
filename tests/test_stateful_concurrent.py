"""Hypothesis stateful test of the concurrent path (section 5 of SPEC.md): random batches grown step
by step, run with executions in the background, completing in an order Hypothesis chooses (the
engine's deterministic schedule). After every step:

* every spec invariant holds after every machine transition (the observer);
* the observable properties of tests/test_stateful.py hold (they are the same rules);
* R31, R32, R34 — the concurrent run answers exactly as the sequential run of the same calls does:
  the same results in the same order, the same abort point and terminal status, whatever the
  completion order; it may only have started more executions, each after the abort point;
* R29, R30 — never more than ``max_concurrency`` executions in flight, a barrier never with
  another, never two of one call id (read from the ledger, apart from the core's bookkeeping).

Rules checked: R11, R12, R13, R29, R30, R31, R32, R33, R34.
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, rule

from loopspec import RunOutcome, Tool, run_batch
from loopspec.core.rules import violated_invariants
from tests.strategies import KNOWN_TOOLS, TEXT_SCHEMA, Recorder, budgets, modes
from tests.test_stateful import BatchMachine

#: ``echo`` is read-only (its calls overlap); ``length`` is not (a barrier under the default policy).
READ_ONLY = {"echo"}


def recorded_tools(rec: Recorder) -> list[Tool]:
    return [Tool.define(n, lambda a, c, n=n: rec._run(n, a, c), TEXT_SCHEMA,
                        annotations={"readOnlyHint": n in READ_ONLY}) for n in KNOWN_TOOLS]


class Schedule:
    """The completion order, from Hypothesis' integers: when the run may take up the next request
    it first asks whether a result has arrived (``must`` false: 0 means none yet), when it waits it
    must be given one."""

    def __init__(self, picks: list[int]) -> None:
        self.picks = list(picks)
        self.asked = 0

    def __call__(self, pending: tuple[int, ...], must: bool) -> int | None:
        i = self.picks[self.asked] if self.asked < len(self.picks) else 0
        self.asked += 1
        if must:
            return pending[i % len(pending)]
        i %= len(pending) + 1
        return None if i == 0 else pending[i - 1]


class ConcurrentBatchMachine(BatchMachine):
    @initialize(budget=budgets, mode=modes, slots=st.integers(2, 4), picks=st.lists(st.integers(0, 7), max_size=30))
    def setup_concurrent(self, budget: int, mode: str, slots: int, picks: list[int]) -> None:
        self.calls = []
        self.budget = budget
        self.mode = mode
        self.fail_at = {}
        self.slots = slots
        self.overlap = "read-only"
        self.picks = picks
        self.run()

    # BatchMachine's own initialize rule would set up a sequential run first; the stateful runner
    # calls every @initialize rule, so that one is neutralised here
    def setup(self, budget: int, mode: str) -> None:  # type: ignore[override]
        pass

    @rule(slots=st.integers(1, 4))
    def set_slots(self, slots: int) -> None:
        self.slots = slots
        self.run()

    @rule(overlap=st.sampled_from(["read-only", "idempotent", "all"]))
    def set_overlap(self, overlap: str) -> None:
        self.overlap = overlap
        self.run()

    @rule(picks=st.lists(st.integers(0, 7), max_size=30))
    def reschedule(self, picks: list[int]) -> None:
        """Another completion order for the same calls."""
        self.picks = picks
        self.run()

    def run(self) -> None:
        if not hasattr(self, "slots"):
            return
        self.recorder = Recorder(self.fail_at)
        broken: list[tuple[str, list[str]]] = []

        def observe(state: Any, transition: Any) -> None:
            bad = violated_invariants(state)
            if bad:
                broken.append((transition.id, bad))

        self.outcome: RunOutcome = run_batch(
            self.calls, tools=recorded_tools(self.recorder), budget=self.budget, mode=self.mode,
            principal="tenant-a", observer=observe, max_concurrency=self.slots, overlap=self.overlap, run_id="r",
            schedule=Schedule(self.picks),
        )
        assert broken == [], f"spec invariants broken after transitions: {broken}"
        seq_rec = Recorder(self.fail_at)
        self.sequential = run_batch(self.calls, tools=recorded_tools(seq_rec), budget=self.budget, mode=self.mode,
                                    principal="tenant-a", run_id="r")

    @invariant()
    def answers_are_the_sequential_runs(self) -> None:  # R31, R32, R34
        if not hasattr(self, "slots"):
            return
        o, seq = self.outcome, self.sequential
        assert o.results == seq.results
        assert (o.status, o.stop_reason, o.aborted, o.coverage) == (seq.status, seq.stop_reason, seq.aborted, seq.coverage)
        assert o.executions[: len(seq.executions)] == seq.executions
        extra = o.executions[len(seq.executions):]
        assert not extra or (o.aborted is not None and all(i > o.aborted[0] for i in extra))

    @invariant()
    def overlap_follows_the_hints(self) -> None:  # R29, R30, R33
        if not hasattr(self, "slots"):
            return
        assert self.outcome.ledger is not None
        running: dict[int, str] = {}
        barriers = {n for n in KNOWN_TOOLS if n not in READ_ONLY} if self.overlap != "all" else set()
        ids = {}
        for ev in self.outcome.ledger.events:
            if ev["type"] == "execution_started" and ev["attempt"] == 1:
                running[ev["index"]] = ev["tool"]
                ids[ev["index"]] = ev["callId"]
                assert len(running) <= self.slots
                if len(running) > 1:
                    assert not set(running.values()) & barriers, running
                    flying_ids = [ids[i] for i in running]
                    assert len(flying_ids) == len(set(flying_ids))
            elif ev["type"] in ("execution_finished", "execution_abandoned"):
                running.pop(ev["index"], None)


TestConcurrentBatchMachine = ConcurrentBatchMachine.TestCase
TestConcurrentBatchMachine.settings = settings(max_examples=120, stateful_step_count=20, deadline=None)
