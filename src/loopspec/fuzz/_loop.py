"""Loop mode of the fuzzer: ``loop.run`` steps, their harness, the reference adapter and the engine path.

Kept apart from batch mode because the loop's semantics may still be refined. Everything the
protocol exchanges about the outcome is derived from the engine's ``RunOutcome.to_json()``
(:data:`loopspec._judge_loop.LOOP_RESULT_FIELDS`).

A loop step is ``{"kind": "loop", "config": <loop.run params>, "model": [reply, ...], "script": [...]}``.
The harness plays the model: its k-th ``model.next`` gets ``model[k-1]`` —
``{"calls": [...]}``, ``{"final": str}``, ``{"error": str}`` (answered with a JSON-RPC error: the
model failed) or ``{"raw": V}`` (V itself, which is neither calls nor a final answer) — and
``{"final": "done"}`` after the end of the list. Tools follow the script, as in batch mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from hypothesis import strategies as st

from .._judge import TRACE_FORMAT
from .._judge_loop import LOOP_RESULT_FIELDS
from ._adapter import ExecuteFn, Executor, Impl, ModelFn
from ._generate import (
    TOOL_POOL,
    _call_plans,
    _config_plans,
    _scripts,
    build_config,
    resolve_call,
)
from ._harness import amend_late, execution_cap, late_message, script_outcome
from ._rpc import INVALID_PARAMS, MODEL_FAILED, TOOL_FAILED, ProtocolFailure, RpcError

__all__ = [
    "DEFAULT_REPLY",
    "loop_reference_path",
    "loop_step_reductions",
    "loop_steps",
    "reference_loop_run",
    "run_loop_step",
]

Json = Any

DEFAULT_REPLY: Final = {"final": "done"}
RAW_REPLIES: Final = ({"calls": "lookup"}, {"final": 3}, {}, {"calls": [], "final": "x"}, "just text", None, 7)

# --------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------

_optional_small = st.sampled_from((None, None, 1, 2, 3, 0))  # unlimited first: the shrinking target
_limit_plans = st.tuples(
    _optional_small, _optional_small, _optional_small, st.sampled_from((None, None, 2, 3, 4, 0, 1)), st.integers(0, 2),
)
_tool_limit_plans = st.tuples(*[st.sampled_from((None, None, None, 1, 0, 2))] * len(TOOL_POOL))


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


# --------------------------------------------------------------------------------------------
# The harness for one loop.run
# --------------------------------------------------------------------------------------------


class _LoopRecorder:
    def __init__(self, step: Mapping[str, Json]) -> None:
        self.names = {t["name"] for t in step["config"]["tools"]}
        self.script: Sequence[Mapping[str, Json]] = step.get("script", [])
        self.model: Sequence[Mapping[str, Json]] = step.get("model", [])
        self.events: list[dict[str, Json]] = []
        self.k = 0
        self.rounds = 0
        self.failure: ProtocolFailure | None = None
        calls = sum(len(r["calls"]) for r in self.model if isinstance(r, dict) and isinstance(r.get("calls"), list))
        retries = (step["config"].get("limits") or {}).get("maxRetries") or 0
        self.exec_cap = execution_cap(calls, retries if isinstance(retries, int) else 0)
        self.model_cap = len(self.model) + 8  # the model's script, then "final" answers a correct run stops at

    def __call__(self, method: str, params: Json) -> Json:
        if self.failure is not None:
            raise RpcError(TOOL_FAILED, "the harness already stopped this run", {"category": "INTERNAL_ERROR"})
        if not isinstance(params, dict):
            self.failure = ProtocolFailure("P5", "bad-params", f"{method} params must be an object")
            raise self.failure
        if method == "tool.execute":
            return self.execute(params)
        if method == "model.next":
            return self.model_next(params)
        self.failure = ProtocolFailure("P4", "unexpected-request", f"a {method!r} request from the implementation")
        raise self.failure

    def execute(self, params: dict[str, Json]) -> Json:
        if self.k >= self.exec_cap:
            self.failure = ProtocolFailure("P4", "flood", f"more than {self.exec_cap} tool.execute requests in one "
                                                          "loop.run")
            raise self.failure
        ctx = params.get("context")
        self.k += 1
        name = params.get("name")
        outcome = script_outcome(self.script, self.k, name, isinstance(name, str) and name in self.names)
        self.events.append({
            "type": "execute", "callId": params.get("callId"), "name": name, "arguments": params.get("arguments"),
            "principal": ctx.get("principal") if isinstance(ctx, dict) else None,
            "outcome": ({"status": "ok", "output": outcome.output} if outcome.ok
                        else {"status": "error", "category": outcome.category}),
        })
        if outcome.ok:
            return {"output": outcome.output}
        raise RpcError(TOOL_FAILED, "tool failed", {"category": outcome.category})

    def model_next(self, params: dict[str, Json]) -> Json:
        if self.rounds >= self.model_cap:
            self.failure = ProtocolFailure("P4", "flood", f"more than {self.model_cap} model.next requests in one "
                                                          "loop.run (the model had answered \"final\")")
            raise self.failure
        self.rounds += 1
        reply = dict(self.model[self.rounds - 1]) if self.rounds <= len(self.model) else dict(DEFAULT_REPLY)
        self.events.append({"type": "model", "round": params.get("round"), "results": params.get("results"),
                            "reply": reply})
        if "error" in reply:
            raise RpcError(MODEL_FAILED, str(reply["error"]))
        if "raw" in reply:
            return reply["raw"]
        return reply


def loop_params(step: Mapping[str, Json]) -> dict[str, Json]:
    return dict(step["config"])


def run_loop_step(impl: Impl, step: Mapping[str, Json]) -> dict[str, Json]:
    rec = _LoopRecorder(step)
    trace: dict[str, Json] = {"format": TRACE_FORMAT, "kind": "loop", "config": dict(step["config"]),
                              "events": rec.events}
    try:
        result = impl.call("loop.run", loop_params(step), rec)
    except ProtocolFailure as f:
        rec.events.append((rec.failure or f).to_event())
        return trace
    except RpcError as err:
        rec.events.append((rec.failure or ProtocolFailure(
            "P4", "error-response", f"loop.run answered error {err.code}: {err.message}")).to_event())
        return trace
    rec.events.append(rec.failure.to_event() if rec.failure is not None else {"type": "response", "result": result})
    if rec.failure is None:
        late = late_message(impl, "loop.run")
        if late is not None:
            amend_late(trace, late)
    return trace


# --------------------------------------------------------------------------------------------
# The reference engine behind loop.run, and its path for diagrams
# --------------------------------------------------------------------------------------------

_LIMITS: Final = {"maxRounds": "max_rounds", "maxExecutions": "max_executions",
                  "maxToolExecutions": "max_tool_executions", "maxRequests": "max_requests",
                  "maxRetries": "max_retries", "deadline": "deadline"}


def _limits(raw: Json) -> Any:
    from .._core import Limits

    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - set(_LIMITS):
        raise RpcError(INVALID_PARAMS, f"limits must be an object with keys among {sorted(_LIMITS)}")
    try:
        return Limits(**{_LIMITS[k]: v for k, v in raw.items() if v is not None})
    except (ValueError, TypeError) as exc:
        raise RpcError(INVALID_PARAMS, str(exc)) from None


def outcome_to_result(outcome: Any) -> dict[str, Json]:
    """A loop.run result from an engine RunOutcome (the fields of LOOP_RESULT_FIELDS)."""
    j = outcome.to_json()
    values = {**j, "rounds": j["counters"]["modelRequests"]}
    return {k: values[k] for k in LOOP_RESULT_FIELDS}


def reference_loop_run(executor: Executor, params: dict[str, Json], execute: ExecuteFn,
                       model_next: ModelFn) -> dict[str, Json]:
    from .._engine import run_loop

    tools = executor._tools(params.get("tools"), execute)  # type: ignore[attr-defined]

    def model(turn: Any) -> Json:
        return model_next(turn.round, list(turn.results))

    try:
        out = run_loop(model, tools=tools, limits=_limits(params.get("limits")), mode=params.get("mode"),
                       on_limit=params.get("onLimit"), principal=params.get("principal", "anonymous"))
    except (ValueError, TypeError) as exc:
        raise RpcError(INVALID_PARAMS, str(exc)) from None
    return outcome_to_result(out)


def loop_reference_path(trace: Mapping[str, Json]) -> list[tuple[str, int | None]] | None:
    """The engine's transition path for a loop trace (replies and outcomes as recorded)."""
    from .._engine import run_loop
    from ._campaign import outcome_tools

    try:
        cfg = trace["config"]
        replies = [e["reply"] for e in trace["events"] if e.get("type") == "model"]
        outcomes = [e["outcome"] for e in trace["events"] if e.get("type") == "execute"]
        feed = iter(replies)

        def model(turn: Any) -> Json:
            r = next(feed, None)
            if r is None or "error" in r:
                raise RuntimeError("the model failed")
            return r.get("raw", r)

        steps: list[tuple[str, int | None]] = []
        run_loop(model, tools=outcome_tools(cfg["tools"], outcomes), limits=_limits(cfg.get("limits")),
                 mode=cfg.get("mode"), on_limit=cfg.get("onLimit"), principal=cfg.get("principal", "anonymous"),
                 observer=lambda s, t: steps.append((t.id, s.requests[-1].index if s.requests else None)))
    except Exception:
        return None
    return steps


