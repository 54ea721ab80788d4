"""Unit tests of the pure core: canonical content, the schema subset, the check order (R1–R10)."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import pytest

from loopspec import load_spec
from loopspec.core.rules import (
    EXECUTE,
    GUARDS,
    REJECT,
    REPLAY,
    Limits,
    Outcome,
    RunConfig,
    RunState,
    ToolDefinitionError,
    ToolSchema,
    admit_pending,
    answer_failure,
    arguments_valid,
    begin_execution,
    begin_retry,
    bind_id,
    canonical_json,
    classify_binding,
    content_key,
    decide,
    drive,
    escalates,
    parse_schema,
    receive_response,
    record_outcome,
    retry_due,
    violated_invariants,
    well_formed,
    within,
)

TEXT = parse_schema({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
                     "additionalProperties": False}, tool="length")
MIXED = parse_schema({"type": "object", "properties": {"key": {"type": "string"}, "n": {"type": "integer"},
                                                        "flag": {"type": "boolean"}},
                      "required": ["key"], "additionalProperties": False}, tool="lookup")
OPEN = parse_schema({"type": "object", "properties": {"text": {"type": "string"}}}, tool="note")


class TestCanonicalContent:
    def test_key_order_is_irrelevant(self) -> None:
        assert canonical_json({"a": 1, "b": [1, {"d": 2, "c": 3}]}) == canonical_json({"b": [1, {"c": 3, "d": 2}], "a": 1})

    def test_integral_numbers_compare_by_value(self) -> None:
        assert canonical_json({"n": 1}) == canonical_json({"n": 1.0})
        assert canonical_json({"n": 1.5}) != canonical_json({"n": 1})

    def test_booleans_are_not_numbers(self) -> None:
        assert canonical_json({"n": True}) != canonical_json({"n": 1})
        assert canonical_json({"n": False}) != canonical_json({"n": 0})

    @pytest.mark.parametrize("bad", [{"x": math.nan}, {"x": math.inf}, {1: "a"}, {"x": object()}, {"x": {1, 2}}])
    def test_non_json_is_rejected(self, bad: object) -> None:
        assert canonical_json(bad) is None

    def test_canonical_text_round_trips(self) -> None:
        v = {"z": [1, 2.5, "é", None, True], "a": {}}
        text = canonical_json(v)
        assert text is not None and canonical_json(json.loads(text)) == text

    def test_content_includes_the_tool_name(self) -> None:
        assert content_key("length", {"text": "a"}) != content_key("upper", {"text": "a"})


class TestWellFormed:
    """R2."""

    @pytest.mark.parametrize(
        ("call_id", "name", "args", "ok"),
        [
            ("c1", "length", {"text": "x"}, True),
            ("", "length", {}, False),
            ("   ", "length", {}, False),
            (None, "length", {}, False),
            (7, "length", {}, False),
            ("c1", None, {}, False),
            ("c1", 3, {}, False),
            ("c1", "", {}, True),  # an empty name is a string: it fails the allow-list instead (R3)
            ("c1", "length", '{"text": "x"}', False),
            ("c1", "length", ["text"], False),
            ("c1", "length", None, False),
            ("c1", "length", {"x": math.nan}, False),
        ],
    )
    def test_cases(self, call_id: object, name: object, args: object, ok: bool) -> None:
        assert well_formed(call_id, name, args) is ok


class TestSchemaSubset:
    """R4."""

    def test_required_and_types(self) -> None:
        assert arguments_valid(MIXED, {"key": "a", "n": 3, "flag": True})
        assert arguments_valid(MIXED, {"key": "a", "n": 3.0})
        assert not arguments_valid(MIXED, {"n": 3})
        assert not arguments_valid(MIXED, {"key": "a", "n": True})
        assert not arguments_valid(MIXED, {"key": "a", "n": "3"})
        assert not arguments_valid(MIXED, {"key": "a", "n": 3.5})
        assert not arguments_valid(MIXED, {"key": "a", "flag": 1})
        assert not arguments_valid(MIXED, {"key": 1})

    def test_additional_properties(self) -> None:
        assert not arguments_valid(TEXT, {"text": "a", "extra": 1})
        assert arguments_valid(OPEN, {"text": "a", "extra": {"nested": [1]}})
        assert arguments_valid(OPEN, {})

    @pytest.mark.parametrize(
        ("raw", "field"),
        [
            ({"type": "array"}, ".type"),
            ({"type": "object", "properties": {"x": {"type": "number"}}}, ".properties.x.type"),
            ({"type": "object", "properties": {"x": {"type": "string", "minLength": 1}}}, ".properties.x"),
            ({"type": "object", "oneOf": []}, ".oneOf"),
            ({"type": "object", "properties": {}, "required": ["ghost"]}, ".required"),
            ({"type": "object", "additionalProperties": {"type": "string"}}, ".additionalProperties"),
            ("object", ""),
        ],
    )
    def test_definitions_outside_the_subset_are_rejected_naming_the_field(self, raw: object, field: str) -> None:
        with pytest.raises(ToolDefinitionError) as info:
            parse_schema(raw, tool="t")
        assert info.value.field == field and info.value.tool == "t"

    def test_schema_round_trips_to_json(self) -> None:
        assert parse_schema(MIXED.to_json(), tool="x") == MIXED


class TestBinding:
    """R5–R7, R10."""

    def test_classes(self) -> None:
        assert classify_binding(None, False, "k") == "fresh"
        assert classify_binding("k", True, "k") == "replay"
        assert classify_binding("k", False, "k") == "unresolved"
        assert classify_binding("k", True, "other") == "conflict"
        assert classify_binding("k", False, "other") == "conflict"


def _spec_walk(values: dict[str, bool]) -> tuple[str, str | None]:
    """Interpret the spec's `check` and `start` groups (R0) over fixed guard values."""
    spec = load_spec()

    def first(source: str, trigger: str):  # type: ignore[no-untyped-def]
        for t in spec.group(source, trigger):
            if all(values[g] for g in t.when) and not any(values[g] for g in t.unless):
                return t
        raise AssertionError(f"no transition enabled from {source} on {trigger}")

    t = first("proposed", "check")
    if t.dest == "validated":
        t = first("validated", "start")
    if t.dest == "executing":
        return EXECUTE, None
    if t.effect == "answer_replay":
        return REPLAY, None
    assert t.dest == "returned" and t.code is not None
    return REJECT, t.code


