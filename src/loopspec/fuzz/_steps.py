"""The step format the stages share: which steps run concurrently, how a schedule picks the answer
released next (protocol v1.1, PROTOCOL.md C4), the choices a run used, and whether an implementation
announced concurrency.

The generator draws schedules and predicts their runs with :func:`chooser`, the harness releases answers with
the same function, and the campaign keeps the choices a PCT policy made (:func:`realized_schedule`): one
definition below all three, so no stage imports another for it. Pure: no I/O.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["Chooser", "announces_concurrency", "chooser", "is_concurrent", "realized_schedule"]

Json = Any


# --------------------------------------------------------------------------------------------
# Schedules (protocol v1.1, PROTOCOL.md C4)
# --------------------------------------------------------------------------------------------

#: Chooses the answer released next: (release number j from 0, the held executions' numbers in
#: start order) -> the position of the one to release.
Chooser = Callable[[int, Sequence[int]], int]


def is_concurrent(step: Mapping[str, Json]) -> bool:
    """Does ``step`` run concurrently (a batch step with ``config.concurrency``)?"""
    cfg = step.get("config")
    return step.get("kind", "batch") == "batch" and isinstance(cfg, dict) and isinstance(cfg.get("concurrency"), dict)


def chooser(schedule: Json) -> Chooser:
    """The choice function of a schedule: a list of choices (entry j, mod the number held; 0 past
    its end), or ``{"pct": seed, "depth": d}`` — PCT (Burckhardt et al. 2010): each execution gets a
    random priority when it starts, the highest held is released, and at d change points (among
    the first releases) the highest held drops below every other. Deterministic: the harness and
    the prediction call it on the same held lists and get the same choices."""
    if isinstance(schedule, dict) and isinstance(schedule.get("pct"), int):
        seed = schedule["pct"]
        depth = schedule.get("depth", 1)
        depth = depth if isinstance(depth, int) and 0 <= depth <= 16 else 1
        rng = random.Random(seed)
        changes = frozenset(rng.sample(range(8), min(depth, 8)))
        lowered: dict[int, float] = {}

        def prio(k: int) -> float:
            if k in lowered:
                return lowered[k]
            return random.Random(seed * 1_000_003 + k).random() + 1.0

        def pct(j: int, held: Sequence[int]) -> int:
            best = max(range(len(held)), key=lambda i: prio(held[i]))
            if j in changes and len(held) > 1:
                lowered[held[best]] = -float(j)  # a change point: the favourite drops below all others
                best = max(range(len(held)), key=lambda i: prio(held[i]))
            return best

        return pct
    choices = [c for c in schedule if isinstance(c, int) and not isinstance(c, bool) and c >= 0] \
        if isinstance(schedule, list) else []

    def listed(j: int, held: Sequence[int]) -> int:
        return (choices[j] if j < len(choices) else 0) % len(held)

    return listed


def realized_schedule(trace: Mapping[str, Json]) -> list[int]:
    """The choices a concurrent step's run used (its release events), trailing zeros dropped."""
    out = [e.get("choice", 0) for e in trace.get("events") or () if isinstance(e, dict) and e.get("type") == "release"]
    while out and out[-1] == 0:
        out.pop()
    return out


def announces_concurrency(info: Json) -> bool:
    """Did the implementation announce protocol v1.1's ``concurrency`` capability (PROTOCOL.md C1)?"""
    caps = info.get("capabilities") if isinstance(info, dict) else None
    return isinstance(caps, dict) and caps.get("concurrency") is True
