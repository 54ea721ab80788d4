"""Exhaustive bounded model checking of SPEC.md section 6: writes, crashes and restarts.

The system explored is one run whose model proposes write calls (a call id and one key argument's
value, from small alphabets) and an application that carries them out through the durable operation
ledger with the decisions of :mod:`loopspec.core.writes` (or a broken variant's). Every step is one
durable transaction or one message, and between any two of them the process may **crash** (its
volatile state — where it was in a request, a response it had received but not recorded — is lost;
the ledger, the run's recorded requests and answers, and the external system survive) and
**restart** (recovery, R46). The **environment** chooses the model's next call (or the end of the
run), how the external system answers each send (applied and answered, applied and the answer lost,
lost before it applied, rejected definitely; with an idempotency record a key already applied is not
applied again) and whether a lookup is unavailable (at most ``outages`` times).

A lookup is a question and an answer. When the policy records nothing between them (:func:`loopspec.core.writes.
before_lookup`: the correct policy, R43) the two are one step: asking changes nothing durable and nothing in the
external system, so a crash after the question reaches exactly the state a crash before it does, and the step in
between would only add states that differ in the volatile position. When the policy records something before
the answer (the ``failed-before-lookup`` variant), the question is a step of its own — ``lookup K asked; record
T before its answer`` — and the process may crash after it, before the answer (the crash point
``after-lookup``); the answer then records its own state over whatever was recorded (``lookup K: applied``).

Ghost state, which no implementation can see, makes the invariants of ``writes.toml`` checkable:
the number of remote effects per business key; the keys whose last send has an outcome the
application does not know; and, at each send, whether its operation was durably ``dispatched`` and
whether an earlier send of the key was still unresolved. The search is breadth-first, so the first
violation found has a shortest path; the path is returned as data (step labels).
"""

from __future__ import annotations

import tomllib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ..core import writes as w
from ..spec.base import default_spec_path

__all__ = ["Scope", "WState", "WriteExploration", "explore_writes", "invariants_violated", "load_write_scopes",
           "replay_labels", "summary"]


@dataclass(frozen=True)
class Scope:
    name: str
    reconcile: str = "record"
    ids: tuple[str, ...] = ("c1", "c2")
    values: tuple[str, ...] = ("a", "b")
    max_requests: int = 2
    budget: int = 2
    crashes: int = 1
    outages: int = 1
    slow: bool = False
    expected: dict[str, Any] = field(default_factory=dict)
    #: variant -> why this scope cannot catch it (``[scope.NAME.uncaught]``)
    uncaught: dict[str, str] = field(default_factory=dict)


class WState(NamedTuple):
    # durable: the operation ledger ((app key, business key, state), sorted), the run's requests and answers
    ops: tuple[tuple[str, str, str], ...]
    requests: tuple[tuple[str, str], ...]
    answers: tuple[str, ...]
    marks: int                                # dispatch marks recorded (W02): what the budget charges (R45)
    # volatile: where the application is ("idle", "down", ("reconcile", done, then), ("intent", i), ...)
    pc: tuple[Any, ...]
    # the external system: app keys it applied (its record / what a lookup finds)
    remote: frozenset[str]
    # environment budget
    crashes_left: int
    outages_left: int
    # ghosts
    effects: tuple[tuple[str, int], ...]      # business key -> remote effects (capped at 2)
    unresolved: frozenset[str]                # business keys whose last send's outcome the app does not know
    sends: int
    undurable_sends: int                      # sends while the operation was not durably `dispatched`
    blind_sends: int                          # sends while an earlier send of the key was unresolved


def _op(s: WState, ak: str) -> str:
    return next((st for k, _t, st in s.ops if k == ak), "absent")


def _set_op(s: WState, ak: str, tk: str, state: str) -> tuple[tuple[str, str, str], ...]:
    rest = [o for o in s.ops if o[0] != ak]
    return tuple(sorted([*rest, (ak, tk, state)]))


def _keys(sc: Scope, policy: w.Policy, req: tuple[str, str]) -> tuple[str, str]:
    cid, value = req
    return (cid if policy.key_by_call_id else value), value


def _bump(effects: tuple[tuple[str, int], ...], tk: str) -> tuple[tuple[str, int], ...]:
    d = dict(effects)
    d[tk] = min(2, d.get(tk, 0) + 1)
    return tuple(sorted(d.items()))


