"""Hypothesis strategies for the fuzzer: configurations, batches and tool scripts.

Small pools make the interesting cases frequent: ids come from three names, so replays and
conflicts happen all the time; every call is generated with an explicit *relation* to the
calls before it (fresh, replay — sometimes with keys reordered or ``1`` written ``1.0`` —, same
content under another id, conflict, unknown tool, invalid arguments, malformed); budgets are
tiny; tool scripts make executions fail with every failure category.

Each call is drawn as a *plan*: a fixed tuple of small integers and booleans that does not depend
on the calls around it. :func:`resolve_calls` turns a list of plans into calls against a
configuration (a plan's "earlier call" is picked modulo the calls that exist). So a batch is a
plain ``st.lists`` of plans, and Hypothesis can delete any call while shrinking; everything shrinks
towards an empty batch of well-formed fresh calls with a lenient schema. All strategies are built
once, at import: building a strategy costs more than drawing from it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any, Final

from hypothesis import strategies as st

from .._core import FAILURE_CATEGORIES, blank

__all__ = [
    "ID_POOL",
    "RELATIONS",
    "SCHEMA_POOL",
    "TOOL_POOL",
    "batch_configs",
    "batch_steps",
    "call_lists",
    "call_plans",
    "equivalent_rewrite",
    "json_values",
    "resolve_calls",
    "schemas",
    "scripts",
]

Json = Any

TOOL_POOL: Final = ("lookup", "search", "write")
UNKNOWN_TOOLS: Final = ("shell", "Lookup", "", "sql", "lookup ")
ID_POOL: Final = ("c1", "c2", "c3")
PRINCIPALS: Final = ("alice", "bob")
#: property name -> type; "principal" and "user" are ordinary arguments that look like identity (R16)
PROPS: Final = {"q": "string", "n": "integer", "flag": "boolean", "principal": "string", "user": "string"}
VALUES: Final = {
    "string": ("a", "b", "", "é", "x y", "bob", "💥", 'q"\\'),
    "integer": (0, 1, -1, 7, 2, 1.0, 2**31),  # 1.0 is an integer too (R4)
    "boolean": (False, True),
}
WRONG: Final = {
    "string": (1, None, ["a"], True),
    "integer": (1.5, "1", True, None),
    "boolean": (0, "true", None),
}
EXTRA_KEYS: Final = ("extra", "principal", "user", "tenant")
EXTRA_VALUES: Final = ("mallory", 1, None, True)
RELATIONS: Final = ("fresh", "replay", "same-content", "conflict", "unknown-tool", "invalid-arguments", "malformed")
#: Odd call shapes. All are malformed (R2) except the last two, whose ids look blank or padded but
#: are valid: R2's blank means Unicode White_Space only, and ids are compared exactly.
MALFORMED: Final = (
    "missing-id", "numeric-id", "blank-id", "empty-id", "numeric-name", "arguments-string",
    "arguments-list", "missing-arguments", "not-an-object", "null", "null-arguments", "unicode-blank-id",
    "separator-id", "padded-id",
)

# --------------------------------------------------------------------------------------------
# JSON values (tool outputs)
# --------------------------------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**31), 2**31), st.sampled_from((0.5, -1.25, 1e-7, 3.0, 2.5e10)),
    st.text(max_size=6),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)

# --------------------------------------------------------------------------------------------
# Schemas
# --------------------------------------------------------------------------------------------


def _schema_pool() -> tuple[dict[str, Json], ...]:
    """Every schema over up to three properties of the pool: each property optional or required,
    additional properties allowed or not. The lenient empty schema comes first (shrinking target)."""
    pool: list[dict[str, Json]] = []
    for k in range(0, 4):
        for names in combinations(tuple(PROPS), k):
            for mask in range(2**k):
                required = [n for i, n in enumerate(names) if mask >> i & 1]
                for strict in (False, True):
                    sch: dict[str, Json] = {"type": "object", "properties": {n: {"type": PROPS[n]} for n in names}}
                    if required:
                        sch["required"] = required
                    if strict:
                        sch["additionalProperties"] = False
                    pool.append(sch)
    return tuple(pool)


SCHEMA_POOL: Final = _schema_pool()
_schemas = st.integers(0, len(SCHEMA_POOL) - 1).map(SCHEMA_POOL.__getitem__)  # small repr, unlike sampled_from


def schemas() -> st.SearchStrategy[dict[str, Json]]:
    """An input schema in the flat subset of R4 over a small property pool (one draw)."""
    return _schemas


# --------------------------------------------------------------------------------------------
# Call plans and their resolution
# --------------------------------------------------------------------------------------------

ArgPlan = tuple[tuple[bool, ...], tuple[int, ...], int, int, int, int, int]
CallPlan = tuple[int, int, int, int, int, int, int, ArgPlan]

_small = st.integers(0, 7)


def _bits(value: int, shift: int, width: int) -> int:
    return (value >> shift) & ((1 << width) - 1)


def _unpack_args(parts: tuple[int, int, int]) -> ArgPlan:
    """Arguments plan from three integers (few draws are much faster to generate than many):
    a presence mask, five 3-bit value indices, and the rest packed with the noisiest parts (the extra
    key) in the high bits, which shrinking clears first."""
    mask, values, misc = parts
    present = tuple(bool(mask >> i & 1) for i in range(len(PROPS)))
    vals = tuple(_bits(values, 3 * i, 3) for i in range(len(PROPS)))
    wrong, pick, way, extra_value, extra = (_bits(misc, 0, 2), _bits(misc, 2, 3), _bits(misc, 5, 2),
                                            _bits(misc, 7, 2), _bits(misc, 9, 4))
    return present, vals, extra, extra_value, way, pick, wrong


def _unpack_call(parts: tuple[int, int, int, int, ArgPlan]) -> CallPlan:
    rel, cid, tool, misc, args = parts
    return rel, cid, tool, _bits(misc, 0, 3), _bits(misc, 3, 2), _bits(misc, 5, 3) % len(UNKNOWN_TOOLS), \
        _bits(misc, 8, 4) % len(MALFORMED), args


#: (present[5], value[5], extra 0..15 (1..4: an extra key), extra value, invalid way, pick, wrong value)
_arg_plans = st.tuples(
    st.integers(0, 2 ** len(PROPS) - 1), st.integers(0, 2 ** (3 * len(PROPS)) - 1), st.integers(0, 2**13 - 1),
).map(_unpack_args)
#: (relation, id, tool, earlier-call ref, rewrite, unknown name, malformed way, arguments plan)
_call_plans = st.tuples(
    st.integers(0, len(RELATIONS) - 1), st.integers(0, len(ID_POOL) - 1), st.integers(0, len(TOOL_POOL) - 1),
    st.integers(0, 2**12 - 1), _arg_plans,
).map(_unpack_call)


def call_plans(max_calls: int = 6) -> st.SearchStrategy[list[CallPlan]]:
    return st.lists(_call_plans, max_size=max_calls)


def valid_arguments(schema: Mapping[str, Json], plan: ArgPlan) -> dict[str, Json]:
    present, values, extra, extra_value, _, _, _ = plan
    props: dict[str, Json] = schema.get("properties", {})
    required = set(schema.get("required", []))
    out: dict[str, Json] = {}
    for i, name in enumerate(PROPS):
        if name in props and (name in required or present[i]):
            pool = VALUES[props[name]["type"]]
            out[name] = pool[values[i] % len(pool)]
    if schema.get("additionalProperties", True) and 1 <= extra <= len(EXTRA_KEYS):
        key = EXTRA_KEYS[extra - 1]
        if key not in props:
            out[key] = EXTRA_VALUES[extra_value % len(EXTRA_VALUES)]
    return out


def invalid_arguments(schema: Mapping[str, Json], plan: ArgPlan) -> dict[str, Json] | None:
    """Arguments that fail ``schema`` (R4), or None when the schema accepts every object."""
    props: dict[str, Json] = schema.get("properties", {})
    required = list(schema.get("required", []))
    ways = []
    if required:
        ways.append("missing")
    if props:
        ways.append("type")
    if not schema.get("additionalProperties", True):
        ways.append("extra")
    if not ways:
        return None
    _, _, _, _, way_i, pick, wrong = plan
    way = ways[way_i % len(ways)]
    args = valid_arguments(schema, plan)
    if way == "missing":
        args.pop(required[pick % len(required)], None)
    elif way == "type":
        name = sorted(props)[pick % len(props)]
        pool = WRONG[props[name]["type"]]
        args[name] = pool[wrong % len(pool)]
    else:
        args["unexpected"] = 1
    return args


def equivalent_rewrite(args: Mapping[str, Json], how: int) -> dict[str, Json]:
    """The same canonical content written differently: keys reversed, integers as floats."""
    items = list(args.items())
    if how in (1, 3):
        items.reverse()
    if how in (2, 3):
        items = [(k, float(v) if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**53 else v)
                 for k, v in items]
    return dict(items)


def malformed(call: Mapping[str, Json], how: str) -> Json:
    c = dict(call)
    if how == "missing-id":
        c.pop("id", None)
    elif how == "numeric-id":
        c["id"] = 7
    elif how == "blank-id":
        c["id"] = "  "
    elif how == "empty-id":
        c["id"] = ""
    elif how == "numeric-name":
        c["name"] = 5
    elif how == "arguments-string":
        c["arguments"] = json.dumps(c.get("arguments", {}))
    elif how == "arguments-list":
        c["arguments"] = [1]
    elif how == "missing-arguments":
        c.pop("arguments", None)
    elif how == "not-an-object":
        return "lookup(q='a')"
    elif how == "null-arguments":
        c["arguments"] = None
    elif how == "unicode-blank-id":
        c["id"] = "\u00a0\u2003"  # White_Space only: blank, so malformed
    elif how == "separator-id":
        c["id"] = "\x1c"  # not White_Space (though str.isspace() says so): a valid id
    elif how == "padded-id":
        c["id"] = f" {c.get('id')} "  # valid, and distinct from the unpadded id
    else:
        return None
    return c


def _well_formed(c: Json) -> bool:
    return (isinstance(c, dict) and isinstance(c.get("id"), str) and not blank(c["id"])
            and isinstance(c.get("name"), str) and isinstance(c.get("arguments"), dict))


def resolve_call(plan: CallPlan, earlier: Sequence[Json], tools: Sequence[Mapping[str, Json]]) -> Json:
    """The call a plan stands for, given the calls before it and the configured tools."""
    rel_i, id_i, tool_i, ref, how, unknown_i, mal_i, args_plan = plan
    relation = RELATIONS[rel_i]
    schema_of = {t["name"]: t["inputSchema"] for t in tools}
    names = [t["name"] for t in tools]
    cid = ID_POOL[id_i]
    name = names[tool_i % len(names)]
    bases = [c for c in earlier if _well_formed(c)]
    if relation in ("replay", "same-content", "conflict") and bases:
        base = bases[ref % len(bases)]
        if relation == "replay":
            return {"id": base["id"], "name": base["name"], "arguments": equivalent_rewrite(base["arguments"], how)}
        if relation == "same-content":
            others = [i for i in ID_POOL if i != base["id"]]
            return {"id": others[id_i % len(others)], "name": base["name"], "arguments": dict(base["arguments"])}
        args = valid_arguments(schema_of[name], args_plan)
        if name == base["name"] and args == base["arguments"]:
            args = {**args, "extra": ref} if schema_of[name].get("additionalProperties", True) else args
        return {"id": base["id"], "name": name, "arguments": args}
    if relation == "unknown-tool":
        bad = UNKNOWN_TOOLS[unknown_i]
        if bad not in schema_of:
            return {"id": cid, "name": bad, "arguments": {}}
    if relation == "invalid-arguments":
        args = invalid_arguments(schema_of[name], args_plan)
        if args is not None:
            return {"id": cid, "name": name, "arguments": args}
    call = {"id": cid, "name": name, "arguments": valid_arguments(schema_of[name], args_plan)}
    if relation == "malformed":
        return malformed(call, MALFORMED[mal_i])
    return call


def resolve_calls(plans: Sequence[CallPlan], tools: Sequence[Mapping[str, Json]]) -> list[Json]:
    calls: list[Json] = []
    for plan in plans:
        calls.append(resolve_call(plan, calls, tools))
    return calls


def call_lists(tools: Sequence[Mapping[str, Json]], max_calls: int = 6) -> st.SearchStrategy[list[Json]]:
    """A proposal of up to ``max_calls`` calls, each related to the ones before it."""
    return call_plans(max_calls).map(lambda plans: resolve_calls(plans, tools))


# --------------------------------------------------------------------------------------------
# Configurations, scripts, steps
# --------------------------------------------------------------------------------------------

_config_plans = st.tuples(
    st.integers(1, len(TOOL_POOL)), _schemas, _schemas, _schemas, st.integers(0, 4),
    st.sampled_from(("continue", "abort")), st.sampled_from(PRINCIPALS),
)


def build_config(plan: tuple[int, dict[str, Json], dict[str, Json], dict[str, Json], int, str, str]) -> dict[str, Json]:
    k, s1, s2, s3, budget, mode, principal = plan
    tools = [{"name": name, "inputSchema": sch} for name, sch in zip(TOOL_POOL[:k], (s1, s2, s3), strict=False)]
    return {"tools": tools, "budget": budget, "mode": mode, "principal": principal}


def batch_configs() -> st.SearchStrategy[dict[str, Json]]:
    return _config_plans.map(build_config)


#: Tool outputs worth sending through an implementation: unicode, escapes, nesting, numbers that a
#: careless JSON layer changes (1.0 vs 1, big integers, tiny floats), empty containers, null.
OUTPUT_POOL: Final = (
    "ok", 0, 1.0, -1.25, 1e-7, 2.5e10, 2**53 + 1, True, None, "", "é💥\u2028\u0000\"\\</x>", [], {},
    [1, "a", None, [True]], {"b": 1, "a": {"é": [0.5]}}, {"tool": "lookup", "execution": 1}, "x" * 300,
)
_FAIL_SLOTS: Final = 3 * len(FAILURE_CATEGORIES)  # about a third of the scripted executions fail
script_entries = st.integers(0, len(OUTPUT_POOL) + _FAIL_SLOTS - 1).map(
    lambda i: {"value": OUTPUT_POOL[i]} if i < len(OUTPUT_POOL)
    else {"fail": FAILURE_CATEGORIES[(i - len(OUTPUT_POOL)) % len(FAILURE_CATEGORIES)]}
)
_scripts = st.lists(script_entries, max_size=4)


def scripts(max_size: int = 4) -> st.SearchStrategy[list[dict[str, Json]]]:
    """Tool behaviour by execution ordinal: a value or a failure category (see _harness)."""
    return _scripts if max_size == 4 else st.lists(script_entries, max_size=max_size)


def _build_step(parts: tuple[Any, list[CallPlan], list[dict[str, Json]]]) -> dict[str, Json]:
    cfg_plan, plans, script = parts
    cfg = build_config(cfg_plan)
    return {"kind": "batch", "config": cfg, "calls": resolve_calls(plans, cfg["tools"]), "script": script}


_STEPS: dict[int, st.SearchStrategy[dict[str, Json]]] = {}


def batch_steps(max_calls: int = 6) -> st.SearchStrategy[dict[str, Json]]:
    """One fuzz step: a batch.run with its configuration, calls and tool script."""
    if max_calls not in _STEPS:
        _STEPS[max_calls] = st.tuples(_config_plans, call_plans(max_calls), _scripts).map(_build_step)
    return _STEPS[max_calls]
