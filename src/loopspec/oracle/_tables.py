"""Spec-derived tables the ledger checker needs, built once per loaded spec.

Nothing about states, transitions, guards, codes or rules is written here by hand: the driving
group of each state, the order of the per-call checks, the transition answering each code, the
rules and the invariants they cite all come from ``spec/loop.toml`` and ``spec/SPEC.md``. The only
hand-written table is :data:`EFFECT_EVENTS`, which is the ledger format itself (version 1): the
events each effect of the engine records, in order. It is checked against the spec's effects when
the tables are built and against real engine ledgers by the tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..core import rules as core
from ..spec.loader import WRITE_SECTION, Spec, Transition, load_rules

#: Ledger format v1: the events an effect records, in order. Each entry is the set of event types
#: allowed at that position (the model's reply is one of three events).
EFFECT_EVENTS: Final[Mapping[str, tuple[frozenset[str], ...]]] = {
    "ask_model": (frozenset({"model_requested"}), frozenset({"model_proposed", "model_final", "model_failed"})),
    "next_item": (frozenset({"call_advanced"}),),
    "end_round": (frozenset({"round_decided"}),),
    "answer_error": (frozenset({"call_rejected"}), frozenset({"result_returned"})),
    "answer_replay": (frozenset({"call_replayed"}), frozenset({"result_returned"})),
    "bind_id": (frozenset({"call_validated"}),),
    "keep_binding": (frozenset({"call_validated"}),),
    "start_execution": (frozenset({"execution_started"}), frozenset({"execution_finished"})),
    "retry_execution": (frozenset({"execution_started"}), frozenset({"execution_finished"})),
    "store_success": (frozenset({"result_returned"}),),
    "answer_failure": (frozenset({"result_returned"}),),
    "terminate": (frozenset({"run_terminal"}),),
    # section 5 (executions in the background)
    "wait": (frozenset({"run_waiting"}),),
    "land": (frozenset({"execution_finished"}),),
    "run_on": (frozenset({"execution_running"}),),
}

#: Section 5 (max_concurrency > 1): an execution runs on in the background, so its start step records
#: only execution_started; a step records one result_returned for each answer it commits, in request
#: order — none while an earlier request is still executing (the checker adds them, R32); the end step
#: records each execution in flight as execution_abandoned before run_terminal (the checker keeps
#: those until run_terminal names the transition, R35).
CONCURRENT_EFFECT_EVENTS: Final[Mapping[str, tuple[frozenset[str], ...]]] = {
    **{k: tuple(x for x in v if x != frozenset({"result_returned"})) for k, v in EFFECT_EVENTS.items()},
    "start_execution": (frozenset({"execution_started"}),),
    "retry_execution": (frozenset({"execution_started"}),),
}

#: Events recorded outside any transition.
UNTRANSITIONED_EVENTS: Final = frozenset({"run_started", "late_result_discarded", "run_resumed", "write_recorded",
                                          "write_failed"})

#: Every event type of ledger format v1.
EVENT_TYPES: Final = frozenset(t for steps in EFFECT_EVENTS.values() for s in steps for t in s) | UNTRANSITIONED_EVENTS | {
    "execution_abandoned"}

#: The four binding guards and the class of :func:`loopspec.core.rules.classify_binding` each tests.
BINDING_GUARDS: Final[Mapping[str, str]] = {
    "id_conflict": "conflict", "id_replay": "replay", "id_fresh": "fresh", "id_unresolved": "unresolved",
}


class TablesError(ValueError):
    """The spec and the ledger format disagree (a spec change the oracle does not know how to read)."""


@dataclass(frozen=True)
class Tables:
    spec: Spec
    #: state -> the transitions of its driving (non-cancel) trigger, in evaluation order (R0)
    groups: Mapping[str, tuple[Transition, ...]]
    #: transition id -> its guard conditions as (guard id, required value), in evaluation order
    conditions: Mapping[str, tuple[tuple[str, bool], ...]]
    #: transition id -> the conditions that held when it fired (the earlier ones of its group failed)
    reasons: Mapping[str, tuple[tuple[str, bool], ...]]
    by_id: Mapping[str, Transition]
    cancel: frozenset[str]
    terminal_states: frozenset[str]
    code_transition: Mapping[str, str]
    #: code -> position of its check in R1's order (rejections before the execution)
    check_order: Mapping[str, int]
    #: effect id -> transition ids with that effect
    by_effect: Mapping[str, tuple[str, ...]]
    #: the transitions whose firing is how the ledger reports an input the oracle cannot recompute
    schema_check: str | None  # the transition refusing invalid arguments (R4)
    auth_check: str | None  # the transition denying an unauthorized call (R24)
    unreconciled_stop: str | None  # the transition ending a run whose write is still unknown (R46)
    #: rule id -> the invariants SPEC.md cites for it ("Checked by:")
    rules: Mapping[str, tuple[str, ...]]
    #: rule ids in document order
    rule_ids: tuple[str, ...]
    #: effect id -> the first transition with that effect (the only one, for most effects)
    first_by_effect: Mapping[str, Transition]
    #: stop reason -> the terminating transitions recording it
    by_stop_reason: Mapping[str, tuple[Transition, ...]]
    #: code kind -> the escalating transition for it
    by_escalation: Mapping[str, Transition]
    stop_reason_ids: frozenset[str]

    def transition(self, tid: str) -> Transition:
        return self.by_id[tid]


def _rules(spec: Spec) -> dict[str, tuple[str, ...]]:
    path = Path(spec.path).with_name("SPEC.md") if spec.path else None
    try:
        rules = load_rules(path, spec=spec) if path is not None and path.is_file() else load_rules(spec=spec)
    except (OSError, ValueError):
        rules = ()
    return {r.id: r.invariants for r in rules if r.section != WRITE_SECTION}  # section 6: the operation ledger


def build_tables(spec: Spec) -> Tables:
    problems: list[str] = []
    effect_ids = {e.id for e in spec.effects}
    for e in sorted(effect_ids ^ set(EFFECT_EVENTS)):
        where = "spec" if e in effect_ids else "ledger format"
        problems.append(f"effect {e}: known only to the {where}")
    for g in spec.guards:
        if g.id not in core.GUARDS:
            problems.append(f"guard {g.id}: no implementation in the core")
    groups: dict[str, tuple[Transition, ...]] = {}
    for st in spec.states:
        if st.terminal:
            continue
        triggers = [t for t in spec.triggers_from(st.id) if t != "cancel"]
        if len(triggers) != 1:
            problems.append(f"state {st.id}: a ledger step needs exactly one driving trigger, found {triggers}")
            continue
        groups[st.id] = spec.group(st.id, triggers[0])
    if problems:
        raise TablesError("the spec and the ledger format disagree:\n  " + "\n  ".join(problems))
    conditions: dict[str, tuple[tuple[str, bool], ...]] = {}
    for t in spec.transitions:
        conditions[t.id] = tuple((g, True) for g in t.when) + tuple((g, False) for g in t.unless)
    reasons: dict[str, tuple[tuple[str, bool], ...]] = {}
    for group in groups.values():
        before: list[tuple[str, bool]] = []
        for t in group:
            reasons[t.id] = tuple(before) + conditions[t.id]
            # the transition did not fire: with one guard its negation holds; several guards are
            # recorded as the negation of the first (the common shape: a single guard per transition)
            if len(conditions[t.id]) == 1:
                g, want = conditions[t.id][0]
                before.append((g, not want))
    code_transition = {t.code: t.id for t in spec.transitions if t.code is not None}
    check_order = {t.code: n for n, t in enumerate(spec.transitions)
                   if t.code is not None and "R1" in t.rules and core.code_kind(t.code) != "failure"}
    by_effect: dict[str, list[str]] = {}
    for t in spec.transitions:
        if t.effect is not None:
            by_effect.setdefault(t.effect, []).append(t.id)
    schema_check = next((t.id for t in spec.transitions if "arguments_valid" in t.unless), None)
    auth_check = next((t.id for t in spec.transitions if "authorized" in t.unless), None)
    unreconciled_stop = next((t.id for t in spec.transitions if "unreconciled_left" in t.when), None)
    rules = _rules(spec)
    return Tables(
        spec=spec,
        groups=groups,
        conditions=conditions,
        reasons=reasons,
        by_id={t.id: t for t in spec.transitions},
        cancel=frozenset(t.id for t in spec.transitions if t.trigger == "cancel"),
        terminal_states=frozenset(s.id for s in spec.states if s.terminal),
        code_transition=code_transition,
        check_order=check_order,
        by_effect={k: tuple(v) for k, v in by_effect.items()},
        schema_check=schema_check,
        auth_check=auth_check,
        unreconciled_stop=unreconciled_stop,
        rules=rules,
        rule_ids=tuple(rules),
        first_by_effect={e: next(t for t in spec.transitions if t.effect == e) for e in by_effect},
        by_stop_reason={r.id: tuple(t for t in spec.transitions if t.effect == "terminate" and t.stop_reason == r.id)
                        for r in spec.stop_reasons},
        by_escalation={t.escalates: t for t in spec.transitions if t.escalates is not None},
        stop_reason_ids=frozenset(r.id for r in spec.stop_reasons),
    )


def compile_groups(t: Tables, guard_source: Mapping[str, str], namespace: dict[str, object],
                   constants: Mapping[str, bool] | None = None) -> dict[str, object]:
    """Compile each state's driving group into one Python function ``f(c, s) -> Transition`` that tests
    the guards in the spec's order (R0), first enabled wins. Generated from the spec data, so it stays
    the spec's; ``guard_source`` gives the expression for each guard id (``s`` is the RunState, ``c``
    the checker) and ``namespace`` the names those expressions use. ``constants``: guards whose value
    the run's configuration fixes (no limit set: the budget guard always holds; a sequential run: no
    result ever arrives in the background), folded in: a condition that always holds is not tested, a
    transition whose condition never holds is left out (the order of the rest is the spec's)."""
    ns: dict[str, object] = dict(namespace)
    src: list[str] = []
    const = constants or {}
    for state, group in t.groups.items():
        src.append(f"def expected_{state}(c, s):")
        for tr in group:
            ns[f"T_{tr.id}"] = tr
            fixed = [const[g] == want for g, want in t.conditions[tr.id] if g in const]
            if not all(fixed):
                continue  # never enabled under this configuration
            conds = [guard_source[g] if want else f"not ({guard_source[g]})" for g, want in t.conditions[tr.id]
                     if g not in const]
            if conds:
                src.append(f"    if {' and '.join(conds)}:")
                src.append(f"        return T_{tr.id}")
            else:
                src.append(f"    return T_{tr.id}")
        src.append("    return None")
    exec(compile("\n".join(src) + "\n", "<loopspec spec groups>", "exec"), ns)
    return {state: ns[f"expected_{state}"] for state in t.groups}


_CACHE: dict[int, Tables] = {}


def tables_for(spec: Spec) -> Tables:
    key = id(spec)
    t = _CACHE.get(key)
    if t is None or t.spec is not spec:
        t = _CACHE[key] = build_tables(spec)
    return t
