"""Hypothesis strategies for fuzz steps (batch and loop), over the same vocabulary as the fast
generator (:mod:`._vocab`). ``loopspec fuzz`` does not use them (its exploration is the seeded
generator of :mod:`._generate`); the project's property tests of the judge do, where Hypothesis's
shrinking earns its place.

Each call is drawn as a *plan*: a fixed tuple of small integers and booleans that does not depend
on the calls around it; :func:`._vocab.resolve_calls` turns a list of plans into calls against a
configuration. So a batch is a plain ``st.lists`` of plans, and Hypothesis can delete any call
while shrinking; everything shrinks towards an empty batch of well-formed fresh calls with a
lenient schema. All strategies are built once, at import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import strategies as st

from ._vocab import (
    ID_POOL,
    MALFORMED,
    PRINCIPALS,
    PROPS,
    RAW_REPLIES,
    RELATIONS,
    SCHEMA_POOL,
    SCRIPT_SLOTS,
    TOOL_POOL,
    CallPlan,
    _unpack_args,
    _unpack_call,
    build_config,
    build_loop_step,
    equivalent_rewrite,
    resolve_calls,
    script_entry,
)

__all__ = [
    "ID_POOL",
    "MALFORMED",
    "RELATIONS",
    "SCHEMA_POOL",
    "TOOL_POOL",
    "batch_configs",
    "batch_steps",
    "call_lists",
    "call_plans",
    "equivalent_rewrite",
    "json_values",
    "loop_steps",
    "resolve_calls",
    "schemas",
    "scripts",
]

Json = Any

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**31), 2**31), st.sampled_from((0.5, -1.25, 1e-7, 3.0, 2.5e10)),
    st.text(max_size=6),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)

_schemas = st.integers(0, len(SCHEMA_POOL) - 1).map(SCHEMA_POOL.__getitem__)  # small repr, unlike sampled_from


def schemas() -> st.SearchStrategy[dict[str, Json]]:
    """An input schema in the flat subset of R4 over a small property pool (one draw)."""
    return _schemas


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


def call_lists(tools: Sequence[Mapping[str, Json]], max_calls: int = 6) -> st.SearchStrategy[list[Json]]:
    """A proposal of up to ``max_calls`` calls, each related to the ones before it."""
    return call_plans(max_calls).map(lambda plans: resolve_calls(plans, tools))


_config_plans = st.tuples(
    st.integers(1, len(TOOL_POOL)), _schemas, _schemas, _schemas, st.integers(0, 4),
    st.sampled_from(("continue", "abort")), st.sampled_from(PRINCIPALS),
)


def batch_configs() -> st.SearchStrategy[dict[str, Json]]:
    return _config_plans.map(build_config)


script_entries = st.integers(0, SCRIPT_SLOTS - 1).map(script_entry)
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


# --------------------------------------------------------------------------------------------
# Loop mode
# --------------------------------------------------------------------------------------------

_optional_small = st.sampled_from((None, None, 1, 2, 3, 0))  # unlimited first: the shrinking target
_limit_plans = st.tuples(
    _optional_small, _optional_small, _optional_small, st.sampled_from((None, None, 2, 3, 4, 0, 1)), st.integers(0, 2),
)
_tool_limit_plans = st.tuples(*[st.sampled_from((None, None, None, 1, 0, 2))] * len(TOOL_POOL))


_LOOP_STEPS: dict[int, st.SearchStrategy[dict[str, Json]]] = {}


def loop_steps(max_calls: int = 6) -> st.SearchStrategy[dict[str, Json]]:
    """One fuzz step: a loop.run with its configuration, the model's replies and a tool script."""
    if max_calls not in _LOOP_STEPS:
        # a round: (kind 0..9 — 0-6 calls, 7 final, 8 model error, 9 a reply that is neither —, calls, raw)
        rounds = st.tuples(st.integers(0, 9), st.lists(_call_plans, max_size=max_calls),
                           st.integers(0, len(RAW_REPLIES) - 1))
        _LOOP_STEPS[max_calls] = st.tuples(
            _config_plans, _limit_plans, _tool_limit_plans, st.sampled_from(("throw", "error-result")),
            st.lists(rounds, min_size=1, max_size=4), _scripts,
        ).map(build_loop_step)
    return _LOOP_STEPS[max_calls]


