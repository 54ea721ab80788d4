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
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..core.rules import parse_schema
from ._declared import Declaration
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


#: Key values per property type: a handful, so the same business write is proposed again (R37, R44).
_KEY_VALUES: Final = {"string": ("A", "B", "C"), "integer": (1, 2, 3), "boolean": (False, True)}
_FIXED: Final = {"string": "a", "integer": 5, "boolean": True}


def declared_writes(tools: Sequence[Mapping[str, Json]]) -> dict[str, tuple[dict[str, Json], list[str]]]:
    """The declared tools that are writes — MCP's ``readOnlyHint`` not true (R36) — with their key arguments: the
    required properties, or every property when none is required (R37). A tool without properties is left out:
    nothing could key it."""
    out: dict[str, tuple[dict[str, Json], list[str]]] = {}
    for t in tools:
        if (t.get("annotations") or {}).get("readOnlyHint") is True:
            continue
        sch = parse_schema(t.get("inputSchema"), tool=t["name"])
        keys = sorted(sch.required) or [n for n, _ in sch.properties]
        if keys:
            out[t["name"]] = (dict(t), keys)
    return out


class WritesGenerator:
    """Examples of writes steps (same interface as :class:`loopspec.fuzz._generate.Generator`). With a
    declaration, the write tools are the declared tools that are not read-only (their MCP annotations decide),
    keyed by their required arguments."""

    def __init__(self, *, seed: int, steps: int = 1, max_calls: int = 6, declared: Declaration | None = None) -> None:
        self.seed = seed
        self.steps = max(1, min(steps, 2))
        self.max_calls = max(1, min(max_calls, 8))
        self.mode = "writes"
        self.declared = declared_writes(declared.tools) if declared is not None and declared.tools else None
        if self.declared == {}:
            raise ValueError("--mode writes: no declared tool is a write (every one has readOnlyHint true, or no "
                             "property to key it by)")

    def opens(self, i: int) -> bool:
        """No writes campaign opens with focused examples (see :meth:`Generator.opens`)."""
        return False

    def rng(self, i: int) -> random.Random:
        return random.Random(self.seed * 1_000_003 + i)

    def _declared_calls(self, r: random.Random, n: int) -> tuple[list[dict[str, Json]], list[dict[str, Json]]]:
        assert self.declared is not None
        names = sorted(self.declared)
        names = names[:1] if len(names) == 1 or r.random() < 0.6 else names
        width = r.randint(1, 3)
        calls = []
        for k in range(n):
            name = r.choice(names)
            tool, keys = self.declared[name]
            sch = parse_schema(tool.get("inputSchema"), tool=name)
            args: dict[str, Json] = {}
            for prop, typ in sch.properties:
                if prop in keys:
                    args[prop] = r.choice(_KEY_VALUES[typ][:width])
                elif prop in sch.required:
                    args[prop] = _FIXED[typ]  # fixed: the same key is the same write
            calls.append({"id": f"c{k + 1}", "name": name, "arguments": args})
        tools = [{**self.declared[name][0], "kind": "write",
                  "reconcile": r.choices(("record", "lookup", "none"), (4, 4, 1))[0],
                  "key": {"arguments": self.declared[name][1], "scope": "principal"}} for name in names]
        return calls, tools

    def step(self, r: random.Random, c: random.Random | None = None) -> dict[str, Json]:
        """A writes step drawn from ``r``; its ``crashes`` (PROTOCOL.md W5) from ``c`` (none without it)."""
        if self.declared is not None:
            n = r.randint(1, self.max_calls)
            calls, tools = self._declared_calls(r, n)
        else:  # (the draws in the order they always had: the same seed gives the same campaign)
            names = ["pay"] if r.random() < 0.6 else ["pay", "ship"]
            reconcile = {m: r.choices(("record", "lookup", "none"), (4, 4, 1))[0] for m in names}
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
            tools = writes_tools(reconcile)
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
        step: dict[str, Json] = {"kind": "writes", "config": {"tools": tools, "budget": budget,
                                                              "principal": "alice"},
                                 "calls": calls, "script": script, "outages": outages}
        if c is not None and c.random() < 0.35:  # the lookups (1-based, in arrival order) cut by a restart
            step["crashes"] = sorted(c.sample(range(1, 5), c.randint(1, 2)))
        return step

    def example(self, i: int) -> tuple[list[Planned], set[str]]:
        r = self.rng(i)
        c = random.Random(f"crashes:{self.seed}:{i}")  # str seeds are hashed with SHA-512: no PYTHONHASHSEED
        return [Planned(self.step(r, c), None) for _ in range(self.steps)], set()
