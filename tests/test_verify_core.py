"""loopspec verify explores the real core: its stepper, fast model and reductions are checked here
against the engine, the reference driver (gate/decide, R1), and whole-history exploration."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopspec.checker.bounds import Bounds, apply_overrides, load_bounds
from loopspec.checker.counterexample import Lifted, Script, Step, replay_core, replay_engine
from loopspec.checker.crosscheck import edge_map, fast_vs_reference, tree_vs_dedup
from loopspec.checker.explore import make_model
from loopspec.checker.fast import FastModel
from loopspec.checker.readsets import invariant_read_sets, read_set, reads_clock
from loopspec.checker.reference import ReferenceModel, check_invariants
from loopspec.checker.semantics import (
    CORE,
    EFFECT_CALLS,
    EFFECT_FUNCTIONS,
    PRE_GROUP_CALLS,
    Machine,
    clone,
    step,
    tables,
)
from loopspec.checker.state import Encoder, NonLocal, canonical, orbit_size, project, swap_values
from loopspec.checker.universe import Universe
from loopspec.checker.window import Bindings, Poison, Sealed, Tail
from loopspec.core import rules as core
from loopspec.core.rules import Answer, Binding, Execution, Request, RunState
from loopspec.spec.loader import load_spec

from .strategies import oracle_answers

SMALL = ("batch.calls=2", "batch.ids=2", "loop.calls=2", "loop.ids=2", "concurrent.calls=2")


def bounds(*overrides: str) -> Bounds:
    return apply_overrides(load_bounds(), [*SMALL, *overrides])


# --------------------------------------------------------------------------------------------
# The fast model and the reductions against whole histories
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("scope", "overrides"), [
    ("batch", ("batch.calls=3", "batch.ids=3")),
    ("loop", ()),
    ("concurrent", ()),  # the concurrent model's incremental verdicts = every invariant in every state
])
def test_fast_model_has_the_reference_models_states_edges_and_verdicts(scope: str, overrides: tuple[str, ...]) -> None:
    """Windowed, memoised steps and synthetic invariant checks = whole RunStates + core.INVARIANTS."""
    b = bounds(*overrides)
    assert fast_vs_reference(b, b.scope(scope)) == []


def test_fast_model_views_change_nothing() -> None:
    """The partial memo keys (poison-enforced) give the same graph as whole-L keys."""
    b = bounds()
    U = Universe.build(b, b.scope("batch"))
    with_views = edge_map(FastModel(U))
    without = edge_map(FastModel(U, views=False))
    assert with_views.edges == without.edges


@pytest.mark.parametrize(("scope", "overrides"), [("batch", ()), ("loop", ("loop.calls=1",)),
                                                 ("concurrent", ("concurrent.calls=3",))])
def test_deduplication_by_compact_key_loses_no_history(scope: str, overrides: tuple[str, ...]) -> None:
    """Every history explored separately has the same compact edges as its compact key: the
    live-variable reduction and the symmetry reduction are sound at this bound."""
    b = bounds(*overrides)
    assert tree_vs_dedup(b, b.scope(scope)) == []


@pytest.mark.parametrize("scope", ["batch", "loop"])
def test_symmetry_reduction_keeps_every_orbit(scope: str) -> None:
    """Exploring without symmetry reaches exactly the orbits of the symmetric exploration, and the
    orbit sizes add up to the states found without it."""
    b = bounds("loop.calls=1")
    U = Universe.build(b, b.scope(scope))
    sym = edge_map(ReferenceModel(U))
    plain = edge_map(ReferenceModel(U, symmetry=False))
    n = len(U.values)
    canon = {canonical(k[0], k[1], n) if k[1] else k for k in plain.states}
    assert canon == sym.states
    assert sum(orbit_size(k, n) for k in sym.states) == len(plain.states)
    for k, edges in plain.edges.items():
        ck = canonical(k[0], k[1], n) if k[1] else k
        assert {(t, canonical(d[0], d[1], n) if d and d[1] else d, bad) for t, d, bad in edges} == sym.edges[ck]


def _rename(s: RunState, ids: dict[str, str], swap: bool, values: Sequence[str]) -> RunState:
    """The image of a concrete run under a permutation of the id pool and the value swap."""
    def v(x: Any) -> Any:
        if isinstance(x, str) and swap and x in values:
            return values[1 - values.index(x)]
        if isinstance(x, dict):
            return {k: v(y) for k, y in x.items()}
        return x

    def cid(x: Any) -> Any:
        return ids.get(x, x) if isinstance(x, str) else x

    t = clone(s)
    t.requests = [Request(r.index, r.round, cid(r.call_id), r.name, v(r.arguments), r.authorized) for r in t.requests]
    t.answers = [dataclasses.replace(a, call_id=cid(a.call_id)) for a in t.answers]
    t.bindings = {cid(k): Binding(b.name, core.content_key(b.name, v(_args_of(b.key))), b.bound_at, b.success, b.success_at)
                  for k, b in t.bindings.items()}
    if t.response is not None:
        t.response = tuple(v(dict(c, id=cid(c["id"])) if isinstance(c, dict) and "id" in c else c) for c in t.response)
    return t


def _args_of(key: str) -> Any:
    import json

    return json.loads(key.split("\x00", 1)[1])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers=oracle_answers, cfg=st.integers(0, 7), perm=st.permutations(["c1", "c2", "c3"]), swap=st.booleans())
def test_canonical_form_is_invariant_under_renaming(answers: list[int], cfg: int, perm: list[str], swap: bool) -> None:
    """Ids and values are interchangeable: a renamed run has the same canonical compact state."""
    b = load_bounds()
    U = Universe.build(b, b.scope("batch"))
    enc = Encoder(U)
    ren = dict(zip(["c1", "c2", "c3"], perm, strict=True))
    for m, _ in _walk(U, cfg, answers):
        key = canonical(*project(enc, m.state, m.s, cfg), len(U.values))
        other = _rename(m.s, ren, swap, U.values)
        assert canonical(*project(enc, m.state, other, cfg), len(U.values)) == key
        assert check_invariants(other) == check_invariants(m.s)


def test_swap_values_is_an_involution() -> None:
    x = ("a", ("v", 0), (("v", 1), None), 3)
    assert swap_values(swap_values(x)) == x
    assert swap_values(("v", 0)) == ("v", 1)


# --------------------------------------------------------------------------------------------
# The stepper against the engine, the reference driver and gate/decide (R0, R1)
# --------------------------------------------------------------------------------------------


class _Draw:
    def __init__(self, answers: Sequence[int]) -> None:
        self.answers = list(answers)
        self.pos = 0

    def choose(self, point: str, options: Sequence[str]) -> str:
        i = self.answers[self.pos] if self.pos < len(self.answers) else 0
        self.pos += 1
        return options[i % len(options)]


def _walk(U: Universe, cfg_index: int, answers: Sequence[int]) -> list[tuple[Machine, Step | None]]:
    cfg = U.configs[cfg_index % len(U.configs)]
    m = Machine(tables().spec.initial.id, RunState(cfg.config))
    out: list[tuple[Machine, Step | None]] = [(Machine(m.state, clone(m.s)), None)]
    o = _Draw(answers)
    trail: list[tuple[str, str]] = []

    class Rec:
        def choose(self, point: str, options: Sequence[str]) -> str:
            lab = o.choose(point, options)
            trail.append((point, lab))
            return lab

    while m.state not in tables().terminal:
        before = Machine(m.state, clone(m.s))
        trail.clear()
        tr = step(CORE, cfg.env, m, Rec())
        st_ = Step(len(out) - 1, tr, tuple(trail), before, Machine(m.state, clone(m.s)), check_invariants(m.s))
        out.append((Machine(m.state, clone(m.s)), st_))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers=oracle_answers, cfg=st.integers(0, 7), scope=st.sampled_from(["batch", "loop", "concurrent"]))
def test_engine_takes_the_steppers_transitions_and_no_invariant_breaks(answers: list[int], cfg: int, scope: str) -> None:
    """Any run the checker can take, replayed through run_batch/run_loop with scripted tools, model,
    clock, hook and cancel token, takes the same spec transitions; every invariant holds."""
    b = load_bounds()
    U = Universe.build(b, b.scope(scope))
    walk = _walk(U, cfg, answers)
    steps = tuple(s for _, s in walk if s is not None)
    assert all(not s.violated for s in steps)
    lf = Lifted(b.scope(scope), CORE, U.configs[cfg % len(U.configs)], U, steps)
    script = Script.from_json(lf.script().to_json())
    eng = replay_engine(script)
    assert eng.error is None
    assert list(eng.transitions) == lf.path
    assert eng.first_violation is None
    mine = replay_core(b, b.scope(scope), script)
    assert list(mine.transitions) == lf.path


CHECK_CODES = {t.code: t.id for t in load_spec().transitions if t.code}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers=oracle_answers, cfg=st.integers(0, 7), scope=st.sampled_from(["batch", "loop"]))
def test_steppers_check_and_start_agree_with_gate_and_decide(answers: list[int], cfg: int, scope: str) -> None:
    """R1: the transition the stepper fires from `proposed` and `validated` is the one
    core.gate / core.decide choose for the same request."""
    b = load_bounds()
    U = Universe.build(b, b.scope(scope))
    spec = load_spec()
    replay_t = next(t.id for t in spec.transitions if t.effect == "answer_replay")
    for _, st_ in _walk(U, cfg, answers):
        if st_ is None or st_.before.state not in ("proposed", "validated"):
            continue
        t = st_.transition
        if t.trigger == "cancel" or t.id in ("T05", "T06", "T07"):
            continue
        s = clone(st_.before.s)
        choice = dict(st_.choice)
        if choice.get("tick") == "yes":
            s.now = float(s.config.limits.deadline)  # type: ignore[arg-type]
        if st_.before.state == "proposed":
            core.admit_pending(s)
        allowed = choice.get("auth", "allow") == "allow"
        action, code, binds = core.gate(s, lambda s_, r_, allowed=allowed: allowed)
        if st_.before.state == "proposed":
            if t.code is not None:
                assert code == t.code
            elif t.id == replay_t:
                assert action == "replay"
            else:
                assert t.effect in ("bind_id", "keep_binding")
                assert code is None or CHECK_CODES[code] in ("T16", "T17", "T18", "T19")
                assert binds == (t.effect == "bind_id")
        else:
            assert (t.code == code) if t.code else (action == "execute")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers=oracle_answers, cfg=st.integers(0, 7))
def test_reference_driver_drive_ends_where_the_stepper_ends(answers: list[int], cfg: int) -> None:
    """core.drive (the reference driver, gate/decide) run on the same batch ends in the same state."""
    b = load_bounds()
    U = Universe.build(b, b.scope("batch"))
    walk = _walk(U, cfg, answers)
    last = walk[-1][0].s
    script = Lifted(b.scope("batch"), CORE, U.configs[cfg], U, tuple(s for _, s in walk if s)).script()
    outcomes = script.outcomes

    def outcome_for(s: RunState, ex: Execution) -> core.Outcome:
        outs = outcomes[ex.ordinal - 1] if ex.ordinal - 1 < len(outcomes) else []
        lab = outs[ex.attempts - 1] if ex.attempts - 1 < len(outs) else "ok"
        return core.Outcome.success({"execution": ex.ordinal}) if lab == "ok" else core.Outcome.failure(lab)

    s = core.drive(RunState(U.configs[cfg].config), lambda s: script.responses[0], outcome_for)
    assert [(a.index, a.status, a.code, a.output, a.replayed) for a in s.answers] == \
           [(a.index, a.status, a.code, a.output, a.replayed) for a in last.answers]
    assert [(e.request, e.attempts) for e in s.executions] == [(e.request, e.attempts) for e in last.executions]
    assert (s.status, s.stop_reason, s.aborted) == (last.status, last.stop_reason, last.aborted)


# --------------------------------------------------------------------------------------------
# The pieces the fast model relies on
# --------------------------------------------------------------------------------------------


def test_invariants_read_nothing_outside_their_read_set() -> None:
    """The read sets found in the core's source are complete: with every other field poisoned,
    each invariant still evaluates, to the same verdict, on every state of a small exploration."""
    b = bounds()
    reads = invariant_read_sets()
    fields = [f.name for f in dataclasses.fields(RunState)]
    for scope in ("batch", "loop", "concurrent"):
        U = Universe.build(b, b.scope(scope))
        ref = make_model(U, CORE, "reference")
        frontier = [n for _, n in ref.initial()]
        seen = 0
        while frontier and seen < 3000:
            nxt = []
            for node in frontier:
                if ref.is_terminal(node):
                    continue
                for _, _, _, node2, bad, _ in ref.expand(node):
                    s = node2[1].s
                    seen += 1
                    for name, inv in core.INVARIANTS.items():
                        kw = {f: (getattr(s, f) if f in reads[name] or f == "config" else Poison(f)) for f in fields}
                        assert inv(RunState(**kw)) == inv(s), name
                    if not bad:
                        nxt.append(node2)
            frontier = nxt[:400]


def test_read_sets_and_clock_reads_are_found_in_the_source() -> None:
    reads = invariant_read_sets()
    assert reads["INV-EXEC-BUDGET"] == {"config", "executions", "uncharged"}  # R45: charged executions
    assert "bindings" in reads["INV-BINDING-STABLE"]
    assert read_set(core.inv_one_terminal) == {"status", "stop_reason", "terminations"}
    assert reads_clock(core.GUARDS["deadline_passed"]) and reads_clock(core.GUARDS["retry_allowed"])
    assert not reads_clock(core.GUARDS["outcome_ok"])
    assert reads["INV-DEADLINE"] == {"late_model_requests", "executions"}
    assert reads["INV-RETRY-DUE"] == {"executions"}
    assert {"aborted_answer", "requests", "answers", "executions"} <= reads["INV-DECISION"]
    assert {"cursor", "admitted_cursor", "status", "stop_reason"} <= reads["INV-ESCALATION"]
    groups = tables().clock_groups
    assert ("decided", "request") in groups and ("validated", "start") in groups and ("executing", "finish") in groups
    # no guard of the check reads the clock, but its error answers record whether they are late
    assert reads_clock(core.answer_error) and ("proposed", "check") in groups
    assert ("returned", "advance") not in groups
    # a failure made final records whether a retry was still due, which reads the clock (R23)
    assert reads_clock(core.answer_failure) and not reads_clock(core.store_success)


def test_effect_calls_are_what_the_steps_call() -> None:
    """The table the clock groups are derived from (EFFECT_CALLS, PRE_GROUP_CALLS) lists every state
    update a step of each effect calls."""
    calls: list[str] = []

    def recording(name: str, fn: Any) -> Any:
        def wrapped(*a: Any, **kw: Any) -> Any:
            calls.append(name)
            return fn(*a, **kw)
        return wrapped

    sem = CORE.variant("recording", "the core, recording its calls",
                       functions={f: recording(f, getattr(core, f)) for f in EFFECT_FUNCTIONS})
    b = bounds("loop.calls=1")
    seen: set[str] = set()
    for scope in ("batch", "loop", "concurrent"):
        U = Universe.build(b, b.scope(scope))
        frontier = [(c.index, Machine(tables().spec.initial.id, RunState(c.config))) for c in U.configs]
        rnd = random.Random(0)
        for _ in range(12):
            nxt = []
            for cfg, m in rnd.sample(frontier, min(len(frontier), 300)):
                if m.state in tables().terminal:
                    continue
                for sc in enumerate_steps_recorded(sem, U.configs[cfg].env, m, calls):
                    step_, tr, m2 = sc
                    allowed = set(EFFECT_CALLS[tr.effect]) | set(PRE_GROUP_CALLS.get((m.state, tr.trigger), ()))
                    assert set(step_) <= allowed, (tr.id, step_)
                    seen.add(tr.effect)
                    nxt.append((cfg, m2))
            frontier = nxt
    assert seen == {t.effect for t in load_spec().transitions}


def enumerate_steps_recorded(sem: Any, env: Any, m: Machine, calls: list[str]) -> Any:
    from loopspec.checker.reference import enumerate_steps

    calls.clear()
    for sc in enumerate_steps(sem, env, m):
        assert sc.transition is not None
        yield list(calls), sc.transition, sc.machine
        calls.clear()


def test_clone_copies_every_field() -> None:
    """The checker copies RunStates field by field: a field the core adds must be copied too (the
    facts of INV-DECISION / INV-DEADLINE / INV-RETRY-DUE live in new fields)."""
    fields = {f.name for f in dataclasses.fields(RunState)}
    s = RunState(core.RunConfig(schemas={}))
    for f in fields - {"config", "bindings", "requests", "answers", "executions", "per_tool", "held", "uncharged_per_tool"}:
        setattr(s, f, f"value of {f}")
    s.held = {3: core.Answer(3, 1, "c1", "ok")}
    s.uncharged_per_tool = {"t": 1}
    s.executions = [Execution(0, "t", "p", 1, 2, None, True, 3, True, True, True)]
    t = clone(s)
    for f in fields:
        assert getattr(t, f) == getattr(s, f), f
    assert dataclasses.astuple(t.executions[0]) == dataclasses.astuple(s.executions[0])
    assert t.executions[0] is not s.executions[0]


def test_a_cancellation_winning_the_race_with_an_abort_breaks_nothing() -> None:
    """R13, R21, R26: at `returned` with an answer that aborts the run, the cancel token wins; the
    answer stays and the run is CANCELLED: no invariant breaks (INV-ESCALATION allows it). Moving on
    past that answer instead breaks INV-ESCALATION."""
    b = load_bounds()
    U = Universe.build(b, b.scope("loop"))
    cfg = next(c for c in U.configs if c.config.mode == "abort")

    class Script:
        def __init__(self, **answers: str) -> None:
            self.answers = answers

        def choose(self, point: str, options: Sequence[str]) -> str:
            return self.answers.get(point, options[0])

    m = Machine(tables().spec.initial.id, RunState(cfg.config))
    assert step(CORE, cfg.env, m, Script(response="c1:shell()")).id == "T04"
    assert step(CORE, cfg.env, m, Script()).code == "UNKNOWN_TOOL"
    moved_on = Machine(m.state, clone(m.s))
    assert step(CORE, cfg.env, m, Script(cancel="yes")).id == "T28"
    assert m.s.stop_reason == "CANCELLED" and m.s.answers[-1].code == "UNKNOWN_TOOL"
    assert check_invariants(m.s) == ()
    core.next_item(moved_on.s)  # what abort-mode-continues does
    assert "INV-ESCALATION" in check_invariants(moved_on.s)


def test_window_refuses_what_lies_outside_it() -> None:
    t = Tail("answers", 3, [Answer(3, 1, "c1", "ok")])
    assert len(t) == 4 and t[-1].index == 3 and t[3].index == 3
    with pytest.raises(NonLocal):
        t[0]
    with pytest.raises(NonLocal):
        list(t)
    b = Bindings(frozenset({"c1"}), {})
    assert b.get("c1") is None
    with pytest.raises(NonLocal):
        b.get("c2")
    with pytest.raises(NonLocal):
        dict(b.items())
    p = Poison("x")
    for use in (lambda: p + 1, lambda: p < 2, lambda: bool(p), lambda: p == 1, lambda: p.attr, lambda: f"{p}"):
        with pytest.raises(NonLocal):
            use()
    sealed = Sealed("request", 5)
    assert sealed.index == 5
    with pytest.raises(NonLocal):
        _ = sealed.call_id


class _NoCancelNoTick(_Draw):
    def choose(self, point: str, options: Sequence[str]) -> str:
        if point in ("cancel", "tick"):
            return "no"
        return super().choose(point, options)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers=oracle_answers, cfg=st.integers(0, 7),
       scope=st.sampled_from(["concurrent", "concurrent-4", "concurrent-retries"]))
def test_reference_driver_drive_runs_the_concurrent_machine(answers: list[int], cfg: int, scope: str) -> None:
    """Section 5: core.drive (gate/decide, with the environment's arrivals) run on the inputs of any
    walk of the stepper through a concurrent scope ends in the same state, for every completion
    order the walk chose (slots, retries in flight and both limit policies included)."""
    b = load_bounds()
    U = Universe.build(b, b.scope(scope))
    c = U.configs[cfg % len(U.configs)]
    m = Machine(tables().spec.initial.id, RunState(c.config))
    o = _NoCancelNoTick(answers)
    steps: list[Step] = []
    trail: list[tuple[str, str]] = []

    class Rec:
        def choose(self, point: str, options: Sequence[str]) -> str:
            lab = o.choose(point, options)
            trail.append((point, lab))
            return lab

    while m.state not in tables().terminal:
        before = Machine(m.state, clone(m.s))
        trail.clear()
        tr = step(CORE, c.env, m, Rec())
        steps.append(Step(len(steps), tr, tuple(trail), before, Machine(m.state, clone(m.s)), ()))
    last = m.s
    script = Lifted(b.scope(scope), CORE, c, U, tuple(steps)).script()
    sched = list(script.schedule or [])

    def outcome_for(s: RunState, ex: Execution) -> core.Outcome:
        outs = script.outcomes[ex.ordinal - 1] if ex.ordinal - 1 < len(script.outcomes) else []
        lab = outs[ex.attempts - 1] if ex.attempts - 1 < len(outs) else "ok"
        return core.Outcome.success({"execution": ex.ordinal}) if lab == "ok" else core.Outcome.failure(lab)

    def arrive(s: RunState, must: bool) -> int | None:
        return sched.pop(0) if sched else None

    responses = list(script.responses)
    s = core.drive(RunState(c.config), lambda s: responses.pop(0) if responses else [], outcome_for, arrive=arrive)
    assert sched == []
    assert [(a.index, a.status, a.code, a.output, a.replayed) for a in s.answers] == \
           [(a.index, a.status, a.code, a.output, a.replayed) for a in last.answers]
    assert [(e.request, e.attempts, e.abandoned) for e in s.executions] == \
           [(e.request, e.attempts, e.abandoned) for e in last.executions]
    assert (s.status, s.stop_reason, s.aborted) == (last.status, last.stop_reason, last.aborted)
    assert core.violated_invariants(s) == []
