"""The fuzzer's vocabulary: the pools steps are drawn from and how a *plan* (a tuple of small
integers) becomes a call, a configuration or a tool script. Pure data and functions, no randomness
of its own: the fast generator (:mod:`._generate`) and the Hypothesis strategies
(:mod:`._strategies`) both draw plans and resolve them here, so both speak the same steps.

Small pools make the interesting cases frequent: ids come from three names, so replays and
conflicts happen all the time; every call has an explicit *relation* to the calls before it
(fresh, replay — sometimes with keys reordered or ``1`` written ``1.0`` —, same content under
another id, conflict — sometimes the same call with ``true`` for ``1`` —, unknown tool, invalid arguments,
malformed); budgets are tiny; tool scripts
make executions fail with every failure category.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any, Final, Protocol

from ..core.rules import FAILURE_CATEGORIES, blank

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


# --------------------------------------------------------------------------------------------
# Call plans and their resolution
# --------------------------------------------------------------------------------------------

ArgPlan = tuple[tuple[bool, ...], tuple[int, ...], int, int, int, int, int]
CallPlan = tuple[int, int, int, int, int, int, int, ArgPlan]

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


def boolean_twin(args: Mapping[str, Json], schema: Mapping[str, Json] | None) -> dict[str, Json] | None:
    """``args`` with its first untyped ``1``/``0`` written ``true``/``false`` (or the other way round), or None when
    it has none. Other content (R5: booleans are not numbers), which an implementation comparing arguments with
    Python's ``==`` (``{"n": 1} == {"n": True}``) takes for a replay (R7). Only a property the schema does not
    type: a typed one would fail R4 first."""
    props = (schema or {}).get("properties", {})
    for key, value in args.items():
        if key not in props and type(value) in (bool, int) and value in (0, 1):
            return {**args, key: int(value) if isinstance(value, bool) else bool(value)}
    return None


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


class ArgumentSource(Protocol):
    """Where the arguments of declared tools come from (:class:`loopspec.fuzz._arguments.Arguments`)."""

    def valid(self, name: str, plan: ArgPlan) -> dict[str, Json]: ...

    def invalid(self, name: str, plan: ArgPlan) -> dict[str, Json] | None: ...


def unknown_names(declared: Sequence[str]) -> tuple[str, ...]:
    """Names to propose that no declared tool has (R3): the usual suspects, and near misses of the declared
    names (another case, a trailing space)."""
    out = [n for n in ("shell", "", "sql") if n not in declared]
    for name in declared:
        for near in (name.capitalize() if name != name.capitalize() else name.lower(), f"{name} "):
            if near not in declared and near not in out:
                out.append(near)
    return tuple(out)


def resolve_call(plan: CallPlan, earlier: Sequence[Json], tools: Sequence[Mapping[str, Json]],
                 source: ArgumentSource | None = None, unknown: Sequence[str] = UNKNOWN_TOOLS) -> Json:
    """The call a plan stands for, given the calls before it and the configured tools. ``source``: the
    arguments of declared tools (default: from the pools here); ``unknown``: the names that are no tool."""
    rel_i, id_i, tool_i, ref, how, unknown_i, mal_i, args_plan = plan
    relation = RELATIONS[rel_i]
    schema_of = {t["name"]: t["inputSchema"] for t in tools}
    names = [t["name"] for t in tools]
    cid = ID_POOL[id_i]
    name = names[tool_i % len(names)]
    bases = [c for c in earlier if _well_formed(c)]

    def valid(tool: str) -> dict[str, Json]:
        return source.valid(tool, args_plan) if source is not None else valid_arguments(schema_of[tool], args_plan)

    if relation in ("replay", "same-content", "conflict") and bases:
        base = bases[ref % len(bases)]
        if relation == "replay":
            return {"id": base["id"], "name": base["name"], "arguments": equivalent_rewrite(base["arguments"], how)}
        if relation == "same-content":
            others = [i for i in ID_POOL if i != base["id"]]
            return {"id": others[id_i % len(others)], "name": base["name"], "arguments": dict(base["arguments"])}
        twin = boolean_twin(base["arguments"], schema_of.get(base["name"])) if how == 3 else None
        if twin is not None:  # the same call but true for 1: other content, though Python's == says equal
            return {"id": base["id"], "name": base["name"], "arguments": twin}
        args = valid(name)
        if name == base["name"] and args == base["arguments"]:
            args = {**args, "extra": ref} if (schema_of[name] or {}).get("additionalProperties", True) else args
        return {"id": base["id"], "name": name, "arguments": args}
    if relation == "unknown-tool" and unknown:
        bad = unknown[unknown_i % len(unknown)]
        if bad not in schema_of:
            return {"id": cid, "name": bad, "arguments": {}}
    if relation == "invalid-arguments":
        args = source.invalid(name, args_plan) if source is not None else invalid_arguments(schema_of[name], args_plan)
        if args is not None:
            return {"id": cid, "name": name, "arguments": args}
    call = {"id": cid, "name": name, "arguments": valid(name)}
    if relation == "malformed":
        return malformed(call, MALFORMED[mal_i])
    return call


def resolve_calls(plans: Sequence[CallPlan], tools: Sequence[Mapping[str, Json]]) -> list[Json]:
    calls: list[Json] = []
    for plan in plans:
        calls.append(resolve_call(plan, calls, tools))
    return calls


# --------------------------------------------------------------------------------------------
# Configurations and tool scripts
# --------------------------------------------------------------------------------------------

def build_config(plan: tuple[int, dict[str, Json], dict[str, Json], dict[str, Json], int, str, str]) -> dict[str, Json]:
    k, s1, s2, s3, budget, mode, principal = plan
    tools = [{"name": name, "inputSchema": sch} for name, sch in zip(TOOL_POOL[:k], (s1, s2, s3), strict=False)]
    return {"tools": tools, "budget": budget, "mode": mode, "principal": principal}


#: Tool outputs worth sending through an implementation: unicode, escapes, nesting, numbers that a
#: careless JSON layer changes (1.0 vs 1, big integers, tiny floats), empty containers, null.
OUTPUT_POOL: Final = (
    "ok", 0, 1.0, -1.25, 1e-7, 2.5e10, 2**53 + 1, True, None, "", "é💥\u2028\u0000\"\\</x>", [], {},
    [1, "a", None, [True]], {"b": 1, "a": {"é": [0.5]}}, {"tool": "lookup", "execution": 1}, "x" * 300,
)
_FAIL_SLOTS: Final = 3 * len(FAILURE_CATEGORIES)  # about a third of the scripted executions fail


def script_entry(i: int) -> dict[str, Json]:
    """Script entry number ``i`` of ``len(OUTPUT_POOL) + _FAIL_SLOTS``: a value or a failure."""
    if i < len(OUTPUT_POOL):
        return {"value": OUTPUT_POOL[i]}
    return {"fail": FAILURE_CATEGORIES[(i - len(OUTPUT_POOL)) % len(FAILURE_CATEGORIES)]}


SCRIPT_SLOTS: Final = len(OUTPUT_POOL) + _FAIL_SLOTS


# --------------------------------------------------------------------------------------------
# Loop mode: a loop.run step (configuration with limits, the model's replies, a tool script)
# --------------------------------------------------------------------------------------------

DEFAULT_REPLY: Final = {"final": "done"}
RAW_REPLIES: Final = ({"calls": "lookup"}, {"final": 3}, {}, {"calls": [], "final": "x"}, "just text", None, 7)


def build_loop_step(parts: tuple[Any, ...]) -> dict[str, Json]:
    cfg_plan, limit_plan, tool_limits, policy, rounds, script = parts
    base = build_config(cfg_plan)
    tools = []
    for t, m in zip(base["tools"], tool_limits, strict=False):
        tools.append({**t, "maxExecutions": m} if m is not None else t)
    max_rounds, max_exec, max_tool, max_req, retries = limit_plan
    config = {
        "tools": tools,
        "limits": {"maxRounds": max_rounds, "maxExecutions": max_exec, "maxToolExecutions": max_tool,
                   "maxRequests": max_req, "maxRetries": retries, "deadline": None},
        "mode": base["mode"], "onLimit": policy, "principal": base["principal"],
    }
    model: list[dict[str, Json]] = []
    earlier: list[Json] = []
    for kind, plans, raw in rounds:
        if kind <= 6:
            calls = []
            for p in plans:
                c = resolve_call(p, earlier, tools)
                calls.append(c)
                earlier.append(c)
            model.append({"calls": calls})
        elif kind == 7:
            model.append({"final": "the answer"})
        elif kind == 8:
            model.append({"error": "the model failed"})
        else:
            model.append({"raw": RAW_REPLIES[raw]})
    return {"kind": "loop", "config": config, "model": model, "script": script}