# --------------------------------------------------------------------------------------------
# Minimization: the parts of a loop step that can be removed one at a time
# --------------------------------------------------------------------------------------------


def loop_step_reductions(step: dict[str, Json]) -> list[dict[str, Json]]:
    out: list[dict[str, Json]] = []
    model = step.get("model", [])
    out += [{**step, "model": model[:i] + model[i + 1:]} for i in range(len(model))]
    for i, reply in enumerate(model):
        calls = reply.get("calls") if isinstance(reply, dict) else None
        if isinstance(calls, list):
            for j in range(len(calls)):
                new = [*model[:i], {"calls": calls[:j] + calls[j + 1:]}, *model[i + 1:]]
                out.append({**step, "model": new})
    script = step.get("script", [])
    out += [{**step, "script": script[:j] + script[j + 1:]} for j in range(len(script))]
    limits = step["config"].get("limits", {})
    for key, value in limits.items():
        if value is not None and key != "maxRetries":
            out.append({**step, "config": {**step["config"], "limits": {**limits, key: None}}})
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            out.append({**step, "config": {**step["config"], "limits": {**limits, key: value - 1}}})
    used = {c.get("name") for r in model if isinstance(r, dict) and isinstance(r.get("calls"), list)
            for c in r["calls"] if isinstance(c, dict)}
    tools = step["config"]["tools"]
    out += [{**step, "config": {**step["config"], "tools": tools[:j] + tools[j + 1:]}}
            for j in range(len(tools)) if tools[j]["name"] not in used and len(tools) > 1]
    return out

