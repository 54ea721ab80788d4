"""The diagram model is extracted from the spec, complete and in the spec's order (R0, R1)."""

from __future__ import annotations

import itertools

import pytest

from loopspec import load_rules, load_spec
from loopspec.core.rules import decide
from loopspec.render.model import (
    CHECK_GROUPS,
    extract_check_flow,
    extract_machine,
    merged_edges,
)


@pytest.fixture(scope="module")
def spec():
    return load_spec()


@pytest.fixture(scope="module")
def machine(spec):
    return extract_machine(spec, load_rules(spec=spec))


def test_every_state_and_transition_is_in_the_model(spec, machine) -> None:
    assert [s.id for s in machine.states] == [s.id for s in spec.states]
    assert [e.id for e in machine.edges] == [t.id for t in spec.transitions]
    for t in spec.transitions:
        e = machine.edge(t.id)
        assert (e.sources, e.dest, e.trigger, e.guard, e.effect, e.code) == (
            t.sources, t.dest, t.trigger, t.guard_label(), t.effect, t.code)
    assert machine.initial == spec.initial.id


def test_terminal_statuses_and_their_stop_reasons(spec, machine) -> None:
    assert {st for st, _ in machine.statuses} == {"COMPLETED", "TRUNCATED", "REJECTED", "FAILED", "CANCELLED"}
    for s in machine.terminal_states:
        assert s.stop_reasons == tuple(r.id for r in spec.stop_reasons if r.status == s.status)
        assert s.triggers == ()
    every_reason = [r for s in machine.terminal_states for r in s.stop_reasons]
    assert sorted(every_reason) == sorted(r.id for r in spec.stop_reasons)


def test_evaluation_order_of_each_group_R0(spec, machine) -> None:
    for e in machine.edges:
        group = spec.group(e.sources[0], e.trigger)
        assert group[e.order - 1].id == e.id
        assert e.group_size == len(group)


def test_edge_kinds_mark_the_error_paths(spec, machine) -> None:
    for e in machine.edges:
        dest = spec.state(e.dest)
        if dest.terminal:
            assert e.kind == ("complete" if dest.status == "COMPLETED" else "abort"), e.id
        elif e.code is not None:
            assert e.kind == "error", e.id
    # every escalation and every transition that answers a code is drawn as an error path
    assert all(machine.edge(t.id).kind == "abort" for t in spec.transitions if t.escalates)
    assert all(machine.edge(t.id).kind == "error" for t in spec.transitions if t.code)
    assert {e.kind for e in machine.edges} == {"normal", "error", "abort", "complete"}


def test_invariants_are_attached_through_the_rules(spec, machine) -> None:
    rules = {r.id: r for r in load_rules(spec=spec)}
    # the loop machine shows loop.toml's invariants; section 6's (INV-W-*, cited by R42/R46 of T34/T35)
    # belong to the writes diagram
    loop_invariants = {i.id for i in spec.invariants}
    for s in machine.states:
        expected = set()
        for t in spec.transitions:
            if s.id in t.sources or (s.terminal and t.dest == s.id):
                for r in t.rules:
                    expected |= set(rules[r].invariants) if r in rules else set()
        assert set(s.invariants) == expected & loop_invariants, s.id
    assert "INV-W-RECONCILED" in {i for r in ("R46",) for i in rules[r].invariants}
    assert "INV-CHECKED-BEFORE-EXEC" in machine.state("validated").invariants
    # without SPEC.md rules, nothing is attached (and nothing is invented)
    bare = extract_machine(spec)
    assert all(s.invariants == () for s in bare.states)


def test_merged_edges_cover_each_single_source_transition_once(machine) -> None:
    drawn = [m.id for _, _, members in merged_edges(machine) for m in members]
    assert drawn == [e.id for e in machine.edges if len(e.sources) == 1]
    for src, dst, members in merged_edges(machine):
        assert all(m.sources == (src,) and m.dest == dst for m in members)
        assert len({m.kind for m in members}) == 1
        assert [m.order for m in members] == list(range(members[0].order, members[0].order + len(members)))


def test_check_flow_is_the_check_then_start_groups_in_spec_order_R1(spec) -> None:
    flow = extract_check_flow(spec)
    expected = [t.id for source, trigger in CHECK_GROUPS for t in spec.group(source, trigger)]
    assert [d.transition for d in flow.decisions] == expected
    assert [d.step for d in flow.decisions] == list(range(1, len(expected) + 1))
    # the last transition of the start group is the unguarded execution
    assert flow.decisions[-1].question == "" and flow.decisions[-1].dest == "executing"


def test_check_flow_agrees_with_the_core_decide_R1(spec) -> None:
    """Failing exactly the n-th check of the flow (all earlier ones passing) yields the code of
    the n-th error transition in core.decide: the drawn order is the implemented order."""
    flow = extract_check_flow(spec)
    call_checks = [d for d in flow.decisions if d.code is not None]
    codes_in_flow = [d.code for d in call_checks]
    passing = dict(request_admitted=True, well_formed=True, allow_listed=True, arguments_valid=True,
                   binding="fresh", authorized=True, deadline_passed=False, budget_left=True, tool_budget_left=True)
    seen = []
    for d in call_checks:
        (guard,) = [g for g in spec.transition(d.transition).guards]
        args = dict(passing)
        if guard == "id_conflict":
            args["binding"] = "conflict"
        else:
            args[guard] = d.fires_on == "yes"
        action, code = decide(**args)
        assert action == "reject"
        seen.append(code)
    assert seen == codes_in_flow
    assert decide(**passing) == ("execute", None)


def test_check_flow_questions_fire_on_the_guard_polarity(spec) -> None:
    for d in extract_check_flow(spec).decisions:
        t = spec.transition(d.transition)
        if len(t.guards) == 1:
            assert d.question == t.guards[0] + "?"
            assert d.fires_on == ("yes" if t.when else "no")


@pytest.mark.parametrize("groups", list(itertools.permutations(CHECK_GROUPS)))
def test_check_flow_follows_the_requested_groups(spec, groups) -> None:
    flow = extract_check_flow(spec, groups)
    assert flow.groups == groups
    assert [g for g, _ in flow.by_group()] == list(groups)


def test_check_flow_rejects_an_empty_group(spec) -> None:
    with pytest.raises(ValueError, match="no transition leaving"):
        extract_check_flow(spec, [("completed", "check")])