def test_decide_is_the_spec_check_order_on_every_guard_combination() -> None:
    """R1: the pure `decide` and the transition order of loop.toml agree on all 2^8 × 4 inputs."""
    flags = ["request_admitted", "well_formed", "allow_listed", "arguments_valid", "authorized",
             "deadline_passed", "budget_left", "tool_budget_left"]
    n = 0
    for bits in itertools.product([False, True], repeat=len(flags)):
        for binding in ("fresh", "replay", "conflict", "unresolved"):
            v = dict(zip(flags, bits, strict=True))
            guards = dict(v, model_error=False, final_answer=False, round_done=False,
                          result_arrived=False, take_up_blocked=False,  # section 5: the item is taken up
                          id_conflict=binding == "conflict", id_replay=binding == "replay",
                          id_fresh=binding == "fresh", id_unresolved=binding == "unresolved")
            assert decide(binding=binding, **v) == _spec_walk(guards), (v, binding)
            n += 1
    assert n == 1024


def test_escalation_follows_mode_and_policy() -> None:
    """R13, R14, R20."""
    assert escalates("violation", "abort", "error-result")
    assert not escalates("violation", "continue", "throw")
    assert escalates("failure", "abort", "error-result")
    assert escalates("limit", "continue", "throw")
    assert not escalates("limit", "abort", "error-result")


def test_within() -> None:
    assert within(0, None) and within(0, 1) and not within(1, 1) and not within(0, 0)


