"""The must-fail corpus: every broken decision core yields a short counterexample, which replays
through the engine (with the variant installed) to the same broken invariant at the same step.

Golden summaries live in tests/golden/verify_mutants.json. When a change to the spec, the core or
the bounds changes them on purpose, regenerate with

    python -m loopspec.checker.mutants --overwrite tests/golden/verify_mutants.json

(or run this file with LOOPSPEC_OVERWRITE_GOLDEN=1) and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from loopspec.checker.bounds import apply_overrides, load_bounds
from loopspec.checker.counterexample import Script, counterexample_json, replay, replay_core, replay_engine
from loopspec.checker.crosscheck import fast_vs_reference, tree_vs_dedup
from loopspec.checker.explain import explain
from loopspec.checker.explore import explore
from loopspec.checker.mutants import MUTANTS, SURVIVORS, MutantResult, check_mutant, corpus_summaries
from loopspec.checker.reference import check_invariants
from loopspec.checker.semantics import CORE, Machine, step, tables
from loopspec.checker.state import NonLocal
from loopspec.checker.universe import Universe
from loopspec.core.rules import RunState

GOLDEN = Path(__file__).parent / "golden" / "verify_mutants.json"
REGEN = "python -m loopspec.checker.mutants --overwrite tests/golden/verify_mutants.json"

_results: dict[str, MutantResult] = {}


def result(name: str) -> MutantResult:
    if name not in _results:
        mt = next(m for m in MUTANTS if m.semantics.name == name)
        _results[name] = check_mutant(mt)
    return _results[name]


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    if os.environ.get("LOOPSPEC_OVERWRITE_GOLDEN"):
        from loopspec.support.text import write_atomic

        data = {"format": "loopspec-verify-mutants/1", "bounds": "spec/bounds.toml", "mutants": corpus_summaries()}
        write_atomic(GOLDEN, json.dumps(data, indent=2) + "\n")
    return json.loads(GOLDEN.read_text())["mutants"]  # type: ignore[no-any-return]


def test_corpus_has_at_least_eight_variants_each_naming_its_rule() -> None:
    assert len(MUTANTS) >= 8
    assert len({m.semantics.name for m in MUTANTS + SURVIVORS}) == len(MUTANTS) + len(SURVIVORS)
    for m in MUTANTS:
        assert m.semantics.overrides, m.semantics.name  # it really replaces something of the core
        assert m.semantics.rules and m.semantics.breaks


@pytest.mark.parametrize("name", [m.semantics.name for m in MUTANTS])
def test_variant_is_caught_within_four_calls(name: str, golden: dict[str, Any]) -> None:
    r = result(name)
    assert r.lifted is not None, f"{name} was not caught"
    lf = r.lifted
    assert lf.calls <= 4, f"{name}: the counterexample needs {lf.calls} calls"
    assert set(r.mutant.semantics.breaks) <= set(lf.violated)
    # the lifted path ends in a whole RunState that core.INVARIANTS rejects
    assert lf.steps[-1].violated and all(not s.violated for s in lf.steps[:-1])
    assert r.summary() == golden.get(name), f"{name}: the counterexample changed; if intended, run `{REGEN}`"


@pytest.mark.parametrize("name", [m.semantics.name for m in MUTANTS])
def test_counterexample_replays_through_the_engine(name: str) -> None:
    """The JSON counterexample, replayed by run_batch/run_loop with the variant installed, breaks the
    same invariants at the same step; without it the engine agrees with the core at every step."""
    r = result(name)
    assert r.lifted is not None
    cx = json.loads(json.dumps(counterexample_json(r.lifted)))
    n = len(cx["trace"]["path"])
    assert cx["trace"]["failed"] == n - 1
    sem = r.mutant.semantics
    eng = replay(cx, sem)
    assert list(eng.transitions[:n]) == cx["trace"]["path"]
    assert eng.first_violation == n - 1
    assert set(eng.violated[n - 1]) == {v["id"] for v in cx["violated"]}
    b = load_bounds()
    script = Script.from_json(cx["replay"])
    mine = replay_core(b, b.scope(r.mutant.scope), script, sem)
    assert list(mine.transitions[:n]) == cx["trace"]["path"] and mine.first_violation == n - 1
    # the correct core on the same inputs: engine and stepper agree, nothing breaks
    eng_core = replay_engine(script, CORE)
    core_core = replay_core(b, b.scope(r.mutant.scope), script, CORE)
    assert eng_core.error is None and core_core.error is None
    assert eng_core.transitions == core_core.transitions
    assert eng_core.first_violation is None and core_core.first_violation is None


@pytest.mark.parametrize("name", [m.semantics.name for m in MUTANTS[:4]])
def test_counterexample_text_cites_transitions_rules_and_the_invariant(name: str) -> None:
    r = result(name)
    assert r.lifted is not None
    text = explain(r.lifted)
    for t in r.lifted.path:
        assert f": {t} " in text
    assert "Let " in text and "Then " in text and "(R0)" in text
    for inv in r.lifted.violated:
        assert f"breaks {inv}" in text


@pytest.mark.parametrize("mt", [m for m in MUTANTS + SURVIVORS if m.semantics.local], ids=lambda m: m.semantics.name)
def test_fast_model_verdicts_are_the_cores_for_every_variant(mt: Any) -> None:
    """For each variant, the fast model's graph and verdicts (which invariants break, where) equal
    the reference model's, which evaluates core.INVARIANTS on whole histories."""
    b = apply_overrides(load_bounds(), ["batch.calls=2", "batch.ids=2", "loop.calls=1", "loop.ids=2", "concurrent.calls=2"])
    assert fast_vs_reference(b, b.scope(mt.scope), mt.semantics) == []


