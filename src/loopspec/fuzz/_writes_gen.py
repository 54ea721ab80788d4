"""Writes steps for ``loopspec fuzz --mode writes`` (protocol v1.2, PROTOCOL.md section 8).

A small vocabulary, as in Hypothesis's stateful testing: one or two write tools (``pay`` keyed by
``order``, ``ship`` keyed by ``parcel``), each with what its external system offers (record, lookup,
none); calls that reuse a handful of key values under fresh call ids (the same business write
proposed again, R37, R44); and an environment script in which a dispatch is applied and answered,
rejected, applied or not with its answer lost (a timeout, R41/R42) or applied or not with the
process killed (a restart, R39/R46), and some lookups are unavailable (W08) or cut by a restart (the
process killed at the lookup instead of an answer: a crash during reconciliation, R43/R46). Deterministic
per (seed, example index); the crashes at lookups come from a random stream of their own, so the rest of
each step is what it was before they were drawn.
"""

from __future__ import annotations

import random
from typing import Any

from ._prediction import Planned

__all__ = ["WritesGenerator", "writes_tools"]

Json = Any

_TOOLS = {
    "pay": ("order", {"type": "object", "properties": {"order": {"type": "string"}, "amount": {"type": "integer"}},
                      "required": ["order", "amount"]}),
    "ship": ("parcel", {"type": "object", "properties": {"parcel": {"type": "string"}}, "required": ["parcel"]}),
}


def writes_tools(reconcile: dict[str, str]) -> list[dict[str, Json]]:
    """The declared writes of a step (R36–R38), ``reconcile``: tool name -> record|lookup|none."""
    return [{"name": name, "kind": "write", "reconcile": rec, "key": {"arguments": [_TOOLS[name][0]], "scope": "principal"},
             "inputSchema": _TOOLS[name][1], "annotations": {"readOnlyHint": False, "destructiveHint": True}}
            for name, rec in reconcile.items()]


class WritesGenerator:
    """Examples of writes steps (same interface as :class:`loopspec.fuzz._generate.Generator`)."""

    def __init__(self, *, seed: int, steps: int = 1, max_calls: int = 6) -> None:
        self.seed = seed
        self.steps = max(1, min(steps, 2))
        self.max_calls = max(1, min(max_calls, 8))
        self.mode = "writes"

    def rng(self, i: int) -> random.Random:
        return random.Random(self.seed * 1_000_003 + i)

    def step(self, r: random.Random, c: random.Random | None = None) -> dict[str, Json]:
        """A writes step drawn from ``r``; its ``crashes`` (PROTOCOL.md W5) from ``c`` (none without it)."""
        names = ["pay"] if r.random() < 0.6 else ["pay", "ship"]
        reconcile = {n: r.choices(("record", "lookup", "none"), (4, 4, 1))[0] for n in names}
        values = ["A", "B", "C"][: r.randint(1, 3)]
        n = r.randint(1, self.max_calls)
        calls = []
        for k in range(n):
            name = r.choice(names)
            arg = _TOOLS[name][0]
            args: dict[str, Json] = {arg: r.choice(values)}
            if name == "pay":
                args["amount"] = 5  # fixed: the same order is the same payment
            calls.append({"id": f"c{k + 1}", "name": name, "arguments": args})
        script: list[dict[str, Json]] = []
        for _ in range(r.randint(0, n + 2)):
            x = r.random()
            if x < 0.35:
                script.append({"value": {"ok": r.randint(1, 9)}})
            elif x < 0.45:
                script.append({"fail": r.choice(("NOT_FOUND_OR_NOT_ACCESSIBLE", "INTERNAL_ERROR"))})
            elif x < 0.70:
                script.append({"lose": r.choice(("applied", "not-applied"))})
            else:
                script.append({"restart": r.choice(("applied", "not-applied"))})
        outages = sorted(r.sample(range(1, 5), r.randint(0, 1))) if r.random() < 0.3 else []
        budget = r.choice((n + 4, n + 4, n + 4, max(1, n - 1)))
        step: dict[str, Json] = {"kind": "writes", "config": {"tools": writes_tools(reconcile), "budget": budget,
                                                              "principal": "alice"},
                                 "calls": calls, "script": script, "outages": outages}
        if c is not None and c.random() < 0.35:  # the lookups (1-based, in arrival order) cut by a restart
            step["crashes"] = sorted(c.sample(range(1, 5), c.randint(1, 2)))
        return step

    def example(self, i: int) -> tuple[list[Planned], set[str]]:
        r = self.rng(i)
        c = random.Random(f"crashes:{self.seed}:{i}")  # str seeds are hashed with SHA-512: no PYTHONHASHSEED
        return [Planned(self.step(r, c), None) for _ in range(self.steps)], set()
