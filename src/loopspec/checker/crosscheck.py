"""Cross-checks of the checker's own abstractions, at a (small) bound.

* :func:`fast_vs_reference`: the fast model (compact states, windowed steps, memoised local
  views, invariants decided on synthetic states) and the reference model (whole RunStates, every
  invariant of the core evaluated on the whole history) must reach the same canonical states with
  the same edges — transition id, successor and the exact set of invariants broken — from every
  state. With a broken variant this also shows that the fast model's verdicts are the core's.
* :func:`tree_vs_dedup`: exploring whole RunStates *without* deduplication (every history
  separately) must give, state by state, the same compact edges as exploring with deduplication by
  the compact, live-variable-reduced, symmetry-reduced key: so two histories with the same key
  have the same futures and verdicts (at that bound), which is what makes the reduction sound.

For a concurrent scope (section 5, :mod:`loopspec.checker.concurrent`) the two checks are about
that model's own shortcuts: ``fast_vs_reference`` compares its incremental verdicts (only the
invariants that read a field the step changed) with every invariant evaluated in every state, and
``tree_vs_dedup`` compares the search without symmetry (ids as they are) with the symmetric one:
mapped to canonical form, the same states, edges and verdicts.

``loopspec verify --crosscheck`` runs both; the test suite runs them for the core and the
corpus.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .bounds import Bounds, Scope
from .fast import FastModel
from .reference import ReferenceModel
from .semantics import CORE, Semantics
from .universe import Universe

__all__ = ["EdgeMap", "edge_map", "fast_vs_reference", "tree_vs_dedup"]

Json = Any
Edge = tuple[str, Json, tuple[str, ...]]


@dataclass
class EdgeMap:
    states: set[Json]
    edges: dict[Json, set[Edge]]
    transitions: int


def edge_map(model: Any, key_of: Callable[[Any], Json] | None = None, max_states: int = 2_000_000) -> EdgeMap:
    """Explore ``model`` completely (violating states are not expanded) and record every edge.

    ``key_of(node)`` maps a node to the key edges are recorded under (default: the model's key).
    """
    decode = getattr(model, "decode", None) or (lambda x: x)
    seen: set[Json] = set()
    edges: dict[Json, set[Edge]] = defaultdict(set)
    frontier: list[tuple[Json, Any]] = []
    for k, node in model.initial():
        if k not in seen:
            seen.add(k)
            frontier.append((k, node))
    n = 0
    while frontier:
        nxt = []
        for k0, node in frontier:
            if model.is_terminal(node):
                continue
            src = key_of(node) if key_of else decode(k0)
            for _, tid, k, node2, bad, _ in model.expand(node):
                n += 1
                dst = key_of(node2) if key_of and not bad else decode(k)
                edges[src].add((tid, dst if not bad else None, tuple(sorted(bad))))
                if bad or k in seen:
                    continue
                seen.add(k)
                nxt.append((k, node2))
                if len(seen) > max_states:
                    raise RuntimeError("crosscheck: too many states for a cross-check; lower the bound")
        frontier = nxt
    return EdgeMap({decode(k) for k in seen}, dict(edges), n)


def _diff(a: EdgeMap, b: EdgeMap, name_a: str, name_b: str, limit: int = 5) -> list[str]:
    out = []
    keys_a = set(a.edges)
    keys_b = set(b.edges)
    if keys_a != keys_b:
        out.append(f"expanded states differ: {len(keys_a - keys_b)} only in {name_a}, {len(keys_b - keys_a)} only in {name_b}")
    for k in list(keys_a & keys_b):
        if a.edges[k] != b.edges[k]:
            out.append(f"state {k!r}: only in {name_a}: {sorted(a.edges[k] - b.edges[k], key=repr)[:3]}; "
                       f"only in {name_b}: {sorted(b.edges[k] - a.edges[k], key=repr)[:3]}")
            if len(out) >= limit:
                break
    return out


def fast_vs_reference(bounds: Bounds, scope: Scope, sem: Semantics = CORE, *, views: bool = True) -> list[str]:
    """Differences between the fast and the reference model (empty when they agree)."""
    U = Universe.build(bounds, scope)
    if U.concurrent:
        from .concurrent import ConcurrentModel

        full = edge_map(ConcurrentModel(U, sem, check="all"))
        incremental = edge_map(ConcurrentModel(U, sem))
        out = _diff(full, incremental, "every invariant", "incremental")
        if full.states != incremental.states and not out:
            out.append("reached states differ")
        return out
    ref = edge_map(ReferenceModel(U, sem))
    fast = edge_map(FastModel(U, sem, views=views))
    out = _diff(ref, fast, "reference", "fast")
    if ref.states != fast.states and not out:
        out.append("reached states differ")
    return out


def tree_vs_dedup(bounds: Bounds, scope: Scope, sem: Semantics = CORE) -> list[str]:
    """Differences between exploring every history separately and exploring by compact key."""
    U = Universe.build(bounds, scope)
    if U.concurrent:
        from .concurrent import ConcurrentModel

        canon = ConcurrentModel(U, sem, check="all")
        plain = ConcurrentModel(U, sem, symmetry=False, check="all")

        def canonical(node: Any) -> Json:
            cfg, m = node
            return canon.key(cfg, m)

        return _diff(edge_map(plain, key_of=canonical), edge_map(canon), "no symmetry", "symmetry")
    keyed = ReferenceModel(U, sem)
    tree = ReferenceModel(U, sem, key="full")

    def compact(node: Any) -> Json:
        cfg, m = node
        return keyed.key(cfg, m)

    a = edge_map(tree, key_of=compact)
    b = edge_map(keyed)
    return _diff(a, b, "tree", "dedup")
