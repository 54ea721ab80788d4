"""Extract the diagram model (a small intermediate representation) from the loaded spec.

Everything here is derived from :func:`loopspec.load_spec` and the rules of SPEC.md: nothing about
states, transitions, codes or invariants is written by hand. The renderers (``dot``, ``mermaid``,
``markdown``) are pure functions of these dataclasses.

* :class:`Machine` — the loop machine: states (with the stop reasons of each terminal status and
  the invariants attached to each state), and one :class:`Edge` per spec transition with its
  trigger, guard and effect labels and its :data:`EdgeKind` (what styling it gets).
* :class:`CheckFlow` — the per-call decision flow of R1: the ``check`` group leaving ``proposed``
  followed by the ``start`` group leaving ``validated``, in evaluation order (R0).

Invariants are attached to states through the rules: a transition cites rules, a rule cites the
invariants that check it ("Checked by:" in SPEC.md). A state carries the invariants cited by the
transitions leaving it (what is decided there) and, for a terminal state, by those entering it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from ..spec.loader import Rule, Spec, Transition

__all__ = [
    "ANSWERING_EFFECTS",
    "CHECK_GROUPS",
    "CheckFlow",
    "Decision",
    "Edge",
    "EdgeKind",
    "Machine",
    "StateNode",
    "edge_kind",
    "extract_check_flow",
    "extract_machine",
    "merged_edges",
]

#: How a transition is drawn. ``error``: the request is answered with an error and the run goes
#: on; ``abort``: the run ends in a terminal state that is not COMPLETED (escalations included);
#: ``complete``: the run ends COMPLETED; ``normal``: everything else.
EdgeKind = Literal["normal", "error", "abort", "complete"]

#: Effects that answer the request with an error (a spec code, or the failure's category).
ANSWERING_EFFECTS: Final = frozenset({"answer_error", "answer_failure"})

#: The (source state, trigger) groups whose evaluation order is the per-call check order (R1).
CHECK_GROUPS: Final = (("proposed", "check"), ("validated", "start"))


@dataclass(frozen=True, slots=True)
class StateNode:
    id: str
    phase: str
    doc: str
    initial: bool
    status: str | None
    #: The triggers that leave this state, in spec order (empty for a terminal state).
    triggers: tuple[str, ...]
    #: For a terminal state: the stop reasons that carry its status, in spec order.
    stop_reasons: tuple[str, ...]
    #: Invariant ids attached to this state (see the module docstring), in spec order.
    invariants: tuple[str, ...]

    @property
    def terminal(self) -> bool:
        return self.phase == "terminal"


@dataclass(frozen=True, slots=True)
class Edge:
    """One spec transition. ``sources`` has several states for a transition like ``cancel``."""

    id: str
    name: str
    trigger: str
    sources: tuple[str, ...]
    dest: str
    when: tuple[str, ...]
    unless: tuple[str, ...]
    guard: str
    effect: str | None
    code: str | None
    stop_reason: str | None
    escalates: str | None
    rules: tuple[str, ...]
    kind: EdgeKind
    #: 1-based position in its (source, trigger) group: evaluation order (R0).
    order: int
    #: How many transitions its (source, trigger) group has.
    group_size: int

    @property
    def effect_label(self) -> str:
        """The effect with its argument: ``answer_error(INVALID_CALL)``, ``terminate(DEADLINE)``."""
        name = self.effect or ""
        arg = self.code or self.stop_reason or (f"‹{self.escalates}›" if self.escalates else "")
        return f"{name}({arg})" if arg else name

    @property
    def label(self) -> str:
        """UML-style ``trigger [guard] / effect``."""
        parts = [self.trigger]
        if self.guard:
            parts.append(self.guard)
        if self.effect:
            parts.append("/ " + self.effect_label)
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Machine:
    name: str
    version: str
    phases: tuple[str, ...]
    initial: str
    states: tuple[StateNode, ...]
    edges: tuple[Edge, ...]
    #: (invariant id, doc), in spec order.
    invariants: tuple[tuple[str, str], ...]
    #: (status, terminal state id), in the order of the terminal states.
    statuses: tuple[tuple[str, str], ...]

    def state(self, sid: str) -> StateNode:
        for s in self.states:
            if s.id == sid:
                return s
        raise KeyError(sid)

    def edge(self, tid: str) -> Edge:
        for e in self.edges:
            if e.id == tid:
                return e
        raise KeyError(tid)

    @property
    def active_states(self) -> tuple[StateNode, ...]:
        return tuple(s for s in self.states if not s.terminal)

    @property
    def terminal_states(self) -> tuple[StateNode, ...]:
        return tuple(s for s in self.states if s.terminal)


@dataclass(frozen=True, slots=True)
class Decision:
    """One step of the per-call decision flow: a transition of a check group, in order."""

    step: int
    transition: str
    state: str
    trigger: str
    #: What is asked: ``"well_formed?"`` for a single guard, the bracket label for several,
    #: ``""`` for the unguarded fallback (it fires when every earlier question let the call pass).
    question: str
    #: The answer to ``question`` that makes the transition fire: ``"yes"`` or ``"no"``.
    fires_on: Literal["yes", "no", ""]
    dest: str
    effect: str | None
    effect_label: str
    code: str | None
    kind: EdgeKind
    rules: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CheckFlow:
    name: str
    version: str
    groups: tuple[tuple[str, str], ...]
    decisions: tuple[Decision, ...]

    def by_group(self) -> list[tuple[tuple[str, str], tuple[Decision, ...]]]:
        return [(g, tuple(d for d in self.decisions if (d.state, d.trigger) == g)) for g in self.groups]


# --------------------------------------------------------------------------------------------


def edge_kind(spec: Spec, t: Transition) -> EdgeKind:
    dest = spec.state(t.dest)
    if dest.terminal:
        return "complete" if dest.status == "COMPLETED" else "abort"
    if t.code is not None or t.effect in ANSWERING_EFFECTS:
        return "error"
    return "normal"


def _invariants_by_transition(spec: Spec, rules: Sequence[Rule]) -> dict[str, tuple[str, ...]]:
    by_rule = {r.id: r.invariants for r in rules}
    out: dict[str, tuple[str, ...]] = {}
    for t in spec.transitions:
        seen: dict[str, None] = {}
        for r in t.rules:
            for inv in by_rule.get(r, ()):
                seen.setdefault(inv, None)
        out[t.id] = tuple(seen)
    return out


def _in_spec_order(ids: Iterable[str], order: Sequence[str]) -> tuple[str, ...]:
    wanted = set(ids)
    return tuple(i for i in order if i in wanted)


def extract_machine(spec: Spec, rules: Sequence[Rule] = ()) -> Machine:
    """The loop machine of ``spec``. ``rules`` (from :func:`loopspec.load_rules`) attach invariants."""
    inv_order = [i.id for i in spec.invariants]
    by_t = _invariants_by_transition(spec, rules)
    states: list[StateNode] = []
    for s in spec.states:
        attached: set[str] = set()
        for t in spec.transitions:
            if s.id in t.sources or (s.terminal and t.dest == s.id):
                attached.update(by_t[t.id])
        states.append(
            StateNode(
                id=s.id,
                phase=s.phase,
                doc=s.doc,
                initial=s.initial,
                status=s.status,
                triggers=spec.triggers_from(s.id),
                stop_reasons=tuple(r.id for r in spec.stop_reasons if s.terminal and r.status == s.status),
                invariants=_in_spec_order(attached, inv_order),
            )
        )
    edges: list[Edge] = []
    for t in spec.transitions:
        group = spec.group(t.sources[0], t.trigger)
        edges.append(
            Edge(
                id=t.id,
                name=t.name,
                trigger=t.trigger,
                sources=t.sources,
                dest=t.dest,
                when=t.when,
                unless=t.unless,
                guard=t.guard_label(),
                effect=t.effect,
                code=t.code,
                stop_reason=t.stop_reason,
                escalates=t.escalates,
                rules=t.rules,
                kind=edge_kind(spec, t),
                order=group.index(t) + 1,
                group_size=len(group),
            )
        )
    return Machine(
        name=spec.name,
        version=spec.version,
        phases=spec.phases,
        initial=spec.initial.id,
        states=tuple(states),
        edges=tuple(edges),
        invariants=tuple((i.id, i.doc) for i in spec.invariants),
        statuses=tuple((s.status or "", s.id) for s in spec.terminal_states),
    )


def merged_edges(machine: Machine) -> list[tuple[str, str, tuple[Edge, ...]]]:
    """Single-source edges bundled for drawing: consecutive transitions of one (source, trigger)
    group that share destination and kind become one drawn edge ``(source, dest, members)``.

    Multi-source transitions (``cancel``) are left out: the renderers draw them separately.
    The order of the result is deterministic (spec order of the first member).
    """
    out: list[tuple[str, str, tuple[Edge, ...]]] = []
    for e in machine.edges:
        if len(e.sources) != 1:
            continue
        src = e.sources[0]
        if out:
            psrc, pdest, members = out[-1]
            last = members[-1]
            if (psrc, pdest) == (src, e.dest) and last.trigger == e.trigger and last.kind == e.kind \
                    and last.order + 1 == e.order:
                out[-1] = (psrc, pdest, (*members, e))
                continue
        out.append((src, e.dest, (e,)))
    return out


def _question(t: Transition) -> tuple[str, Literal["yes", "no", ""]]:
    if not t.guards:
        return "", ""
    if len(t.guards) == 1:
        return (t.guards[0] + "?", "yes" if t.when else "no")
    return t.guard_label(), "yes"


def extract_check_flow(spec: Spec, groups: Sequence[tuple[str, str]] = CHECK_GROUPS) -> CheckFlow:
    """The per-call decision flow: the transitions of ``groups``, each group in evaluation order."""
    decisions: list[Decision] = []
    for source, trigger in groups:
        group = spec.group(source, trigger)
        if not group:
            raise ValueError(f"the spec has no transition leaving {source!r} on {trigger!r}")
        for t in group:
            q, fires = _question(t)
            e_arg = t.code or t.stop_reason or (f"‹{t.escalates}›" if t.escalates else "")
            decisions.append(
                Decision(
                    step=len(decisions) + 1,
                    transition=t.id,
                    state=source,
                    trigger=trigger,
                    question=q,
                    fires_on=fires,
                    dest=t.dest,
                    effect=t.effect,
                    effect_label=f"{t.effect}({e_arg})" if e_arg else (t.effect or ""),
                    code=t.code,
                    kind=edge_kind(spec, t),
                    rules=t.rules,
                )
            )
    return CheckFlow(spec.name, spec.version, tuple(groups), tuple(decisions))


def invariant_docs(machine: Machine) -> Mapping[str, str]:
    return dict(machine.invariants)
