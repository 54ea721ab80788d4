"""The language-neutral conformance vectors of spec/conformance/ run through the reference engine."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from loopspec import load_rules
from loopspec.engine.vectors import (
    conformance_dir,
    load_batch_vectors,
    load_concurrent_vectors,
    load_loop_vectors,
    run_batch_vector,
    run_concurrent_vector,
    run_loop_vector,
)

SCHEMAS = conformance_dir().parent / "schema"
BATCH = load_batch_vectors()
LOOP_FILE = conformance_dir() / "loop.json"
LOOP = load_loop_vectors() if LOOP_FILE.is_file() else {"cases": [], "toolsets": {}}
RULES = {r.id for r in load_rules()}
CONCURRENT = load_concurrent_vectors()

#: rules a single batch can exercise (the loop rules need rounds, clocks, cancellation)
BATCH_RULES = {f"R{i}" for i in range(0, 18)} | {"R20"}
LOOP_RULES = {f"R{i}" for i in range(18, 27)} | {"R28"}


def _schema(name: str) -> dict:  # type: ignore[type-arg]
    return json.loads((SCHEMAS / name).read_text(encoding="utf-8"))


def test_batch_vectors_match_their_schema() -> None:
    jsonschema.validate(BATCH, _schema("batch-vectors.schema.json"))


@pytest.mark.skipif(not LOOP_FILE.is_file(), reason="loop vectors not written yet")
def test_loop_vectors_match_their_schema() -> None:
    jsonschema.validate(LOOP, _schema("loop-vectors.schema.json"))


def test_there_are_enough_vectors_and_ids_are_unique() -> None:
    ids = [c["id"] for c in BATCH["cases"]] + [c["id"] for c in LOOP["cases"]]
    assert len(BATCH["cases"]) >= 60
    assert len(ids) == len(set(ids))


def test_seed_cases_of_the_foundation_are_present() -> None:
    ids = {c["id"] for c in BATCH["cases"]}
    for seed in ("seed-replay-budget-1", "seed-conflict-different-arguments", "seed-distinct-ids-same-arguments",
                 "seed-budget-1-second-new-id", "seed-budget-0-empty", "seed-budget-0-one-call",
                 "seed-unknown-tool-shell", "seed-blank-id", "seed-missing-id", "seed-invalid-arguments"):
        assert seed in ids


def test_every_batch_rule_is_covered_by_a_vector() -> None:
    cited = {r for c in BATCH["cases"] for r in c["rules"]}
    assert cited <= RULES
    assert BATCH_RULES - cited == set(), f"rules without a batch vector: {sorted(BATCH_RULES - cited)}"


@pytest.mark.skipif(not LOOP_FILE.is_file(), reason="loop vectors not written yet")
def test_every_loop_rule_is_covered_by_a_vector() -> None:
    cited = {r for c in LOOP["cases"] for r in c["rules"]}
    assert cited <= RULES
    assert LOOP_RULES - cited == set(), f"rules without a loop vector: {sorted(LOOP_RULES - cited)}"
    assert len(LOOP["cases"]) >= 40


@pytest.mark.parametrize("case", BATCH["cases"], ids=[c["id"] for c in BATCH["cases"]])
def test_batch_vector(case: dict) -> None:  # type: ignore[type-arg]
    result = run_batch_vector(case, BATCH.get("toolsets", {}))
    assert result.passed, "\n".join([f"{case['id']} ({', '.join(case['rules'])}): {case.get('doc', '')}", *result.diff()])


@pytest.mark.parametrize("case", LOOP["cases"], ids=[c["id"] for c in LOOP["cases"]])
def test_loop_vector(case: dict) -> None:  # type: ignore[type-arg]
    result = run_loop_vector(case, LOOP.get("toolsets", {}))
    assert result.passed, "\n".join([f"{case['id']} ({', '.join(case['rules'])}): {case.get('doc', '')}", *result.diff()])


def test_a_wrong_expectation_is_reported(tmp_path: Path) -> None:
    """The runner can fail: a vector with a tampered expectation does not pass."""
    case = json.loads(json.dumps(next(c for c in BATCH["cases"] if c["id"] == "seed-replay-budget-1")))
    case["expect"]["executed"] = 2
    result = run_batch_vector(case, BATCH.get("toolsets", {}))
    assert not result.passed and any(d.startswith("executed:") for d in result.diff())


# -- section 5: concurrent execution ------------------------------------------------------------------


def test_concurrent_vectors_match_their_schema_and_cover_section_5() -> None:
    jsonschema.validate(CONCURRENT, _schema("concurrent-vectors.schema.json"))
    cited = {r for c in CONCURRENT["cases"] for r in c["rules"]}
    assert cited <= RULES
    # R35 needs a cancellation or a clock: the engine's tests and the model checker cover it
    assert {"R29", "R30", "R31", "R32", "R33", "R34"} <= cited
    ids = [c["id"] for c in CONCURRENT["cases"]] + [c["id"] for c in BATCH["cases"]] + [c["id"] for c in LOOP["cases"]]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("case", CONCURRENT["cases"], ids=lambda c: c["id"])
def test_concurrent_vector(case: dict) -> None:  # type: ignore[type-arg]
    """Every completion order the case lists gives the same, expected outcome."""
    for order, r in run_concurrent_vector(case, CONCURRENT.get("toolsets", {})):
        assert r.passed, f"completion order {order}: " + "; ".join(r.diff())