def invariants_violated(s: WState, sc: Scope) -> list[str]:
    out: list[str] = []
    if any(n > 1 for _k, n in s.effects):
        out.append("INV-W-ONE-EFFECT")
    if s.undurable_sends:
        out.append("INV-W-DURABLE-BEFORE-SEND")
    if s.blind_sends:
        out.append("INV-W-NO-BLIND-REDISPATCH")
    for ak, _tk, st in s.ops:
        if (st == "confirmed" and ak not in s.remote) or (st == "failed" and ak in s.remote):
            out.append("INV-W-LEDGER-TRUTH")
            break
    if s.pc[0] == "done":
        status, listed = s.pc[1], s.pc[2]
        unknown = tuple(sorted(ak for ak, _t, st in s.ops if st == "unknown"))
        if (any(st in ("intent", "dispatched") for _a, _t, st in s.ops)
                or (status == "COMPLETED" and unknown) or listed != unknown):
            out.append("INV-W-RECONCILED")
    if s.sends > sc.budget or s.marks > sc.budget:
        out.append("INV-W-DISPATCH-BUDGET")
    return out


def initial(sc: Scope) -> WState:
    return WState((), (), (), 0, ("idle",), frozenset(), sc.crashes, sc.outages, (), frozenset(), 0, 0, 0)


def _lookups(s: WState, ak: str, tk: str) -> Iterator[tuple[str, WState]]:
    """The environment's answers to a lookup of ``ak`` (asked while the key was unknown): the external system's
    truth, or unavailable. The answer's transition is recorded from ``unknown``, over anything a broken policy
    recorded while the lookup was asked (for the correct policy the key is still unknown: the same state)."""
    truth: w.Lookup = "applied" if ak in s.remote else "not_applied"
    yield truth, s._replace(ops=_set_op(s, ak, tk, w.op_step("unknown", w.on_lookup(truth))),
                            unresolved=s.unresolved - {tk})
    if s.outages_left > 0:
        yield "unavailable", s._replace(ops=_set_op(s, ak, tk, w.op_step("unknown", w.on_lookup("unavailable"))),
                                        outages_left=s.outages_left - 1)


def _ask(s: WState, ak: str, tk: str, policy: w.Policy, *, recovery: bool,
         asked: tuple[Any, ...]) -> tuple[str, WState] | None:
    """The question of a lookup of unknown ``ak`` as a step of its own, when the policy records something before
    the answer (then the process is at ``asked``, where it may crash); ``None`` when it records nothing."""
    pre = w.before_lookup("unknown", policy, recovery=recovery)
    if pre is None:
        return None
    return (f"lookup {ak} asked; record {pre} before its answer",
            s._replace(ops=_set_op(s, ak, tk, w.op_step("unknown", pre)), pc=asked))


