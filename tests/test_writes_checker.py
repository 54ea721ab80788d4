"""SPEC.md section 6: the pure core (loopspec.core.writes) and its model checker (loopspec.checker.writes).

The bounds and the committed figures are in spec/writes-bounds.toml; the vectors in
spec/conformance/writes.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopspec.checker.writes import (
    Scope,
    explore_writes,
    invariants_violated,
    load_write_scopes,
    replay_labels,
    summary,
)
from loopspec.core import writes as w
from loopspec.spec.writes import load_write_spec

ROOT = Path(__file__).resolve().parents[1]
SCOPES = load_write_scopes()
VECTORS = json.loads((ROOT / "spec" / "conformance" / "writes.json").read_text(encoding="utf-8"))


def test_the_core_agrees_with_writes_toml() -> None:
    assert w.check_against_spec(load_write_spec()) == []


def test_op_step_follows_the_machine_and_refuses_the_rest() -> None:
    assert w.op_step("absent", "record_intent") == "intent"
    assert w.op_step("failed", "record_intent") == "intent"  # a new attempt of a definitely failed key
    with pytest.raises(w.OpError, match="record_intent cannot fire from 'confirmed'"):
        w.op_step("confirmed", "record_intent")  # R44: a confirmed key is never dispatched again
    with pytest.raises(w.OpError):
        w.op_step("unknown", "mark_dispatched")  # R43: never re-sent before reconciliation


def test_R37_the_key_is_named_arguments_and_principal_never_the_call_id() -> None:
    tool = w.WriteTool("create_order", ("order_ref",))
    k = w.idempotency_key(tool, {"order_ref": "A-1", "amount": 5}, "alice")
    assert k == w.idempotency_key(tool, {"order_ref": "A-1", "amount": 7}, "alice")  # only key arguments count
    assert k != w.idempotency_key(tool, {"order_ref": "A-2"}, "alice")
    assert k != w.idempotency_key(tool, {"order_ref": "A-1"}, "bob")  # the trusted principal is part of it
    assert k != w.idempotency_key(w.WriteTool("refund", ("order_ref",)), {"order_ref": "A-1"}, "alice")
    run = w.WriteTool("create_order", ("order_ref",), scope="run")
    assert w.idempotency_key(run, {"order_ref": "A-1"}, "alice", "r1") != w.idempotency_key(
        run, {"order_ref": "A-1"}, "alice", "r2")
    with pytest.raises(ValueError, match="needs the run id"):
        w.idempotency_key(run, {"order_ref": "A-1"}, "alice")
    with pytest.raises(ValueError, match="key arguments missing: order_ref"):
        w.idempotency_key(tool, {"amount": 1}, "alice")


def test_R36_R37_R38_write_definitions_are_checked() -> None:
    schema = {"type": "object", "properties": {"order_ref": {"type": "string"}, "note": {"type": "string"}},
              "required": ["order_ref"]}
    assert w.write_tool_problems(w.WriteTool("t", ("order_ref",)), schema) == []
    assert "call id is not a key" in w.write_tool_problems(w.WriteTool("t", ()), schema)[0]
    assert "must be a required string or integer" in w.write_tool_problems(w.WriteTool("t", ("note",)), schema)[0]
    assert "readOnlyHint" in w.write_tool_problems(w.WriteTool("t", ("order_ref",)), schema, {"readOnlyHint": True})[0]
    assert "reconcile must be" in w.write_tool_problems(w.WriteTool("t", ("order_ref",), "maybe"), schema)[0]  # type: ignore[arg-type]


def test_R42_a_timeout_is_unknown_never_a_failure() -> None:
    assert w.on_response("lost") == "lose_outcome"
    assert w.on_response("rejected") == "reject"
    assert w.on_request("unknown", "lookup") == "reconcile"
    assert w.on_request("unknown", "none") == "answer_unknown"
    assert w.on_request("confirmed", "none") == "replay"
    assert w.on_recovery("dispatched") == "lose_outcome"


FAST = [n for n, s in SCOPES.items() if not s.slow]
SLOW = [n for n, s in SCOPES.items() if s.slow]


@pytest.mark.parametrize("name", FAST)
def test_the_correct_policy_proves_every_invariant_within_the_bounds(name: str) -> None:
    sc = SCOPES[name]
    r = explore_writes(sc)
    assert r.violation is None, (r.violation, r.path)
    assert r.figures() == {k: v for k, v in sc.expected.items() if k != "variants"}


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_larger_bounds(name: str) -> None:
    sc = SCOPES[name]
    r = explore_writes(sc)
    assert r.violation is None, (r.violation, r.path)
    assert r.figures() == {k: v for k, v in sc.expected.items() if k != "variants"}


VARIANT_CASES = [(n, v) for n in FAST for v in SCOPES[n].expected.get("variants", {})]


@pytest.mark.parametrize(("name", "variant"), VARIANT_CASES)
def test_every_broken_variant_is_caught_with_a_shortest_counterexample(name: str, variant: str) -> None:
    sc = SCOPES[name]
    want = sc.expected["variants"][variant]
    r = explore_writes(sc, variant)
    assert r.violation == want["violated"] and r.path is not None and len(r.path) == want["length"], (r.violation, r.path)
    end = replay_labels(sc, r.path, variant)  # the counterexample is data that replays
    assert invariants_violated(end, sc) == want["violated"]
    with pytest.raises(ValueError):  # and the correct policy cannot follow it to the end
        assert not invariants_violated(replay_labels(sc, r.path), sc)
        raise ValueError("followed without a violation")


def test_every_variant_of_the_spec_is_caught_in_some_scope() -> None:
    caught = {v for n in FAST for v in SCOPES[n].expected.get("variants", {})}
    assert caught == {v.id for v in load_write_spec().variants}


def test_R43_nothing_is_recorded_between_a_lookup_and_its_answer() -> None:
    for st in w.OP_STATES:
        for recovery in (False, True):
            assert w.before_lookup(st, recovery=recovery) is None  # the correct policy: only the answer is recorded
            bad = w.before_lookup(st, w.VARIANTS["failed-before-lookup"], recovery=recovery)
            assert bad == ("reconcile_not_applied" if recovery and st == "unknown" else None)
    assert w.op_step("unknown", "reconcile_not_applied") == "failed"


def test_R43_a_failed_recorded_before_the_lookup_answers_survives_a_crash_and_the_write_is_sent_again() -> None:
    """The variant's first symptom is the `failed` it records for an applied key (INV-W-LEDGER-TRUTH, 8 steps);
    its consequence needs the crash between the lookup's question and its answer: the next process finds the key
    failed and sends it again — a second effect without a record, a blind re-send with one."""
    script = ["request c1(a)", "record intent", "mark dispatched", "send: applied, answered", "crash", "restart",
              "recover a: lose_outcome", "lookup a asked; record reconcile_not_applied before its answer",
              "crash", "restart", "recovered", "record intent", "mark dispatched"]
    r = explore_writes(SCOPES["lookup"], "failed-before-lookup", only=frozenset({"INV-W-ONE-EFFECT"}))
    assert r.violation == ["INV-W-ONE-EFFECT"] and r.path == [*script, "send: applied, answered"]
    r = explore_writes(SCOPES["record"], "failed-before-lookup", only=frozenset({"INV-W-NO-BLIND-REDISPATCH"}))
    assert r.violation == ["INV-W-NO-BLIND-REDISPATCH"] and r.path == [*script, "send: already applied, answered"]
    # without the crash at the lookup, the answer overwrites the premature `failed`: nothing is sent again
    end = replay_labels(SCOPES["lookup"], [*script[:8], "lookup a: applied", "recovered", "answer from ledger"],
                        "failed-before-lookup")
    assert summary(end)["operations"] == {"a": "confirmed"} and invariants_violated(end, SCOPES["lookup"]) == []
    with pytest.raises(ValueError, match="not possible here"):  # the correct policy asks and answers in one step
        replay_labels(SCOPES["lookup"], script[:8])


def test_a_scope_that_cannot_catch_a_variant_says_why_and_indeed_does_not_catch_it() -> None:
    uncaught = [(n, v) for n in FAST for v in SCOPES[n].uncaught]
    assert uncaught == [("none", "failed-before-lookup")]  # with `none` nothing is looked up
    for n, v in uncaught:
        assert v in w.VARIANTS and v not in SCOPES[n].expected["variants"]
        assert explore_writes(SCOPES[n], v).violation is None


@pytest.mark.parametrize("variant", ["record-after-dispatch", "timeout-as-failure", "retry-without-lookup",
                                     "failed-before-lookup"])
def test_without_an_idempotency_record_each_variant_applies_a_write_twice(variant: str) -> None:
    """Their first symptom is a broken rule; with a lookup-only system the consequence is a double effect."""
    r = explore_writes(SCOPES["lookup"], variant, only=frozenset({"INV-W-ONE-EFFECT"}))
    assert r.violation == ["INV-W-ONE-EFFECT"] and r.path is not None
    assert sum(label.startswith("send: applied") for label in r.path) == 2


def test_a_record_masks_the_double_effect_of_a_blind_retry_but_the_checker_still_catches_it() -> None:
    r = explore_writes(SCOPES["record"], "retry-without-lookup", only=frozenset({"INV-W-ONE-EFFECT"}))
    assert r.violation is None  # deduplicated by the external system...
    assert explore_writes(SCOPES["record"], "retry-without-lookup").violation == ["INV-W-NO-BLIND-REDISPATCH"]


# -- conformance vectors -------------------------------------------------------------------------------


def _scope(case: dict) -> Scope:  # type: ignore[type-arg]
    return Scope("vector", reconcile=case["reconcile"], ids=("c1", "c2", "c3"), max_requests=3,
                 budget=case["budget"], crashes=2, outages=1)


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda c: c["id"])
def test_write_vector(case: dict) -> None:  # type: ignore[type-arg]
    sc = _scope(case)
    end = replay_labels(sc, case["steps"])
    assert summary(end) == case["expect"]
    assert invariants_violated(end, sc) == []


def test_write_vectors_cover_section_6_and_can_fail() -> None:
    cited = {r for c in VECTORS["cases"] for r in c["rules"]}
    section6 = {f"R{n}" for n in range(36, 47)}
    assert section6 - cited <= {"R36"}, sorted(section6 - cited)  # R36: tool definitions, tested above
    case = json.loads(json.dumps(VECTORS["cases"][1]))
    case["expect"]["answers"][0] = "failed"  # a timeout reported as a failure
    assert summary(replay_labels(_scope(case), case["steps"])) != case["expect"]


# -- loopspec verify --writes ----------------------------------------------------------------------------


def test_cli_verify_writes_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from loopspec.cli import main

    assert main(["verify", "--writes", "--scope", "none"]) == 0
    assert "every invariant of section 6 holds" in capsys.readouterr().out
    assert main(["verify", "--writes", "--scope", "lookup", "--variant", "record-after-dispatch",
                 "--format", "json", "--out", str(tmp_path)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["runs"][0]["violated"] == ["INV-W-DURABLE-BEFORE-SEND"]
    assert json.loads((tmp_path / "verify-writes.json").read_text(encoding="utf-8")) == report
    assert main(["verify", "--writes", "--scope", "record", "--mutants"]) == 0  # every variant caught
    capsys.readouterr()
    assert main(["verify", "--writes", "--scope", "none", "--mutants"]) == 0  # but the one it cannot catch
    assert "failed-before-lookup]: 9,049 states" in capsys.readouterr().out.split("not caught here, as expected")[0]
    assert main(["verify", "--writes", "--variant", "nope"]) == 2
    assert "no write variant 'nope'" in capsys.readouterr().err
