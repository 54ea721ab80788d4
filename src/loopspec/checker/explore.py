"""Breadth-first exhaustive exploration of one scope, like TLC: every state reached within the
bound, every invariant checked in each, the shortest path to the first violation.

The explorer is generic over a *model* (:class:`~loopspec.checker.fast.FastModel`, the default,
or :class:`~loopspec.checker.reference.ReferenceModel`) and a *semantics* (the core, or a variant
of the must-fail corpus). States are deduplicated by their canonical compact form; the search is
level by level, so the first violation found is at the smallest depth (number of transitions).
"""

from __future__ import annotations

import time
from array import array
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .bounds import Bounds, Scope
from .fast import FastModel
from .reference import Choice, ReferenceModel
from .semantics import CORE, Semantics
from .universe import Universe

__all__ = ["Exploration", "Progress", "Violation", "explore"]

Json = Any


@dataclass(frozen=True)
class Violation:
    """The first violating step found: the path to it, as states and steps of the model."""

    invariants: tuple[str, ...]
    depth: int
    #: (state key, choice, transition id) for every step from the initial state; the last step
    #: is the violating one, its successor key is ``last_key``.
    path: tuple[tuple[Json, Choice, str], ...]
    last_key: Json

    @property
    def crashed(self) -> str | None:
        """The exception text when the step raised (a variant driving the core into an assertion)."""
        return next((v[len("CRASH: "):] for v in self.invariants if v.startswith("CRASH: ")), None)


@dataclass
class Exploration:
    """What exploring one scope found."""

    scope: Scope
    semantics: str
    model: str
    states: int = 0
    transitions: int = 0
    depth: int = 0
    seconds: float = 0.0
    complete: bool = False  # the bound was exhausted (no violation stopped the search)
    coverage: Counter[str] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)  # answers given, by code (and ok / ok (replay))
    stop_reasons: Counter[str] = field(default_factory=Counter)
    violation: Violation | None = None
    memo_misses: int = 0
    memo_hits: int = 0
    memo_fallbacks: int = 0
    orbit_states: int = 0  # distinct states before symmetry reduction (when counted)
    configs: int = 0

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds else 0.0

    @property
    def transitions_per_second(self) -> float:
        return self.transitions / self.seconds if self.seconds else 0.0

    def to_json(self) -> dict[str, Json]:
        return {
            "scope": self.scope.name,
            "bounds": self.scope.describe(),
            "semantics": self.semantics,
            "model": self.model,
            "configurations": self.configs,
            "states": self.states,
            "transitions": self.transitions,
            "depth": self.depth,
            "seconds": round(self.seconds, 3),
            "states_per_second": round(self.states_per_second),
            "transitions_per_second": round(self.transitions_per_second),
            "states_before_symmetry": self.orbit_states or None,
            "complete": self.complete,
            "coverage": dict(sorted(self.coverage.items())),
            "answers": dict(sorted(self.codes.items())),
            "stop_reasons": dict(sorted(self.stop_reasons.items())),
            "memo": {"misses": self.memo_misses, "hits": self.memo_hits, "fallbacks": self.memo_fallbacks},
            "violated": list(self.violation.invariants) if self.violation else [],
        }


@dataclass(frozen=True)
class Progress:
    scope: str
    states: int
    transitions: int
    depth: int
    seconds: float
    frontier: int


def make_model(U: Universe, sem: Semantics, kind: str) -> Any:
    if U.concurrent:
        # section 5: a step involves several requests; whole RunStates (see checker.concurrent)
        from .concurrent import ConcurrentModel

        if kind == "fast":
            return ConcurrentModel(U, sem)
        if kind == "reference":
            return ConcurrentModel(U, sem, check="all")
        if kind == "tree":
            return ConcurrentModel(U, sem, key="full", check="all")
        raise ValueError(f"unknown model {kind!r} (fast, reference, tree)")
    if kind == "fast":
        return FastModel(U, sem)
    if kind == "reference":
        return ReferenceModel(U, sem)
    if kind == "tree":
        return ReferenceModel(U, sem, key="full")
    raise ValueError(f"unknown model {kind!r} (fast, reference, tree)")


