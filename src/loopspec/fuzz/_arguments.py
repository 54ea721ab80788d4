"""Arguments for declared tools, drawn from each tool's ``inputSchema``: valid ones, and deliberately
invalid ones (R4).

Each property of a schema gets its value from a pool for its type: readable values first (``"a"``, ``0``,
``true``: what a reduced case shows best), then values that hypothesis-jsonschema generates from the
property's schema (the empty string, control and astral characters, large integers within 64 bits). An
invalid object misses a required property, gives one a value of another type, or adds a property the
schema forbids. Which values a call gets is decided by the call's plan (plain integers, see
:mod:`._vocab`), so a campaign is the same for the same seed.

hypothesis-jsonschema builds objects with Hypothesis internals that its last release (0.23.1) no longer
matches (``from_schema`` of an object schema raises ``AttributeError: 'many' object has no attribute 'more'``
with Hypothesis 6.170): it is asked for the scalar property values only, and the objects are put together
here. The pools are generated once per process, lazily (in the generator's helper process during a
campaign), deterministically (``derandomize``).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..core.rules import ToolSchema, parse_schema
from ._vocab import ArgPlan

__all__ = ["READABLE", "Arguments", "type_pool"]

Json = Any

#: Readable values per property type, first in every pool.
READABLE: Final[Mapping[str, tuple[Json, ...]]] = {
    "string": ("a", "b", "Java", "x y", "", "é", "💥", "A b", 'q"\\'),
    "integer": (0, 1, 2, -1, 7, 1.0, 2**31),  # 1.0 is an integer too (R4)
    "boolean": (False, True),
}
#: Values of the wrong type for a property of each type (R4: INVALID_ARGUMENT).
WRONG: Final[Mapping[str, tuple[Json, ...]]] = {
    "string": (1, None, ["a"], True, {"a": 1}),
    "integer": (1.5, "1", True, None, [1]),
    "boolean": (0, "true", None, 1),
}
#: What hypothesis-jsonschema is asked for, per type (bounded: an integer past 64 bits or a long string
#: would make a finding of the transport, not of the loop).
_SCHEMAS: Final[Mapping[str, dict[str, Json]]] = {
    "string": {"type": "string", "maxLength": 12},
    "integer": {"type": "integer", "minimum": -(2**53), "maximum": 2**53},
    "boolean": {"type": "boolean"},
}
_GENERATED = 48
_POOLS: dict[str, tuple[Json, ...]] = {}


def _generated(typ: str) -> tuple[Json, ...]:
    """hypothesis-jsonschema's values for a property of type ``typ`` (the same ones in every process)."""
    try:
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis_jsonschema import from_schema
    except ImportError:  # an environment without it: the readable values alone
        return ()
    out: list[Json] = []

    @settings(max_examples=_GENERATED, database=None, derandomize=True, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(from_schema(_SCHEMAS[typ]))
    def collect(value: Json) -> None:
        out.append(value)

    collect()
    seen: list[Json] = []
    for v in out:
        if not any(v == s and type(v) is type(s) for s in seen):
            seen.append(v)
    return tuple(seen)


def type_pool(typ: str) -> tuple[Json, ...]:
    """Every value a property of type ``typ`` may get: the readable ones, then the generated ones."""
    pool = _POOLS.get(typ)
    if pool is None:
        readable = READABLE[typ]
        pool = _POOLS[typ] = readable + tuple(v for v in _generated(typ)
                                              if not any(v == r and type(v) is type(r) for r in readable))
    return pool


class Arguments:
    """Valid and invalid arguments for each declared tool (``tools``: MCP tool objects)."""

    def __init__(self, tools: Sequence[Mapping[str, Json]]) -> None:
        self.schemas: dict[str, ToolSchema] = {t["name"]: parse_schema(t.get("inputSchema"), tool=t["name"])
                                               for t in tools}

    @staticmethod
    def _rng(plan: ArgPlan) -> random.Random:
        present, values, extra, extra_value, way, pick, wrong = plan
        seed = (sum(b << i for i, b in enumerate(present)) * 1_000_003 + sum(v << (3 * i) for i, v in enumerate(values))
                ) * 65_537 + ((extra * 4 + extra_value) * 4 + way) * 64 + pick * 8 + wrong
        return random.Random(seed)

    def valid(self, name: str, plan: ArgPlan) -> dict[str, Json]:
        """Arguments of ``name`` that satisfy its schema: every required property, each optional one half of
        the time, values readable three times in four; sometimes an extra property when the schema allows it."""
        return self._valid(self.schemas[name], self._rng(plan))

    def _valid(self, sch: ToolSchema, r: random.Random) -> dict[str, Json]:
        out: dict[str, Json] = {}
        for prop, typ in sch.properties:
            if prop in sch.required or r.random() < 0.5:
                pool = type_pool(typ)
                readable = len(READABLE[typ])
                out[prop] = pool[r.randrange(readable)] if r.random() < 0.75 or len(pool) == readable \
                    else pool[r.randrange(readable, len(pool))]
        if sch.additional and r.random() < 0.15:
            key = r.choice(("extra", "principal", "user"))
            if sch.type_of(key) is None:
                out[key] = r.choice(("mallory", 1, None, True))
        return out

    def invalid(self, name: str, plan: ArgPlan) -> dict[str, Json] | None:
        """Arguments of ``name`` that fail its schema (R4), or None when the schema accepts every object."""
        sch = self.schemas[name]
        r = self._rng(plan)
        ways = (["missing"] if sch.required else []) + (["type"] if sch.properties else []) \
            + (["extra"] if not sch.additional else [])
        if not ways:
            return None
        args = self._valid(sch, r)
        way = ways[plan[4] % len(ways)]
        if way == "missing":
            args.pop(sorted(sch.required)[plan[5] % len(sch.required)], None)
        elif way == "type":
            prop, typ = sch.properties[plan[5] % len(sch.properties)]
            args[prop] = WRONG[typ][plan[6] % len(WRONG[typ])]
        else:
            args["unexpected" if sch.type_of("unexpected") is None else "unexpected_"] = 1
        return args
