"""The concurrent model: section 5 of SPEC.md (executions in flight) explored with whole RunStates.

A step of a run with executions in flight is about several requests at once — a landed result
commits the answers held behind it, an abort abandons every execution in flight — so the fast
model's one-id window does not apply. This model keeps the whole :class:`~loopspec.core.rules.RunState`
of every state (like :class:`~loopspec.checker.reference.ReferenceModel`), steps it with the same
:func:`~loopspec.checker.semantics.step` (the core's guards and effects; the environment now also
chooses which execution in flight completes, and when, and how), and checks the invariants of
loop.toml on it with the core's own functions.

Two reductions, both argued in docs/verify.md and checked by :mod:`loopspec.checker.crosscheck`:

* **Symmetry.** Call ids are interchangeable (the alphabet has every call for every id; the core
  and the invariants only compare ids and use them as keys). A state's key renames the ids in the
  order they first appear in the run — requests first, then the items of the current response —
  which is the same for a state and every id-permutation of it: a canonical form.
* **Partial order: commuting landings.** See :func:`independent`: two results in flight, neither
  of them the lowest request in flight, commute when neither is retried. Of the orders in which a
  set of such results can land in a row, only the one in request order is explored (a *sleep set*
  in each state, Godefroid's algorithm, made safe for a breadth-first search with state
  deduplication by exploring a state again when it is reached with a smaller sleep set).

Invariants are checked incrementally: after a step only those that read a field the step changed
(read sets from the core's source, :mod:`loopspec.checker.readsets`) are evaluated, on the whole
RunState; the others hold because they held before and read nothing new.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..core import rules as core
from ..core.rules import Answer, Execution, Outcome, RunState
from .readsets import invariant_read_sets
from .reference import Choice, enumerate_steps, step_label
from .semantics import CORE, Machine, Semantics, tables
from .universe import Universe

__all__ = ["ConcurrentModel", "state_key"]

Json = Any


_CANON: dict[int, tuple[Any, str]] = {}


def _canon(v: Json) -> Json:
    if v is None or isinstance(v, str | int | bool | float):
        return v
    hit = _CANON.get(id(v))
    if hit is not None and hit[0] is v:  # the alphabet's own objects, which nothing mutates
        return hit[1]
    c = core.canonical_json(v)
    out = c if c is not None else repr(v)
    if len(_CANON) < 100_000:
        _CANON[id(v)] = (v, out)
    return out


def _out(o: Json) -> Json:
    """A tool output as a token: the checker's outputs are ``{"execution": n}``."""
    if isinstance(o, dict) and set(o) == {"execution"}:
        return o["execution"]
    return _canon(o)


def _outcome(o: Outcome | None) -> Json:
    if o is None:
        return None
    return ("ok", _out(o.output)) if o.ok else ("err", o.category)


def state_key(cfg: int, ms: str, s: RunState, *, symmetry: bool = True) -> Json:
    """The whole state as a hashable value, call ids renamed canonically (see the module doc)."""
    names: dict[str, str] = {}

    def rn(cid: object) -> object:
        if not symmetry or not isinstance(cid, str):
            return cid
        n = names.get(cid)
        if n is None:
            n = names[cid] = f"#{len(names)}"
        return n

    def call(c: Json) -> Json:
        if not isinstance(c, dict):
            return ("item", _canon(c))
        return (rn(c.get("id")) if "id" in c else "<no id>", _canon(c.get("name")), _canon(c.get("arguments")))

    reqs = tuple((rn(r.call_id), r.round, _canon(r.name), _canon(r.arguments), r.authorized) for r in s.requests)
    resp = None if s.response is None else tuple(call(c) for c in s.response)

    def ans(a: Answer | None) -> Json:
        if a is None:
            return None
        return (a.index, a.round, rn(a.call_id), a.status, _out(a.output) if a.status == "ok" else None, a.code,
                a.replayed, a.executed, a.late)

    def exe(e: Execution) -> Json:
        return (e.request, e.tool, e.principal == s.config.principal, e.ordinal, e.attempts, _outcome(e.outcome),
                e.late, e.late_retries, e.retry_skipped, e.abandoned, e.landed_late)

    binds = tuple(sorted(
        (str(rn(k)), b.name, b.key, b.bound_at, None if b.success is None else _out(b.success[0]), b.success_at)
        for k, b in s.bindings.items()))
    d = s.config.limits.deadline
    return (
        cfg, ms, d is not None and s.now >= d, reqs, resp, tuple(ans(a) for a in s.answers),
        tuple(sorted((i, ans(a)) for i, a in s.held.items())), tuple(exe(e) for e in s.executions), binds,
        tuple(sorted((k, v) for k, v in s.per_tool.items() if v)), s.model_requests, s.replays, s.rejections,
        s.retries, s.round, s.final, s.model_failed, s.input_exhausted, s.cursor, s.admitted_cursor,
        _outcome(s.outcome), s.status, s.stop_reason, s.aborted, s.terminations, s.final_at, s.discarded,
        s.late_model_requests, ans(s.aborted_answer), s.focus,
        None if s.arrival is None else (s.arrival[0], _outcome(s.arrival[1])), s.early_take_ups,
    )


