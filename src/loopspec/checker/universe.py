"""The finite world of one scope: call alphabet, tools, initial configurations.

Everything concrete the checker feeds the core comes from here, so that a counterexample can be
written down as plain calls, configuration and scripted outcomes, and replayed by the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.rules import Limits, RunConfig
from .bounds import Bounds, Scope, ToolDef
from .semantics import Env

__all__ = ["Config", "Universe", "call_label", "id_name"]

Json = Any

INVALID_VALUE = 0  # an integer where the schema wants a string (R4)
NOT_AN_OBJECT = "not-an-object"  # arguments given as a JSON string (R2)


def id_name(i: int) -> str:
    return f"c{i + 1}"


def call_label(call_id: str | None, tool: str, form: str) -> str:
    return f"{call_id if call_id is not None else '-'}:{tool}{form}"


@dataclass(frozen=True, slots=True)
class Config:
    """One initial configuration: the RunConfig, the environment, and how to describe it."""

    index: int
    config: RunConfig
    env: Env
    label: str

    def to_json(self) -> dict[str, Json]:
        c = self.config
        lim = c.limits
        out: dict[str, Json] = {
            "kind": "batch" if c.batch else "loop",
            "mode": c.mode,
            "on_limit": c.on_limit,
            "principal": c.principal,
            "max_executions": lim.max_executions,
        }
        if not c.batch:
            out.update({
                "max_rounds": lim.max_rounds, "max_requests": lim.max_requests,
                "max_tool_executions": lim.max_tool_executions, "max_retries": lim.max_retries,
                "deadline": lim.deadline, "tool_limits": dict(c.tool_limits),
                "authorize": self.env.authorize, "cancel": self.env.cancel,
            })
        if c.max_concurrency > 1:
            out.update({"max_concurrency": c.max_concurrency, "barriers": sorted(c.barriers)})
        return out


@dataclass(frozen=True)
class Universe:
    """The scope's alphabet. ``ids`` are interchangeable, and so are ``values`` (symmetry)."""

    bounds: Bounds
    scope: Scope
    ids: tuple[str, ...]
    values: tuple[str, ...]
    tools: tuple[ToolDef, ...]
    calls: Mapping[str, Json]
    call_order: tuple[str, ...]
    configs: tuple[Config, ...]

    @property
    def concurrent(self) -> bool:
        return self.scope.concurrent

    @staticmethod
    def build(bounds: Bounds, scope: Scope) -> Universe:
        ids = tuple(id_name(i) for i in range(scope.ids))
        # a write tool (section 6) is in a scope only when the scope names it
        tools_in = tuple(t for t in bounds.tools if (t.name in scope.tools if scope.tools is not None else not t.write))
        values = bounds.values[: scope.values] if scope.values is not None else bounds.values
        calls = calls_for(bounds, scope, ids, tools_in, values)
        order = tuple(calls)
        configs: list[Config] = []
        schemas = {t.name: t.schema for t in tools_in if t.allow_listed}
        barriers = frozenset(t.name for t in tools_in if t.allow_listed and not t.read_only)
        def conc(mc: int) -> dict[str, Any]:
            return {"max_concurrency": mc, "barriers": barriers} if mc > 1 else {}

        def label(mc: int) -> str:
            return f" max_concurrency={mc}" if scope.concurrent else ""

        if scope.batch:
            for mc in scope.concurrency:
                for budget in scope.budgets:
                    for mode in scope.modes:
                        cfg = RunConfig(
                            schemas=schemas, limits=Limits(max_executions=budget), mode=mode,
                            on_limit="throw" if mode == "abort" else "error-result",
                            principal=bounds.principal, run_id="verify", batch=True, **conc(mc),
                        )
                        env = Env(calls, order, scope.calls, scope.failures, True, False, False, False, False, False)
                        configs.append(Config(len(configs), cfg, env, f"budget={budget} mode={mode}{label(mc)}"))
        else:
            if scope.tool_limits is not None:
                tool_limits = {n: v for n, v in scope.tool_limits.items() if n in schemas}
            else:
                tool_limits = {t.name: t.max_executions for t in tools_in if t.allow_listed and t.max_executions is not None}
            for mc in scope.concurrency:
                for budget in scope.budgets:
                    for mode in scope.modes:
                        for policy in scope.on_limit:
                            lim = Limits(
                                max_rounds=scope.max_rounds, max_executions=budget, max_requests=scope.max_requests,
                                max_retries=scope.max_retries, deadline=scope.deadline,
                            )
                            cfg = RunConfig(
                                schemas=schemas, limits=lim, mode=mode, on_limit=policy, principal=bounds.principal,
                                tool_limits=tool_limits, run_id="verify", **conc(mc),
                            )
                            env = Env(
                                calls, order, scope.calls, scope.failures, False, scope.cancel,
                                scope.deadline is not None, scope.authorize, scope.model_error, scope.final,
                                scope.cancel_in_flight, frozenset(t.name for t in tools_in if t.write),
                            )
                            configs.append(Config(len(configs), cfg, env,
                                                  f"budget={budget} mode={mode} on_limit={policy}{label(mc)}"))
        return Universe(bounds, scope, ids, values, tools_in, calls, order, tuple(configs))

    def tool_index(self, name: object) -> int | None:
        for i, t in enumerate(self.tools):
            if t.name == name:
                return i
        return None


def calls_for(bounds: Bounds, scope: Scope, ids: tuple[str, ...], tools: tuple[ToolDef, ...] | None = None,
              values: tuple[str, ...] | None = None) -> dict[str, Json]:
    """The call alphabet: every call the model may propose within the scope, by label.

    It is closed under the symmetries of :mod:`loopspec.checker.state`: every call that carries an
    id exists for every id of the pool, and every call that carries a value exists for every
    value (calls that must not depend on either — an unknown tool, a call without an id — carry
    empty arguments).
    """
    out: dict[str, Json] = {}
    tools = bounds.tools if tools is None else tools
    values = bounds.values if values is None else values
    listed = [t for t in tools if t.allow_listed]
    for cid in ids:
        for t in tools:
            if t.allow_listed:
                for v in values:
                    out[call_label(cid, t.name, f"({v})")] = {"id": cid, "name": t.name, "arguments": {t.argument: v}}
                if scope.invalid:
                    out[call_label(cid, t.name, "(#invalid)")] = {
                        "id": cid, "name": t.name, "arguments": {t.argument: INVALID_VALUE}}
            else:
                # one form: the arguments of a call to an unknown tool never matter (R3)
                out[call_label(cid, t.name, "()")] = {"id": cid, "name": t.name, "arguments": {}}
        if scope.malformed:
            out[call_label(cid, listed[0].name, "<arguments not an object>")] = {
                "id": cid, "name": listed[0].name, "arguments": NOT_AN_OBJECT}
    if scope.malformed:
        t0 = listed[0]
        out[call_label(None, t0.name, "() <no id>")] = {"name": t0.name, "arguments": {}}
    return out
