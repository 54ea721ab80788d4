"""loopspec's exhaustive bounded model checker (``loopspec verify``).

It explores, breadth-first, every behaviour of the decision core within the bounds of
``spec/bounds.toml``, checks every invariant of loop.toml in every state reached, and reports the
shortest counterexample when one breaks — as data, as text, and as a script the engine replays.
See docs/verify.md for what is explored, the reductions and why they are sound.

Modules: :mod:`.semantics` (the core as a set of functions; one spec transition per step),
:mod:`.universe` / :mod:`.bounds` (what the environment may do), :mod:`.state` (compact states,
symmetry), :mod:`.reference` (whole RunStates) and :mod:`.fast` (windowed, memoised) models,
:mod:`.explore` (the search), :mod:`.counterexample` / :mod:`.explain` (results),
:mod:`.mutants` (the must-fail corpus), :mod:`.crosscheck` (the checker checking itself).

Layer: a driver, beside ``fuzz``, ``oracle`` and ``render`` (none of which it imports); it may import
``engine``, ``core``, ``spec`` and ``support``.
"""

from __future__ import annotations

from .bounds import Bounds, BoundsError, Scope, load_bounds
from .counterexample import Script, counterexample_json, lift, replay, replay_core, replay_engine
from .explain import explain
from .explore import Exploration, Violation, explore
from .semantics import CORE, Semantics, installed

__all__ = [
    "CORE",
    "Bounds",
    "BoundsError",
    "Exploration",
    "Scope",
    "Script",
    "Semantics",
    "Violation",
    "counterexample_json",
    "explain",
    "explore",
    "installed",
    "lift",
    "load_bounds",
    "replay",
    "replay_core",
    "replay_engine",
]