def explore(
    bounds: Bounds,
    scope: Scope,
    sem: Semantics = CORE,
    *,
    model: str = "fast",
    progress: Callable[[Progress], None] | None = None,
    progress_every: float = 1.0,
    count_orbits: bool = False,
    max_states: int | None = None,
) -> Exploration:
    """Explore ``scope`` exhaustively with ``sem``; stop at the first invariant violation."""
    U = Universe.build(bounds, scope)
    m = make_model(U, sem, model)
    ex = Exploration(scope, sem.name, model, configs=len(U.configs))
    t0 = time.perf_counter()
    index: dict[Json, int] = {}
    keys: list[Json] = []
    parent = array("q")
    steps: list[tuple[Choice, str] | None] = []
    frontier: list[tuple[int, Json]] = []
    if hasattr(m, "seen"):
        m.seen = index.__contains__
    for k, node in m.initial():
        if k not in index:
            index[k] = len(keys)
            keys.append(k)
            parent.append(-1)
            steps.append(None)
            frontier.append((index[k], node))
    coverage: Counter[str] = Counter()
    codes: Counter[str] = Counter()
    stops: Counter[str] = Counter()
    transitions = 0
    depth = 0
    next_report = t0 + progress_every
    violation: Violation | None = None
    while frontier and violation is None:
        nxt: list[tuple[int, Json]] = []
        for si, node in frontier:
            if m.is_terminal(node):
                continue
            for choice, tid, k, node2, bad, (code, stop) in m.expand(node):
                transitions += 1
                coverage[tid] += 1
                if code is not None:
                    codes[code] += 1
                if stop is not None:
                    stops[stop] += 1
                if bad:
                    decode = getattr(m, "decode", None) or (lambda x: x)
                    path = tuple((decode(a), c, t) for a, c, t in (*_path(keys, parent, steps, si), (keys[si], choice, tid)))
                    violation = Violation(bad, depth + 1, path, decode(k))
                    break
                if k not in index:
                    index[k] = len(keys)
                    keys.append(k)
                    parent.append(si)
                    steps.append((choice, tid))
                    nxt.append((index[k], node2))
            if violation is not None:
                break
            if progress is not None and time.perf_counter() >= next_report:
                next_report = time.perf_counter() + progress_every
                progress(Progress(scope.name, len(keys), transitions, depth, time.perf_counter() - t0, len(nxt)))
            if max_states is not None and len(keys) > max_states:
                raise RuntimeError(f"more than {max_states} states: raise the limit or lower the bound")
        frontier = nxt
        if frontier or violation is not None:
            depth += 1
    ex.seconds = time.perf_counter() - t0
    ex.states = len(keys)
    ex.transitions = transitions
    ex.depth = depth
    ex.coverage = coverage
    ex.codes = codes
    ex.stop_reasons = stops
    ex.violation = violation
    ex.complete = violation is None
    if isinstance(m, FastModel):
        ex.memo_misses, ex.memo_hits, ex.memo_fallbacks = m.misses, m.hits, m.fallbacks
    if count_orbits and U.concurrent:
        from .concurrent import ConcurrentModel

        ex.orbit_states = _count_states(ConcurrentModel(U, sem, symmetry=False))
    elif count_orbits:
        from .state import orbit_size

        decode = getattr(m, "decode", None) or (lambda x: x)
        ex.orbit_states = sum(orbit_size(decode(k), len(U.values)) for k in keys)
    if progress is not None:
        progress(Progress(scope.name, ex.states, ex.transitions, ex.depth, ex.seconds, 0))
    return ex


def _count_states(m: Any) -> int:
    """The states a model reaches (no violation expected: the symmetric search found none)."""
    seen = {}
    frontier = []
    for k, node in m.initial():
        if k not in seen:
            seen[k] = True
            frontier.append(node)
    while frontier:
        nxt = []
        for node in frontier:
            if m.is_terminal(node):
                continue
            for _, _, k, node2, bad, _ in m.expand(node):
                if not bad and k not in seen:
                    seen[k] = True
                    nxt.append(node2)
        frontier = nxt
    return len(seen)


def _path(keys: list[Json], parent: array, steps: list[tuple[Choice, str] | None], si: int) -> tuple[tuple[Json, Choice, str], ...]:
    out = []
    cur = si
    while parent[cur] != -1:
        p = parent[cur]
        st = steps[cur]
        assert st is not None
        out.append((keys[p], st[0], st[1]))
        cur = p
    return tuple(reversed(out))

