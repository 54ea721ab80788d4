"""The engine's WriteExecutor under random requests, lost answers, rejections, lookup outages and crashes at
every crash point (in process: the crash hook raises), checked after every step against the invariants of
section 6 — the engine-side counterpart of the model checker (tests/test_writes_checker.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from loopspec.core import writes as w
from loopspec.engine.oplog import MemoryOperationLedger, Rejected, WriteExecutor, WriteHandler
from loopspec.spec.writes import load_write_spec

POINTS = [c.id for c in load_write_spec().crash_points]
SCHEMA = {"type": "object", "properties": {"ref": {"type": "string"}}, "required": ["ref"]}


class Crash(BaseException):
    """The process dies (BaseException: nothing in the executor may catch it)."""


class World:
    """The external system with an idempotency record or a lookup, scripted by the state machine."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.applied: dict[str, Any] = {}  # key -> result
        self.effects: dict[str, int] = {}  # business ref -> effects
        self.next: str = "applied"  # what the next send does
        self.lookup_down = False

    def send(self, arguments: Mapping[str, Any], key: str) -> Any:
        if self.mode == "record" and key in self.applied:
            return self.applied[key]
        how, self.next = self.next, "applied"
        if how == "rejected":
            raise Rejected("NOT_FOUND_OR_NOT_ACCESSIBLE")
        if how == "lost-before":
            raise TimeoutError
        self.applied[key] = {"ref": arguments["ref"], "n": len(self.applied)}
        self.effects[arguments["ref"]] = self.effects.get(arguments["ref"], 0) + 1
        if how == "lost-after":
            raise TimeoutError
        return self.applied[key]

    def lookup(self, key: str, arguments: Mapping[str, Any]) -> tuple[bool, Any]:
        if self.lookup_down:
            raise ConnectionError
        return key in self.applied, self.applied.get(key)


class Writes(RuleBasedStateMachine):
    def __init__(self, mode: str, variant: str = "correct") -> None:
        super().__init__()
        self.world = World(mode)
        self.ledger = MemoryOperationLedger()  # survives the "process": it stands for the durable file
        self.policy = w.CORRECT if variant == "correct" else w.VARIANTS[variant]
        self.crashes: list[str] = []  # the crash points at which the coming processes die, in order
        self.index = 0
        self.pending: tuple[str, dict[str, str]] | None = None  # a request the crash interrupted
        self.ex = self._boot()

    def _hook(self, point: str) -> None:
        if self.crashes and point == self.crashes[0]:
            self.crashes.pop(0)
            raise Crash

    def _boot(self) -> WriteExecutor:
        tool = w.WriteTool("put", ("ref",), reconcile=self.world.mode)  # type: ignore[arg-type]
        h = WriteHandler(tool, self.world.send, self.world.lookup, SCHEMA)
        return WriteExecutor(self.ledger, {"put": h}, "p", "run", budget=6, policy=self.policy, crash_hook=self._hook)

    def _call(self, cid: str, args: dict[str, str]) -> None:
        try:
            self.ex.call(self.index, cid, "put", args)
            self.index += 1
            self.pending = None
        except Crash:
            self.pending = (cid, args)
            while True:
                self.ex = self._boot()
                try:
                    self.ex.resume()
                    break
                except Crash:  # killed at the recovery's lookup (after-lookup): the next process recovers again
                    continue

    @precondition(lambda self: self.pending is None)
    @rule(cid=st.sampled_from(["c1", "c2", "c3"]), ref=st.sampled_from(["a", "b"]),
          how=st.sampled_from(["applied", "applied", "lost-after", "lost-before", "rejected"]),
          crash=st.none() | st.sampled_from(POINTS), again=st.booleans(), down=st.booleans())
    def request(self, cid: str, ref: str, how: str, crash: str | None, again: bool, down: bool) -> None:
        """``again``: after the crash, the next process dies too, at its first lookup (the recovery's, R43)."""
        self.world.next, self.world.lookup_down = how, down
        self.crashes = [crash, "after-lookup"] if crash and again else [crash] if crash else []
        self._call(cid, {"ref": ref})

    @precondition(lambda self: self.pending is not None)
    @rule(down=st.booleans())
    def retry_after_restart(self, down: bool) -> None:
        assert self.pending is not None
        self.world.lookup_down = down
        self._call(*self.pending)

    @invariant()
    def one_effect_per_key(self) -> None:
        assert all(n <= 1 for n in self.world.effects.values()), self.world.effects

    @invariant()
    def the_ledger_never_lies(self) -> None:
        for r in self.ledger.operations():
            if r.state == "confirmed":
                assert r.key in self.world.applied
            if r.state == "failed":
                assert r.key not in self.world.applied

    def teardown(self) -> None:
        self.crashes = []
        if self.pending is None:
            self.world.lookup_down = False
            out = self.ex.finish()
            assert out["status"] == "COMPLETED", out  # with the lookup back, nothing stays unknown


def _machine(mode: str, variant: str = "correct") -> type[RuleBasedStateMachine]:
    return type(f"Writes_{mode}_{variant}", (Writes,), {"__init__": lambda self: Writes.__init__(self, mode, variant)})


SETTINGS = settings(max_examples=60, stateful_step_count=12, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("mode", ["record", "lookup"])
def test_the_engine_keeps_the_write_invariants_under_random_crashes(mode: str) -> None:
    m = _machine(mode)
    m.TestCase.settings = SETTINGS
    m.TestCase().runTest()


@pytest.mark.parametrize("variant", ["key-by-call-id", "timeout-as-failure", "record-after-dispatch"])
def test_the_stateful_test_catches_the_broken_engines(variant: str) -> None:
    m = _machine("lookup", variant)
    m.TestCase.settings = settings(SETTINGS, max_examples=300, database=None, phases=[Phase.generate])  # no shrinking
    with pytest.raises(AssertionError):
        m.TestCase().runTest()


def test_the_executor_refuses_the_variant_its_ledger_cannot_record() -> None:
    """failed-before-lookup (R43) overwrites its premature `failed` with the lookup's answer (failed → confirmed,
    failed → unknown): no transition of writes.toml, so the operation ledger could not record it (R40). The model
    checker (tests/test_writes_checker.py) and examples/python --bug failed-before-lookup carry that variant."""
    world = World("lookup")
    h = WriteHandler(w.WriteTool("put", ("ref",), reconcile="lookup"), world.send, world.lookup, SCHEMA)
    with pytest.raises(ValueError, match=r"failed-before-lookup .*\(R40\)"):
        WriteExecutor(MemoryOperationLedger(), {"put": h}, "p", "run", policy=w.VARIANTS["failed-before-lookup"])
    for name, policy in w.VARIANTS.items():  # every other variant runs on it
        if name != "failed-before-lookup":
            WriteExecutor(MemoryOperationLedger(), {"put": h}, "p", "run", policy=policy)
