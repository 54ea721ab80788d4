"""The reference model: whole core RunStates, stepped by :func:`semantics.step`, checked with
``loopspec.core.rules.INVARIANTS`` verbatim.

Slow (every state carries its history and every invariant is recomputed from it) but with no
abstraction at all beyond deduplication: it is what the fast explorer is validated against, what
finds the counterexamples of the must-fail corpus, and what lifts every counterexample the fast
explorer reports back to concrete calls.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import rules as core
from ..core.rules import RunState
from ..spec.loader import Transition
from .semantics import CORE, Machine, Semantics, clone, step, tables
from .state import Encoder, NonLocal, canonical, project
from .universe import Universe

__all__ = ["Choice", "ReferenceModel", "Succ", "check_invariants", "enumerate_steps"]

Json = Any
#: The environment's answers during one step, in the order they were asked: (point, label).
Choice = tuple[tuple[str, str], ...]


def check_invariants(s: RunState) -> tuple[str, ...]:
    """The invariant ids of loop.toml that ``s`` violates (an invariant that raises counts)."""
    out = []
    for name, inv in core.INVARIANTS.items():
        try:
            ok = inv(s)
        except Exception:
            ok = False
        if not ok:
            out.append(name)
    return tuple(out)


class _Script:
    """An oracle that follows a prefix of answer indices, then answers 0, recording every question."""

    __slots__ = ("pos", "prefix", "trail")

    def __init__(self, prefix: Sequence[int]) -> None:
        self.prefix = prefix
        self.pos = 0
        self.trail: list[tuple[str, tuple[str, ...], int]] = []

    def choose(self, point: str, options: Sequence[str]) -> str:
        i = self.prefix[self.pos] if self.pos < len(self.prefix) else 0
        self.trail.append((point, tuple(options), i))
        self.pos += 1
        return options[i]


@dataclass(slots=True)
class Succ:
    choice: Choice
    transition: Transition | None  # None when the step raised
    machine: Machine
    error: str | None = None


def enumerate_steps(sem: Semantics, cfg_env: Any, m: Machine) -> Iterator[Succ]:
    """Every successor of ``m``: one per sequence of environment answers (depth-first)."""
    tb = tables()
    stack: list[tuple[int, ...]] = [()]
    while stack:
        prefix = stack.pop()
        m2 = Machine(m.state, clone(m.s))
        o = _Script(prefix)
        tr: Transition | None
        err = None
        try:
            tr = step(sem, cfg_env, m2, o, tb)
        except Exception as exc:  # a variant may drive the core into an assertion
            tr, err = None, f"{type(exc).__name__}: {exc}"
        for k in range(len(prefix), len(o.trail)):
            _, options, _ = o.trail[k]
            base = tuple(x[2] for x in o.trail[:k])
            for j in range(len(options) - 1, 0, -1):
                stack.append((*base, j))
        yield Succ(tuple((p, opts[i]) for p, opts, i in o.trail), tr, m2, err)


class ReferenceModel:
    """States are (machine state, whole RunState); keys are canonical compact states."""

    def __init__(self, U: Universe, sem: Semantics = CORE, *, key: str = "compact", symmetry: bool = True) -> None:
        self.U = U
        self.sem = sem
        self.enc = Encoder(U)
        self.key_kind = key
        self.symmetry = symmetry
        self.terminal = tables().terminal

    def initial(self) -> list[tuple[Json, tuple[int, Machine]]]:
        out = []
        for c in self.U.configs:
            m = Machine(tables().spec.initial.id, RunState(c.config))
            out.append((self.key(c.index, m), (c.index, m)))
        return out

    def key(self, cfg: int, m: Machine) -> Json:
        if self.key_kind == "full":
            return (cfg, m.state, full_key(m.s))
        L, recs = project(self.enc, m.state, m.s, cfg)
        if not self.symmetry:
            return (L, tuple(recs))  # records in id order, values as they are
        return canonical(L, recs, len(self.U.values))

    def is_terminal(self, node: tuple[int, Machine]) -> bool:
        return node[1].state in self.terminal

    def expand(self, node: tuple[int, Machine]) -> Iterator[tuple[Choice, str, Json, tuple[int, Machine], tuple[str, ...]]]:
        cfg, m = node
        env = self.U.configs[cfg].env
        for sc in enumerate_steps(self.sem, env, m):
            if sc.transition is None:
                yield sc.choice, "ERROR", ("error", sc.error), (cfg, sc.machine), (f"CRASH: {sc.error}",), (None, None)
                continue
            bad = check_invariants(sc.machine.s)
            try:
                k = self.key(cfg, sc.machine)
            except NonLocal as exc:
                if not bad:
                    raise
                k = ("nonlocal", str(exc), id(sc))
            yield sc.choice, sc.transition.id, k, (cfg, sc.machine), bad, step_label(m.s, sc.machine.s)


def step_label(before: RunState, after: RunState) -> tuple[str | None, str | None]:
    """What a step produced, for the coverage report: the answer it gave (its code, ``ok`` or
    ``ok (replay)``) and the stop reason it ended the run with."""
    code = None
    if len(after.answers) > len(before.answers):
        a = after.answers[-1]
        code = a.code if a.status != "ok" else ("ok (replay)" if a.replayed else "ok")
    stop = after.stop_reason if after.status is not None and before.status is None else None
    return code, stop


def full_key(s: RunState) -> Json:
    """The whole RunState as a hashable value (history included; no symmetry)."""
    return (
        s.now, tuple(sorted((k, b.name, b.key, b.bound_at, repr(b.success), b.success_at) for k, b in s.bindings.items())),
        tuple(repr(r) for r in s.requests), tuple(repr(a) for a in s.answers),
        tuple((e.request, e.tool, e.principal, e.ordinal, e.attempts, repr(e.outcome), e.late, e.late_retries,
               e.retry_skipped)
              for e in s.executions),
        tuple(sorted(s.per_tool.items())), s.model_requests, s.replays, s.rejections, s.retries, s.round,
        repr(s.response), s.final, s.model_failed, s.input_exhausted, s.cursor, s.admitted_cursor, repr(s.outcome), s.status,
        s.stop_reason, s.aborted, s.terminations, s.final_at, s.discarded, s.late_model_requests,
        repr(s.aborted_answer),
    )

