"""The harness: runs one step (a ``batch.run``) against an implementation and records the trace.

The harness owns the tools. A step carries a *script* for them: the k-th execution the
implementation starts (``tool.execute`` number k, 1-based, across all tools of the step) gets
``script[k-1]`` — ``{"value": V}`` (the tool returns V) or ``{"fail": CATEGORY}`` (the tool fails
with that category) — and executions past the end of the script return
``{"tool": name, "execution": k}``, so every execution is visible in the answers. A
``tool.execute`` for a tool that is not registered fails with INTERNAL_ERROR (the harness has no
such tool) and is recorded like any other execution: the judge then reports R3.

The trace (``loopspec-trace/1``) is what :mod:`loopspec._judge` reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import _core as core
from .._judge import TRACE_FORMAT
from ._adapter import Impl
from ._rpc import TOOL_FAILED, ProtocolFailure, RpcError

__all__ = ["batch_params", "default_output", "run_batch_step", "script_outcome"]

Json = Any


def default_output(name: Json, k: int) -> Json:
    return {"tool": name if isinstance(name, str) else None, "execution": k}


def script_outcome(script: Sequence[Mapping[str, Json]], k: int, name: Json, registered: bool) -> core.Outcome:
    """The outcome the harness gives execution ``k`` (1-based) of tool ``name``."""
    if not registered:
        return core.Outcome.failure("INTERNAL_ERROR")
    if k <= len(script):
        entry = script[k - 1]
        if "fail" in entry:
            return core.Outcome.failure(entry["fail"])
        return core.Outcome.success(entry.get("value"))
    return core.Outcome.success(default_output(name, k))


def batch_params(step: Mapping[str, Json]) -> dict[str, Json]:
    cfg = step["config"]
    return {
        "tools": cfg["tools"], "budget": cfg["budget"], "mode": cfg["mode"], "principal": cfg["principal"],
        "calls": step["calls"],
    }


class _Recorder:
    """Answers the implementation's requests during one step and records them."""

    def __init__(self, tools: Sequence[Mapping[str, Json]], script: Sequence[Mapping[str, Json]]) -> None:
        self.names = {t["name"] for t in tools}
        self.script = script
        self.events: list[dict[str, Json]] = []
        self.k = 0
        self.failure: ProtocolFailure | None = None

    def __call__(self, method: str, params: Json) -> Json:
        if self.failure is not None:  # an in-process implementation swallowed our failure: refuse everything
            raise RpcError(TOOL_FAILED, "the harness already stopped this run", {"category": "INTERNAL_ERROR"})
        if method == "tool.execute":
            return self.execute(params)
        return self.unexpected(method)

    def unexpected(self, method: str) -> Json:
        self.failure = ProtocolFailure("P4", "unexpected-request", f"a {method!r} request from the implementation during batch.run")
        raise self.failure

    def execute(self, params: Json) -> Json:
        if not isinstance(params, dict):
            self.failure = ProtocolFailure("P5", "bad-params", "tool.execute params must be an object")
            raise self.failure
        ctx = params.get("context")
        self.k += 1
        name = params.get("name")
        outcome = script_outcome(self.script, self.k, name, isinstance(name, str) and name in self.names)
        ev = {
            "type": "execute", "callId": params.get("callId"), "name": name,
            "arguments": params.get("arguments"),
            "principal": ctx.get("principal") if isinstance(ctx, dict) else None,
            "outcome": ({"status": "ok", "output": outcome.output} if outcome.ok
                        else {"status": "error", "category": outcome.category}),
        }
        self.events.append(ev)
        if outcome.ok:
            return {"output": outcome.output}
        raise RpcError(TOOL_FAILED, "tool failed", {"category": outcome.category})


def run_batch_step(impl: Impl, step: Mapping[str, Json]) -> dict[str, Json]:
    """Send one ``batch.run`` and return its trace. Never raises for a misbehaving implementation:
    protocol failures become a ``protocol-error`` event (the caller should then discard ``impl``)."""
    rec = _Recorder(step["config"]["tools"], step.get("script", []))
    trace: dict[str, Json] = {
        "format": TRACE_FORMAT, "kind": "batch",
        "config": dict(step["config"]), "calls": step["calls"], "events": rec.events,
    }
    try:
        result = impl.call("batch.run", batch_params(step), rec)
    except ProtocolFailure as f:
        rec.events.append((rec.failure or f).to_event())
        return trace
    except RpcError as err:
        if rec.failure is not None:
            rec.events.append(rec.failure.to_event())
        else:
            rec.events.append(ProtocolFailure("P4", "error-response",
                                              f"batch.run answered error {err.code}: {err.message}").to_event())
        return trace
    if rec.failure is not None:
        rec.events.append(rec.failure.to_event())
    else:
        rec.events.append({"type": "response", "result": result})
    return trace


def trace_failed(trace: Mapping[str, Json]) -> bool:
    """Did the step end with a protocol failure (the implementation should be restarted)?"""
    evs = trace.get("events") or []
    return bool(evs) and evs[-1].get("type") == "protocol-error"