def successors(s: WState, sc: Scope, policy: w.Policy) -> Iterator[tuple[str, WState]]:
    """Every step from ``s``: (label, next state). Labels read as a script."""
    pc = s.pc
    if pc[0] == "done":
        return
    if pc[0] != "down" and s.crashes_left > 0:
        yield "crash", s._replace(pc=("down",), crashes_left=s.crashes_left - 1)
    kind = pc[0]
    if kind == "down":
        yield "restart", s._replace(pc=("reconcile", (), "idle"))
        return
    if kind == "reconcile":  # recovery (then="idle") or the end of the run (then="end"): R46, R42
        done, then = pc[1], pc[2]
        for ak, tk, st in s.ops:
            rec = w.on_recovery(st, policy) if then == "idle" else None
            if rec is not None:
                yield f"recover {ak}: {rec}", s._replace(ops=_set_op(s, ak, tk, w.op_step(st, rec)))
                return
        for ak, tk, st in s.ops:
            if st == "unknown" and ak not in done and sc.reconcile != "none" and not policy.retry_without_lookup:
                if ask := _ask(s, ak, tk, policy, recovery=then == "idle", asked=("reconcile_asked", done, then, ak, tk)):
                    yield ask
                    return
                for res, n in _lookups(s, ak, tk):
                    yield f"lookup {ak}: {res}", n._replace(pc=("reconcile", (*done, ak), then))
                return
        if then == "idle":
            yield "recovered", s._replace(pc=("idle",))
        else:
            unknown = tuple(sorted(ak for ak, _t, st in s.ops if st == "unknown"))
            yield ("finish COMPLETED" if not unknown else "finish UNRECONCILED",
                   s._replace(pc=("done", "UNRECONCILED" if unknown else "COMPLETED", unknown)))
        return
    if kind == "reconcile_asked":  # a recovery's or the end's lookup asked, its answer not yet recorded
        done, then, ak, tk = pc[1:]
        for res, n in _lookups(s, ak, tk):
            yield f"lookup {ak}: {res}", n._replace(pc=("reconcile", (*done, ak), then))
        return
    if kind == "idle":
        i = len(s.answers)
        if i < len(s.requests):
            yield from _check(s, sc, policy, i)
            return
        if len(s.requests) < sc.max_requests:
            for cid in sc.ids:
                for v in sc.values:
                    yield f"request {cid}({v})", s._replace(requests=(*s.requests, (cid, v)))
        yield "end of run", s._replace(pc=("reconcile", (), "end"))
        return
    i = pc[1]
    ak, tk = _keys(sc, policy, s.requests[i])
    if kind == "intent":
        if policy.record_after_dispatch:
            yield from _send(s, sc, ak, tk, i, then_mark=True)
        else:
            yield "mark dispatched", s._replace(ops=_set_op(s, ak, tk, w.op_step(_op(s, ak), "mark_dispatched")),
                                                 marks=s.marks + 1, pc=("marked", i))
        return
    if kind == "marked":
        yield from _send(s, sc, ak, tk, i, then_mark=False)
        return
    if kind == "sent_unmarked":  # the broken variant: the mark comes after the send
        st = _op(s, ak)
        yield "mark dispatched", s._replace(ops=_set_op(s, ak, tk, "dispatched" if st == "intent" else st),
                                             marks=s.marks + (st == "intent"), pc=("sent", i, pc[2]))
        return
    if kind == "sent":
        t = w.on_response(pc[2], policy)
        st = _op(s, ak)
        new = w.op_step(st, t) if st == "dispatched" else st
        unresolved = s.unresolved - {tk} if pc[2] != "lost" else s.unresolved
        answer = {"confirm": "ok", "reject": "failed", "lose_outcome": w.OUTCOME_UNKNOWN}[t]
        yield f"record {t}", s._replace(ops=_set_op(s, ak, tk, new), unresolved=unresolved, pc=("answer", i, answer))
        return
    if kind == "answer":
        yield f"answer {pc[2]}", s._replace(answers=(*s.answers, pc[2]), pc=("idle",))
        return
    if kind in ("lookup", "lookup_asked"):  # a request's own reconciliation (R42: before anything else happens to it)
        if kind == "lookup" and (ask := _ask(s, ak, tk, policy, recovery=False, asked=("lookup_asked", i))):
            yield ask
            return
        for res, n in _lookups(s, ak, tk):
            yield f"lookup {ak}: {res}", n._replace(pc=("answer", i, w.OUTCOME_UNKNOWN) if res == "unavailable"
                                                    else ("idle",))
        return
    raise AssertionError(f"unknown pc {pc!r}")


def _check(s: WState, sc: Scope, policy: w.Policy, i: int) -> Iterator[tuple[str, WState]]:
    ak, tk = _keys(sc, policy, s.requests[i])
    st = _op(s, ak)
    action = w.on_request(st, sc.reconcile, policy)
    if action == "replay":
        yield "answer from ledger", s._replace(answers=(*s.answers, "ok"))
    elif action == "answer_unknown":
        yield "answer OUTCOME_UNKNOWN", s._replace(answers=(*s.answers, w.OUTCOME_UNKNOWN))
    elif action == "reconcile":
        if st == "dispatched":  # only after a crash; recovery makes it unknown first
            yield "record lose_outcome", s._replace(ops=_set_op(s, ak, tk, "unknown"))
        else:
            yield "reconcile", s._replace(pc=("lookup", i))
    elif action == "resume_intent":
        yield "resume intent", s._replace(pc=("intent", i))
    else:  # dispatch: a new attempt (W01), reserved from the budget (R45): the budget counts dispatch marks,
        # durable, not sends, which a crash between the mark and the send hides from every implementation
        if s.marks >= sc.budget:
            yield "answer BUDGET_EXHAUSTED", s._replace(answers=(*s.answers, "BUDGET_EXHAUSTED"))
            return
        new = "intent" if policy.retry_without_lookup and st in ("unknown", "dispatched") else w.op_step(st, "record_intent")
        yield "record intent", s._replace(ops=_set_op(s, ak, tk, new), pc=("intent", i))


def _send(s: WState, sc: Scope, ak: str, tk: str, i: int, *, then_mark: bool) -> Iterator[tuple[str, WState]]:
    """One send: the external system's possible answers (R38, R41)."""
    ghost = s._replace(sends=s.sends + 1,
                       undurable_sends=s.undurable_sends + (_op(s, ak) != "dispatched"),
                       blind_sends=s.blind_sends + (tk in s.unresolved),
                       unresolved=s.unresolved | {tk})
    nxt = "sent_unmarked" if then_mark else "sent"
    if sc.reconcile == "record" and ak in s.remote:  # deduplicated by the idempotency record
        yield "send: already applied, answered", ghost._replace(pc=(nxt, i, "applied"))
        yield "send: already applied, answer lost", ghost._replace(pc=(nxt, i, "lost"))
        return
    applied = ghost._replace(remote=s.remote | {ak}, effects=_bump(s.effects, tk))
    yield "send: applied, answered", applied._replace(pc=(nxt, i, "applied"))
    yield "send: applied, answer lost", applied._replace(pc=(nxt, i, "lost"))
    yield "send: lost before applied", ghost._replace(pc=(nxt, i, "lost"))
    yield "send: rejected", ghost._replace(pc=(nxt, i, "rejected"))