def test_a_variant_reaching_outside_the_window_is_refused_not_misread() -> None:
    mt = next(m for m in MUTANTS if m.semantics.name == "results-out-of-order")
    assert not mt.semantics.local
    b = load_bounds()
    with pytest.raises(NonLocal):
        explore(b, b.scope("batch"), mt.semantics, model="fast")


@pytest.mark.slow
@pytest.mark.parametrize("mt", MUTANTS + SURVIVORS, ids=lambda m: m.semantics.name)
def test_deduplication_is_sound_for_every_variant(mt: Any) -> None:
    b = apply_overrides(load_bounds(), ["batch.calls=2", "batch.ids=2", "loop.calls=1", "loop.ids=2", "concurrent.calls=2"])
    assert tree_vs_dedup(b, b.scope(mt.scope), mt.semantics) == []


#: Variants that survived exhaustive exploration until loop.toml gained the invariants that catch
#: them (R10, R13, R19, R23), and two more of the same kind (a cached failure served as a plain
#: error; a retry after the deadline).
FORMER_GAPS = {
    "deadline-ignored": "INV-DEADLINE",
    "abort-mode-continues": "INV-ESCALATION",
    "failed-call-refused": "INV-DECISION",
    "cached-failure-as-error": "INV-DECISION",
    "retry-after-deadline": "INV-DEADLINE",
    "retry-skipped": "INV-RETRY-DUE",
}
NEW_INVARIANTS = ("INV-DECISION", "INV-ESCALATION", "INV-DEADLINE", "INV-RETRY-DUE")


@pytest.mark.parametrize(("name", "inv"), sorted(FORMER_GAPS.items()))
def test_former_spec_gaps_are_caught_by_the_new_invariants(name: str, inv: str) -> None:
    """R10, R13, R19, R23: each is in the must-fail corpus, caught within four calls, breaking its
    invariant."""
    assert name in {m.semantics.name for m in MUTANTS} and name not in {m.semantics.name for m in SURVIVORS}
    lf = result(name).lifted
    assert lf is not None and lf.calls <= 4 and inv in lf.violated