def _fields(s: RunState) -> dict[str, Json]:
    """A fingerprint of every field, to tell which ones a step changed."""
    return {
        "bindings": tuple(sorted((k, b.key, b.success_at, repr(b.success)) for k, b in s.bindings.items())),
        "requests": tuple(s.requests), "answers": tuple(s.answers), "held": tuple(sorted(s.held.items())),
        "executions": tuple((e.request, e.attempts, repr(e.outcome), e.late, e.late_retries, e.retry_skipped,
                             e.abandoned, e.landed_late, e.principal, e.ordinal, e.tool) for e in s.executions),
        "per_tool": tuple(sorted(s.per_tool.items())),
    }


_SCALARS = ("now", "model_requests", "replays", "rejections", "retries", "round", "response", "final", "model_failed",
            "input_exhausted", "cursor", "admitted_cursor", "outcome", "status", "stop_reason", "aborted", "terminations",
            "final_at", "discarded", "late_model_requests", "aborted_answer", "focus", "arrival", "early_take_ups", "phase")


def _changed(before: dict[str, Json], b: RunState, a: RunState) -> set[str]:
    after = _fields(a)
    out = {f for f, v in after.items() if before[f] != v}
    out.update(f for f in _SCALARS if getattr(b, f) != getattr(a, f))
    return out


class ConcurrentModel:
    """States are (configuration, Machine); keys are :func:`state_key` (canonical under id
    permutations unless ``symmetry`` is off; ``key="full"`` keeps the whole history without
    renaming, for the tree crosscheck). ``check="all"`` evaluates every invariant in every state."""

    def __init__(self, U: Universe, sem: Semantics = CORE, *, key: str = "compact", symmetry: bool = True,
                 check: str = "changed") -> None:
        self.U = U
        self.sem = sem
        self.key_kind = key
        self.symmetry = symmetry and key != "full"
        self.check = check
        self.tb = tables()
        self.terminal = self.tb.terminal
        self.reads = invariant_read_sets()
        #: Set by the explorer: is this key already a state of the search? A state reached again
        #: has the verdict it had (its key is the whole state, up to id renaming, which no
        #: invariant can tell apart), so it is not checked again.
        self.seen: Any = None

    def initial(self) -> list[tuple[Json, tuple[int, Machine]]]:
        out = []
        for c in self.U.configs:
            m = Machine(self.tb.spec.initial.id, RunState(c.config))
            out.append((self.key(c.index, m), (c.index, m)))
        return out

    def key(self, cfg: int, m: Machine) -> Json:
        if m.state in self.terminal and self.key_kind != "full":
            # never expanded, and its invariants were checked on the step that reached it
            return ("terminal", cfg, m.state, m.s.stop_reason)
        return state_key(cfg, m.state, m.s, symmetry=self.symmetry)

    def is_terminal(self, node: tuple[int, Machine]) -> bool:
        return node[1].state in self.terminal

    def _verdict(self, before: dict[str, Json], b: RunState, a: RunState) -> tuple[str, ...]:
        if self.check == "all":
            names: Any = core.INVARIANTS
        else:
            changed = _changed(before, b, a)
            names = [n for n in core.INVARIANTS if self.reads[n] & changed]
        out = []
        for name in names:
            try:
                ok = core.INVARIANTS[name](a)
            except Exception:
                ok = False
            if not ok:
                out.append(name)
        return tuple(out)

    def expand(self, node: tuple[int, Machine]) -> Iterator[tuple[Choice, str, Json, tuple[int, Machine], tuple[str, ...],
                                                                  tuple[str | None, str | None]]]:
        cfg, m = node
        env = self.U.configs[cfg].env
        before = _fields(m.s)
        seen = self.seen
        for sc in enumerate_steps(self.sem, env, m):
            if sc.transition is None:
                yield sc.choice, "ERROR", ("error", sc.error), (cfg, sc.machine), (f"CRASH: {sc.error}",), (None, None)
                continue
            k = self.key(cfg, sc.machine)
            if seen is not None and k[0] != "terminal" and seen(k):
                bad: tuple[str, ...] = ()
            else:
                bad = self._verdict(before, m.s, sc.machine.s)
            yield sc.choice, sc.transition.id, k, (cfg, sc.machine), bad, step_label(m.s, sc.machine.s)


def describe_choice(choice: Choice) -> str:
    return json.dumps(dict(choice))