def test_numbers_compare_by_value_at_any_magnitude() -> None:
    """Content equality (R5): integral floats equal their integers beyond 2**53 too."""
    assert canonical_json({"n": 2**53}) == canonical_json({"n": 2.0**53})
    assert canonical_json({"n": 10**16}) == canonical_json({"n": 1e16})
    assert canonical_json({"n": 2**53 + 1}) != canonical_json({"n": 2.0**53})  # different values
    assert canonical_json({"n": -0.0}) == canonical_json({"n": 0})


class TestRetryDue:
    """R23: a DEPENDENCY_TEMPORARY failure is retried while fewer than max_retries retries have been
    made and the deadline has not passed; a failure made final while a retry was due breaks
    INV-RETRY-DUE."""

    @staticmethod
    def failed(category: str = "DEPENDENCY_TEMPORARY", *, max_retries: int = 1, retries: int = 0,
               deadline: float | None = None, clock: float = 0.0) -> RunState:
        """One call executed and failed ``1 + retries`` times, then answered with its failure at ``clock``."""
        s = RunState(RunConfig(schemas={"t": ToolSchema()}, limits=Limits(max_retries=max_retries, deadline=deadline)))
        receive_response(s, [{"id": "a", "name": "t", "arguments": {}}])
        admit_pending(s)
        bind_id(s)
        begin_execution(s)
        record_outcome(s, Outcome.failure(category))
        for _ in range(retries):
            begin_retry(s)
            record_outcome(s, Outcome.failure(category))
        s.now = clock
        answer_failure(s)
        return s

    def test_R23_a_failure_made_final_while_a_retry_was_due_breaks_inv_retry_due(self) -> None:
        s = self.failed(max_retries=2, retries=1)
        assert s.executions[-1].retry_skipped
        assert violated_invariants(s) == ["INV-RETRY-DUE"]

    @pytest.mark.parametrize(("why", "kw"), [
        ("after max_retries retries", {"max_retries": 2, "retries": 2}),
        ("retries off", {"max_retries": 0}),
        ("once the deadline has passed", {"max_retries": 2, "deadline": 5.0, "clock": 5.0}),
        ("another category is never retried", {"category": "INTERNAL_ERROR", "max_retries": 2}),
        ("NOT_FOUND is never retried", {"category": "NOT_FOUND_OR_NOT_ACCESSIBLE", "max_retries": 2}),
    ])
    def test_R23_a_failure_made_final_when_no_retry_was_due_breaks_nothing(self, why: str, kw: dict[str, Any]) -> None:
        s = self.failed(**kw)
        assert not s.executions[-1].retry_skipped, why
        assert violated_invariants(s) == [], why

    def test_R23_the_recorded_fact_is_the_retry_guard(self) -> None:
        """The fact answer_failure records is exactly when the retry_allowed guard would have fired."""
        for max_retries, retries, category, clock in itertools.product(
                (0, 1, 2), (0, 1, 2), ("DEPENDENCY_TEMPORARY", "INTERNAL_ERROR"), (0.0, 5.0)):
            if retries > max_retries:
                continue
            s = self.failed(category, max_retries=max_retries, retries=retries, deadline=5.0, clock=clock)
            s.executions[-1].retry_skipped = False
            assert retry_due(s) == GUARDS["retry_allowed"](s)
            assert retry_due(s) == (category == "DEPENDENCY_TEMPORARY" and retries < max_retries and clock < 5.0)

    def test_R23_the_reference_driver_retries_every_due_retry(self) -> None:
        s = RunState(RunConfig(schemas={"t": ToolSchema()}, limits=Limits(max_retries=2), mode="continue"))
        responses = iter([[{"id": "a", "name": "t", "arguments": {}}], {"final": "done"}])
        drive(s, lambda s: next(responses), lambda s, ex: Outcome.failure("DEPENDENCY_TEMPORARY"),
              on_step=lambda s, label: violated_invariants(s) == [] or pytest.fail(str(violated_invariants(s))))
        assert [e.attempts for e in s.executions] == [3] and s.answers[0].code == "DEPENDENCY_TEMPORARY"
        assert violated_invariants(s) == []