def test_an_execution_started_after_the_deadline_is_caught() -> None:
    """R19: with the deadline ignored, a call checked after the clock passed it executes; the
    execution records that it started late (INV-DEADLINE) and the check order said DEADLINE_EXCEEDED
    (INV-DECISION). The correct core refuses the same call with DEADLINE_EXCEEDED."""
    b = load_bounds()
    U = Universe.build(b, b.scope("loop"))
    cfg = U.configs[0]

    class Script:
        def __init__(self, **answers: str) -> None:
            self.answers = answers

        def choose(self, point: str, options: Any) -> str:
            return self.answers.get(point, options[0])

    sem = next(m.semantics for m in MUTANTS if m.semantics.name == "deadline-ignored")
    for semantics, last in ((sem, "T20"), (CORE, "T17")):
        m = Machine(tables().spec.initial.id, RunState(cfg.config))
        assert step(semantics, cfg.env, m, Script(response="c1:lookup(alice)")).id == "T04"
        assert step(semantics, cfg.env, m, Script()).id == "T14"
        assert check_invariants(m.s) == ()
        assert step(semantics, cfg.env, m, Script(tick="yes")).id == last
        if semantics is CORE:
            assert check_invariants(m.s) == () and m.s.answers[-1].late
        else:
            assert m.s.executions[-1].late
            assert set(check_invariants(m.s)) == {"INV-DEADLINE", "INV-DECISION"}


@pytest.mark.slow
@pytest.mark.parametrize("mt", SURVIVORS or [None], ids=lambda m: m.semantics.name if m else "none")
def test_known_spec_gaps_survive_the_default_bound(mt: Any) -> None:
    """These variants break a MUST of SPEC.md that no invariant checks; exhaustive exploration at
    the default bound finds nothing. When the spec gains the missing invariant this test fails:
    move the variant to MUTANTS (and to FORMER_GAPS)."""
    if mt is None:
        pytest.skip("SURVIVORS is empty: every variant of the corpus is caught (the last survivor, "
                    "retry-skipped, is caught since loop.toml gained INV-RETRY-DUE)")
    r = check_mutant(mt)
    assert r.lifted is None and r.exploration.complete


def test_no_variant_is_both_a_survivor_and_a_former_gap() -> None:
    """A survivor has no invariant to break yet; a former gap names the one that catches it."""
    survivors = {m.semantics.name for m in SURVIVORS}
    assert not survivors & set(FORMER_GAPS)
    assert all(not m.semantics.breaks and m.semantics.rules for m in SURVIVORS)
    assert all(FORMER_GAPS[m.semantics.name] in m.semantics.breaks for m in MUTANTS if m.semantics.name in FORMER_GAPS)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FORMER_GAPS))
def test_former_spec_gaps_survive_without_the_new_invariants(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without INV-DECISION, INV-ESCALATION, INV-DEADLINE and INV-RETRY-DUE, exhaustive exploration
    at the default bound finds nothing: those invariants are what closes these gaps of the spec."""
    from loopspec.core import rules as core

    older = {k: v for k, v in core.INVARIANTS.items() if k not in NEW_INVARIANTS}
    monkeypatch.setattr(core, "INVARIANTS", older)
    mt = next(m for m in MUTANTS if m.semantics.name == name)
    r = check_mutant(mt)
    assert r.lifted is None and r.exploration.complete


@pytest.mark.parametrize("model", ["fast", "reference"])
def test_a_core_that_raises_is_a_failure_not_a_crash_of_the_checker(model: str) -> None:
    def answer_error(s: Any, code: str) -> Any:
        raise AssertionError("broken answer_error")

    sem = CORE.variant("raises", "answer_error raises", functions={"answer_error": answer_error})
    b = load_bounds()
    ex = explore(b, b.scope("batch"), sem, model=model)
    assert ex.violation is not None and ex.violation.crashed == "AssertionError: broken answer_error"
    assert [t for _, _, t in ex.violation.path] == ["T04", "ERROR"]


def test_docs_corpus_table_is_the_corpus(golden: dict[str, Any]) -> None:
    """docs/verify.md lists every variant of the corpus with its scope, rules, the invariant it must
    break and its counterexample's size, as the golden file has them."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "verify.md").read_text()
    rows = {}
    for line in doc.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].strip("`")] = cells
    assert set(rows) == {m.semantics.name for m in MUTANTS}
    for m in MUTANTS:
        name, scope, rules, breaks, size, also = rows[m.semantics.name]
        g = golden[m.semantics.name]
        assert (scope, rules, breaks) == (m.scope, ", ".join(m.semantics.rules), ", ".join(m.semantics.breaks)), name
        calls, steps = g["calls"], g["steps"]
        assert size == f"{calls} call{'' if calls == 1 else 's'}, {steps} step{'' if steps == 1 else 's'}", name
        assert also == (", ".join(sorted(set(g["violated"]) - set(m.semantics.breaks))) or "—"), name