@dataclass
class WriteExploration:
    scope: str
    variant: str
    states: int
    transitions: int
    terminal: int
    violation: list[str] | None = None   # the invariants broken, when one is
    path: list[str] | None = None        # the shortest path to it (step labels)

    def figures(self) -> dict[str, int]:
        return {"states": self.states, "transitions": self.transitions, "terminal": self.terminal}


def explore_writes(sc: Scope, variant: str = "correct", *, only: frozenset[str] | None = None,
                   max_states: int = 2_000_000) -> WriteExploration:
    """Breadth-first over every state of ``sc`` under the correct policy or a broken variant; stops at the
    first state that breaks an invariant (a shortest counterexample) or when every state is explored.
    ``only``: check just these invariants (to show what a variant breaks beyond its first symptom)."""
    policy = w.CORRECT if variant == "correct" else w.VARIANTS[variant]
    start = initial(sc)
    parent: dict[WState, tuple[WState, str] | None] = {start: None}
    queue = deque([start])
    transitions = terminal = 0
    while queue:
        s = queue.popleft()
        bad = invariants_violated(s, sc)
        if only is not None:
            bad = [b for b in bad if b in only]
        if bad:
            path: list[str] = []
            cur = s
            while (p := parent[cur]) is not None:
                path.append(p[1])
                cur = p[0]
            return WriteExploration(sc.name, variant, len(parent), transitions, terminal, bad, path[::-1])
        if s.pc[0] == "done":
            terminal += 1
        for label, n in successors(s, sc, policy):
            transitions += 1
            if n not in parent:
                if len(parent) >= max_states:
                    raise RuntimeError(f"scope {sc.name}: more than {max_states} states")
                parent[n] = (s, label)
                queue.append(n)
    return WriteExploration(sc.name, variant, len(parent), transitions, terminal)


def load_write_scopes(path: str | Path | None = None) -> dict[str, Scope]:
    """The scopes of ``writes-bounds.toml`` (beside the spec), with their committed expected figures."""
    p = Path(path) if path is not None else default_spec_path().with_name("writes-bounds.toml")
    doc = tomllib.loads(p.read_text(encoding="utf-8"))
    out: dict[str, Scope] = {}
    for name, raw in (doc.get("scope") or {}).items():
        raw = dict(raw)
        expected = raw.pop("expected", {})
        expected["variants"] = raw.pop("variants", {})
        for k in ("ids", "values"):
            if k in raw:
                raw[k] = tuple(raw[k])
        out[name] = Scope(name=name, expected=expected, **raw)
    return out


def replay_labels(sc: Scope, labels: list[str], variant: str = "correct") -> WState:
    """Follow a script of step labels from the initial state (a counterexample, a conformance vector);
    ``ValueError`` names the first label that is not a step from where the script is."""
    policy = w.CORRECT if variant == "correct" else w.VARIANTS[variant]
    s = initial(sc)
    for n, label in enumerate(labels):
        nxt = dict(successors(s, sc, policy))
        if label not in nxt:
            raise ValueError(f"step {n}: {label!r} is not possible here; possible: {sorted(nxt)}")
        s = nxt[label]
    return s


def summary(s: WState) -> dict[str, Any]:
    """What a script leads to, as plain data: the answers, each key's operation state, effects per key."""
    return {"answers": list(s.answers), "operations": {ak: st for ak, _t, st in s.ops},
            "effects": dict(s.effects), "dispatches": s.sends,
            "status": s.pc[1] if s.pc[0] == "done" else None,
            "unreconciled": list(s.pc[2]) if s.pc[0] == "done" else None}


def main() -> None:  # pragma: no cover - a helper for updating writes-bounds.toml
    for name, sc in load_write_scopes().items():
        r = explore_writes(sc)
        print(name, r.figures(), r.violation)
        for v in w.VARIANTS:
            x = explore_writes(sc, v)
            print(f"  {v} = {{ violated = {x.violation}, length = {len(x.path or [])} }}"
                  + (f"  # uncaught: {sc.uncaught[v]}" if v in sc.uncaught else ""))


if __name__ == "__main__":  # pragma: no cover
    main()
